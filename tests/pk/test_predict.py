"""Predictions of the dosing regimen and their second-order sensitivities, against closed forms."""

import numpy as np
import pytest
import sympy as sp

from scichains import pk
from scichains.pk._sensitivity import Sensitivities

from .models import REGIMEN_CSV, iv_model, oral_f_model, oral_model

DOSE = 320.0


def oral_conc(phi, t):
    """One-compartment oral absorption, bolus ``DOSE`` into the depot at 0 (closed form)."""
    ka, cl, v = phi
    k = cl / v
    return DOSE * ka / (v * (ka - k)) * (np.exp(-k * t) - np.exp(-ka * t))


def test_second_order_sensitivities_match_the_closed_form():
    depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
    sens = Sensitivities(
        [depot, center], [ka, cl, v], [-ka * depot, ka * depot - cl / v * center], center / v
    )
    from scichains import ode

    phi = np.array([1.5, 2.7, 31.0])
    t = np.array([0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 24.0])
    y0 = np.zeros(sens.size)
    y0[0] = DOSE
    prob = sens.model.problem(y0, (0.0, 24.0), np.concatenate([phi, [0.0, 0.0]]))
    sol = ode.solve(prob, saveat=t, rtol=1e-11, atol=1e-13)
    g, g1, g2 = sens.observe(sol.u, phi)
    np.testing.assert_allclose(g, oral_conc(phi, t), rtol=1e-8)
    h = 1e-4
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        fd = (oral_conc(phi + e, t) - oral_conc(phi - e, t)) / (2 * h)
        np.testing.assert_allclose(g1[:, k], fd, rtol=1e-6, atol=1e-9)
        for m in range(3):
            d = np.zeros(3)
            d[m] = h
            fd2 = (
                oral_conc(phi + e + d, t)
                - oral_conc(phi + e - d, t)
                - oral_conc(phi - e + d, t)
                + oral_conc(phi - e - d, t)
            ) / (4 * h * h)
            np.testing.assert_allclose(g2[:, k, m], fd2, rtol=1e-4, atol=1e-7)
    np.testing.assert_array_equal(g2, np.swapaxes(g2, 1, 2))


def test_each_observation_row_takes_its_own_endpoint():
    # two observation expressions (issue 29, item 3): the concentration and the absorption
    # rate ka * depot; rows at the same times alternate endpoints, each against its closed
    # form and central differences of it
    depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
    sens = Sensitivities(
        [depot, center],
        [ka, cl, v],
        [-ka * depot, ka * depot - cl / v * center],
        [center / v, ka * depot],
    )
    from scichains import ode

    def rate(phi, t):
        return DOSE * phi[0] * np.exp(-phi[0] * t)

    phi = np.array([1.5, 2.7, 31.0])
    t = np.array([0.25, 0.25, 1.0, 1.0, 4.0, 8.0, 12.0])
    endpoint = np.array([0, 1, 1, 0, 1, 0, 1])
    y0 = np.zeros(sens.size)
    y0[0] = DOSE
    prob = sens.model.problem(y0, (0.0, 24.0), np.concatenate([phi, [0.0, 0.0]]))
    sol = ode.solve(prob, saveat=np.unique(t), rtol=1e-11, atol=1e-13)
    u = sol.u[np.searchsorted(np.unique(t), t)]
    g, g1, g2 = sens.observe(u, phi, endpoint=endpoint)

    def closed(p):
        return np.where(endpoint == 0, oral_conc(p, t), rate(p, t))

    np.testing.assert_allclose(g, closed(phi), rtol=1e-8)
    h = 1e-4
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        fd = (closed(phi + e) - closed(phi - e)) / (2 * h)
        np.testing.assert_allclose(g1[:, k], fd, rtol=1e-6, atol=1e-9)
        for m in range(3):
            d = np.zeros(3)
            d[m] = h
            fd2 = (
                closed(phi + e + d)
                - closed(phi + e - d)
                - closed(phi - e + d)
                + closed(phi - e - d)
            ) / (4 * h * h)
            np.testing.assert_allclose(g2[:, k, m], fd2, rtol=1e-4, atol=1e-7)
    assert sens.n_endpoints == 2
    with pytest.raises(ValueError, match="2 observation expressions: give each row's endpoint"):
        sens.observe(u, phi)
    with pytest.raises(ValueError, match=r"endpoint must be .* in 0\.\.1"):
        sens.observe(u, phi, endpoint=endpoint + 1)


def test_third_order_sensitivities_match_the_closed_form():
    depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
    sens = Sensitivities(
        [depot, center],
        [ka, cl, v],
        [-ka * depot, ka * depot - cl / v * center],
        center / v,
        order=3,
    )
    from scichains import ode

    phi = np.array([1.5, 2.7, 31.0])
    t = np.array([0.5, 2.0, 8.0, 24.0])
    y0 = np.zeros(sens.size)
    y0[0] = DOSE
    prob = sens.model.problem(y0, (0.0, 24.0), np.concatenate([phi, [0.0, 0.0]]))
    g, g1, g2, g3 = sens.observe(ode.solve(prob, saveat=t, rtol=1e-12, atol=1e-14).u, phi)
    np.testing.assert_allclose(g, oral_conc(phi, t), rtol=1e-9)

    def second(ph, k, m, h=1e-3):
        e, d = np.eye(3)[k] * h, np.eye(3)[m] * h
        c = oral_conc
        return (c(ph + e + d, t) - c(ph + e - d, t) - c(ph - e + d, t) + c(ph - e - d, t)) / (
            4 * h * h
        )

    h = 1e-3
    for k, m, r in [(0, 0, 0), (0, 1, 2), (1, 1, 2), (2, 2, 2), (0, 2, 1)]:
        e = np.eye(3)[r] * h
        fd3 = (second(phi + e, k, m) - second(phi - e, k, m)) / (2 * h)
        np.testing.assert_allclose(g3[:, k, m, r], fd3, rtol=2e-3, atol=1e-6)
        np.testing.assert_array_equal(g3[:, k, m, r], g3[:, r, k, m])


def iv_conc(cl, v, doses, t):
    """One-compartment IV: superposition of boluses (duration 0) and zero-order infusions."""
    k = cl / v
    c = np.zeros_like(t)
    for t0, amount, dur in doses:
        s = t - t0
        if dur == 0:
            c += np.where(s >= 0, amount / v * np.exp(-k * np.maximum(s, 0)), 0.0)
        else:
            rate = amount / dur
            during = rate / (k * v) * (1 - np.exp(-k * np.clip(s, 0, dur)))
            c += np.where(s >= 0, during * np.exp(-k * np.maximum(s - dur, 0)), 0.0)
    return c


def test_infusions_boluses_and_repeats_match_superposition(tmp_path):
    # subject 1: 2 h infusions every 12 h (ADDL 2) and a bolus at 30 h with a sample at 30 h
    # (it sees the bolus); subject 2: a 4 h infusion by DUR, samples before and during it;
    # subject 3: no observations (allowed; predicts nothing)
    text = (
        "ID,TIME,DV,AMT,RATE,DUR,II,ADDL,EVID\n"
        "1,0,.,100,50,0,12,2,1\n"
        "1,1,1,0,0,0,0,0,0\n1,2,1,0,0,0,0,0,0\n1,5,1,0,0,0,0,0,0\n1,13,1,0,0,0,0,0,0\n"
        "1,26,1,0,0,0,0,0,0\n1,30,.,40,0,0,0,0,1\n1,30,1,0,0,0,0,0,0\n1,36,1,0,0,0,0,0,0\n"
        "2,0.5,1,0,0,0,0,0,0\n2,1,.,80,0,4,0,0,1\n2,2,1,0,0,0,0,0,0\n2,6,1,0,0,0,0,0,0\n"
        "3,0,.,10,0,0,0,0,1\n"
    )
    path = tmp_path / "iv.csv"
    path.write_text(text)
    data = pk.read_events(path)
    model = iv_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-10, atol=1e-12)
    x = model.pack()
    cl, v = np.exp(model.theta0)
    pred = obj.predict(x)
    d1 = [(0.0, 100.0, 2.0), (12.0, 100.0, 2.0), (24.0, 100.0, 2.0), (30.0, 40.0, 0.0)]
    np.testing.assert_allclose(pred[0], iv_conc(cl, v, d1, data.subjects[0].times), rtol=1e-8)
    np.testing.assert_allclose(
        pred[1], iv_conc(cl, v, [(1.0, 80.0, 4.0)], data.subjects[1].times), rtol=1e-8, atol=1e-14
    )
    assert pred[1][0] == 0.0  # before the first dose
    assert pred[2].size == 0


def test_individual_predictions_use_the_etas():
    data = pk.theophylline()
    model = oral_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-10, atol=1e-12)
    x = model.pack()
    etas = np.tile([0.2, -0.1, 0.05], (12, 1))
    ipred = obj.predict(x, etas)
    ka, cl, v = np.exp(model.theta0 + etas[0])
    s = data.subjects[0]
    k = cl / v
    amt = s.doses[0].amount
    ref = amt * ka / (v * (ka - k)) * (np.exp(-k * s.times) - np.exp(-ka * s.times))
    np.testing.assert_allclose(ipred[0], ref, rtol=1e-8, atol=1e-13)
    with pytest.raises(ValueError, match=r"etas must have shape \(12, 3\)"):
        obj.predict(x, np.zeros((3, 12)))


def test_bioavailability_scales_boluses_and_infusions(tmp_path):
    # oral model, F = 1 / (1 + exp(-tf)): the closed form by superposition of a bolus F*AMT
    # and, for the infusion into the depot, the convolution of the unit response over the
    # infusion time (numerically, fine trapezoid)
    model = oral_f_model()
    path = tmp_path / "regimen.csv"
    path.write_text(REGIMEN_CSV)
    data = pk.read_events(path)
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    x = model.pack()
    ka, cl, v = np.exp(model.theta0[:3])
    F = 1 / (1 + np.exp(-model.theta0[3]))
    pred = obj.predict(x)

    def unit(t):
        k = cl / v
        tt = np.maximum(t, 0)
        return np.where(t >= 0, ka / (v * (ka - k)) * (np.exp(-k * tt) - np.exp(-ka * tt)), 0)

    for s, p in zip(data.subjects, pred):
        ref = np.zeros(s.times.size)
        for d in s.doses:
            if d.duration == 0:
                ref += F * d.amount * unit(s.times - d.time)
            else:
                u = np.linspace(0, d.duration, 20001)
                for j, t in enumerate(s.times):
                    ref[j] += F * d.rate * np.trapezoid(unit(t - d.time - u), u)
        np.testing.assert_allclose(p, ref, rtol=1e-6, atol=1e-9)
