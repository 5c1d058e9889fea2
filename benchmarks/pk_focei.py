"""FOCE-I on the Theophylline data (nlmixr2's one-compartment model, 12 subjects, 132
concentrations): wall time of ``scichains.pk.fit`` (exact outer gradient) against the same
objective minimised by the same BFGS with finite-difference outer gradients (SciPy's 2-point
differences: the approach of issue 14's hand-written FOCE-I), in the same process. Prints
the machine, the median of ``--reps`` fits, the peer's time, their ratio, both OFVs (nlmixr2
published 116.804) and the covariance step's time.

Usage: python benchmarks/pk_focei.py [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.optimize
import sympy as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine as machine  # noqa: E402

from scichains import pk  # noqa: E402


def theophylline_model():
    depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
    tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={ka: sp.exp(tka + eka), cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev)},
        theta={tka: 0.45, tcl: 1.0, tv: 3.45},
        eta=[eka, ecl, ev],
        omega=[0.6, 0.3, 0.1],
        observe=center / v,
        error=pk.Additive(0.7),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    print(machine.describe())
    t0 = time.perf_counter()
    model = theophylline_model()
    data = pk.theophylline()
    print(f"model build (SymPy, generated code): {time.perf_counter() - t0:.2f} s")
    times = []
    for _ in range(args.reps):
        res = pk.fit(model, data)
        times.append(res.seconds)
    med = statistics.median(times)
    print(
        f"pk.fit, exact gradient: median {med:.2f} s of {args.reps} "
        f"({', '.join(f'{t:.2f}' for t in times)}); OFV {res.ofv:.4f}, "
        f"{res.n_evaluations} evaluations, {res.message}"
    )
    obj = pk.PopulationObjective(model, data)
    count = [0]

    def value(x):
        count[0] += 1
        try:
            return obj.value(x)
        except (pk.InnerFailure, pk.PKSolveError, np.linalg.LinAlgError):
            return np.inf

    t0 = time.perf_counter()
    peer = scipy.optimize.minimize(
        value, model.pack(), method="BFGS", options={"gtol": 1e-4, "maxiter": 500}
    )
    tp = time.perf_counter() - t0
    print(
        f"peer, finite-difference gradient: {tp:.2f} s; OFV {peer.fun:.4f}, "
        f"{count[0]} evaluations, {peer.message}"
    )
    print(f"ratio peer / exact: {tp / med:.1f}x")
    t0 = time.perf_counter()
    cov = pk.covariance(model, data, res)
    print(
        f"covariance step (sandwich): {time.perf_counter() - t0:.2f} s; SE(theta) "
        f"{np.array2string(cov.se_theta, precision=4)}"
    )


if __name__ == "__main__":
    main()
