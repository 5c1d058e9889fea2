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


PK_TIMES = np.array([0.25, 0.5, 1.0, 2.0, 3.5, 5.0, 7.0, 9.0, 12.0, 24.0])


def pk_population(count: int, seed: int = 0):
    """``(model, data, x)``: nlmixr2's one-compartment oral Theophylline model
    (:class:`scichains.pk.PKModel`, log-normal ka, CL, V, additive error) and ``count``
    simulated subjects of the Theophylline design (320 mg into the depot at t = 0, 10
    samples over 24 h) drawn from the model at ``x`` (near the published estimates)."""
    import sympy as sp

    from scichains import pk

    depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
    tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
    model = pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={ka: sp.exp(tka + eka), cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev)},
        theta={tka: 0.45, tcl: 1.0, tv: 3.45},
        eta=[eka, ecl, ev],
        omega=[0.4, 0.07, 0.02],
        observe=center / v,
        error=pk.Additive(0.7),
    )
    rows = np.arange(2, 2 + PK_TIMES.size)
    design = [
        pk.Subject(i + 1, [pk.Dose(0.0, 320.0, 0, row=1)], PK_TIMES, np.zeros(PK_TIMES.size), rows)
        for i in range(count)
    ]
    design = pk.EventData(design, ())
    x = model.pack(theta=[0.47, 1.01, 3.46], omega=[0.4, 0.07, 0.02], sd=[0.7])
    dv = pk.simulate(model, design, x, 1, seed=seed)[0].reshape(count, PK_TIMES.size)
    subjects = [
        pk.Subject(s.id, s.doses, s.times, dv[i].copy(), s.rows)
        for i, s in enumerate(design.subjects)
    ]
    return model, pk.EventData(subjects, ()), x
