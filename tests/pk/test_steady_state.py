"""Steady-state doses (SS=1, II): predictions against closed forms and against a long run
of repeated doses, and the OFV gradient through the steady state against central
differences."""

import numpy as np
import pytest

from scichains import pk

from .checks import gradient_matches_central_differences
from .models import iv_model, oral_model


def write(tmp_path, text):
    path = tmp_path / "ss.csv"
    path.write_text(text)
    return pk.read_events(path)


def oral_ss(ka, cl, v, amount, ii, t):
    """Superposition of infinitely many oral boluses every ``ii``: the steady state
    ``t`` after a dose (``0 <= t < ii``)."""
    k = cl / v
    return (
        amount
        * ka
        / (v * (ka - k))
        * (np.exp(-k * t) / (1 - np.exp(-k * ii)) - np.exp(-ka * t) / (1 - np.exp(-ka * ii)))
    )


def test_oral_steady_state_matches_superposition(tmp_path):
    # SS dose at 24 h, II 12: samples before it (state reset: the earlier dose is forgotten),
    # in the interval after it, and after an extra dose at 36 h
    data = write(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,SS,II\n1,0,.,100,1,0,0\n1,3,1,0,0,0,0\n1,24,.,300,1,1,12\n"
        "1,24,1,0,0,0,0\n1,25,1,0,0,0,0\n1,30,1,0,0,0,0\n1,35.5,1,0,0,0,0\n"
        "1,36,.,300,1,0,0\n1,40,1,0,0,0,0\n",
    )
    model = oral_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    ka, cl, v = np.exp(model.theta0)
    t = data.subjects[0].times
    pred = obj.predict(model.pack())[0]
    k = cl / v
    first = 100 * ka / (v * (ka - k)) * (np.exp(-k * 3) - np.exp(-ka * 3))
    assert pred[0] == pytest.approx(first, rel=1e-9)
    after = t[1:5] - 24.0
    np.testing.assert_allclose(pred[1:5], oral_ss(ka, cl, v, 300, 12, after), rtol=1e-8)
    extra = 300 * ka / (v * (ka - k)) * (np.exp(-k * 4) - np.exp(-ka * 4))
    assert pred[5] == pytest.approx(oral_ss(ka, cl, v, 300, 12, 16.0) + extra, rel=1e-8)


def test_steady_state_infusion_equals_a_long_run_of_repeats(tmp_path):
    # a 2 h infusion every 8 h at steady state vs 60 explicit repeats (ADDL): the half-life
    # (about 4.6 h) makes the 60th interval a steady state to far below the tolerance
    ss = write(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,SS,II,DUR\n1,480,.,100,1,1,8,2\n"
        "1,480.5,1,0,0,0,0,0\n1,481,1,0,0,0,0,0\n1,483,1,0,0,0,0,0\n1,487,1,0,0,0,0,0\n",
    )
    rep = write(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,ADDL,II,DUR\n1,0,.,100,1,60,8,2\n"
        "1,480.5,1,0,0,0,0,0\n1,481,1,0,0,0,0,0\n1,483,1,0,0,0,0,0\n1,487,1,0,0,0,0,0\n",
    )
    model = iv_model()
    a = pk.PopulationObjective(model, ss, rtol=1e-11, atol=1e-13).predict(model.pack())[0]
    b = pk.PopulationObjective(model, rep, rtol=1e-11, atol=1e-13).predict(model.pack())[0]
    np.testing.assert_allclose(a, b, rtol=1e-8)


@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_ofv_gradient_through_the_steady_state(tmp_path, method):
    data = write(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,SS,II\n"
        "1,0,.,300,1,1,12\n1,0.5,9.0,0,0,0,0\n1,2,12.0,0,0,0,0\n1,6,9.5,0,0,0,0\n"
        "1,11.9,6.1,0,0,0,0\n"
        "2,0,.,250,1,1,24\n2,1,7.0,0,0,0,0\n2,4,8.5,0,0,0,0\n2,12,5.0,0,0,0,0\n"
        "2,23,2.6,0,0,0,0\n"
        "3,0,.,320,1,1,8\n3,1,13.0,0,0,0,0\n3,3,15.2,0,0,0,0\n3,7,13.5,0,0,0,0\n",
    )
    model = oral_model(omega=(0.3, 0.1, 0.05))
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=[0.4, 1.0, 3.5])
    gradient_matches_central_differences(obj, x)


SS_LAG_CSV = (
    "ID,TIME,DV,AMT,EVID,SS,II,DUR\n"
    # a steady-state bolus every 12 h whose doses arrive tlag later: samples before the
    # arrival (the orbit's tail), after it, and past the next (not given) dose's time
    "5,0,.,300,1,1,12,0\n5,0.05,4,0,0,0,0,0\n5,1,6,0,0,0,0,0\n5,4,9,0,0,0,0,0\n"
    "5,11.9,5,0,0,0,0,0\n5,14,3,0,0,0,0,0\n"
    "6,0,.,200,1,1,8,0\n6,0.05,5,0,0,0,0,0\n6,2,7,0,0,0,0,0\n6,7,5,0,0,0,0,0\n"
)


def test_steady_state_with_a_lag_matches_superposition(tmp_path):
    from .models import lag_model

    data = write(tmp_path, SS_LAG_CSV)
    model = lag_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    x = model.pack()
    etas = np.array([[0.1, -0.1, 0.4], [0.0, 0.2, -0.3]])
    for s, eta, pred in zip(data.subjects, etas, obj.predict(x, etas)):
        ka, cl, v, tl = np.exp(model.theta0 + np.append(eta[:2], [0.0, eta[2]])[[0, 1, 2, 3]])
        d = s.doses[0]
        # the arrivals tl + k II for k = 0, -1, -2, ...: superposition of single doses
        k = cl / v
        ref = np.zeros_like(s.times)
        for j in range(400):
            a = tl - j * d.ss_interval
            dt = s.times - a
            one = d.amount * ka / (v * (ka - k)) * (np.exp(-k * dt) - np.exp(-ka * dt))
            ref += np.where(dt > 0, one, 0.0)
        assert tl < s.times[1] and s.times[0] < tl  # samples on both sides of the arrival
        np.testing.assert_allclose(pred, ref, rtol=1e-8)


@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_ofv_gradient_through_a_lagged_steady_state(tmp_path, method):
    from .models import lag_model

    data = write(tmp_path, SS_LAG_CSV)
    model = lag_model(omega=(0.3, 0.1, 0.2))
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack()
    g = gradient_matches_central_differences(obj, x)
    assert abs(g[3]) > 1e-2  # the lag matters


def test_lagged_steady_state_infusion_equals_a_long_run_of_repeats(tmp_path):
    # a 2 h infusion into the lagged depot every 12 h at steady state against 60 explicit
    # repeats (ADDL): samples before the arrival (the last cycle's washout) and after
    from .models import lag_model

    samples = "5,720.05,1,0,0,0,0,0\n5,721,1,0,0,0,0,0\n5,723,1,0,0,0,0,0\n5,731,1,0,0,0,0,0\n"
    ss = write(tmp_path, "ID,TIME,DV,AMT,EVID,SS,II,DUR\n5,720,.,300,1,1,12,2\n" + samples)
    rep = write(tmp_path, "ID,TIME,DV,AMT,EVID,ADDL,II,DUR\n5,0,.,300,1,60,12,2\n" + samples)
    model = lag_model()
    x = model.pack()
    etas = np.array([[0.1, 0.2, 0.3]])  # tlag about 0.13 h
    a = pk.PopulationObjective(model, ss, rtol=1e-11, atol=1e-13).predict(x, etas)[0]
    b = pk.PopulationObjective(model, rep, rtol=1e-11, atol=1e-13).predict(x, etas)[0]
    np.testing.assert_allclose(a, b, rtol=1e-8)


def test_ofv_gradient_through_a_lagged_steady_state_infusion(tmp_path):
    from .models import lag_model

    data = write(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,SS,II,DUR\n"
        "5,0,.,300,1,1,12,2\n5,0.05,4,0,0,0,0,0\n5,1,6,0,0,0,0,0\n5,4,9,0,0,0,0,0\n"
        "6,0,.,200,1,1,8,1\n6,0.05,5,0,0,0,0,0\n6,2,7,0,0,0,0,0\n6,7,5,0,0,0,0,0\n",
    )
    model = lag_model(omega=(0.3, 0.1, 0.2))
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    x = model.pack()
    gradient_matches_central_differences(obj, x)


# ---------------------------------------------------------------- SS=2 (superposition)


def _virtual_train(time, amount, dur, ii, n=400):
    """The doses before a steady-state dose at ``time``: ``n`` more every ``ii`` back."""
    return [(time - j * ii, amount, dur) for j in range(1, n + 1)]


def test_ss2_adds_the_steady_state_to_the_current_state(tmp_path):
    # IV (k = 0.15/h): 100 at 0, then SS=2 of 300 every 12 h at 24 h (bolus, subject 1) or of
    # a 2 h infusion of 300 every 12 h (subject 2), a plain dose at 36 h. Before 24 h: the
    # dose at 0 alone; after: it, the dose at 24 h and the 400 virtual doses before it
    # (superposition), as closed forms; SS=1 at 24 h forgets the dose at 0
    from .test_predict import iv_conc

    rows = (
        "{i},0,.,100,1,0,0,0\n{i},3,1,.,0,0,0,0\n{i},24,.,300,1,2,12,{dur}\n{i},24,1,.,0,0,0,0\n"
        "{i},25,1,.,0,0,0,0\n{i},30,1,.,0,0,0,0\n{i},35.5,1,.,0,0,0,0\n{i},36,.,300,1,0,0,0\n"
        "{i},40,1,.,0,0,0,0\n"
    )
    text = "ID,TIME,DV,AMT,EVID,SS,II,DUR\n" + rows.format(i=1, dur=0) + rows.format(i=2, dur=2)
    data = write(tmp_path, text)
    model = iv_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    cl, v = np.exp(model.theta0)
    for s, p, dur in zip(data.subjects, obj.predict(model.pack()), (0.0, 2.0)):
        real = [(0.0, 100.0, 0.0), (24.0, 300.0, dur), (36.0, 300.0, 0.0)]
        ref = iv_conc(cl, v, real, s.times)
        ref += np.where(
            s.times >= 24, iv_conc(cl, v, _virtual_train(24.0, 300.0, dur, 12.0), s.times), 0
        )
        np.testing.assert_allclose(p, ref, rtol=1e-9)
    # SS=1 at 24 h instead: the same less the dose at 0 from 24 h on
    one = write(tmp_path, text.replace(",2,12,", ",1,12,"))
    p1 = pk.PopulationObjective(model, one, rtol=1e-11, atol=1e-13).predict(model.pack())[0]
    t = one.subjects[0].times
    first = iv_conc(cl, v, [(0.0, 100.0, 0.0)], t)
    p2 = obj.predict(model.pack())[0]
    np.testing.assert_allclose(p2 - p1, np.where(t >= 24, first, 0), rtol=1e-7, atol=1e-12)
    # oral: the depot's steady state is added too
    oral = write(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,SS,II\n1,0,.,100,1,0,0\n1,3,1,.,0,0,0\n1,24,.,300,1,2,12\n"
        "1,25,1,.,0,0,0\n1,30,1,.,0,0,0\n",
    )
    model = oral_model()
    ka, cl, v = np.exp(model.theta0)
    k = cl / v
    t = oral.subjects[0].times
    pred = pk.PopulationObjective(model, oral, rtol=1e-11, atol=1e-13).predict(model.pack())[0]
    first = 100 * ka / (v * (ka - k)) * (np.exp(-k * t) - np.exp(-ka * t))
    ref = first + np.where(t >= 24, oral_ss(ka, cl, v, 300, 12, t - 24), 0)
    np.testing.assert_allclose(pred, ref, rtol=1e-9)


def test_ofv_gradient_through_ss2(tmp_path):
    data = write(
        tmp_path,
        "ID,TIME,DV,AMT,EVID,SS,II\n"
        "1,0,.,100,1,0,0\n1,2,3.0,.,0,0,0\n1,6,.,300,1,2,12\n1,7,15.0,.,0,0,0\n1,11,9.1,.,0,0,0\n"
        "2,0,.,250,1,2,24\n2,1,7.0,.,0,0,0\n2,4,8.5,.,0,0,0\n2,23,2.6,.,0,0,0\n",
    )
    model = oral_model(omega=(0.3, 0.1, 0.05))
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=[0.4, 1.0, 3.5])
    gradient_matches_central_differences(obj, x)


def test_ss2_needs_a_model_linear_in_the_states(tmp_path):
    import sympy as sp

    from .models import capacity_model

    data = write(tmp_path, "ID,TIME,DV,AMT,EVID,SS,II\n5,0,.,300,1,2,12\n5,1,3,.,0,0,0\n")
    with pytest.raises(ValueError, match=r"subject ID 5, row 1: .* \(SS=2\) needs a model linear"):
        pk.PopulationObjective(capacity_model(), data)
    # a zero-order production (turnover) breaks superposition too
    x, kel, kin, tk, ek = sp.symbols("x kel kin tk eta_k")
    turnover = pk.PKModel(
        states=[x], odes=[kin - kel * x], individual={kel: sp.exp(tk + ek), kin: sp.exp(tk)},
        theta={tk: -1.0}, eta=[ek], omega=[0.1], observe=x, error=pk.Additive(1.0),
    )  # fmt: skip
    assert not turnover.linear_in_states and iv_model().linear_in_states
    with pytest.raises(ValueError, match=r"\(SS=2\) needs a model linear in the states"):
        pk.PopulationObjective(turnover, data)
    assert pk.PopulationObjective(iv_model(), data).regimens  # linear: accepted
    with pytest.raises(pk.EventTableError, match=r"row 1: SS=3 is not supported"):
        write(tmp_path, "ID,TIME,DV,AMT,EVID,SS,II\n5,0,.,300,1,3,12\n5,1,3,.,0,0,0\n")
    with pytest.raises(pk.EventTableError, match=r"row 1: a steady-state dose \(SS=2\) needs II"):
        write(tmp_path, "ID,TIME,DV,AMT,EVID,SS,II\n5,0,.,300,1,2,0\n5,1,3,.,0,0,0\n")
