"""STLSQ and the library: exact recovery from clean data, robustness to small noise."""

import numpy as np
import pytest

from scichains.discovery import PolynomialLibrary, sparse_regression, stlsq


def test_library_features_and_names():
    lib = PolynomialLibrary(degree=2, sin=True)
    X = np.array([[2.0, 3.0], [0.5, -1.0]])
    Th = lib(X)
    names = lib.names(["x", "y"])
    assert names == ["1", "x", "y", "x^2", "x*y", "y^2", "sin(x)", "sin(y)", "cos(x)", "cos(y)"]
    np.testing.assert_allclose(
        Th[0], [1, 2, 3, 4, 6, 9, np.sin(2), np.sin(3), np.cos(2), np.cos(3)]
    )
    assert len(PolynomialLibrary(3).names(["x", "y"])) == 10  # 1 + 2 + 3 + 4


def _lv_derivatives(X):
    x, y = X[:, 0], X[:, 1]
    return np.stack([1.3 * x - 0.9 * x * y, 0.8 * x * y - 1.8 * y], axis=1)


def test_exact_recovery_of_a_polynomial_system_from_clean_derivatives():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.2, 3.0, (200, 2))
    Y = _lv_derivatives(X)
    lib = PolynomialLibrary(degree=3, sin=True)
    fit = sparse_regression(X, Y, lib, input_names=["x", "y"], target_names=["dx", "dy"])
    names = fit.feature_names
    expect = np.zeros((len(names), 2))
    expect[names.index("x"), 0] = 1.3
    expect[names.index("x*y"), 0] = -0.9
    expect[names.index("x*y"), 1] = 0.8
    expect[names.index("y"), 1] = -1.8
    np.testing.assert_allclose(fit.coefficients, expect, atol=1e-10)
    assert fit.equations()[0] == "dx = +1.3 x -0.9 x*y"


def test_small_noise_keeps_the_support():
    rng = np.random.default_rng(1)
    X = rng.uniform(0.2, 3.0, (400, 2))
    Y = _lv_derivatives(X) + 1e-3 * rng.standard_normal((400, 2))
    fit = sparse_regression(X, Y, PolynomialLibrary(degree=3))
    assert np.count_nonzero(fit.coefficients) == 4
    names = fit.feature_names
    assert fit.coefficients[names.index("x0*x1"), 0] == pytest.approx(-0.9, rel=1e-2)


def test_stlsq_threshold_zeroes_small_terms():
    rng = np.random.default_rng(2)
    Th = rng.standard_normal((100, 5))
    Y = Th @ np.array([2.0, 0.0, 0.05, -1.0, 0.0])
    Xi = stlsq(Th, Y, threshold=0.1)
    np.testing.assert_allclose(Xi[:, 0], [2.0, 0.0, 0.0, -1.0, 0.0], atol=0.1)
    assert np.count_nonzero(Xi) == 2
    with pytest.raises(ValueError, match="same rows"):
        stlsq(Th, Y[:10], 0.1)
    with pytest.raises(ValueError, match="finite"):
        stlsq(Th * np.nan, Y, 0.1)


def test_a_coefficient_equal_to_the_threshold_is_kept():
    # the docstring: coefficients *smaller* than the threshold are zeroed. Unit columns make
    # every least-squares fit exact, so the middle coefficient equals the threshold to the
    # bit in every round (a `<=` in place of `<` zeroes it)
    Theta = np.eye(5)[:, :3]
    Y = np.array([0.25, 0.5, 1.0, 0.0, 0.0])
    free = stlsq(Theta, Y, 0.0)[:, 0]
    assert free[1] == 0.5
    Xi = stlsq(Theta, Y, threshold=free[1])[:, 0]
    np.testing.assert_array_equal(Xi, [0.0, 0.5, 1.0])
    Xi = stlsq(Theta, Y, threshold=np.nextafter(0.5, 1.0))[:, 0]
    np.testing.assert_array_equal(Xi, [0.0, 0.0, 1.0])
