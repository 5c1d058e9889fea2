"""Model evaluation: NPDE, the prediction-corrected VPC and the bootstrap, each against an
independent computation (NumPy, the data simulated from the true model)."""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import matplotlib
import numpy as np
import pytest
from scipy.special import ndtri

from scichains import pk

from .models import iv_model, oral_model, simulated_oral, theoph_subset

matplotlib.use("Agg")


# --- NPDE -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def true_model():
    """30 subjects x 7 samples simulated from the oral model with a 15% proportional error."""
    return simulated_oral(pk.Proportional(0.15), [0.15], n_subjects=30, seed=4)


def _lag1(values, ids):
    """The correlation of consecutive values within the subjects, pooled."""
    a, b = [], []
    for i in np.unique(ids.astype(np.int64)):
        v = values[ids == i]
        a.append(v[:-1])
        b.append(v[1:])
    return float(np.corrcoef(np.concatenate(a), np.concatenate(b))[0, 1])


def test_npde_of_the_true_model_are_independent_standard_normal(true_model):
    model, data, x = true_model
    r = pk.npde(model, data, x, n_sim=200, seed=1)
    assert r.npde.shape == r.pd.shape == (data.n_obs,) == (210,)
    assert np.all(np.isfinite(r.npde)) and r.n_censored == 0 and r.n_degenerate == 0
    s = r.summary()
    print("npde, true model:", {k: round(v, 4) for k, v in s.items()})
    assert abs(s["mean"]) < 0.25 and 0.75 < s["variance"] < 1.35
    assert s["p_global"] > 0.05 and s["p_shapiro"] > 0.05
    # the decorrelation: the subjects' random effects correlate their pd, not their npde
    ids = r.id
    r_pd, r_npde = _lag1(ndtri(r.pd), ids), _lag1(r.npde, ids)
    print(f"lag-1 correlation within subjects: pd {r_pd:.3f}, npde {r_npde:.3f}")
    assert r_pd > 0.3 and abs(r_npde) < 0.15
    tab = r.table()
    assert list(tab) == ["ID", "TIME", "DV", "EPRED", "PD", "NPDE", "CENS"]
    np.testing.assert_array_equal(tab["TIME"], np.concatenate([s.times for s in data.subjects]))


def test_npde_see_a_clearance_twice_too_large(true_model):
    model, data, x = true_model
    wrong = x.copy()
    wrong[1] += np.log(2.0)  # CL doubled: the predictions fall below the observations
    s = pk.npde(model, data, wrong, n_sim=100, seed=1).summary()
    print("npde, CL doubled:", {k: round(v, 4) for k, v in s.items()})
    assert s["mean"] > 0.5 and s["p_mean"] < 1e-6 and s["p_global"] < 1e-6


def _two_subjects():
    """The IV model; subject 1 with one sample, subject 2 with three (the last censored
    below 0.05, an LLOQ that it holds as DV); subject 3 with an observation far above and one
    far below anything simulated."""
    model = iv_model()
    dose = [pk.Dose(0.0, 100.0, 0, row=1)]
    subjects = [
        pk.Subject(1, dose, np.array([2.0]), np.array([4.0]), np.array([2])),
        pk.Subject(
            2,
            dose,
            np.array([1.0, 4.0, 30.0]),
            np.array([4.6, 2.9, 0.05]),
            np.array([2, 3, 4]),
            cens=np.array([0.0, 0.0, 1.0]),
        ),  # fmt: skip
        pk.Subject(3, dose, np.array([1.0, 3.0]), np.array([50.0, -40.0]), np.array([2, 3])),
    ]
    return model, pk.EventData(subjects, ())


def test_npde_and_pd_by_hand():
    model, data = _two_subjects()
    x = model.pack()
    K = 400
    r = pk.npde(model, data, x, n_sim=K, seed=7)
    sims = pk.simulate(model, data, x, K, seed=7)  # the replicates npde compares with
    y = np.concatenate([s.dv for s in data.subjects])
    pd = np.clip(np.mean(sims < y, axis=0), 1 / (2 * K), 1 - 1 / (2 * K))
    pd[3] = np.nan  # the censored one
    np.testing.assert_array_equal(r.pd, pd)
    assert r.pd[4] == 1 - 1 / (2 * K) and r.pd[5] == 1 / (2 * K)  # the edges
    np.testing.assert_allclose(r.epred, sims.mean(axis=0), rtol=1e-12)
    # one observation: npde = Phi^-1(pd)
    assert r.npde[0] == pytest.approx(ndtri(pd[0]), abs=1e-12)
    # several: decorrelated by the inverse Cholesky factor of the simulations' covariance
    for rows in ([1, 2], [4, 5]):
        S = sims[:, rows]
        E, W = S.mean(axis=0), np.linalg.inv(np.linalg.cholesky(np.cov(S.T)))
        yd, Sd = W @ (y[rows] - E), (S - E) @ W.T
        want = ndtri(np.clip(np.mean(Sd < yd, axis=0), 1 / (2 * K), 1 - 1 / (2 * K)))
        np.testing.assert_allclose(r.npde[rows], want, rtol=1e-12)
    assert np.isnan(r.npde[3]) and r.n_censored == 1 and r.cens[3] == 1
    assert list(r.id) == [1, 2, 2, 2, 3, 3]
    fig = r.plot()
    assert len(fig.axes) == 3
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="at least 3 finite npde"):
        pk.npde(model, pk.EventData(data.subjects[:1], ()), x, n_sim=10).summary()


def test_npde_refuse_bad_input():
    model, data = _two_subjects()
    x = model.pack()
    for bad in (0, 1, 2.5, True, "100", 3):  # 3: not above subject 2's three samples
        with pytest.raises(ValueError, match="n_sim must"):
            pk.npde(model, data, x, n_sim=bad)
    with pytest.raises(ValueError, match="x must have shape"):
        pk.npde(model, data, x[:-1], n_sim=10)
    with pytest.raises(ValueError, match="must be finite"):
        pk.npde(model, data, np.full_like(x, np.nan), n_sim=10)
    s = data.subjects[0]
    nan_dv = pk.EventData([replace(s, dv=np.array([np.nan]))], ())
    with pytest.raises(ValueError, match="subject ID 1: an observation"):
        pk.npde(model, nan_dv, x, n_sim=10)


# --- prediction-corrected VPC -------------------------------------------------------------


def test_prediction_corrected_vpc_against_numpy():
    import matplotlib.pyplot as plt

    model = iv_model()  # one compartment, IV bolus: PRED = D / V exp(-CL / V t)
    times = np.array([0.5, 1.0, 2.0, 4.0, 6.0, 8.0])
    doses = [100.0, 300.0, 50.0, 200.0]
    subjects = [
        pk.Subject(i + 1, [pk.Dose(0.0, d, 0, row=1)], times.copy(), np.zeros(6), np.arange(6))
        for i, d in enumerate(doses)
    ]
    data = pk.EventData(subjects, ())
    x = model.pack()
    dv = pk.simulate(model, data, x, 1, seed=11)[0]
    data = pk.EventData([replace(s, dv=dv[6 * i : 6 * i + 6]) for i, s in enumerate(subjects)], ())
    edges = [0.0, 1.5, 5.0, 8.0]
    v = pk.vpc(model, data, x, n_sim=60, bins=edges, seed=3, prediction_corrected=True, lloq=0.5)
    # the correction by hand: closed-form PRED, bin medians, the same simulated replicates
    cl, vol = 3.0, 20.0
    pred = np.concatenate([d / vol * np.exp(-cl / vol * times) for d in doses])
    t = np.tile(times, 4)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, 2)
    med = np.array([np.median(pred[which == b]) for b in range(3)])
    factor = med[which] / pred
    np.testing.assert_allclose(v.dv, dv * factor, rtol=1e-6)
    np.testing.assert_allclose(v.lloq, 0.5 * factor, rtol=1e-6)
    sims = pk.simulate(model, data, x, 60, seed=3) * factor
    low_obs = dv < 0.5
    for b in range(3):
        sel = which == b
        obs = np.where(low_obs, 0.5 * factor, dv * factor)[sel]
        want = np.percentile(obs, [5, 50, 95])
        want[want <= np.max(0.5 * factor[sel])] = np.nan
        np.testing.assert_allclose(v.observed[b], want, rtol=1e-6)
        s = sims[:, sel]
        s = np.where(s < 0.5 * factor[sel], 0.5 * factor[sel], s)
        per = np.percentile(s, [5, 50, 95], axis=1).T
        want = np.median(per, axis=0)
        want[want <= np.max(0.5 * factor[sel])] = np.nan
        np.testing.assert_allclose(v.simulated_median[b], want, rtol=1e-6)
        frac = np.mean(sims[:, sel] < 0.5 * factor[sel], axis=1)
        assert v.simulated_below_median[b] == pytest.approx(np.median(frac))
    assert v.prediction_corrected and v.n_excluded == 0
    # the doses' spread is gone from the corrected observations
    plain = pk.vpc(model, data, x, n_sim=60, bins=edges, seed=3)
    assert not plain.prediction_corrected
    width = lambda w: np.nanmean(w.simulated_median[:, 2] - w.simulated_median[:, 0])  # noqa: E731
    assert width(v) < 0.5 * width(plain)
    ax = v.plot()
    assert ax.get_ylabel() == "prediction-corrected DV"
    assert ax.get_title() == "prediction-corrected VPC"
    assert plain.plot().get_ylabel() == "DV"
    plt.close("all")


def test_prediction_corrected_vpc_leaves_out_zero_predictions(theoph_fit):
    model, data, res = theoph_fit
    with pytest.warns(UserWarning, match="12 observation"):
        v = pk.vpc(model, data, res, n_sim=20, bins=5, prediction_corrected=True)
    # the samples at time 0, before the oral dose reaches the central compartment
    assert v.n_excluded == 12 and v.dv.size == data.n_obs - 12 and np.all(v.times > 0)
    assert np.all(np.isfinite(v.observed))


# --- bootstrap ----------------------------------------------------------------------------


def test_bootstrap_of_theophylline(theoph_fit):
    model, data, res = theoph_fit
    b = pk.bootstrap(model, data, res, n=5, seed=0)
    N = len(data)
    # the resamples: subjects drawn with replacement, one after the other from the seed
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(b.subjects, [rng.integers(0, N, N) for _ in range(5)])
    assert b.n == 5 and b.n_failed + b.n_unconverged + int(np.sum(b.status == "ok")) == 5
    print(
        f"Theophylline bootstrap (n=5): {b.seconds / 5:.2f} s per resample, status "
        f"{list(b.status)}, CL {np.exp(b.low[1]):.3f}..{np.exp(b.high[1]):.3f} L/h"
    )
    assert b.success_rate == np.mean(b.status == "ok") and b.used.sum() >= 4
    # the reported parameters of each refit: theta, omega variances, sd
    p = model.p
    np.testing.assert_array_equal(b.estimates[:, :p], b.x[:, :p])
    np.testing.assert_allclose(b.estimates[:, p : p + 3], np.exp(2 * b.x[:, p : p + 3]))
    np.testing.assert_allclose(b.estimates[:, -1], np.exp(b.x[:, -1]))
    assert b.names == ["tka", "tcl", "tv", "omega(eta_ka)", "omega(eta_cl)", "omega(eta_v)", "add"]
    np.testing.assert_allclose(b.original, [*res.x[:3], *np.diag(res.omega), res.sd["add"]])
    # percentile intervals, median and SE of the used resamples
    e = b.estimates[b.used]
    np.testing.assert_allclose(b.low, np.percentile(e, 2.5, axis=0), rtol=1e-14)
    np.testing.assert_allclose(b.high, np.percentile(e, 97.5, axis=0), rtol=1e-14)
    np.testing.assert_allclose(b.median, np.median(e, axis=0), rtol=1e-14)
    np.testing.assert_allclose(b.se, np.std(e, axis=0, ddof=1), rtol=1e-14)
    assert b.table()["tcl"] == (b.original[1], b.median[1], b.low[1], b.high[1], b.se[1])
    # each refit is a fit of its resample: its OFV at its estimates
    k = int(np.flatnonzero(b.used)[0])
    resample = pk.EventData(
        [replace(data.subjects[i], id=j + 1) for j, i in enumerate(b.subjects[k])], data.covariates
    )
    obj = pk.PopulationObjective(model, resample)
    assert obj.value(b.x[k]) == pytest.approx(b.ofv[k], abs=1e-4)
    assert b.ofv[k] != pytest.approx(res.ofv, abs=1.0)  # not the original data's
    # on an executor: the same resamples and the same bits (the first two of seed 0)
    with ThreadPoolExecutor(2) as pool:
        b2 = pk.bootstrap(model, data, res, n=2, seed=0, executor=pool)
    np.testing.assert_array_equal(b2.subjects, b.subjects[:2])
    np.testing.assert_array_equal(b2.x, b.x[:2])
    fig = b.plot()
    assert len([a for a in fig.axes if a.get_visible()]) == 7
    matplotlib.pyplot.close(fig)


def test_bootstrap_counts_unconverged_and_failed_refits(theoph_fit, capsys, monkeypatch):
    import scichains._fit_report

    model, data, res = theoph_fit
    # one iteration: every refit ends unconverged, counted and left out of the summaries
    monkeypatch.setattr(scichains._fit_report, "_use_tqdm", lambda progress: False)
    b = pk.bootstrap(model, data, res, n=2, seed=1, maxiter=1, progress=True)
    assert "bootstrap: 2/2  failed 0  unconverged 2\n" in capsys.readouterr().err
    assert list(b.status) == ["unconverged"] * 2 and b.n_unconverged == 2
    assert b.success_rate == 0.0 and not np.any(b.used) and np.all(np.isnan(b.low))
    assert all("iteration" in m or "maxiter" in m.lower() for m in b.messages), b.messages
    b = pk.bootstrap(model, data, res, n=2, seed=1, maxiter=1, include_unconverged=True)
    assert np.all(b.used) and np.all(np.isfinite(b.high))
    # a start whose parameters overflow: every refit fails numerically, counted with why
    x = res.x.copy()
    x[1] = 800.0  # CL = exp(800)
    b = pk.bootstrap(model, data, x, n=3, seed=1)
    assert b.n_failed == 3 and np.all(np.isnan(b.x)) and np.all(np.isnan(b.ofv))
    assert "cannot be evaluated at the starting point" in b.messages[0]
    assert np.isnan(b.fit.ofv)  # given estimates, not a fit
    # an error that is not numerical is raised, not counted
    with pytest.raises(ValueError, match="fix names 'nothing'"):
        pk.bootstrap(model, data, res, n=1, fix=["nothing"])


def test_bootstrap_without_a_fit_fits_the_data_first():
    model = oral_model()
    data = theoph_subset(4)
    # the fit to the data is the user's: its warning is not silenced (the refits' are)
    with pytest.warns(pk.FitWarning, match="did not converge"):
        b = pk.bootstrap(model, data, n=2, seed=0, maxiter=2, method="laplace")
    assert b.fit.method == "laplace" and b.fit.n_evaluations > 1 and not b.fit.success
    np.testing.assert_allclose(
        b.original, [*b.fit.x[:3], *np.diag(b.fit.omega), b.fit.sd["add"]], rtol=1e-15
    )
    assert list(b.status) == ["unconverged"] * 2


def test_bootstrap_stratified(theoph_fit):
    model, data, res = theoph_fit
    group = [i % 3 == 0 for i in range(len(data))]  # 4 subjects in one group, 8 in the other
    subjects = [
        replace(s, covariates={**s.covariates, "GRP": float(g)})
        for s, g in zip(data.subjects, group)
    ]
    strat = pk.EventData(subjects, (*data.covariates, "GRP"))
    b = pk.bootstrap(model, strat, res, n=3, seed=2, stratify="grp", maxiter=1)
    g = np.array(group)
    for picks in b.subjects:
        assert np.sum(g[picks]) == 4  # each resample keeps the groups' sizes
        assert np.all(g[picks[:8]] == False) and np.all(g[picks[8:]])  # noqa: E712


def test_bootstrap_refuses_bad_input(theoph_fit):
    model, data, res = theoph_fit
    for n in (0, -3, 2.5, True, "5"):
        with pytest.raises(ValueError, match="n must be a whole number"):
            pk.bootstrap(model, data, res, n=n)
    for level in (0.0, 1.0, 95):
        with pytest.raises(ValueError, match="level must be in"):
            pk.bootstrap(model, data, res, n=2, level=level)
    with pytest.raises(ValueError, match="unknown option.*tolerance"):
        pk.bootstrap(model, data, res, n=2, tolerance=1e-3)
    with pytest.raises(ValueError, match="not a covariate"):
        pk.bootstrap(model, data, res, n=2, stratify="SEX")
    with pytest.raises(TypeError, match="submit"):
        pk.bootstrap(model, data, res, n=2, executor=object())
    with pytest.raises(ValueError, match="finite values"):
        pk.bootstrap(model, data, res.x[:-1], n=2)
    with pytest.raises(ValueError, match="finite values"):
        pk.bootstrap(model, data, np.full(model.size, np.nan), n=2)
    with pytest.raises(ValueError, match="no subjects"):
        pk.bootstrap(model, pk.EventData([], ()), res, n=2)
    held = replace(res, fixed=("tka",))
    with pytest.raises(ValueError, match="pass the same fix="):
        pk.bootstrap(model, data, held, n=2)


@pytest.mark.slow
def test_bootstrap_on_worker_processes_gives_the_same_bits(theoph_fit):
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    model, data, res = theoph_fit
    t = time.perf_counter()
    serial = pk.bootstrap(model, data, res, n=6, seed=3)
    t_serial = time.perf_counter() - t
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        t = time.perf_counter()
        par = pk.bootstrap(model, data, res, n=6, seed=3, executor=pool)
        t_par = time.perf_counter() - t
    np.testing.assert_array_equal(par.x, serial.x)
    np.testing.assert_array_equal(par.ofv, serial.ofv)
    assert list(par.status) == list(serial.status)
    print(f"6 resamples: {t_serial:.1f} s in process, {t_par:.1f} s on 2 worker processes")
