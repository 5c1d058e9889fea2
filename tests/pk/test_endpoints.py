"""Several endpoints (issue 29, item 3): a joint PK/PD model written as
``PKModel(observe={1: conc, 2: effect}, error={1: ..., 2: ...})`` with ``DVID`` selecting each
observation's endpoint. The FOCE-I and Laplace objective against an independent NumPy/SciPy
implementation (closed-form concentrations, each row with its own endpoint's prediction and
error model, censored rows of either endpoint), exact gradients against central differences,
DVID in event tables and the input refused, residuals, GOF and VPC by endpoint, and a fit
that recovers the truth."""

import math
import types

import numpy as np
import pytest
import scipy.optimize
import sympy as sp

from scichains import pk

from .test_blq import _terms
from .test_objective import closed_form, fd_gradient

TIMES = np.array([0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 24.0])
DOSE = 320.0
# one-compartment oral PK, a direct Emax effect of the concentration on a baseline
TRUTH = {"ka": 1.5, "cl": 2.7, "v": 32.0, "e0": 20.0, "emax": 50.0, "ec50": 4.0}
OMEGA = [0.3, 0.1, 0.05]  # eta_ka, eta_cl, eta_e0
SD = {"conc": 0.15, "effect": 3.0}  # proportional, additive


def pkpd_model(conc=None, effect=None, omega=OMEGA, dvids=(1, 2), theta=None):
    depot, center = sp.symbols("depot center")
    ka, cl, v, e0, emax, ec50 = sp.symbols("ka cl v e0 emax ec50")
    tka, tcl, tv, te0, temax, tec50 = sp.symbols("tka tcl tv te0 temax tec50")
    eka, ecl, ee0 = sp.symbols("eta_ka eta_cl eta_e0")
    c = center / v
    theta = np.log(list(TRUTH.values())) if theta is None else theta
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={
            ka: sp.exp(tka + eka),
            cl: sp.exp(tcl + ecl),
            v: sp.exp(tv),
            e0: sp.exp(te0 + ee0),
            emax: sp.exp(temax),
            ec50: sp.exp(tec50),
        },
        theta=dict(zip([tka, tcl, tv, te0, temax, tec50], theta)),
        eta=[eka, ecl, ee0],
        omega=list(omega),
        observe={dvids[0]: c, dvids[1]: e0 + emax * c / (ec50 + c)},
        error={
            dvids[0]: conc or pk.Proportional(SD["conc"]),
            dvids[1]: effect or pk.Additive(SD["effect"]),
        },
    )


def reference_predictions(theta, eta, times, dvid):
    """Concentrations (DVID 1) from the closed form, effects (DVID 2) from them."""
    ka, cl, v = np.exp(theta[0] + eta[0]), np.exp(theta[1] + eta[1]), np.exp(theta[2])
    e0, emax, ec50 = np.exp(theta[3] + eta[2]), np.exp(theta[4]), np.exp(theta[5])
    c = closed_form((ka, cl, v), DOSE, times)
    return np.where(dvid == 1, c, e0 + emax * c / (ec50 + c))


def pkpd_data(n_subjects, seed=0, x_theta=None):
    """Subjects given DOSE into the depot at 0, both endpoints sampled at each of TIMES (the
    concentration's record first), simulated in NumPy at the truth (proportional 15% on the
    concentration, additive 3 on the effect)."""
    rng = np.random.default_rng(seed)
    theta = np.log(list(TRUTH.values())) if x_theta is None else x_theta
    etas = rng.multivariate_normal(np.zeros(3), np.diag(OMEGA), n_subjects)
    times = np.repeat(TIMES, 2)
    dvid = np.tile([1, 2], TIMES.size)
    rows = np.arange(2, 2 + times.size)
    out = []
    for i in range(n_subjects):
        f = reference_predictions(theta, etas[i], times, dvid)
        z = rng.standard_normal(f.size)
        dv = np.where(dvid == 1, f * (1 + SD["conc"] * z), f + SD["effect"] * z)
        out.append(
            pk.Subject(i + 1, [pk.Dose(0.0, DOSE, 0, row=1)], times, dv, rows, dvid=dvid.copy())
        )
    return pk.EventData(out, ())


def censor(data, lloq=None, ceiling=None):
    """Concentrations below ``lloq`` censored below it (``CENS=1``), effects above
    ``ceiling`` censored above it (``CENS=-1``)."""
    out = []
    for s in data.subjects:
        cens = np.zeros(s.n_obs)
        dv = s.dv.copy()
        if lloq is not None:
            low = (s.dvid == 1) & (dv < lloq)
            cens[low], dv[low] = 1, lloq
        if ceiling is not None:
            high = (s.dvid == 2) & (dv > ceiling)
            cens[high], dv[high] = -1, ceiling
        out.append(
            pk.Subject(
                s.id, s.doses, s.times, dv, s.rows, cens=cens, limit=np.full(s.n_obs, np.nan),
                dvid=s.dvid,
            )
        )  # fmt: skip
    return pk.EventData(out, ())


# ---------------------------------------------------------------- an independent objective


def reference_ofv(model, data, x, method, m4=()):
    """OFV from closed-form predictions, each row with its own endpoint's error model (the
    censored rows' and M4's terms and FOCE-I weights from test_blq's SciPy implementation;
    an Exponential endpoint as an additive one on log y, log f), SciPy's BFGS EBEs, central
    differences for the Jacobian (FOCE-I) or the Hessian (Laplace). ``m4``: the DVIDs with
    M4."""
    theta, om, sd = model.unpack(x)
    oinv = np.linalg.inv(om)
    sds, k = {}, 0
    for d, err in zip(model.dvids, model.errors):
        sds[d] = sd[k : k + len(err.names)]
        k += len(err.names)

    total = 0.0
    for s in data.subjects:
        cens = np.zeros(s.n_obs) if s.cens is None else s.cens
        limit = np.full(s.n_obs, np.nan) if s.limit is None else s.limit

        def scaled(f, s=s):
            out = f.copy()
            for d, err in zip(model.dvids, model.errors):
                if err.log_transform:
                    out[s.dvid == d] = np.log(f[s.dvid == d])
            return out

        y = scaled(s.dv)

        def pred(eta, s=s):
            return scaled(reference_predictions(theta, eta, s.times, s.dvid))

        def terms(f, weights, s=s, y=y, cens=cens, limit=limit):
            ell, w = np.zeros(f.size), np.zeros(f.size)
            for d, err in zip(model.dvids, model.errors):
                rows = s.dvid == d
                name = "Additive" if err.log_transform else type(err).__name__
                part = types.SimpleNamespace(dv=y[rows], cens=cens[rows], limit=limit[rows])
                ell[rows], w[rows] = _terms(name, sds[d], part, f[rows], d in m4, weights)
            return ell, w

        def L(eta, pred=pred, terms=terms):
            return np.sum(terms(pred(eta), False)[0]) + eta @ oinv @ eta

        eta = scipy.optimize.minimize(L, np.zeros(3), method="BFGS", options={"gtol": 1e-9}).x
        if method == "focei":
            h = 1e-6
            G = np.stack(
                [(pred(eta + h * e) - pred(eta - h * e)) / (2 * h) for e in np.eye(3)], axis=1
            )
            A = oinv + (G.T * terms(pred(eta), True)[1]) @ G
        else:
            k = 1e-4
            H = np.empty((3, 3))
            for a, ea in enumerate(np.eye(3)):
                for b, eb in enumerate(np.eye(3)):
                    H[a, b] = (
                        L(eta + k * ea + k * eb)
                        - L(eta + k * ea - k * eb)
                        - L(eta - k * ea + k * eb)
                        + L(eta - k * ea - k * eb)
                    ) / (4 * k * k)
            A = 0.5 * H
        total += L(eta) + np.linalg.slogdet(om)[1] + np.linalg.slogdet(A)[1]
    return total


X_TEST_THETA = [0.3, 1.1, 3.4, 3.1, 3.8, 1.5]  # off the truth


@pytest.mark.parametrize(
    "conc, effect, method, censored",
    [
        (pk.Proportional(0.15), pk.Additive(3.0), "focei", True),
        (pk.Exponential(0.15), pk.Combined(2.0, 0.05), "laplace", False),
    ],
)
def test_objective_matches_an_independent_implementation(conc, effect, method, censored):
    # 4 subjects, 14 records each (both endpoints at every time); censored: concentrations
    # below 3 mg/L (M3) and effects above 55 (censored above) of either endpoint
    data = pkpd_data(4)
    if censored:
        data = censor(data, lloq=3.0, ceiling=55.0)
        cens = np.concatenate([s.cens for s in data.subjects])
        dvid = np.concatenate([s.dvid for s in data.subjects])
        assert np.sum((cens == 1) & (dvid == 1)) >= 3 and np.sum((cens == -1) & (dvid == 2)) >= 3
    model = pkpd_model(conc, effect)
    x = model.pack(theta=X_TEST_THETA, omega=[0.4, 0.07, 0.1])
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-10, atol=1e-12)
    assert obj.value(x) == pytest.approx(reference_ofv(model, data, x, method), abs=2e-5)


def test_an_endpoint_without_rows_changes_nothing():
    # every record DVID 1: the two-endpoint model's objective is that of the concentration
    # model alone, and the effect's residual error has a zero gradient. The two models are
    # compiled separately, so LLVM may contract different products into FMAs: the same to
    # rounding (on an AMD Zen 4 one gradient entry differed in its last bit), not bit for bit
    data = pkpd_data(3)
    only_conc = pk.EventData(
        [
            pk.Subject(s.id, s.doses, s.times[s.dvid == 1], s.dv[s.dvid == 1],
                       s.rows[s.dvid == 1], dvid=s.dvid[s.dvid == 1])
            for s in data.subjects
        ],
        (),
    )  # fmt: skip
    two = pkpd_model()
    x2 = two.pack(theta=X_TEST_THETA)
    f2, g2 = pk.PopulationObjective(two, only_conc).value_and_grad(x2)
    one = pkpd_model()
    one_model = pk.PKModel(
        states=one.states, odes=one.odes, individual=dict(zip(one.phi, one.phi_exprs)),
        theta=dict(zip(one.theta_symbols, X_TEST_THETA)), eta=one.eta, omega=OMEGA,
        observe=one.observes[0], error=pk.Proportional(SD["conc"]),
    )  # fmt: skip
    plain = pk.EventData(
        [pk.Subject(s.id, s.doses, s.times, s.dv, s.rows) for s in only_conc.subjects], ()
    )
    f1, g1 = pk.PopulationObjective(one_model, plain).value_and_grad(one_model.pack())
    assert f2 == pytest.approx(f1, rel=1e-14)
    np.testing.assert_allclose(g2[:-1], g1, rtol=1e-13, atol=1e-13 * np.abs(g1).max())
    assert g2[-1] == 0.0
    # a dict of one endpoint reads data without DVID as that endpoint's
    single = pk.PKModel(
        states=one.states, odes=one.odes, individual=dict(zip(one.phi, one.phi_exprs)),
        theta=dict(zip(one.theta_symbols, X_TEST_THETA)), eta=one.eta, omega=OMEGA,
        observe={1: one.observes[0]}, error={1: pk.Proportional(SD["conc"])},
    )  # fmt: skip
    assert single.dvids == (1,) and single.parameter_names()[-1] == "log_prop[1]"
    assert pk.PopulationObjective(single, plain).value(single.pack()) == f1
    assert two.parameter_names()[-2:] == ["log_prop[1]", "log_add[2]"]


@pytest.mark.parametrize(
    "conc, effect, method, blq",
    [
        (pk.Proportional(0.15), pk.Additive(3.0), "focei", "m3"),
        # ~19 s; by default the focei case above checks the two endpoints' gradient,
        # test_objective_matches_an_independent_implementation Laplace's two-endpoint value and
        # test_blq.py's laplace-m4 case Laplace's M4 gradient
        pytest.param(
            pk.Exponential(0.15),
            pk.Combined(2.0, 0.05),
            "laplace",
            {2: "m4"},
            marks=pytest.mark.slow,
        ),
    ],
)
def test_gradient_matches_central_differences(conc, effect, method, blq):
    # censored rows of both endpoints; Laplace with an exponential (log-scale) endpoint and
    # M4 on the other (its truncation term on every effect row)
    data = censor(pkpd_data(4, seed=1), lloq=3.0, ceiling=55.0)
    model = pkpd_model(conc, effect)
    obj = pk.PopulationObjective(model, data, method=method, blq=blq, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=X_TEST_THETA, omega=[0.4, 0.07, 0.1])
    f, g = obj.value_and_grad(x)
    assert f == pytest.approx(obj.value(x), abs=1e-9)
    fd = fd_gradient(obj, x)
    print("largest gradient error:", np.max(np.abs(g - fd) / (1 + np.abs(fd))))
    np.testing.assert_allclose(g, fd, rtol=2e-5, atol=2e-5)


# ---------------------------------------------------------------- event tables, bad input

CSV = (
    "ID,TIME,DV,AMT,EVID,CMT,DVID\n"
    "1,0,.,320,1,1,.\n"
    "1,1,5.1,.,0,2,1\n"
    "1,1,38.0,.,0,3,2\n"
    "1,4,7.9,.,0,2,1\n"
    "1,4,45.5,.,0,3,2\n"
    "2,0,.,320,1,1,.\n"
    "2,2,6.0,.,0,2,1\n"
    "2,8,31.0,.,0,3,2\n"
)


def read(tmp_path, text, **kwargs):
    path = tmp_path / "data.csv"
    path.write_text(text)
    return pk.read_events(path, **kwargs)


def test_dvid_selects_each_records_endpoint(tmp_path):
    data = read(tmp_path, CSV)
    s1, s2 = data.subjects
    np.testing.assert_array_equal(s1.dvid, [1, 2, 1, 2])
    np.testing.assert_array_equal(s2.dvid, [1, 2])
    assert data.dvids == (1, 2) and data.covariates == ()
    model = pkpd_model()
    x = model.pack(theta=X_TEST_THETA)
    obj = pk.PopulationObjective(model, data)
    pred = obj.predict(x)
    for s, f in zip(data.subjects, pred):
        np.testing.assert_allclose(
            f, reference_predictions(X_TEST_THETA, np.zeros(3), s.times, s.dvid), rtol=1e-6
        )
    # the same table with the endpoints' ids 5 and 7, in the other order in the model
    other = read(tmp_path, CSV.replace(",1\n", ",5\n").replace(",2\n", ",7\n"))
    swapped = pkpd_model(dvids=(5, 7))
    assert obj.value(x) == pytest.approx(pk.PopulationObjective(swapped, other).value(x), abs=1e-9)


def test_bad_endpoint_input_is_refused(tmp_path):
    data = read(tmp_path, CSV)
    from .models import oral_model

    with pytest.raises(ValueError, match=r"DVID column .* one observation expression: .*observe="):
        pk.PopulationObjective(oral_model(), data)
    three = read(tmp_path, CSV.replace("2,8,31.0,.,0,3,2", "2,8,31.0,.,0,3,3"))
    with pytest.raises(ValueError, match=r"subject ID 2, row 8: DVID 3 is not an endpoint"):
        pk.PopulationObjective(pkpd_model(), three)
    plain = read(tmp_path, "ID,TIME,DV,AMT,EVID\n1,0,.,320,1\n1,1,5,.,0\n")
    with pytest.raises(ValueError, match=r"endpoints \[1, 2\] .* subject ID 1 has no DVID"):
        pk.PopulationObjective(pkpd_model(), plain)
    with pytest.raises(pk.EventTableError, match="row 2: an observation record without a DVID"):
        read(tmp_path, CSV.replace("1,1,5.1,.,0,2,1", "1,1,5.1,.,0,2,."))
    with pytest.raises(pk.EventTableError, match="row 2: DVID 1.5 is not an endpoint number"):
        read(tmp_path, CSV.replace("1,1,5.1,.,0,2,1", "1,1,5.1,.,0,2,1.5"))
    with pytest.raises(pk.EventTableError, match="observations of DVID 1 in compartments 2"):
        read(tmp_path, CSV.replace("1,4,7.9,.,0,2,1", "1,4,7.9,.,0,3,1"))
    # without DVID, observations in two compartments say how to select endpoints
    no_dvid = "\n".join(line.rsplit(",", 1)[0] for line in CSV.strip().split("\n")) + "\n"
    with pytest.raises(pk.EventTableError, match="compartments 2 .* and 3 .*DVID column"):
        read(tmp_path, no_dvid)
    # the model: an error model for each endpoint, keyed as observe
    depot, center, v = sp.symbols("depot center v")
    base = dict(
        states=[depot, center], odes=[-depot, depot - center / v],
        individual={v: sp.exp(sp.Symbol("tv") + sp.Symbol("eta_v"))},
        theta={sp.Symbol("tv"): 3.0}, eta=[sp.Symbol("eta_v")], omega=[0.1],
    )  # fmt: skip
    two = {1: center / v, 2: depot}
    with pytest.raises(ValueError, match=r"no error model for endpoint\(s\) \[2\]"):
        pk.PKModel(**base, observe=two, error={1: pk.Additive(1.0)})
    with pytest.raises(ValueError, match=r"endpoints \[1, 2\] .* each its own error model"):
        pk.PKModel(**base, observe=two, error=pk.Additive(1.0))
    with pytest.raises(ValueError, match=r"error is given for endpoint\(s\) \[3\]"):
        pk.PKModel(
            **base,
            observe=two,
            error={1: pk.Additive(1.0), 2: pk.Additive(1.0), 3: pk.Additive(1.0)},
        )
    with pytest.raises(ValueError, match="error is a dict of endpoints but observe is one"):
        pk.PKModel(**base, observe=center / v, error={1: pk.Additive(1.0)})
    with pytest.raises(ValueError, match="not a DVID value"):
        pk.PKModel(**base, observe={"conc": center / v}, error={"conc": pk.Additive(1.0)})
    with pytest.raises(TypeError, match=r"error\[2\] must be an ErrorModel"):
        pk.PKModel(**base, observe=two, error={1: pk.Additive(1.0), 2: 0.5})
    with pytest.raises(
        ValueError, match=r"the observation of endpoint 2 uses unknown symbols \['k'\]"
    ):
        pk.PKModel(
            **base,
            observe={1: center / v, 2: sp.Symbol("k")},
            error={1: pk.Additive(1.0), 2: pk.Additive(1.0)},
        )
    model = pk.PKModel(**base, observe=two, error={1: pk.Additive(1.0), 2: pk.Proportional(0.1)})
    with pytest.raises(ValueError, match="blq names endpoint 3"):
        pk.PopulationObjective(model, data, blq={3: "m4"})
    with pytest.raises(ValueError, match=r"blq\[2\] must be 'm1', 'm3' or 'm4'"):
        pk.PopulationObjective(model, data, blq={2: "m2"})
    with pytest.raises(ValueError, match="blq as a dict .* needs a model with endpoints"):
        pk.PopulationObjective(oral_model(), plain, blq={1: "m4"})


def test_blq_per_endpoint():
    # M1 for the effect, M3 for the concentration: the censored effects are left out, the
    # censored concentrations are not
    data = censor(pkpd_data(3, seed=2), lloq=3.0, ceiling=55.0)
    model = pkpd_model()
    x = model.pack(theta=X_TEST_THETA)
    mixed = pk.PopulationObjective(model, data, blq={2: "m1"})
    keep = []
    for s in data.subjects:
        k = ~((s.dvid == 2) & (s.cens != 0))
        keep.append(
            pk.Subject(s.id, s.doses, s.times[k], s.dv[k], s.rows[k], cens=s.cens[k],
                       limit=s.limit[k], dvid=s.dvid[k])
        )  # fmt: skip
    dropped = pk.EventData(keep, ())
    assert mixed.n_obs == dropped.n_obs < data.n_obs
    assert mixed.value(x) == pk.PopulationObjective(model, dropped).value(x)


# ---------------------------------------------------------------- fits and diagnostics


@pytest.fixture(scope="module")
def pkpd_fit():
    """A FOCE-I fit of the joint model to 16 simulated subjects (224 records) from the truth."""
    model = pkpd_model()
    data = pkpd_data(16, seed=3)
    x_true = model.pack(omega=OMEGA)
    return model, data, x_true, pk.fit(model, data, x0=x_true)


def test_a_joint_fit_recovers_the_truth(pkpd_fit):
    # one data set: each typical value within 3.5 standard errors (sandwich) of the truth;
    # measured (seed 3): -0.79, -0.27, -0.39, 1.13, 1.24, 1.18 SE
    model, data, x_true, res = pkpd_fit
    assert res.success, res.message
    assert list(res.sd) == ["prop[1]", "add[2]"]
    assert res.n_obs == data.n_obs == 224
    cov = pk.covariance(model, data, res)
    assert cov.success, cov.message
    z = (res.x[:6] - x_true[:6]) / cov.se_theta
    print("\n(estimate - truth) / SE:", np.round(z, 2))
    assert np.all(np.abs(z) < 3.5)
    assert res.sd["prop[1]"] == pytest.approx(SD["conc"], rel=0.2)
    assert res.sd["add[2]"] == pytest.approx(SD["effect"], rel=0.2)
    # a residual error parameter of one endpoint is fixed by its name
    with pytest.warns(pk.FitWarning, match="iteration limit"):
        fixed = pk.fit(model, data, x0=res.x, fix={"add[2]": 3.0}, maxiter=0)
    assert fixed.fixed == ("log_add[2]",) and fixed.sd["add[2]"] == pytest.approx(3.0)


def test_residuals_gof_and_vpc_by_endpoint(pkpd_fit):
    model, data, _, res = pkpd_fit
    table = pk.residuals(model, data, res)
    dvid = np.concatenate([s.dvid for s in data.subjects])
    np.testing.assert_array_equal(table["DVID"], dvid)
    # each row's predictions are its endpoint's (closed form at the EBEs and at eta = 0) and
    # its IWRES is scaled by its own endpoint's error model
    ipred = np.concatenate(
        [
            reference_predictions(res.x[:6], e, s.times, s.dvid)
            for s, e in zip(data.subjects, res.etas)
        ]
    )
    pred = np.concatenate(
        [reference_predictions(res.x[:6], np.zeros(3), s.times, s.dvid) for s in data.subjects]
    )
    np.testing.assert_allclose(table["IPRED"], ipred, rtol=1e-6)
    np.testing.assert_allclose(table["PRED"], pred, rtol=1e-6)
    sd = np.where(dvid == 1, res.sd["prop[1]"] * ipred, res.sd["add[2]"])
    np.testing.assert_allclose(table["IWRES"], (table["DV"] - ipred) / sd, rtol=1e-5, atol=1e-7)
    for k in (1, 2):  # a fitted model: CWRES about standard normal within each endpoint
        c = table["CWRES"][dvid == k]
        assert abs(np.mean(c)) < 0.3 and 0.7 < np.std(c) < 1.3
    import matplotlib

    matplotlib.use("Agg")
    assert len(pk.gof_plot(table).axes) == 8  # a row of four panels per endpoint
    fig = pk.gof_plot(table, endpoint=2)
    assert len(fig.axes) == 4 and fig.axes[0].get_title() == "DVID 2"
    with pytest.raises(ValueError, match=r"no rows of DVID 3 \(it has \[1, 2\]\)"):
        pk.gof_plot(table, endpoint=3)
    # the VPC of one endpoint: its observations, against simulations of its own
    with pytest.raises(ValueError, match=r"endpoints \[1, 2\]: give vpc\(\.\.\., endpoint=dvid\)"):
        pk.vpc(model, data, res, n_sim=5)
    with pytest.raises(ValueError, match="endpoint 3 is not an endpoint of the model"):
        pk.vpc(model, data, res, n_sim=5, endpoint=3)
    edges = list(TIMES - 0.1) + [30.0]
    v = pk.vpc(model, data, res, n_sim=50, bins=edges, endpoint=2)
    assert v.endpoint == 2
    np.testing.assert_array_equal(v.dv, table["DV"][dvid == 2])
    for b, t in enumerate(TIMES):
        sel = (dvid == 2) & (table["TIME"] == t)
        np.testing.assert_allclose(v.observed[b], np.percentile(table["DV"][sel], [5, 50, 95]))
    # the effect's median (around 20 to 50) within its simulated interval in most bins
    inside = (v.observed[:, 1] >= v.simulated_low[:, 1]) & (
        v.observed[:, 1] <= v.simulated_high[:, 1]
    )
    assert inside.sum() >= 6 and np.nanmin(v.simulated_median[:, 1]) > 15
    v.plot()
    conc = pk.vpc(model, data, res, n_sim=20, bins=edges, endpoint=1)
    assert np.nanmax(conc.simulated_median[:, 1]) < 15  # concentrations, not effects


def test_simulate_draws_each_endpoint_from_its_own_error_model():
    # an exponential error on the concentration and an additive one on the effect, random
    # effects nearly zero: log-normal concentrations around the prediction, effects normal
    model = pkpd_model(pk.Exponential(0.2), pk.Additive(3.0), omega=[1e-8] * 3)
    data = pkpd_data(2)
    x = model.pack()
    sims = pk.simulate(model, data, x, 400, seed=1)
    f = np.concatenate(pk.PopulationObjective(model, data).predict(x))
    dvid = np.concatenate([s.dvid for s in data.subjects])
    logc = np.log(sims[:, dvid == 1])
    assert np.all(np.abs(logc.mean(axis=0) - np.log(f[dvid == 1])) < 4 * 0.2 / 20)
    np.testing.assert_allclose(logc.std(axis=0).mean(), 0.2, rtol=0.05)
    eff = sims[:, dvid == 2]
    assert np.all(np.abs(eff.mean(axis=0) - f[dvid == 2]) < 4 * 3.0 / 20)
    np.testing.assert_allclose(eff.std(axis=0).mean(), 3.0, rtol=0.05)


@pytest.mark.slow
def test_joint_fits_recover_the_truth_over_replicates():
    # issue 29's floor for a joint PK/PD fit: 20 replicate data sets of 24 subjects (both
    # endpoints at 7 times), FOCE-I from starts 10% off; each typical value's mean estimate
    # within 3 Monte Carlo standard errors of the truth
    truth = np.array(list(TRUTH.values()))
    est, sds = [], []
    for seed in range(20):
        model = pkpd_model()
        data = pkpd_data(24, seed=100 + seed)
        x_true = model.pack(omega=OMEGA)
        from .models import perturbed_start

        res = pk.fit(model, data, x0=perturbed_start(model, x_true, seed))
        assert res.success, res.message
        est.append(np.exp(res.x[:6]))
        sds.append(list(res.sd.values()))
    est, sds = np.array(est), np.array(sds)
    mean = est.mean(axis=0)
    se = est.std(axis=0, ddof=1) / math.sqrt(len(est))
    z = (mean - truth) / se
    print("\nka, CL, V, E0, Emax, EC50: mean", np.round(mean, 3), "MC SE", np.round(se, 3))
    print("bias/SE", np.round(z, 2), "sd mean", np.round(sds.mean(axis=0), 4))
    assert np.all(np.abs(z) < 3)
    np.testing.assert_allclose(sds.mean(axis=0), [SD["conc"], SD["effect"]], rtol=0.1)


def test_an_endpoint_model_pickles_and_runs_on_threads_with_the_same_bits():
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    model = pkpd_model(pk.Exponential(0.15), pk.Combined(2.0, 0.05))
    back = pickle.loads(pickle.dumps(model))
    assert back.dvids == (1, 2) and back.parameter_names() == model.parameter_names()
    data = censor(pkpd_data(4, seed=4), lloq=3.0, ceiling=55.0)
    x = model.pack(theta=X_TEST_THETA)
    want = pk.PopulationObjective(model, data, blq={2: "m4"}).value_and_grad(x)
    got = pk.PopulationObjective(back, data, blq={2: "m4"}).value_and_grad(x)
    assert got[0] == want[0] and np.array_equal(got[1], want[1])
    with ThreadPoolExecutor(2) as pool:
        obj = pk.PopulationObjective(model, data, executor=pool, batch_size=2, blq={2: "m4"})
        got = obj.value_and_grad(x)
    assert got[0] == want[0] and np.array_equal(got[1], want[1])
