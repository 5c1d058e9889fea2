"""Covariance step, shrinkage and residuals against nlmixr2's published Theophylline fit."""

import numpy as np
import pytest

from scichains import pk

from .models import oral_model, theoph_subset

# nlmixr2 FOCEi fits of the same model and data (see test_fit.py):
# - covariance "r,s" (sandwich), printed in nlmixr2save's saveFit example,
#   https://nlmixr2.github.io/nlmixr2save/reference/saveFit.html (repository
#   nlmixr2/nlmixr2save, reference/saveFit.md): SE tka 0.1954, tcl 0.07555, tv 0.04289,
#   add.sd 0.09264; Shrink(SD)% 1.893, 3.873, 10.31; the first rows of its table (ID 1):
#   TIME 0, 0.25, 0.57: PRED 0, 3.27, 5.83; WRES 1.07, -0.227, 0.295; IPRED 0, 3.85, 6.79;
#   IWRES 1.07, -1.45, -0.310; CPRED 0, 3.22, 5.78; CWRES 1.07, -0.179, 0.286
# - covariance "analytic" (the Hessian, R^-1 in our terms), printed in the nlmixr2 vignette
#   "Modifying nlmixr2 models by piping": SE tka 0.1911, tcl 0.08366, tv 0.04654,
#   add.sd 0.04951; Shrink(SD)% 1.421, 3.968, 10.28
SE_RS = np.array([0.1954, 0.07555, 0.04289, 0.09264])
SE_R = np.array([0.1911, 0.08366, 0.04654, 0.04951])
SHRINK = np.array([1.893, 3.873, 10.31])
TABLE = {
    "PRED": [0.0, 3.27, 5.83],
    "WRES": [1.07, -0.227, 0.295],
    "IPRED": [0.0, 3.85, 6.79],
    "IWRES": [1.07, -1.45, -0.310],
    "CPRED": [0.0, 3.22, 5.78],
    "CWRES": [1.07, -0.179, 0.286],
}


def test_standard_errors_match_nlmixr2(theoph_fit):
    model, data, res = theoph_fit
    rs = pk.covariance(model, data, res)
    np.testing.assert_allclose([*rs.se_theta, *rs.se_sd], SE_RS, rtol=0.05)
    r = pk.covariance(model, data, res, kind="r")
    np.testing.assert_allclose([*r.se_theta, *r.se_sd], SE_R, rtol=0.02)
    np.testing.assert_allclose(r.rse_theta, 100 * r.se_theta / np.abs(list(res.theta.values())))
    assert rs.names[:3] == ["tka", "tcl", "tv"]
    assert rs.se_omega.shape == (3, 3) and np.all(np.diag(rs.se_omega) > 0)
    with pytest.raises(ValueError, match="kind must be"):
        pk.covariance(model, data, res, kind="rs")


def test_r_is_half_the_hessian_of_the_ofv_and_s_sums_the_scores():
    model = oral_model()
    data = theoph_subset(4)
    x = model.pack(theta=[0.4, 1.0, 3.5], omega=[0.4, 0.07, 0.02])
    cov = pk.covariance(model, data, x, kind="r")
    obj = pk.PopulationObjective(model, data)
    h = 1e-3
    n = x.size
    H = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            ea, eb = np.eye(n)[a] * h, np.eye(n)[b] * h
            H[a, b] = (
                obj.value(x + ea + eb)
                - obj.value(x + ea - eb)
                - obj.value(x - ea + eb)
                + obj.value(x - ea - eb)
            ) / (4 * h * h)
    np.testing.assert_allclose(cov.R, 0.5 * H, rtol=1e-3, atol=1e-3)
    _, gi = obj.per_subject(x, grad=True)
    np.testing.assert_allclose(cov.S, 0.25 * gi.T @ gi, rtol=1e-6)
    np.testing.assert_allclose(gi.sum(axis=0), obj.value_and_grad(x)[1], rtol=1e-10)


def test_shrinkage_matches_nlmixr2(theoph_fit):
    _, _, res = theoph_fit
    np.testing.assert_allclose(pk.shrinkage(res), SHRINK, atol=1.0)


def test_residual_table_matches_nlmixr2(theoph_fit):
    model, data, res = theoph_fit
    tab = pk.residuals(model, data, res)
    assert len(tab["ID"]) == 132 and set(tab) >= set(TABLE)
    for key, ref in TABLE.items():
        np.testing.assert_allclose(tab[key][:3], ref, atol=0.012, rtol=0.01, err_msg=key)
    np.testing.assert_allclose(tab["RES"], tab["DV"] - tab["PRED"])
    # decorrelated: per subject, the squares sum to the quadratic form r^T C^-1 r
    dec = pk.residuals(model, data, res, decorrelate=True)
    m = data.subjects[0].n_obs
    obj = pk.PopulationObjective(model, data)
    theta, om, sd = model.unpack(res.x)
    f, G, *_ = obj._predict(0, theta, res.etas[0])
    C = G @ om @ G.T + sd[0] ** 2 * np.eye(m)
    r = data.subjects[0].dv - (f - G @ res.etas[0])
    assert np.sum(dec["CWRES"][:m] ** 2) == pytest.approx(r @ np.linalg.solve(C, r), rel=1e-8)
