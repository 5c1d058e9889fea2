"""Dosing rules (a dose when the concentration falls below a threshold): predictions and
their derivatives up to third order against the closed form of a one-compartment IV bolus,
and the FOCE-I objective's exact gradient against central differences."""

import pickle

import numpy as np
import pytest
import sympy as sp

from scichains import pk
from scichains.pk._predict import Regimen, predict_subject
from scichains.pk._sensitivity import Sensitivities

from .checks import central, gradient_matches_central_differences

D0, A, CTHR = 100.0, 40.0, 0.8


def closed_form(ph, t, cthr=CTHR, amount=A, max_doses=None):
    """``C(t) = D0/V e^{-kt} r^{j(t)}`` with ``r = 1 + A/(V Cthr)``: the rule's doses come at
    ``tau_1 = ln(D0/(V Cthr))/k`` and every ``ln(r)/k`` after."""
    cl, v = ph[0], ph[1]
    k, r = cl / v, 1.0 + amount / (v * cthr)
    tau1 = np.log(D0 / (v * cthr)) / k
    j = np.where(t > tau1, np.floor((t - tau1) / (np.log(r) / k)) + 1, 0)
    if max_doses is not None:
        j = np.minimum(j, max_doses)
    return D0 / v * np.exp(-k * t) * r**j


def one_compartment(order, with_threshold=False):
    center, cl, v, c = sp.symbols("center cl v cthr")
    phi = [cl, v, c] if with_threshold else [cl, v]
    cthr = c if with_threshold else CTHR
    rule = (center / v - cthr, 0, -1, A, None)
    return Sensitivities([center], phi, [-cl / v * center], center / v, order=order, rules=[rule])


# observation times between the rule's doses (at 10.7, 18.1, 25.4, 32.8, 40.1: none close
# to one, where central differences would straddle the jump)
T_OBS = np.array([0.5, 2.0, 5.0, 8.0, 14.0, 21.5, 29.0, 36.5, 44.0])


@pytest.mark.parametrize("order", [2, 3])
def test_rule_doses_and_derivatives_match_the_closed_form(order):
    sens = one_compartment(order, with_threshold=True)
    phi = np.array([4.0, 30.0, CTHR])
    s = pk.Subject(1, [pk.Dose(0.0, D0, 0)], T_OBS, T_OBS * 0, np.arange(T_OBS.size))

    def exact(p):
        return closed_form(p, T_OBS, cthr=p[2])

    y = predict_subject(sens, Regimen(s, 1), phi, 1e-12, 1e-14)
    obs = sens.observe(y, phi)
    np.testing.assert_allclose(obs[0], exact(phi), rtol=1e-10)
    for k in range(3):
        fd = central(exact, phi, [k], 1e-6, relative=True)
        np.testing.assert_allclose(obs[1][:, k], fd, rtol=1e-6, atol=1e-10)
        for m in range(k, 3):
            fd = central(exact, phi, [k, m], 1e-4, relative=True)
            np.testing.assert_allclose(obs[2][:, k, m], fd, rtol=1e-4, atol=1e-8)
    if order == 3:
        for idx in [(0, 0, 0), (0, 1, 2), (1, 1, 2), (2, 2, 2), (0, 1, 1)]:
            fd = central(exact, phi, list(idx), 2e-3, relative=True)
            np.testing.assert_allclose(obs[3][(slice(None), *idx)], fd, rtol=1e-2, atol=1e-6)


def test_the_dose_times_are_the_closed_forms():
    """The doses' times: the jumps of the predictions on a fine grid, against tau_1 and
    Delta."""
    sens = one_compartment(2)
    phi = np.array([4.0, 30.0])
    t = np.linspace(0.05, 44.0, 2000)
    s = pk.Subject(1, [pk.Dose(0.0, D0, 0)], t, t * 0, np.arange(t.size))
    c = sens.observe(predict_subject(sens, Regimen(s, 1), phi, 1e-12, 1e-14), phi)[0]
    np.testing.assert_allclose(c, closed_form(phi, t), rtol=1e-10)


def rule_model(max_doses=1, error=None, **kw):
    """One-compartment IV model with a rescue dose of 40 when the concentration falls below
    0.8 (once, by default); log-normal CL and V."""
    center, cl, v = sp.symbols("center cl v")
    tcl, tv, ecl, ev = sp.symbols("tcl tv eta_cl eta_v")
    return pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev)},
        theta={tcl: np.log(4.0), tv: np.log(30.0)},
        eta=[ecl, ev],
        omega=np.array([0.09, 0.04]),
        observe=center / v,
        error=error or pk.Exponential(0.1),
        rules=[pk.DoseRule(center / v - CTHR, center, A, max_doses=max_doses)],
        **kw,
    )


# samples early (before the rescue dose) and late (after it, which comes between 4 and 25
# for every plausible subject): no dose time crosses a sample, where the predictions jump
T_RESCUE = np.array([0.5, 1.5, 3.0, 30.0, 36.0, 42.0, 48.0])


def rule_data(model, n=6, seed=1, t=T_RESCUE):
    """``n`` subjects given 100 at 0, sampled at ``t``, simulated from ``model``."""
    subjects = [
        pk.Subject(i + 1, [pk.Dose(0.0, D0, 0)], t, t * 0 + 1.0, np.arange(t.size))
        for i in range(n)
    ]
    data = pk.EventData(subjects, [])
    dv = pk.simulate(model, data, model.pack(), 1, seed=seed, rtol=1e-10, atol=1e-12)[0]
    k = 0
    for s in subjects:
        s.dv[:] = dv[k : k + s.times.size]
        k += s.times.size
    return data


@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_ofv_gradient_through_the_rule_matches_central_differences(method):
    model = rule_model()
    data = rule_data(model)
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    gradient_matches_central_differences(obj, model.pack() + 0.05)


def test_repeated_doses_and_the_direction_form_give_the_same_gradient():
    """Doses every ~7 h while the concentration stays above 0.8 (proportional error), in
    the system along phi and in the one along eta and theta (time-varying covariates')."""
    model = rule_model(max_doses=None, error=pk.Proportional(0.1))
    data = rule_data(model, t=T_OBS)
    x = model.pack() + 0.05
    phi = pk.PopulationObjective(model, data, sensitivities="phi", rtol=1e-11, atol=1e-13)
    g = gradient_matches_central_differences(phi, x)
    dirs = pk.PopulationObjective(model, data, sensitivities="directions", rtol=1e-11, atol=1e-13)
    v, gd = dirs.value_and_grad(x)
    assert v == pytest.approx(phi.value(x), rel=1e-10)
    np.testing.assert_allclose(gd, g, rtol=1e-7, atol=1e-8)


def test_focei_fit_recovers_the_simulated_population():
    model = rule_model()
    data = rule_data(model, n=24, seed=3)
    fit = pk.fit(model, data)
    assert fit.success
    cl, v = np.exp(list(fit.theta.values()))
    assert cl == pytest.approx(4.0, rel=0.1) and v == pytest.approx(30.0, rel=0.1)
    # without the rule the late samples cannot be fitted
    plain = pk.PKModel(**{**model._arguments, "rules": ()})
    assert pk.fit(plain, data).ofv > fit.ofv + 100


def test_max_doses_and_pickling():
    model = rule_model(max_doses=2)
    t = np.linspace(0.05, 44.0, 400)
    s = pk.Subject(1, [pk.Dose(0.0, D0, 0)], t, t * 0 + 1.0, np.arange(t.size))
    data = pk.EventData([s], [])
    obj = pk.PopulationObjective(model, data, rtol=1e-12, atol=1e-14)
    (c,) = obj.predict(model.pack())
    np.testing.assert_allclose(c, closed_form(np.array([4.0, 30.0]), t, max_doses=2), rtol=1e-10)
    again = pickle.loads(pickle.dumps(model))
    assert again.rules[0].max_doses == 2
    (c2,) = pk.PopulationObjective(again, data, rtol=1e-12, atol=1e-14).predict(model.pack())
    np.testing.assert_array_equal(c2, c)


def test_rule_definition_errors():
    base = rule_model()
    center, (cl, v) = base.states[0], base.phi
    kw = {k: v for k, v in base._arguments.items() if k != "rules"}  # the model's arguments
    with pytest.raises(ValueError, match="amount must be finite and positive"):
        pk.DoseRule(center / v - 1, center, -5.0)
    with pytest.raises(ValueError, match="direction must be"):
        pk.DoseRule(center / v - 1, center, 5.0, direction=2)
    with pytest.raises(ValueError, match="max_doses must be a positive integer"):
        pk.DoseRule(center / v - 1, center, 5.0, max_doses=0)
    with pytest.raises(TypeError, match="pk.DoseRule"):
        pk.PKModel(**kw, rules=[(center / v - 1, center, 5.0)])
    with pytest.raises(ValueError, match="which is not a state"):
        pk.PKModel(**kw, rules=[pk.DoseRule(center / v - 1, sp.Symbol("depot"), 5.0)])
    with pytest.raises(ValueError, match=r"the condition uses \['tv'\]"):
        pk.PKModel(**kw, rules=[pk.DoseRule(center - base.theta_symbols[1], center, 5.0)])
    with pytest.raises(ValueError, match="does not use the states"):
        pk.PKModel(**kw, rules=[pk.DoseRule(v - 1, center, 5.0)])
    t = sp.Symbol("t")
    with pytest.raises(ValueError, match="autonomous ODE"):
        pk.PKModel(
            **{**kw, "odes": [-cl / v * center * (1 + t / 1e6)], "t": t},
            rules=[pk.DoseRule(center / v - 1, center, 5.0)],
        )
    with pytest.raises(ValueError, match="lag time is not supported"):
        pk.PKModel(**{**kw, "lag": {center: cl}}, rules=[pk.DoseRule(center / v - 1, center, 5.0)])
    ss = pk.Subject(1, [pk.Dose(0.0, D0, 0, ss_interval=12.0)], T_OBS, T_OBS, np.arange(9))
    with pytest.raises(ValueError, match="steady-state dose"):
        pk.PopulationObjective(base, pk.EventData([ss], []))


def test_a_dose_at_an_observation_time_is_not_lost():
    # the first rule dose falls on a sample time (the end of a segment): the sample sees the
    # concentration just before or just after it, and the doses after it are all there
    sens = one_compartment(2)
    phi = np.array([4.0, 30.0])
    k, r = 4.0 / 30.0, 1.0 + A / (30.0 * CTHR)
    tau1 = np.log(D0 / (30.0 * CTHR)) / k
    t = np.array([2.0, tau1, tau1 + 1.0, tau1 + 9.0])
    s = pk.Subject(1, [pk.Dose(0.0, D0, 0)], t, t * 0, np.arange(t.size))
    c = sens.observe(predict_subject(sens, Regimen(s, 1), phi, 1e-12, 1e-14), phi)[0]
    assert c[1] == pytest.approx(CTHR, rel=1e-9) or c[1] == pytest.approx(CTHR * r, rel=1e-9)
    np.testing.assert_allclose(c[[0, 2, 3]], closed_form(phi, t[[0, 2, 3]]), rtol=1e-10)


def test_a_dose_exactly_at_a_segments_end_reaches_the_state():
    # zero-order elimination x' = -1 from 10: x = 2 at t = 8, a sample time, where a solve
    # ends: the rule's crossing at the end of one solve or the start of the next
    x, kel = sp.symbols("x kel")
    sens = Sensitivities([x], [kel], [-kel], x, order=2, rules=[(x - 2, 0, -1, 5.0, None)])
    t = np.array([4.0, 8.0, 9.0])
    s = pk.Subject(1, [pk.Dose(0.0, 10.0, 0)], t, t * 0, np.arange(t.size))
    y = predict_subject(sens, Regimen(s, 1), np.array([1.0]), 1e-10, 1e-12)
    # the sample at 8 sees the state just before the dose or just after it (the crossing
    # is found within rounding of 8); the one at 9 sees the dose either way
    assert y[1, 0] == pytest.approx(2.0, abs=1e-12) or y[1, 0] == pytest.approx(7.0, abs=1e-12)
    np.testing.assert_allclose(y[[0, 2], 0], [6.0, 6.0], rtol=1e-12)
    # and d/dkel: the dose comes at 8 / kel, x(9) = 10 + 5 - 9 kel
    np.testing.assert_allclose(y[:, 1], [-4.0, -8.0, -9.0], rtol=1e-9)


def oral_reference(ph, t_obs, amount=30.0, first=100.0):
    """Oral one-compartment model with a dose of ``amount`` into the depot whenever the
    concentration falls below ``cthr``: SciPy's DOP853 with its own event location, restarted
    after each dose; ``ph = [ka, cl, v, cthr]``."""
    from scipy.integrate import solve_ivp

    ka, cl, v, cthr = ph

    def f(t, x):
        return [-ka * x[0], ka * x[0] - cl / v * x[1]]

    def below(t, x):
        return x[1] / v - cthr

    below.terminal, below.direction = True, -1
    out, t0, x = [], 0.0, np.array([first, 0.0])
    rest = np.asarray(t_obs, dtype=float)
    while True:
        sol = solve_ivp(f, (t0, rest[-1]), x, method="DOP853", rtol=1e-13, atol=1e-15,
                        events=below, dense_output=True)  # fmt: skip
        te = sol.t_events[0]
        stop = te[0] if te.size else np.inf
        here = rest[rest < stop]
        out.extend(sol.sol(here).T[:, 1] / v)
        rest = rest[rest >= stop]
        if not rest.size:
            return np.array(out)
        t0, x = stop, sol.y_events[0][0] + np.array([amount, 0.0])


def test_a_rule_dosing_a_depot_matches_an_independent_solve_to_second_order():
    # two states: the dose goes into the depot while the condition reads the centre, so the
    # series of the dose time has every cross term (L_f g, L_f^2 g through ka and the flow)
    depot, center, ka, cl, v, c = sp.symbols("depot center ka cl v cthr")
    sens = Sensitivities(
        [depot, center],
        [ka, cl, v, c],
        [-ka * depot, ka * depot - cl / v * center],
        center / v,
        order=2,
        rules=[(center / v - c, 0, -1, 30.0, None)],
    )
    phi = np.array([1.1, 3.0, 25.0, 0.9])
    t = np.array([1.0, 4.0, 9.0, 16.0, 18.5, 25.0, 32.0])  # doses at 13.4, 21.0, 28.6
    s = pk.Subject(1, [pk.Dose(0.0, 100.0, 0)], t, t * 0, np.arange(t.size))
    g, g1, g2 = sens.observe(predict_subject(sens, Regimen(s, 2), phi, 1e-12, 1e-14), phi)
    ref = oral_reference(phi, t)
    np.testing.assert_allclose(g, ref, rtol=1e-9)
    assert ref[-1] > 0.9  # the rule dosed (without it the concentration is below 0.1)
    for k in range(4):
        fd = central(lambda p: oral_reference(p, t), phi, [k], 1e-5, relative=True)
        np.testing.assert_allclose(g1[:, k], fd, rtol=1e-5, atol=1e-8)
        for m in range(k, 4):
            # (the differences' error falls as h^2 to ours: 8.6e-3, 9.6e-4, 8.7e-5 relative at
            # relative steps 3e-3, 1e-3, 3e-4; measured)
            fd = central(lambda p: oral_reference(p, t), phi, [k, m], 3e-4, relative=True)
            np.testing.assert_allclose(g2[:, k, m], fd, rtol=5e-4, atol=1e-6)


def test_a_condition_that_turns_nan_fails_the_prediction_by_name():
    # sqrt(C - 0.8) is NaN below 0.8: the solve fails naming the condition (it once went on
    # without the dose)
    base = rule_model()
    center, v = base.states[0], base.phi[1]
    rule = pk.DoseRule(sp.sqrt(center / v - 0.8) - 0.1, center, A)
    bad = pk.PKModel(**{**base._arguments, "rules": [rule]})
    data = rule_data(base, n=1)
    with pytest.raises(pk.PKSolveError, match="condition of events.0. returned nan"):
        pk.PopulationObjective(bad, data).predict(bad.pack())
