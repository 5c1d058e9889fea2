"""Models of benchmarks/ensemble.py, in a module of their own so that Dask workers import them
by name (a function defined in ``__main__`` would be pickled by value and compiled again in
every worker process)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = p[2] * u[0] * u[1] - p[3] * u[1]


def pk_model():
    """One-compartment oral absorption: depot ``a``, central amount ``c``; log parameters
    ``lka``, ``lcl``, ``lv`` (1/h, L/h, L)."""
    import sympy as sp

    from scichains.ode import SymbolicModel

    a, c, lka, lcl, lv = sp.symbols("a c lka lcl lv")
    ka, cl, v = sp.exp(lka), sp.exp(lcl), sp.exp(lv)
    return SymbolicModel([a, c], [lka, lcl, lv], [-ka * a, ka * a - cl / v * c])


THETA = np.log([1.2, 0.4, 5.0])
OMEGA = np.array([0.3, 0.2, 0.15])


def simulated_subjects(count: int, seed: int = 0):
    """``count`` subjects: a dose of 100 at t = 0, central amounts observed at 8 times over
    24 h with 5% proportional noise, random effects drawn from N(0, OMEGA^2)."""
    from scichains.models import SubjectData
    from scichains.ode import ODEProblem, solve

    model = pk_model()
    rng = np.random.default_rng(seed)
    t = np.array([0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 24.0])
    subjects = []
    for _ in range(count):
        p = THETA + OMEGA * rng.standard_normal(3)
        prob = model.problem(np.zeros(2), (0.0, 24.0), p)
        assert isinstance(prob, ODEProblem)
        y = solve(prob, saveat=t, jumps=[(0.0, 0, 100.0)], rtol=1e-8, atol=1e-10).u
        y = y * (1 + 0.05 * rng.standard_normal(y.shape))
        w = np.zeros_like(y)
        w[:, 1] = 1.0
        subjects.append(SubjectData(t=t, y=y, weights=w, u0=np.zeros(2), jumps=[(0.0, 0, 100.0)]))
    return model, subjects
