"""Reset events (issue 29, item 4): EVID 3 (reset) and 4 (reset and dose). Predictions
against closed forms (each observation from the doses of its own epoch between resets),
the exact gradient through a reset against central differences, and the records refused."""

import numpy as np
import pytest

from scichains import pk

from .models import iv_model, lag_model, oral_model
from .test_objective import fd_gradient
from .test_predict import iv_conc


def read(tmp_path, text):
    path = tmp_path / "resets.csv"
    path.write_text(text)
    return pk.read_events(path)


IV = (
    "ID,TIME,DV,AMT,RATE,II,ADDL,EVID\n"
    # 100 every 12 h (4 doses from ADDL 3); a reset at 30 h (the repeat at 36 h is not given),
    # a reset and dose of 80 at 42 h
    "1,0,.,100,0,12,3,1\n1,2,1,.,.,.,.,0\n1,14,1,.,.,.,.,0\n1,29,1,.,.,.,.,0\n"
    "1,30,.,.,.,.,.,3\n1,30,1,.,.,.,.,0\n1,31,1,.,.,.,.,0\n1,40,1,.,.,.,.,0\n"
    "1,42,.,80,0,0,0,4\n1,42,1,.,.,.,.,0\n1,45,1,.,.,.,.,0\n"
    # an infusion of 200 at 20/h (10 h) stopped by a reset and bolus of 50 at 4 h
    "2,0,.,200,20,0,0,1\n2,2,1,.,.,.,.,0\n2,4,.,50,0,0,0,4\n2,6,1,.,.,.,.,0\n2,12,1,.,.,.,.,0\n"
    # a bolus at 5 h recorded before a reset at 5 h is wiped with everything else; an
    # infusion started by EVID 4 runs
    "3,0,.,100,0,0,0,1\n3,5,.,100,0,0,0,1\n3,5,.,.,.,.,.,3\n3,6,1,.,.,.,.,0\n"
    "3,8,.,60,30,0,0,4\n3,9,1,.,.,.,.,0\n3,12,1,.,.,.,.,0\n"
)
# the doses of each epoch (between resets), as (time, amount, infusion duration)
EPOCHS = {
    1: [(-np.inf, [(0.0, 100.0, 0.0), (12.0, 100.0, 0.0), (24.0, 100.0, 0.0), (36.0, 100.0, 0.0)]),
        (30.0, []), (42.0, [(42.0, 80.0, 0.0)])],
    2: [(-np.inf, [(0.0, 200.0, 10.0)]), (4.0, [(4.0, 50.0, 0.0)])],
    3: [(-np.inf, [(0.0, 100.0, 0.0), (5.0, 100.0, 0.0)]), (5.0, []), (8.0, [(8.0, 60.0, 2.0)])],
}  # fmt: skip


def reference(cl, v, epochs, times):
    out = np.zeros(times.size)
    starts = [e[0] for e in epochs]
    for j, t in enumerate(times):
        k = int(np.searchsorted(starts, t, side="right")) - 1  # the last reset at or before t
        out[j] = iv_conc(cl, v, epochs[k][1], np.array([t]))[0] if epochs[k][1] else 0.0
    return out


def test_resets_match_closed_forms(tmp_path):
    data = read(tmp_path, IV)
    assert [s.resets for s in data.subjects] == [(30.0, 42.0), (4.0,), (5.0, 8.0)]
    # what read_events gives: the repeat at 36 h dropped, the infusion cut at 4 h
    assert [d.time for d in data.subjects[0].doses] == [0.0, 12.0, 24.0, 42.0]
    d = data.subjects[1].doses[0]
    assert (d.amount, d.duration) == pytest.approx((80.0, 4.0))
    model = iv_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    cl, v = np.exp(model.theta0)
    for s, p in zip(data.subjects, obj.predict(model.pack())):
        ref = reference(cl, v, EPOCHS[s.id], s.times)
        np.testing.assert_allclose(p, ref, rtol=1e-9, atol=1e-12)
        assert np.all(p[ref == 0.0] == 0.0)  # nothing left after a reset
    # an oral dose: the reset empties the depot too; a bolus into the centre (CMT 2) after it
    oral = read(
        tmp_path,
        "ID,TIME,DV,AMT,CMT,EVID\n1,0,.,320,1,1\n1,2,1,.,2,0\n1,3,.,100,2,4\n1,5,1,.,2,0\n",
    )
    model = oral_model()
    ka, cl, v = np.exp(model.theta0)
    k = cl / v
    pred = pk.PopulationObjective(model, oral, rtol=1e-11, atol=1e-13).predict(model.pack())[0]
    before = 320 * ka / (v * (ka - k)) * (np.exp(-k * 2) - np.exp(-ka * 2))
    np.testing.assert_allclose(pred, [before, 100 / v * np.exp(-k * 2)], rtol=1e-9)


@pytest.mark.parametrize("method", ["focei", "laplace"])
def test_gradient_through_resets(tmp_path, method):
    data = read(tmp_path, IV)
    rng = np.random.default_rng(0)
    subjects = [
        pk.Subject(s.id, s.doses, s.times, np.abs(1 + 2 * rng.standard_normal(s.n_obs)), s.rows,
                   resets=s.resets)
        for s in data.subjects
    ]  # fmt: skip
    data = pk.EventData(subjects, ())
    model = iv_model()
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack() + 0.05
    f, g = obj.value_and_grad(x)
    np.testing.assert_allclose(g, fd_gradient(obj, x), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "rows, match",
    [
        ("1,4,3,.,.,.,.,0\n1,2,.,50,0,0,0,4\n", r"row 3: TIME 2 goes back at a reset \(EVID 4"),
        ("1,4,3,.,.,.,.,0\n1,4,.,.,.,.,.,3\n", "row 3: a reset .* at the time of an observation"),
        ("1,4,.,50,.,.,.,3\n", "row 2: a reset record .* with AMT 50: a reset and dose is EVID 4"),
        ("1,4,.,.,.,12,1,7\n", r"row 2: EVID 7 is not supported \(0 observation, .* 3 reset"),
    ],
)
def test_bad_reset_records_are_refused(tmp_path, rows, match):
    head = "ID,TIME,DV,AMT,RATE,II,ADDL,EVID\n1,0,.,100,0,0,0,1\n"
    with pytest.raises(pk.EventTableError, match=f"subject ID 1, {match}"):
        read(tmp_path, head + rows)
    with pytest.raises(pk.EventTableError, match="row 2: MDV=0 on a reset record"):
        read(tmp_path, "ID,TIME,DV,AMT,EVID,MDV\n1,0,.,100,1,1\n1,4,.,.,3,0\n")
    ss = "ID,TIME,DV,AMT,RATE,II,SS,EVID\n1,0,.,100,50,12,1,1\n1,1,.,.,.,.,.,3\n"
    with pytest.raises(pk.EventTableError, match="during the steady-state infusion of row 1"):
        read(tmp_path, ss)
    lagged = read(tmp_path, "ID,TIME,DV,AMT,EVID\n1,0,.,100,1\n1,4,.,50,4\n1,5,3,.,0\n")
    with pytest.raises(ValueError, match="subject ID 1: reset events .* with lag times"):
        pk.PopulationObjective(lag_model(), lagged)
