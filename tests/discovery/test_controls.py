"""Control inputs in the libraries (SINDYc): a forced system whose equations mix states and a
measured input, recovered from derivatives, in weak form and by bagging; the names and the
error messages."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from scichains.discovery import (
    PolynomialLibrary,
    ensemble_sparse_regression,
    sparse_regression,
    weak_sparse_regression,
)


def u_of(t):
    return np.sin(1.3 * t) + 0.5 * np.cos(0.4 * t)


def rhs(t, z):
    x, y = z
    u = u_of(t)
    return [-0.5 * x + 2.0 * u, x - 0.8 * y + 1.5 * x * u]


def _data(t):
    sol = solve_ivp(rhs, (t[0], t[-1]), [1.0, -0.5], t_eval=t, rtol=1e-11, atol=1e-12)
    return sol.y.T, u_of(t)


TRUE = {("x'", "x"): -0.5, ("x'", "u"): 2.0, ("y'", "x"): 1.0, ("y'", "y"): -0.8}
TRUE[("y'", "x*u")] = 1.5


def _check(fit):
    assert fit.feature_names == ["1", "x", "y", "u", "x^2", "x*y", "x*u", "y^2", "y*u", "u^2"]
    want = np.zeros_like(fit.coefficients)
    for (target, term), c in TRUE.items():
        want[fit.feature_names.index(term), fit.target_names.index(target)] = c
    np.testing.assert_array_equal(fit.coefficients != 0, want != 0)
    return want


def test_strong_and_weak_form_recover_the_forced_system():
    t = np.linspace(0.0, 20.0, 401)
    X, u = _data(t)
    dX = np.array([rhs(ti, xi) for ti, xi in zip(t, X)])
    lib = PolynomialLibrary(2)
    names = dict(input_names=["x", "y"], control_names=["u"], target_names=["x'", "y'"])
    fit = sparse_regression(X, dX, lib, u=u, **names)
    want = _check(fit)
    np.testing.assert_allclose(fit.coefficients, want, atol=1e-8)
    assert str(fit.to_sympy()[0]).replace(" ", "") in ("2.0*u-0.5*x", "-0.5*x+2.0*u")
    weak = weak_sparse_regression(t, X, lib, u=u, input_names=["x", "y"], control_names=["u"])
    want = _check(weak)
    np.testing.assert_allclose(weak.coefficients, want, atol=2e-3)
    # without the input the forced system has no sparse description: the fit is not the truth
    blind = weak_sparse_regression(t, X, lib, input_names=["x", "y"])
    assert "u" not in blind.feature_names
    # several trajectories: lists of times, samples and inputs
    t2 = np.linspace(0.0, 12.0, 241)
    X2, u2 = _data(t2)
    both = weak_sparse_regression(
        [t, t2], [X, X2], lib, u=[u, u2], input_names=["x", "y"], control_names=["u"]
    )
    _check(both)
    bag = ensemble_sparse_regression(
        X, dX, lib, u=u, n_models=10, input_names=["x", "y"], control_names=["u"]
    )
    assert bag.inclusion[want != 0].min() == 1.0 and bag.inclusion[want == 0].max() == 0.0


def test_control_inputs_checked():
    t = np.linspace(0.0, 5.0, 51)
    X, u = _data(t)
    lib = PolynomialLibrary(1)
    with pytest.raises(ValueError, match="one row per sample"):
        sparse_regression(X, X, lib, u=u[:-1])
    with pytest.raises(ValueError, match="u contains NaN"):
        sparse_regression(X, X, lib, u=np.where(t > 1, np.nan, u))
    with pytest.raises(ValueError, match="control_names has 2 names for 1 control"):
        sparse_regression(X, X, lib, u=u, control_names=["a", "b"])
    with pytest.raises(ValueError, match="control_names without u"):
        weak_sparse_regression(t, X, lib, control_names=["a"])
    with pytest.raises(ValueError, match="one row per sample"):
        weak_sparse_regression(t, X, lib, u=u[:-2])
    fit = sparse_regression(X, X, lib, u=np.c_[u, 2 * u + 1])
    assert fit.feature_names == ["1", "x0", "x1", "u0", "u1"]
