"""The speed floor of issue 29: a FOCE-I fit with the M3 likelihood of 100 subjects x 10
samples of a two-compartment oral model, in under 30 s.

Data simulated here (seeded): 100 mg orally at 0, samples at 0.5, 1, 2, 3, 4, 6, 8, 12, 24 and
36 h; ka 1.2 /h, CL 4 L/h, V1 30 L, Q 6 L/h, V2 60 L (log-normal random effects on ka, CL and
V1: variances 0.1, 0.09, 0.05), a proportional error of 15% and an additive one of 0.05 mg/L;
samples below the LLOQ (``--lloq``, default 0.5 mg/L: about 29% of them) are censored
(CENS = 1, DV = LLOQ).
The fit starts from the truth moved 20-30% (typical values on the log scale, variances
and standard deviations), with M3 (the default ``blq``). Prints the machine, the share of
censored samples, the fit's wall time (model building apart, and the first fit's compile
apart: ``--reps`` timed fits after one untimed), the OFV and the estimates against the truth.

Usage: python benchmarks/pk_m3.py [--reps 3] [--lloq 0.5] [--subjects 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import sympy as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine as machine  # noqa: E402

from scichains import pk  # noqa: E402

TIMES = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 24.0, 36.0])
THETA = {"tka": np.log(1.2), "tcl": np.log(4.0), "tv1": np.log(30.0), "tq": np.log(6.0),
         "tv2": np.log(60.0)}  # fmt: skip
OMEGA = np.array([0.1, 0.09, 0.05])
SD = {"prop": 0.15, "add": 0.05}


def model():
    depot, center, periph = sp.symbols("depot center periph")
    ka, cl, v1, q, v2 = sp.symbols("ka cl v1 q v2")
    tka, tcl, tv1, tq, tv2 = sp.symbols("tka tcl tv1 tq tv2")
    eka, ecl, ev1 = sp.symbols("eta_ka eta_cl eta_v1")
    return pk.PKModel(
        states=[depot, center, periph],
        odes=[
            -ka * depot,
            ka * depot - cl / v1 * center - q / v1 * center + q / v2 * periph,
            q / v1 * center - q / v2 * periph,
        ],
        individual={
            ka: sp.exp(tka + eka),
            cl: sp.exp(tcl + ecl),
            v1: sp.exp(tv1 + ev1),
            q: sp.exp(tq),
            v2: sp.exp(tv2),
        },  # fmt: skip
        theta={tka: 0.0, tcl: 1.0, tv1: 3.0, tq: 2.0, tv2: 4.0},
        eta=[eka, ecl, ev1],
        omega=[0.1, 0.1, 0.1],
        observe=center / v1,
        error=pk.Combined(0.1, 0.1),
    )


def simulate(m, n_subjects: int, lloq: float, seed: int = 0):
    rows = np.arange(2, 2 + TIMES.size)
    dose = [pk.Dose(0.0, 100.0, 0, row=1)]
    subjects = [
        pk.Subject(i + 1, dose, TIMES.copy(), np.ones(TIMES.size), rows) for i in range(n_subjects)
    ]
    x = m.pack(theta=list(THETA.values()), omega=OMEGA, sd=[SD[n] for n in m.error.names])
    rng = np.random.default_rng(seed)
    etas = rng.multivariate_normal(np.zeros(3), np.diag(OMEGA), n_subjects)
    data = pk.EventData(subjects, ())
    out = []
    for s, f in zip(subjects, pk.PopulationObjective(m, data).predict(x, etas)):
        sd = np.sqrt((SD["prop"] * f) ** 2 + SD["add"] ** 2)
        dv = f + sd * rng.standard_normal(f.size)
        cens = (dv < lloq).astype(float)
        dv = np.where(cens > 0, lloq, dv)
        out.append(pk.Subject(s.id, s.doses, s.times, dv, s.rows, cens=cens))
    return pk.EventData(out, ()), x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lloq", type=float, default=0.5)
    ap.add_argument("--subjects", type=int, default=100)
    args = ap.parse_args()
    print(machine.describe())
    t0 = time.perf_counter()
    m = model()
    print(f"model build (SymPy, generated code): {time.perf_counter() - t0:.2f} s")
    data, x_true = simulate(m, args.subjects, args.lloq)
    cens = np.concatenate([s.cens for s in data.subjects])
    print(
        f"{args.subjects} subjects x {TIMES.size} samples, {cens.mean():.1%} below the LLOQ "
        f"{args.lloq} mg/L (M3)"
    )
    rng = np.random.default_rng(1)
    theta0 = np.array(list(THETA.values())) + np.log(rng.uniform(1.2, 1.3, 5)) * rng.choice(
        [-1, 1], 5
    )
    x0 = m.pack(theta=theta0, omega=OMEGA * 1.3, sd=[SD[n] * 1.25 for n in m.error.names])
    t0 = time.perf_counter()
    res = pk.fit(m, data, x0=x0)
    print(f"first fit (compiles the model's kernels): {time.perf_counter() - t0:.1f} s")
    times = []
    for _ in range(args.reps):
        res = pk.fit(m, data, x0=x0)
        times.append(res.seconds)
    print(
        f"FOCE-I + M3: median {statistics.median(times):.1f} s of {args.reps} "
        f"({', '.join(f'{t:.1f}' for t in times)}); OFV {res.ofv:.3f}, "
        f"{res.n_evaluations} evaluations, {res.message}"
    )
    th, om, sd = m.unpack(res.x)
    print("estimate / truth:")
    for (k, v), e in zip(THETA.items(), th):
        print(f"  {k}: {np.exp(e):.3f} / {np.exp(v):.3f}")
    for k, (e, v) in enumerate(zip(np.diag(om), OMEGA)):
        print(f"  omega[{k}]: {e:.4f} / {v:.4f}")
    for n, e in zip(m.error.names, sd):
        print(f"  {n}: {e:.4f} / {SD[n]:.4f}")


if __name__ == "__main__":
    main()
