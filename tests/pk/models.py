"""Models shared by the pk tests."""

import numpy as np
import sympy as sp

from scichains import pk


def oral_model(error=None, omega=(0.6, 0.3, 0.1), covariate=False):
    """nlmixr2's one-compartment Theophylline model (log-normal ka, CL, V)."""
    depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
    tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
    wt = sp.Symbol("WT")
    cl_expr = sp.exp(tcl + ecl) * ((wt / 70) ** sp.Rational(3, 4) if covariate else 1)
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={ka: sp.exp(tka + eka), cl: cl_expr, v: sp.exp(tv + ev)},
        theta={tka: 0.45, tcl: 1.0, tv: 3.45},
        eta=[eka, ecl, ev],
        omega=np.asarray(omega),
        observe=center / v,
        error=error or pk.Additive(0.7),
        covariates=[wt] if covariate else (),
    )


def iv_model():
    center, cl, v = sp.symbols("center cl v")
    tcl, tv, ecl = sp.symbols("tcl tv eta_cl")
    return pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: sp.exp(tcl + ecl), v: sp.exp(tv)},
        theta={tcl: np.log(3.0), tv: np.log(20.0)},
        eta=[ecl],
        omega=[0.1],
        observe=center / v,
        error=pk.Additive(0.5),
    )


def theoph_subset(k=12, drop_t0=False):
    """The first ``k`` Theophylline subjects (optionally without the time-0 samples, where a
    proportional error has zero variance)."""
    data = pk.theophylline()
    subjects = []
    for s in data.subjects[:k]:
        keep = s.times > 0 if drop_t0 else np.ones(s.times.size, bool)
        subjects.append(
            pk.Subject(s.id, s.doses, s.times[keep], s.dv[keep], s.rows[keep], s.covariates)
        )
    return pk.EventData(subjects, data.covariates)
