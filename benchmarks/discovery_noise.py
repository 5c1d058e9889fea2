"""Discovery from raw, noisy samples (issue 32): derivative estimates and weak-form SINDy.

1. Derivatives of sin(t) at 200 times on [0, 2 pi] (even and irregular), clean and with 1%
   Gaussian noise (standard deviation 1% of the signal's standard deviation): the RMS error of
   each ``discovery.derivatives`` method against cos(t), and the default's ratio to the best.
2. Weak-form sparse regression (``discovery.weak_sparse_regression``, default options) on the
   Lotka-Volterra system of ``examples/lotka_volterra_ude.py`` (alpha, beta, gamma, delta =
   1.3, 0.9, 0.8, 1.8; the same initial state and sampling step 0.1), with Gaussian noise of
   5%, 10% and 20% of each state's standard deviation over the record, noise seeds 0-9: how
   many seeds give exactly the true support (x' = x, x*y; y' = y, x*y). On the example's own
   record (t in [0, 3], 31 samples, half an orbit) and on t in [0, 10] (101 samples), with
   polynomials of degree 2 and 3.
3. Bagged weak-form SINDy (``discovery.ensemble_sparse_regression(weak=True)``, 100
   resamples) on the [0, 10] record: the largest inclusion probability of a spurious term and
   the smallest of a true term over the 10 seeds, and how often the median model is exact.
4. The example's own record (t in [0, 3], 31 samples, degree 2), what any selection rule
   could reach: the seeds in which some STLSQ threshold gives the true support; in which,
   with the UDE example's known terms (alpha x, -delta y) taken off, some threshold gives
   x*y alone; in which x*y is the best single term for that remainder.

The trajectories come from scipy's ``solve_ivp`` (rtol 1e-11), so the script compiles nothing.
Run: ``python benchmarks/discovery_noise.py``. Quote the machine line printed first.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _machine as machine  # noqa: E402

from scichains.discovery import (  # noqa: E402
    PolynomialLibrary,
    derivatives,
    ensemble_sparse_regression,
    weak_sparse_regression,
)

METHODS = ["finite_difference", "smoothed_finite_difference", "savgol", "spline", "tv", "kalman"]
ALPHA, BETA, GAMMA, DELTA = 1.3, 0.9, 0.8, 1.8
U0 = [0.44249296, 4.6280594]


def lotka_volterra(t_end: float, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The example's trajectory at ``m`` evenly spaced times on ``[0, t_end]``: ``(t, X)``."""
    t = np.linspace(0.0, t_end, m)

    def rhs(_, u):
        return [ALPHA * u[0] - BETA * u[0] * u[1], GAMMA * u[0] * u[1] - DELTA * u[1]]

    sol = solve_ivp(rhs, (0.0, t_end), U0, t_eval=t, rtol=1e-11, atol=1e-12)
    return t, sol.y.T


def true_support(library) -> np.ndarray:
    names = library.names(["x", "y"])
    s = np.zeros((len(names), 2), dtype=bool)
    s[[names.index("x"), names.index("x*y")], 0] = True
    s[[names.index("y"), names.index("x*y")], 1] = True
    return s


def recoveries(t, clean, library, level: float, seeds=range(10)) -> int:
    """Noise seeds (of ``seeds``) whose weak-form fit has exactly the true support."""
    want = true_support(library)
    hits = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        X = clean + level * clean.std(axis=0) * rng.standard_normal(clean.shape)
        fit = weak_sparse_regression(t, X, library, input_names=["x", "y"])
        hits += np.array_equal(fit.coefficients != 0, want)
    return hits


def derivative_errors() -> None:
    print("1. RMS error of d/dt sin(t) at 200 times on [0, 2 pi] against cos(t)")
    print(f"   {'method':<28} {'clean':>9} {'1% noise':>9} {'irregular':>10} {'irr. 1%':>9}")
    rng = np.random.default_rng(0)
    even = np.linspace(0.0, 2 * np.pi, 200)
    gaps = rng.uniform(0.5, 1.5, 199)
    irregular = np.concatenate([[0.0], np.cumsum(gaps)]) * (2 * np.pi / gaps.sum())
    noise = [rng.standard_normal(200) for _ in range(2)]
    table = {}
    for method in METHODS:
        row = []
        for k, t in enumerate((even, irregular)):
            x = np.sin(t)
            for noisy in (False, True):
                xs = x + 0.01 * np.std(x) * noise[k] if noisy else x
                row.append(float(np.sqrt(np.mean((derivatives(t, xs, method) - np.cos(t)) ** 2))))
        table[method] = row
        print(f"   {method:<28} " + " ".join(f"{e:9.2e}" for e in row))
    for col, name in ((1, "even, 1% noise"), (3, "irregular, 1% noise")):
        best = min(table.values(), key=lambda r: r[col])[col]
        default = table["spline"][col]
        print(f"   default (spline) / best, {name}: {default / best:.2f}")


def weak_recovery() -> None:
    print(
        "2. weak-form SINDy on Lotka-Volterra, exact support in 10 noise seeds "
        "(noise: % of each state's SD)"
    )
    for t_end, m in ((3.0, 31), (10.0, 101)):
        t, clean = lotka_volterra(t_end, m)
        for degree in (2, 3):
            lib = PolynomialLibrary(degree)
            start = time.perf_counter()
            counts = [recoveries(t, clean, lib, level) for level in (0.05, 0.10, 0.20)]
            sec = (time.perf_counter() - start) / 30
            print(
                f"   t in [0, {t_end:g}], {m} samples, degree {degree}: "
                f"5%: {counts[0]}/10, 10%: {counts[1]}/10, 20%: {counts[2]}/10 "
                f"({sec * 1e3:.0f} ms a fit)"
            )


def ensemble_inclusion() -> None:
    print("3. bagged weak-form SINDy (100 resamples), t in [0, 10], 10 noise seeds")
    t, clean = lotka_volterra(10.0, 101)
    for degree in (2, 3):
        lib = PolynomialLibrary(degree)
        want = true_support(lib)
        for level in (0.05, 0.10, 0.20):
            spurious, true, exact = 0.0, 1.0, 0
            start = time.perf_counter()
            for seed in range(10):
                rng = np.random.default_rng(seed)
                X = clean + level * clean.std(axis=0) * rng.standard_normal(clean.shape)
                fit = ensemble_sparse_regression(X, t=t, library=lib, weak=True)
                spurious = max(spurious, float(fit.inclusion[~want].max()))
                true = min(true, float(fit.inclusion[want].min()))
                exact += np.array_equal(fit.coefficients != 0, want)
            sec = (time.perf_counter() - start) / 10
            print(
                f"   degree {degree}, {level:.0%} noise: spurious inclusion <= {spurious:.2f}, "
                f"true >= {true:.2f}, median model exact {exact}/10 ({sec:.1f} s an ensemble)"
            )


def short_record_limits() -> None:
    """What the example's own record (t in [0, 3], 31 samples) allows, whatever the selection
    rule: per noise level, the seeds in which (a) some STLSQ threshold (60, log-spaced from
    1e-3 to 10) gives the true support of the weak-form rows; (b) with the known physics of the
    UDE example taken off (alpha x, -delta y: the rows' left-hand side minus the integrals
    of the known terms), some threshold gives x*y alone in both equations; (c) x*y is the
    single library term that fits that remainder best in both equations."""
    from scichains.discovery import stlsq
    from scichains.discovery._weak import weak_rows

    print(
        "4. the example's record (t in [0, 3], 31 samples), degree 2: seeds of 10 in which "
        "any rule could succeed"
    )
    t, clean = lotka_volterra(3.0, 31)
    lib = PolynomialLibrary(2)
    names = lib.names(["x", "y"])
    want = true_support(lib)
    missing = np.zeros_like(want)
    missing[names.index("x*y"), :] = True
    thresholds = np.geomspace(1e-3, 10.0, 60)
    for level in (0.05, 0.10, 0.20):
        full = remainder = single = 0
        for seed in range(10):
            rng = np.random.default_rng(seed)
            X = clean + level * clean.std(axis=0) * rng.standard_normal(clean.shape)
            G, B, _, _ = weak_rows(t, X, lib)
            # the integrals of x' minus those of the known terms (columns x and y of G)
            Bm = B - np.column_stack(
                [ALPHA * G[:, names.index("x")], -DELTA * G[:, names.index("y")]]
            )
            full += any(np.array_equal(stlsq(G, B, c) != 0, want) for c in thresholds)
            remainder += any(np.array_equal(stlsq(G, Bm, c) != 0, missing) for c in thresholds)
            best = []
            for e in range(2):
                rss = []
                for j in range(len(names)):
                    c = G[:, j] @ Bm[:, e] / (G[:, j] @ G[:, j])
                    rss.append(float(np.sum((Bm[:, e] - c * G[:, j]) ** 2)))
                best.append(names[int(np.argmin(rss))])
            single += best == ["x*y", "x*y"]
        print(
            f"   {level:.0%} noise: (a) full support by some threshold {full}/10; (b) x*y alone "
            f"after the known terms, some threshold {remainder}/10; (c) x*y the best single "
            f"term in both equations {single}/10"
        )


def main() -> None:
    print(machine.describe())
    derivative_errors()
    weak_recovery()
    ensemble_inclusion()
    short_record_limits()


if __name__ == "__main__":
    main()
