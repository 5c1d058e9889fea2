"""Zero-order inputs of modelled duration or rate (issue 29, item 4: ``RATE=-2`` and
``RATE=-1``, NONMEM's ``D1`` and ``R1``): predictions against the closed form and SciPy, the
OFV gradient against central differences (the input's end moves with the duration, or with
the amount over the rate), bad input."""

import numpy as np
import pytest
import scipy.integrate
import sympy as sp

from scichains import pk

from .checks import gradient_matches_central_differences


def read(tmp_path, text):
    path = tmp_path / "data.csv"
    path.write_text(text)
    return pk.read_events(path)


def d1_model(error=None, omega=(0.09, 0.04, 0.1)):
    """One compartment, zero-order input into it of duration D1 (log-normal CL, V, D1)."""
    center, cl, v, d1 = sp.symbols("center cl v d1")
    tcl, tv, td1, ecl, ev, ed1 = sp.symbols("tcl tv td1 eta_cl eta_v eta_d1")
    return pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev), d1: sp.exp(td1 + ed1)},
        theta={tcl: np.log(4.0), tv: np.log(30.0), td1: np.log(2.0)},
        eta=[ecl, ev, ed1],
        omega=list(omega),
        observe=center / v,
        error=error or pk.Proportional(0.1),
        duration={center: d1},
    )


D1_CSV = (
    "ID,TIME,DV,AMT,RATE,EVID\n"
    "1,0,.,100,-2,1\n1,0.5,0.8,.,.,0\n1,1.5,2.0,.,.,0\n1,3,2.2,.,.,0\n1,8,1.0,.,.,0\n"
    "1,12,.,100,-2,1\n1,13,1.9,.,.,0\n1,20,1.1,.,.,0\n"
    "2,0,.,150,-2,1\n2,1,2.4,.,.,0\n2,2.5,3.9,.,.,0\n2,6,2.6,.,.,0\n2,24,0.3,.,.,0\n"
    "3,0,.,80,-2,1\n3,0,.,20,.,1\n3,1,1.4,.,.,0\n3,4,1.6,.,.,0\n3,10,0.5,.,.,0\n"
)


def closed_form(doses, t, cl, v, d):
    """Superposition of zero-order inputs ``(time, amount, duration)`` (duration 0: bolus)
    into one compartment."""
    k = cl / v
    out = np.zeros_like(t)
    for t0, amount, dur in doses:
        s = t - t0
        if dur == 0:
            out += np.where(s >= 0, amount / v * np.exp(-k * np.maximum(s, 0)), 0.0)
            continue
        rate = amount / dur
        during = rate / cl * (1 - np.exp(-k * np.clip(s, 0, dur)))
        out += np.where(s <= dur, during, during * np.exp(-k * (s - dur)))
        out[s < 0] -= during[s < 0]
    return out


def test_predictions_match_the_closed_form(tmp_path):
    data = read(tmp_path, D1_CSV)
    assert data.subjects[0].doses[0].modelled and not data.subjects[2].doses[1].modelled
    model = d1_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-12, atol=1e-14)
    x = model.pack()
    etas = np.array([[0.1, -0.1, 0.3], [0.0, 0.2, -0.4], [-0.2, 0.0, 0.5]])
    for s, eta, pred in zip(data.subjects, etas, obj.predict(x, etas)):
        cl, v, d = np.exp(x[:3] + eta)
        doses = [(dd.time, dd.amount, d if dd.modelled else dd.duration) for dd in s.doses]
        np.testing.assert_allclose(pred, closed_form(doses, s.times, cl, v, d), rtol=1e-9)


@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_ofv_gradient_against_central_differences(tmp_path, method):
    data = read(tmp_path, D1_CSV)
    model = d1_model()
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=np.log([3.5, 28.0, 2.4]), omega=[0.1, 0.05, 0.15], sd=[0.12])
    gradient_matches_central_differences(obj, x)


def lagged_depot_model():
    """Zero-order input of duration D1 into a depot after a lag, then first-order absorption
    (bioavailability F too): the input's start moves with the lag, its end with lag + D1."""
    depot, center, ka, cl, v, d1, tl, f = sp.symbols("depot center ka cl v d1 tl f")
    tka, tcl, tv, td1, ttl, tf = sp.symbols("tka tcl tv td1 ttl tf")
    eka, ecl, ed1 = sp.symbols("eta_ka eta_cl eta_d1")
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={
            ka: sp.exp(tka + eka),
            cl: sp.exp(tcl + ecl),
            v: sp.exp(tv),
            d1: sp.exp(td1 + ed1),
            tl: sp.exp(ttl),
            f: 1 / (1 + sp.exp(-tf)),
        },
        theta={tka: 0.3, tcl: 1.3, tv: 3.4, td1: 0.5, ttl: -0.7, tf: 1.0},
        eta=[eka, ecl, ed1],
        omega=[0.1, 0.05, 0.1],
        observe=center / v,
        error=pk.Proportional(0.1),
        duration={depot: d1},
        lag={depot: tl},
        bioavailability={depot: f},
    )


LAG_CSV = (
    "ID,TIME,DV,AMT,RATE,EVID\n"
    "1,0,.,200,-2,1\n1,0.6,0.1,.,.,0\n1,1,1.0,.,.,0\n1,2,2.9,.,.,0\n1,5,3.5,.,.,0\n"
    "1,9,2.1,.,.,0\n"
    "2,0,.,200,-2,1\n2,0.8,0.6,.,.,0\n2,3,3.1,.,.,0\n2,6,2.8,.,.,0\n2,12,1.2,.,.,0\n"
)


def test_lag_and_duration_against_scipy(tmp_path):
    data = read(tmp_path, LAG_CSV)
    model = lagged_depot_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-12, atol=1e-14)
    x = model.pack()
    etas = np.array([[0.2, -0.1, 0.3], [-0.1, 0.1, -0.2]])
    for s, eta, pred in zip(data.subjects, etas, obj.predict(x, etas)):
        tka, tcl, tv, td1, ttl, tf = x[:6]
        ka, cl, v = np.exp(tka + eta[0]), np.exp(tcl + eta[1]), np.exp(tv)
        d, lag, f = np.exp(td1 + eta[2]), np.exp(ttl), 1 / (1 + np.exp(-tf))
        rate = f * 200 / d

        def rhs(t, u, rate=rate, ka=ka, cl=cl, v=v, lag=lag, d=d):
            r = rate if lag <= t < lag + d else 0.0
            return [r - ka * u[0], ka * u[0] - cl / v * u[1]]

        sol = scipy.integrate.solve_ivp(
            rhs, (0, s.times[-1]), [0.0, 0.0], method="DOP853", t_eval=s.times,
            rtol=1e-12, atol=1e-14, max_step=0.05,
        )  # fmt: skip
        np.testing.assert_allclose(pred, sol.y[1] / v, rtol=1e-7, atol=1e-10)


@pytest.mark.slow
def test_lag_and_duration_gradient(tmp_path):
    data = read(tmp_path, LAG_CSV)
    model = lagged_depot_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    x = model.pack()
    gradient_matches_central_differences(obj, x)


def test_bad_modelled_durations_are_refused(tmp_path):
    with pytest.raises(pk.EventTableError, match="modelled codes are RATE=-1"):
        read(tmp_path, "ID,TIME,DV,AMT,RATE,EVID\n1,0,.,100,-3,1\n1,1,2,.,.,0\n")
    with pytest.raises(pk.EventTableError, match=r"steady-state dose \(SS=1\) with a modelled"):
        read(tmp_path, "ID,TIME,DV,AMT,RATE,EVID,SS,II\n1,0,.,100,-2,1,1,12\n1,1,2,.,.,0,.,.\n")
    with pytest.raises(pk.EventTableError, match="reset .* after the dose of row 1"):
        read(tmp_path, "ID,TIME,DV,AMT,RATE,EVID\n1,0,.,100,-2,1\n1,5,.,.,.,3\n1,6,2,.,.,0\n")
    no_duration = d1_model()
    no_duration_args = dict(no_duration._arguments, duration=None)
    plain = pk.PKModel(**no_duration_args)
    with pytest.raises(ValueError, match="row 1: RATE=-2 .* compartment 1, for which the model"):
        pk.PopulationObjective(plain, read(tmp_path, D1_CSV))
    args = dict(no_duration._arguments)
    args["duration"] = {sp.Symbol("depot"): sp.Symbol("cl")}
    with pytest.raises(ValueError, match="a duration is given for depot, which is not a state"):
        pk.PKModel(**args)
    args["duration"] = {sp.Symbol("center"): sp.Symbol("tcl")}
    with pytest.raises(ValueError, match=r"the duration of center uses \['tcl'\]"):
        pk.PKModel(**args)


def r1_model():
    """One compartment, zero-order input of modelled rate R1 (log-normal CL, V, R1)."""
    center, cl, v, r1 = sp.symbols("center cl v r1")
    tcl, tv, tr1, ecl, ev, er1 = sp.symbols("tcl tv tr1 eta_cl eta_v eta_r1")
    return pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev), r1: sp.exp(tr1 + er1)},
        theta={tcl: np.log(4.0), tv: np.log(30.0), tr1: np.log(50.0)},
        eta=[ecl, ev, er1],
        omega=[0.09, 0.04, 0.1],
        observe=center / v,
        error=pk.Proportional(0.1),
        rate={center: r1},
    )


R1_CSV = D1_CSV.replace(",-2,", ",-1,")


def test_modelled_rate_matches_the_closed_form(tmp_path):
    data = read(tmp_path, R1_CSV)
    assert data.subjects[0].doses[0].modelled == -1
    model = r1_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-12, atol=1e-14)
    x = model.pack()
    etas = np.array([[0.1, -0.1, 0.3], [0.0, 0.2, -0.4], [-0.2, 0.0, 0.5]])
    for s, eta, pred in zip(data.subjects, etas, obj.predict(x, etas)):
        cl, v, r = np.exp(x[:3] + eta)
        doses = [(d.time, d.amount, d.amount / r if d.modelled else d.duration) for d in s.doses]
        np.testing.assert_allclose(pred, closed_form(doses, s.times, cl, v, None), rtol=1e-9)


@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_modelled_rate_gradient(tmp_path, method):
    # two amounts (100 and 150 mg) at one rate: inputs of different lengths
    data = read(tmp_path, R1_CSV)
    model = r1_model()
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=np.log([3.5, 28.0, 60.0]), omega=[0.1, 0.05, 0.15], sd=[0.12])
    g = gradient_matches_central_differences(obj, x)
    assert abs(g[2]) > 1e-2  # the rate matters


def test_modelled_rate_with_bioavailability_stretches_the_duration(tmp_path):
    # NONMEM keeps a rate and stretches the duration: F AMT runs in at R for F AMT / R
    center, cl, v, r1, f = sp.symbols("center cl v r1 f")
    tcl, tv, tr1, tf, ecl = sp.symbols("tcl tv tr1 tf eta_cl")
    model = pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={
            cl: sp.exp(tcl + ecl),
            v: sp.exp(tv),
            r1: sp.exp(tr1),
            f: 1 / (1 + sp.exp(-tf)),
        },
        theta={tcl: np.log(4.0), tv: np.log(30.0), tr1: np.log(50.0), tf: 0.5},
        eta=[ecl],
        omega=[0.09],
        observe=center / v,
        error=pk.Proportional(0.1),
        rate={center: r1},
        bioavailability={center: f},
    )
    data = read(tmp_path, R1_CSV)
    x = model.pack()
    pred = pk.PopulationObjective(model, data, rtol=1e-12, atol=1e-14).predict(x)
    cl, v, r = np.exp(x[:3])
    fb = 1 / (1 + np.exp(-x[3]))
    for s, p in zip(data.subjects, pred):
        doses = [
            (d.time, fb * d.amount, fb * d.amount / r if d.modelled else d.duration)
            for d in s.doses
        ]
        np.testing.assert_allclose(p, closed_form(doses, s.times, cl, v, None), rtol=1e-9)
    # the end moves with F too: the gradient along tf against central differences
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    gradient_matches_central_differences(obj, x)


def test_modelled_inputs_refused_where_not_supported(tmp_path):
    # two equal RATE=-1 inputs at one time end together: their end times cannot move apart
    data = read(tmp_path, "ID,TIME,DV,AMT,RATE,EVID\n1,0,.,100,-1,1\n1,0,.,100,-1,1\n1,5,2,.,.,0\n")
    with pytest.raises(pk.PKSolveError, match="two inputs of modelled rate"):
        pk.PopulationObjective(r1_model(), data).predict(r1_model().pack())
    # hand-made records the reader refuses are refused by the objective too
    s = read(tmp_path, D1_CSV).subjects[0]
    bad = [pk.Dose(0.0, 100.0, 0, 0.0, 1, 12.0, False, -2), *s.doses[1:]]
    data = pk.EventData([pk.Subject(1, bad, s.times, s.dv, s.rows)], ())
    with pytest.raises(ValueError, match=r"steady-state dose with a modelled input \(RATE=-2\)"):
        pk.PopulationObjective(d1_model(), data)
