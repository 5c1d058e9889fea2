"""SR3 beside STLSQ: its fixed point checked in NumPy, closed forms on an orthonormal design,
recovery of Lotka-Volterra's terms through the regressions that take ``optimizer=``, and the
error messages."""

import numpy as np
import pytest

from scichains.discovery import (
    SR3,
    PolynomialLibrary,
    ensemble_sparse_regression,
    sparse_regression,
    sr3,
    weak_sparse_regression,
)

from .test_ensemble import _lv_derivatives
from .test_weak import _lv, _support


def _orthonormal(m=50, nf=6, seed=0):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((m, nf)))
    return q


def test_the_result_is_a_fixed_point_of_the_alternation():
    rng = np.random.default_rng(3)
    Theta = rng.standard_normal((80, 7))
    Y = Theta @ np.array([[1.5, 0.0], [0.0, -2.0], [0.05, 0.0], [0, 0], [0, 0.7], [0, 0], [0, 0]])
    Y = Y + 0.01 * rng.standard_normal(Y.shape)
    nu, thr = 0.5, 0.2
    for kind in ("l0", "l1"):
        W = sr3(Theta, Y, thr, nu=nu, thresholder=kind, unbias=False, tol=1e-14)
        xi = np.linalg.solve(Theta.T @ Theta + np.eye(7) / nu, Theta.T @ Y + W / nu)
        prox = (
            np.where(np.abs(xi) > thr, xi, 0.0)
            if kind == "l0"
            else np.sign(xi) * np.maximum(np.abs(xi) - thr, 0.0)
        )
        np.testing.assert_allclose(W, prox, atol=1e-12)
        assert np.count_nonzero(W) == 3  # the small 0.05 term is cut


def test_closed_forms_on_an_orthonormal_design():
    """With Theta^T Theta = I the fixed points are explicit: l1 soft-thresholds b = Theta^T y
    at threshold (1 + 1/nu); l0 keeps b where it exceeds threshold (1 + 1/nu) (the ridge
    start, b / (1 + 1/nu), is then above the threshold) and zeroes it below threshold."""
    Q = _orthonormal()
    b = np.array([3.0, -2.0, 0.4, -0.3, 1.2, 0.01])
    y = Q @ b
    nu, thr = 2.0, 0.5
    w1 = sr3(Q, y, thr, nu=nu, thresholder="l1", unbias=False, tol=1e-15)[:, 0]
    scale = thr * (1 + 1 / nu)
    np.testing.assert_allclose(w1, np.sign(b) * np.maximum(np.abs(b) - scale, 0.0), atol=1e-12)
    w0 = sr3(Q, y, thr, nu=nu, thresholder="l0", unbias=False, tol=1e-15)[:, 0]
    np.testing.assert_allclose(w0, np.where(np.abs(b) > 1.0, b, 0.0), atol=1e-12)
    # unbiased: least squares on the kept columns, which on this design is b there
    wu = sr3(Q, y, thr, nu=nu, thresholder="l1")[:, 0]
    np.testing.assert_allclose(wu, np.where(np.abs(b) > scale, b, 0.0), atol=1e-12)


def test_lotka_volterra_terms_through_the_regressions():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.2, 3.0, (200, 2))
    Y = _lv_derivatives(X) + 0.02 * rng.standard_normal((200, 2))
    lib = PolynomialLibrary(2)
    ref = sparse_regression(X, Y, lib, input_names=["x", "y"])
    for opt in ("sr3", SR3(nu=0.1), SR3(thresholder="l1")):
        fit = sparse_regression(X, Y, lib, input_names=["x", "y"], optimizer=opt)
        want = _support(fit.feature_names)
        np.testing.assert_array_equal(fit.coefficients != 0, want)
        np.testing.assert_allclose(fit.coefficients, ref.coefficients, atol=1e-12)  # unbiased
    t = np.linspace(0.0, 10.0, 101)
    clean = _lv(t)
    noisy = clean + 0.05 * clean.std(axis=0) * rng.standard_normal(clean.shape)
    weak = weak_sparse_regression(t, noisy, lib, input_names=["x", "y"], optimizer="sr3")
    np.testing.assert_array_equal(weak.coefficients != 0, _support(weak.feature_names))
    bag = ensemble_sparse_regression(
        X, Y, lib, n_models=10, optimizer="sr3", input_names=["x", "y"]
    )
    assert bag.inclusion[_support(bag.feature_names)].min() == 1.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(thresholder="l2"), "thresholder must be 'l0' or 'l1'"),
        (dict(nu=0.0), "nu must be a positive number"),
        (dict(max_iter=0), "max_iter must be a positive integer"),
    ],
)
def test_bad_settings_are_named(kwargs, match):
    Q = _orthonormal()
    with pytest.raises(ValueError, match=match):
        sr3(Q, Q[:, 0], 0.1, **kwargs)
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        sr3(Q, Q[:, 0], np.nan)
    with pytest.raises(ValueError, match="same rows"):
        sr3(Q, Q[:-1, 0], 0.1)
    with pytest.raises(ValueError, match="optimizer must be 'stlsq', 'sr3' or an SR3"):
        sparse_regression(Q[:, :2], Q[:, 0], PolynomialLibrary(1), optimizer="lasso")
