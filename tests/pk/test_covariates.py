"""Time-varying covariates (last observation carried forward): predictions against SciPy,
the system along eta and theta against the chain rule, the OFV gradient against central
differences."""

import numpy as np
import pytest
import scipy.integrate

from scichains import pk

from .checks import gradient_matches_central_differences
from .models import oral_model

TV_CSV = (
    "ID,TIME,DV,AMT,EVID,WT\n"
    # subject 1: WT 60 -> 90 at 5 h (an observation at the change), second dose at 12 h
    "1,0,.,320,1,60\n1,0.5,4.1,0,0,.\n1,2,7.9,0,0,60\n1,5,6.6,0,0,90\n1,7,4.9,0,0,90\n"
    "1,12,.,320,1,90\n1,13,8.1,0,0,90\n1,18,6.2,0,0,90\n"
    # subject 2: constant WT
    "2,0,.,300,1,80\n2,1,6.5,0,0,80\n2,4,7.6,0,0,80\n2,9,5.0,0,0,80\n2,24,1.2,0,0,80\n"
    # subject 3: WT changes twice, once at a dose record, once with nothing else (EVID 2)
    "3,0,.,250,1,70\n3,1,5.0,0,0,70\n3,3,.,0,2,50\n3,4,6.8,0,0,50\n3,8,.,200,1,75\n"
    "3,9,9.0,0,0,75\n3,14,5.1,0,0,75\n"
)


@pytest.fixture
def tv_data(tmp_path):
    path = tmp_path / "tv.csv"
    path.write_text(TV_CSV)
    return pk.read_events(path)


def test_reader_records_the_history(tv_data):
    s1, s2, s3 = tv_data.subjects
    assert s1.covariate_changes == ("WT",) and s2.covariate_changes == ()
    assert [(t, v["WT"]) for t, _, v in s1.covariate_history] == [(5.0, 90.0)]
    assert [(t, v["WT"]) for t, _, v in s3.covariate_history] == [
        (3.0, 50.0),
        (8.0, 75.0),
    ]
    assert s1.covariate_history[0][1] == 4  # the row of the change


def reference(model, x, eta, subject):
    """SciPy's DOP853 on the subject's regimen with CL from the WT in effect (LOCF)."""
    theta = x[: model.p]
    hist = [(-np.inf, subject.covariates["WT"])] + [
        (t, v["WT"]) for t, _, v in subject.covariate_history
    ]

    def phi(t):
        wt = [w for tc, w in hist if tc <= t][-1]
        ka = np.exp(theta[0] + eta[0])
        cl = np.exp(theta[1] + eta[1]) * (wt / 70) ** 0.75
        return ka, cl, np.exp(theta[2] + eta[2])

    cuts = {0.0, subject.times[-1]} | {d.time for d in subject.doses}
    cuts = sorted(cuts | {h[0] for h in hist[1:]})
    x_ = np.zeros(2)
    out = np.zeros(subject.times.size)
    for i, a in enumerate(cuts):
        for d in subject.doses:
            if d.time == a:
                x_[0] += d.amount
        b = cuts[i + 1] if i + 1 < len(cuts) else a
        ka, cl, v = phi(a)
        sel = (subject.times >= a) & (subject.times < b) if b > a else subject.times == a
        if b > a:
            te = np.concatenate([subject.times[sel], [b]])
            sol = scipy.integrate.solve_ivp(
                lambda _, u, ka=ka, cl=cl, v=v: [-ka * u[0], ka * u[0] - cl / v * u[1]],
                (a, b),
                x_,
                method="DOP853",
                t_eval=te,
                rtol=1e-13,
                atol=1e-13,
            )
            out[sel] = sol.y[1, :-1] / v
            x_ = sol.y[:, -1].copy()
        else:
            out[sel] = x_[1] / v
    return out


def test_predictions_carry_the_covariate_forward(tv_data):
    model = oral_model(covariate=True)
    obj = pk.PopulationObjective(model, tv_data, rtol=1e-11, atol=1e-13)
    x = model.pack()
    etas = np.array([[0.1, -0.2, 0.05], [0.0, 0.1, 0.0], [-0.1, 0.3, -0.05]])
    for pred, eta, s in zip(obj.predict(x, etas), etas, tv_data.subjects):
        np.testing.assert_allclose(pred, reference(model, x, eta, s), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("third", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_system_along_eta_and_theta_equals_the_chain_rule(tv_data, third):
    # subject 2 has no change: its derivatives from the direction system (forced) must
    # equal those of the phi system composed with the individual block (to third order:
    # slow, the third-order direction system takes about 30 s to generate)
    model = oral_model(covariate=True)
    obj = pk.PopulationObjective(model, tv_data, rtol=1e-11, atol=1e-13)
    theta, eta = model.theta0, np.array([0.1, -0.2, 0.05])
    ref = obj._predict(1, theta, eta, third=third)
    obj.pieces[1] = (np.zeros(0), obj.cov[1][None])
    got = obj._predict(1, theta, eta, third=third)
    for a, b in zip(got, ref):
        if a is None:
            assert b is None
            continue
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-11)


@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_ofv_gradient_with_changing_covariates(tv_data, method):
    model = oral_model(covariate=True, omega=(0.3, 0.1, 0.05))
    obj = pk.PopulationObjective(model, tv_data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=[0.4, 1.0, 3.5])
    gradient_matches_central_differences(obj, x)


def test_missing_first_covariate_names_the_subject(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("ID,TIME,DV,AMT,EVID,WT\n1,0,.,100,1,.\n1,1,3,0,0,70\n")
    data = pk.read_events(path)
    with pytest.raises(ValueError, match=r"subject ID 1: covariate\(s\) \['WT'\] .* first record"):
        pk.PopulationObjective(oral_model(covariate=True), data)
