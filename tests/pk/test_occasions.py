"""Inter-occasion variability (issue 29, item 4): occasion effects from the ``OCC`` column, one
shared block per occasion (NONMEM's BLOCK SAME). The objective of a model linear in its random
effects against the exact Gaussian marginal likelihood; the gradient against central
differences; the layout of the estimated vector; bad input."""

import numpy as np
import pytest
import sympy as sp

from scichains import pk

from .checks import gradient_matches_central_differences


def read(tmp_path, text, name="data.csv"):
    path = tmp_path / name
    path.write_text(text)
    return pk.read_events(path)


def level_model(occasions=3, full=False):
    """``y = tl + eta + kappa_occ + eps``: linear in the random effects, additive error, so
    FOCE-I and Laplace are the exact marginal likelihood."""
    x, lvl, slope = sp.symbols("x lvl slope")
    tl, ts, el, es, kl = sp.symbols("tl ts eta_l eta_s kappa_l")
    iov_omega = np.array([[0.2]]) if full else [0.2]
    return pk.PKModel(
        states=[x],
        odes=[-x],
        individual={lvl: tl + el + kl, slope: ts + es},
        theta={tl: 5.0, ts: 0.1},
        eta=[el, es],
        omega=np.array([[0.5, 0.05], [0.05, 0.02]]) if full else [0.5, 0.02],
        observe=lvl + slope * x,
        error=pk.Additive(0.3),
        iov_eta=[kl],
        iov_omega=iov_omega,
        occasions=occasions,
    )


# subject 1: occasion 1 only; 2: occasions 1 then 2; 3: 1, 2, 3; 4: occasions 2 and 3
LEVEL_CSV = (
    "ID,TIME,DV,AMT,EVID,OCC\n"
    "1,1,5.3,.,0,1\n1,2,5.9,.,0,1\n1,3,5.1,.,0,1\n"
    "2,1,4.2,.,0,1\n2,2,4.5,.,0,1\n2,11,3.6,.,0,2\n2,12,3.9,.,0,2\n"
    "3,1,6.1,.,0,1\n3,11,6.9,.,0,2\n3,12,7.3,.,0,2\n3,21,5.8,.,0,3\n"
    "4,1,5.0,.,0,2\n4,2,4.4,.,0,2\n4,21,5.6,.,0,3\n4,22,5.2,.,0,3\n"
)


def exact_ofv(data, tl, om_bsv_l, sd_iov, sd):
    """``sum_i log det V_i + r_i' V_i^-1 r_i`` with ``V_i = w_l 11' + w_k Z Z' + s^2 I``."""
    total = 0.0
    for s in data.subjects:
        occ = np.empty(s.n_obs)
        hist = [(-np.inf, s.covariates["OCC"])] + [(t, v["OCC"]) for t, _, v in s.covariate_history]
        for j, t in enumerate(s.times):
            occ[j] = [o for tc, o in hist if tc <= t][-1]
        Z = (occ[:, None] == np.arange(1, 4)[None, :]).astype(float)
        V = om_bsv_l + sd_iov**2 * Z @ Z.T + sd**2 * np.eye(s.n_obs)
        r = s.dv - tl
        total += np.linalg.slogdet(V)[1] + r @ np.linalg.solve(V, r)
    return total


@pytest.mark.parametrize("sens", ["phi", "directions"])
@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_ofv_is_the_exact_marginal_likelihood(tmp_path, sens, method):
    data = read(tmp_path, LEVEL_CSV)
    model = level_model()
    assert model.q == 2 + 3 and [str(e) for e in model.eta][2:] == [
        "kappa_l_occ1",
        "kappa_l_occ2",
        "kappa_l_occ3",
    ]
    obj = pk.PopulationObjective(model, data, method=method, sensitivities=sens)
    x = model.pack(theta=[5.2, 0.1], omega=np.diag([0.4, 0.02, 0.15, 0.15, 0.15]), sd=[0.35])
    # the slope multiplies x = 0 (no doses): only the level's effects reach the data
    assert obj.value(x) == pytest.approx(exact_ofv(data, 5.2, 0.4, np.sqrt(0.15), 0.35), rel=1e-10)
    # occasion effects of occasions a subject lacks are zero; the others are not
    e = obj.etas
    assert np.all(e[0, 3:] == 0) and e[0, 2] != 0
    assert e[3, 2] == 0 and np.all(e[3, 3:] != 0)


def test_omega_layout_shares_the_occasion_block():
    model = level_model(full=True)
    assert model.n_omega == 3 + 1 and model.size == 2 + 4 + 1
    assert model.parameter_names() == [
        "tl",
        "ts",
        "log_L(eta_l)",
        "L(eta_s,eta_l)",
        "log_L(eta_s)",
        "log_L(kappa_l)",
        "log_add",
    ]
    x = model.pack()
    theta, om, sd = model.unpack(x)
    expected = np.zeros((5, 5))
    expected[:2, :2] = [[0.5, 0.05], [0.05, 0.02]]
    expected[2:, 2:] = 0.2 * np.eye(3)
    np.testing.assert_allclose(om, expected, rtol=1e-14, atol=1e-16)
    # one shared entry moves every occasion's variance
    _, dom = model.omega_from(x[2:6])
    np.testing.assert_allclose(np.diag(dom[3]), [0, 0, 0.4, 0.4, 0.4], rtol=1e-14)
    bad = expected.copy()
    bad[3, 3] = 0.3
    with pytest.raises(ValueError, match="occasion 2 differs from that of occasion 1"):
        model.pack(omega=bad)
    np.testing.assert_allclose(model.unpack(model.pack(omega=expected))[1], expected, rtol=1e-14)


def iv_iov_model(error=None):
    center, cl, v = sp.symbols("center cl v")
    tcl, tv, ecl, ev, kcl = sp.symbols("tcl tv eta_cl eta_v kappa_cl")
    return pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: sp.exp(tcl + ecl + kcl), v: sp.exp(tv + ev)},
        theta={tcl: np.log(2.0), tv: np.log(20.0)},
        eta=[ecl, ev],
        omega=[0.09, 0.04],
        observe=center / v,
        error=error or pk.Proportional(0.1),
        iov_eta=[kcl],
        iov_omega=[0.04],
        occasions=2,
    )


IV_CSV = (
    "ID,TIME,DV,AMT,EVID,OCC\n"
    "1,0,.,100,1,1\n1,1,4.3,.,0,1\n1,4,3.1,.,0,1\n1,8,1.9,.,0,1\n"
    "1,24,.,100,1,2\n1,25,4.9,.,0,2\n1,28,3.9,.,0,2\n1,32,2.7,.,0,2\n"
    "2,0,.,100,1,1\n2,1,4.1,.,0,1\n2,4,2.2,.,0,1\n2,8,1.0,.,0,1\n"
    "2,24,.,100,1,2\n2,25,4.6,.,0,2\n2,28,3.0,.,0,2\n"
    "3,0,.,100,1,2\n3,2,3.6,.,0,2\n3,6,2.4,.,0,2\n"
)


@pytest.mark.parametrize("method", ["focei", pytest.param("laplace", marks=pytest.mark.slow)])
def test_ofv_gradient_against_central_differences(tmp_path, method):
    data = read(tmp_path, IV_CSV)
    model = iv_iov_model()
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=[0.6, 3.1], omega=[0.12, 0.03, 0.05], sd=[0.12])
    gradient_matches_central_differences(obj, x)
    # the two occasions of subject 1 have their own clearance: its EBEs differ
    assert obj.etas[0, 2] != obj.etas[0, 3] and obj.etas[2, 2] == 0


def test_fix_and_report_the_occasion_variance(tmp_path):
    data = read(tmp_path, IV_CSV)
    model = iv_iov_model()
    fit = pk.fit(model, data, fix={"kappa_cl": 0.02})
    assert fit.fixed == ("log_sd(kappa_cl)",)
    np.testing.assert_allclose(np.diag(fit.omega)[2:], [0.02, 0.02], rtol=1e-14)
    x = fit.x
    from scichains.pk._bootstrap import _reported, _reported_names

    assert _reported_names(model) == [
        "tcl",
        "tv",
        "omega(eta_cl)",
        "omega(eta_v)",
        "omega(kappa_cl)",
        "prop",
    ]
    np.testing.assert_allclose(_reported(model, x)[4], 0.02, rtol=1e-14)


def test_bad_occasions_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"subject ID 1, row 2: OCC 3 is not an occasion"):
        pk.PopulationObjective(
            iv_iov_model(),
            read(tmp_path, "ID,TIME,DV,AMT,EVID,OCC\n1,0,.,100,1,1\n1,1,4,.,0,3\n"),
        )
    with pytest.raises(ValueError, match=r"subject ID 1, its first record: OCC 1.5"):
        pk.PopulationObjective(
            iv_iov_model(),
            read(tmp_path, "ID,TIME,DV,AMT,EVID,OCC\n1,0,.,100,1,1.5\n1,1,4,.,0,1.5\n"),
        )
    with pytest.raises(ValueError, match=r"covariates \['OCC'\] that the data lack"):
        pk.PopulationObjective(
            iv_iov_model(), read(tmp_path, "ID,TIME,DV,AMT,EVID\n1,0,.,100,1\n1,1,4,.,0\n")
        )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"occasions": 1}, "occasions must be >= 2"),
        ({"occasions": 2.0}, "occasions must be a whole number"),
        ({"iov_omega": None}, "iov_eta needs iov_omega"),
        ({"iov_omega": [0.1, 0.1]}, r"iov_omega must have shape \(1,\)"),
        ({"iov_omega": [-0.1]}, "iov_omega variances must be positive"),
        ({"iov_eta": [sp.Symbol("kappa_v")]}, r"iov_eta \['kappa_v'\] appear in no individual"),
        ({"iov_eta": []}, "occasions is given without iov_eta"),
    ],
)
def test_bad_occasion_models_are_refused(kwargs, match):
    center, cl, v = sp.symbols("center cl v")
    tcl, tv, ecl, kcl = sp.symbols("tcl tv eta_cl kappa_cl")
    args = dict(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: sp.exp(tcl + ecl + kcl), v: sp.exp(tv)},
        theta={tcl: 0.7, tv: 3.0},
        eta=[ecl],
        omega=[0.09],
        observe=center / v,
        error=pk.Proportional(0.1),
        iov_eta=[kcl],
        iov_omega=[0.04],
        occasions=2,
    )
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        pk.PKModel(**args)


def test_models_with_occasions_pickle(tmp_path):
    import pickle

    model = iv_iov_model()
    again = pickle.loads(pickle.dumps(model))
    assert again.occasions == 2 and again.parameter_names() == model.parameter_names()
    data = read(tmp_path, IV_CSV)
    x = model.pack()
    a = pk.PopulationObjective(model, data).value(x)
    assert pk.PopulationObjective(again, data).value(x) == a


def test_the_tools_take_a_fit_with_occasions(tmp_path):
    # 12 subjects x 2 occasions simulated from the model: fit, covariance step, residuals,
    # shrinkage (one per expanded effect), NPDE and a VPC run on the expanded random effects
    lines = ["ID,TIME,AMT,DV,EVID,OCC"]
    for i in range(1, 13):
        for occ, t0 in ((1, 0), (2, 48)):
            lines.append(f"{i},{t0},100,.,1,{occ}")
            lines += [f"{i},{t0 + t},.,0,0,{occ}" for t in (0.5, 2, 6, 12)]
    table = read(tmp_path, "\n".join(lines) + "\n")
    model = iv_iov_model()
    truth = model.pack(theta=np.log([4.0, 30.0]), omega=[0.09, 0.05, 0.04], sd=[0.1])
    data = table.with_observations(pk.simulate(model, table, truth, 1, seed=7)[0])
    fit = pk.fit(model, data, x0=truth)
    assert fit.success and fit.etas.shape == (12, 4) and fit.omega.shape == (4, 4)
    assert fit.omega[2, 2] == fit.omega[3, 3] and fit.omega[2, 3] == 0
    cov = pk.covariance(model, data, fit)
    assert cov.se.shape == (model.size,) and np.all(np.isfinite(cov.se))
    assert cov.se_omega[2, 2] == pytest.approx(cov.se_omega[3, 3], rel=1e-12)
    res = pk.residuals(model, data, fit)
    assert np.all(np.isfinite(res["CWRES"])) and res["CWRES"].size == data.n_obs
    assert pk.shrinkage(fit).shape == (4,)
    assert np.isfinite(pk.npde(model, data, fit, n_sim=50).summary()["p_global"])


def oral_lag_iov_model():
    """Oral absorption with a lag time (ALAG1) and inter-occasion variability on ka."""
    depot, center, ka, cl, v, tl = sp.symbols("depot center ka cl v tl")
    tka, tcl, tv, ttl, eka, ecl, etl, kka = sp.symbols(
        "tka tcl tv ttl eta_ka eta_cl eta_tl kappa_ka"
    )
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={
            ka: sp.exp(tka + eka + kka),
            cl: sp.exp(tcl + ecl),
            v: sp.exp(tv),
            tl: sp.exp(ttl + etl),
        },
        theta={tka: 0.2, tcl: 1.3, tv: 3.4, ttl: -1.0},
        eta=[eka, ecl, etl],
        omega=[0.1, 0.05, 0.1],
        observe=center / v,
        error=pk.Proportional(0.1),
        lag={depot: tl},
        iov_eta=[kka],
        iov_omega=[0.05],
        occasions=2,
    )


LAG_IOV_CSV = (
    "ID,TIME,DV,AMT,EVID,OCC\n"
    "1,0,.,200,1,1\n1,1,3.1,.,0,1\n1,3,4.4,.,0,1\n1,8,2.6,.,0,1\n"
    "1,24,.,200,1,2\n1,25,3.5,.,0,2\n1,27,4.6,.,0,2\n1,32,2.9,.,0,2\n"
    "2,0,.,200,1,1\n2,2,4.0,.,0,1\n2,6,3.4,.,0,1\n"
    "2,12,.,200,1,2\n2,13,5.2,.,0,2\n2,18,4.8,.,0,2\n"
)


def test_lag_times_with_occasions_against_scipy(tmp_path):
    import scipy.integrate

    data = read(tmp_path, LAG_IOV_CSV)
    model = oral_lag_iov_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-12, atol=1e-14)
    x = model.pack()
    etas = np.array([[0.1, -0.1, 0.2, 0.3, -0.2], [0.0, 0.1, -0.2, -0.3, 0.25]])
    for s, eta, pred in zip(data.subjects, etas, obj.predict(x, etas)):
        tka, tcl, tv, ttl = x[:4]
        cl, v, lag = np.exp(tcl + eta[1]), np.exp(tv), np.exp(ttl + eta[2])
        switch = s.doses[1].time
        kas = [np.exp(tka + eta[0] + eta[3]), np.exp(tka + eta[0] + eta[4])]
        cuts = sorted({0.0, s.doses[0].time + lag, switch, switch + lag, s.times[-1]})
        u = np.zeros(2)
        out = np.zeros(s.times.size)
        for a, b in zip(cuts[:-1], cuts[1:]):
            for d in s.doses:
                if np.isclose(d.time + lag, a):
                    u[0] += d.amount
            ka = kas[0] if a < switch else kas[1]
            sel = (s.times >= a) & (s.times < b)
            sol = scipy.integrate.solve_ivp(
                lambda _, y, ka=ka, k=cl / v: [-ka * y[0], ka * y[0] - k * y[1]],
                (a, b), u, method="DOP853", t_eval=np.append(s.times[sel], b),
                rtol=1e-13, atol=1e-14,
            )  # fmt: skip
            out[sel] = sol.y[1, :-1] / v
            u = sol.y[:, -1].copy()
        out[s.times == cuts[-1]] = u[1] / v
        np.testing.assert_allclose(pred, out, rtol=1e-8)


def test_lag_times_with_occasions_gradient(tmp_path):
    data = read(tmp_path, LAG_IOV_CSV)
    model = oral_lag_iov_model()
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    x = model.pack()
    gradient_matches_central_differences(obj, x)


def test_a_change_between_a_dose_and_its_arrival_fails_that_point(tmp_path):
    # the lag (about 0.37 h) carries the dose past the occasion's change at 0.1 h
    data = read(tmp_path, "ID,TIME,DV,AMT,EVID,OCC\n1,0,.,200,1,1\n1,0.1,.,.,2,2\n1,2,4.0,.,0,2\n")
    obj = pk.PopulationObjective(oral_lag_iov_model(), data)
    with pytest.raises(pk.PKSolveError, match=r"row 1: a covariate changes between the dose"):
        obj.predict(oral_lag_iov_model().pack())


def test_fix_omega_in_the_short_form(tmp_path):
    data = read(tmp_path, IV_CSV)
    model = iv_iov_model()
    mask, x = pk._fit.fixed_entries(model, {"omega": [0.05, 0.02, 0.03]}, model.pack())
    assert mask.tolist() == [False, False, True, True, True, False]
    np.testing.assert_allclose(np.diag(model.unpack(x)[1]), [0.05, 0.02, 0.03, 0.03])
    assert pk.fit(model, data, fix={"omega": [0.05, 0.02, 0.03]}).omega[3, 3] == pytest.approx(
        0.03, rel=1e-14
    )


def test_a_lagged_infusion_ending_after_a_change_fails_that_point(tmp_path):
    data = read(
        tmp_path,
        "ID,TIME,DV,AMT,DUR,EVID,OCC\n1,0,.,200,2,1,1\n1,1.5,.,.,.,2,2\n1,4,4.0,.,.,0,2\n",
    )
    obj = pk.PopulationObjective(oral_lag_iov_model(), data)
    with pytest.raises(pk.PKSolveError, match=r"or the end of its infusion at"):
        obj.predict(oral_lag_iov_model().pack())
