"""Lag times (ALAG): predictions and their derivatives along the lag against closed forms and
an independent SciPy solve with float64 central differences, and the OFV's exact gradient."""

import numpy as np
import pytest
import scipy.integrate
import sympy as sp

from scichains import pk
from scichains.pk._predict import Regimen, predict_subject
from scichains.pk._sensitivity import Sensitivities

from .checks import central, gradient_matches_central_differences
from .models import lag_model, theoph_subset

DOSE = 320.0


def lagged_oral(ph, t):
    """One-compartment oral absorption of a bolus at 0 that arrives at ``tlag``."""
    ka, cl, v, tl = ph
    k, s = cl / v, np.maximum(t - tl, 0.0)
    return np.where(t > tl, DOSE * ka / (v * (ka - k)) * (np.exp(-k * s) - np.exp(-ka * s)), 0.0)


@pytest.mark.parametrize("order", [2, 3])
def test_lag_derivatives_match_the_closed_form(order):
    depot, center, ka, cl, v, tl = sp.symbols("depot center ka cl v tl")
    sens = Sensitivities(
        [depot, center],
        [ka, cl, v, tl],
        [-ka * depot, ka * depot - cl / v * center],
        center / v,
        order=order,
        lag=[tl, 0],
    )
    phi = np.array([1.5, 2.7, 31.0, 0.4])
    t = np.array([0.25, 0.5, 1.0, 2.0, 8.0, 24.0])  # 0.25: before the dose arrives
    s = pk.Subject(1, [pk.Dose(0.0, DOSE, 0)], t, t * 0, np.arange(t.size))
    y = predict_subject(sens, Regimen(s, 2, (0,)), phi, 1e-12, 1e-14)
    obs = sens.observe(y, phi)
    np.testing.assert_allclose(obs[0], lagged_oral(phi, t), rtol=1e-10, atol=1e-14)
    assert np.all(obs[1][0] == 0) and np.all(obs[2][0] == 0)
    for k in range(4):
        fd = central(lambda p: lagged_oral(p, t), phi, [k], 1e-5)
        np.testing.assert_allclose(obs[1][:, k], fd, rtol=1e-7, atol=1e-10)
        for m in range(k, 4):
            fd = central(lambda p: lagged_oral(p, t), phi, [k, m], 1e-3)
            np.testing.assert_allclose(obs[2][:, k, m], fd, rtol=1e-4, atol=1e-8)
    if order == 3:
        for idx in [(3, 3, 3), (0, 3, 3), (1, 2, 3), (0, 0, 3), (2, 3, 3)]:
            fd = central(lambda p: lagged_oral(p, t), phi, list(idx), 2e-3)
            np.testing.assert_allclose(obs[3][(slice(None), *idx)], fd, rtol=1e-2, atol=1e-6)


def mm_reference(ph, doses, t_obs):
    """Michaelis-Menten elimination with a lagged depot: SciPy's DOP853 on the regimen cut at
    every (lagged) event; ``doses``: (time, amount, state, duration)."""
    ka, vm, km, v, tl = ph
    events = []
    for t0, amt, st, dur in doses:
        t0 = t0 + (tl if st == 0 else 0.0)
        if dur > 0:
            events += [(t0, st, 0.0, amt / dur), (t0 + dur, st, 0.0, -amt / dur)]
        else:
            events.append((t0, st, amt, 0.0))
    events.sort()
    cuts = sorted({0.0, t_obs[-1]} | {e[0] for e in events if e[0] <= t_obs[-1]})
    x, rate, out = np.zeros(2), np.zeros(2), np.zeros(t_obs.size)
    for i, a in enumerate(cuts):
        for e in events:
            if e[0] == a:
                x[e[1]] += e[2]
                rate[e[1]] += e[3]
        b = cuts[i + 1] if i + 1 < len(cuts) else a
        sel = (t_obs >= a) & (t_obs < b) if b > a else t_obs == a
        if b > a:
            r = rate.copy()

            def f(_, u, r=r):
                return [-ka * u[0] + r[0], ka * u[0] - vm * u[1] / (km * v + u[1]) + r[1]]

            te = np.concatenate([t_obs[sel], [b]])
            sol = scipy.integrate.solve_ivp(
                f, (a, b), x, method="DOP853", t_eval=te, rtol=1e-13, atol=1e-13
            )
            out[sel] = sol.y[1, :-1] / v
            x = sol.y[:, -1].copy()
        else:
            out[sel] = x[1] / v
    return out


def test_lag_on_boluses_and_infusions_of_a_nonlinear_model():
    # Michaelis-Menten (no closed form, no time-shift shortcut): a lagged bolus and a lagged
    # infusion into the depot, an unlagged bolus into the centre; all second derivatives along
    # the lag against central differences of an independent solve
    depot, center, ka, vm, km, v, tl = sp.symbols("depot center ka vm km v tl")
    sens = Sensitivities(
        [depot, center],
        [ka, vm, km, v, tl],
        [-ka * depot, ka * depot - vm * center / (km * v + center)],
        center / v,
        lag=[tl, 0],
    )
    doses = [(0.0, 300.0, 0, 0.0), (6.0, 200.0, 0, 2.0), (10.0, 100.0, 1, 0.0)]
    t = np.array([0.2, 1.0, 3.0, 6.5, 7.5, 8.6, 9.0, 10.0, 11.0, 14.0])
    dose_objs = [pk.Dose(a, b, c, d) for a, b, c, d in doses]
    s = pk.Subject(1, dose_objs, t, t * 0, np.arange(t.size))
    phi = np.array([1.2, 40.0, 2.0, 30.0, 0.45])
    y = predict_subject(sens, Regimen(s, 2, (0,)), phi, 1e-12, 1e-14)
    g, g1, g2 = sens.observe(y, phi)
    np.testing.assert_allclose(g, mm_reference(phi, doses, t), rtol=1e-9, atol=1e-12)
    fd1 = central(lambda p: mm_reference(p, doses, t), phi, [4], 1e-5)
    np.testing.assert_allclose(g1[:, 4], fd1, rtol=1e-6, atol=1e-8)
    for k in range(5):
        fd2 = central(lambda p: mm_reference(p, doses, t), phi, [k, 4], 1e-3)
        np.testing.assert_allclose(g2[:, k, 4], fd2, rtol=1e-4, atol=1e-6)


# Laplace through the lag: its third-order jump is checked against the closed form above
@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_ofv_gradient_along_the_lag_matches_central_differences(method):
    model = lag_model()
    data = theoph_subset(4)
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack()
    g = gradient_matches_central_differences(obj, x)
    # the lag matters: the OFV moves with it
    assert abs(g[3]) > 1e-2


def test_lag_definition_errors():
    base = lag_model()
    kw = dict(
        states=base.states,
        odes=base.odes,
        individual=dict(zip(base.phi, base.phi_exprs)),
        theta=dict(zip(base.theta_symbols, base.theta0)),
        eta=base.eta,
        omega=np.diag(base.omega0),
        observe=base.observe,
        error=pk.Additive(0.7),
    )
    depot, tlag = base.states[0], base.phi[3]
    with pytest.raises(ValueError, match="lag time is given for y"):
        pk.PKModel(**kw, lag={sp.Symbol("y"): tlag})
    with pytest.raises(ValueError, match=r"lag time of depot uses \['ttlag'\]"):
        pk.PKModel(**kw, lag={depot: base.theta_symbols[3]})
    t = sp.Symbol("t")
    odes = [base.odes[0] * (1 + 0 * t + t / 1e6), base.odes[1]]
    with pytest.raises(ValueError, match="autonomous ODE"):
        pk.PKModel(**{**kw, "odes": odes}, t=t, lag={depot: tlag})
