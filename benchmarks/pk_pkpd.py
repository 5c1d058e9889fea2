"""The joint PK/PD floor of issue 29: a joint fit of concentrations and an effect on simulated
data recovers the truth within the Monte Carlo spread of replicate data sets.

Data simulated here (seeded per replicate): a one-compartment oral model (ka 1.5 /h, CL 2.7
L/h, V 32 L; between-subject variances 0.3 on ka, 0.1 on CL) with a direct Emax effect on a
baseline (E0 20, Emax 50, EC50 4 mg/L; variance 0.05 on E0), 320 mg at 0 h, concentrations
(``DVID=1``, proportional error 15%) and effects (``DVID=2``, additive error 3) at 0.5, 1, 2,
4, 8, 12 and 24 h. Each replicate is fitted by FOCE-I, both endpoints at once, from the truth
moved 20-30%. Prints the machine, each fit's time, and per parameter the mean over the
replicates, the replicates' SD (the Monte Carlo spread) and the bias in units of it, the
mean's Monte Carlo standard error (SD / sqrt(n)), the truth and ``z = (mean - truth) / SE``.

Usage: python benchmarks/pk_pkpd.py [--replicates 20] [--subjects 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np
import sympy as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine as machine  # noqa: E402
from _replicates import print_recovery  # noqa: E402

from scichains import pk  # noqa: E402

TIMES = (0.5, 1, 2, 4, 8, 12, 24)
THETA = {"tka": 1.5, "tcl": 2.7, "tv": 32.0, "te0": 20.0, "temax": 50.0, "tec50": 4.0}
OMEGA = [0.3, 0.1, 0.05]
SD = [0.15, 3.0]


def model():
    depot, center = sp.symbols("depot center")
    ka, cl, v, e0, emax, ec50 = sp.symbols("ka cl v e0 emax ec50")
    tka, tcl, tv, te0, temax, tec50 = sp.symbols("tka tcl tv te0 temax tec50")
    eka, ecl, ee0 = sp.symbols("eta_ka eta_cl eta_e0")
    conc = center / v
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={
            ka: sp.exp(tka + eka),
            cl: sp.exp(tcl + ecl),
            v: sp.exp(tv),
            e0: sp.exp(te0 + ee0),
            emax: sp.exp(temax),
            ec50: sp.exp(tec50),
        },  # fmt: skip
        theta={tka: 0.3, tcl: 1.1, tv: 3.4, te0: 3.1, temax: 3.8, tec50: 1.5},
        eta=[eka, ecl, ee0],
        omega=[0.3, 0.1, 0.05],
        observe={1: conc, 2: e0 + emax * conc / (ec50 + conc)},
        error={1: pk.Proportional(0.15), 2: pk.Additive(3.0)},
    )


def template(path: Path, n_subjects: int) -> pk.EventData:
    lines = ["ID,TIME,AMT,DV,EVID,DVID"]
    for i in range(1, n_subjects + 1):
        lines.append(f"{i},0,320,.,1,.")
        for t in TIMES:
            lines += [f"{i},{t},.,0,0,1", f"{i},{t},.,0,0,2"]
    path.write_text("\n".join(lines) + "\n")
    return pk.read_events(path)


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=20)
    ap.add_argument("--subjects", type=int, default=40)
    args = ap.parse_args()
    print(machine.describe())
    warnings.simplefilter("ignore", pk.FitWarning)  # counted below instead
    m = model()
    data0 = template(Path(tempfile.mkdtemp()) / "pkpd.csv", args.subjects)
    truth_x = m.pack(theta=np.log(list(THETA.values())), omega=OMEGA, sd=SD)
    names = ["ka", "CL", "V", "E0", "Emax", "EC50", "omega ka", "omega CL", "omega E0"]
    names += ["prop[1]", "add[2]"]
    truth = np.array([*THETA.values(), *OMEGA, *SD])
    est, secs, failed = [], [], 0
    for r in range(args.replicates):
        data = data0.with_observations(pk.simulate(m, data0, truth_x, 1, seed=2000 + r)[0])
        rng = np.random.default_rng(r)
        th0 = np.log(list(THETA.values())) + np.log(rng.uniform(1.2, 1.3, 6)) * rng.choice(
            [-1, 1], 6
        )
        x0 = m.pack(theta=th0, omega=np.array(OMEGA) * 1.3, sd=np.array(SD) * 1.25)
        res = pk.fit(m, data, x0=x0)
        secs.append(res.seconds)
        failed += not res.success
        th, om, sd = m.unpack(res.x)
        est.append([*np.exp(th), *np.diag(om), *sd])
        print(f"replicate {r + 1}: joint fit {res.seconds:.1f} s", flush=True)
    n = args.replicates
    print(
        f"\n{n} replicates x {args.subjects} subjects x {len(TIMES)} times x 2 endpoints; "
        f"median fit {statistics.median(secs):.1f} s, {failed} of {n} not converged"
    )
    print_recovery(names, truth, est)


if __name__ == "__main__":
    main()
