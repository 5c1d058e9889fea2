"""Collocation (two-stage) fitting: the loss against a plain numpy implementation, its
gradient against central differences (a symbolic model and a small UDE with a network), the
Lotka-Volterra parameters recovered from clean samples, and the error messages."""

import numpy as np
import pytest
import sympy as sp
from scipy.integrate import solve_ivp

import scichains as sc
from scichains.discovery import CollocationObjective, collocate
from scichains.ode import NetworkTerm, ODEProblem, SymbolicModel

ALPHA, BETA, GAMMA, DELTA = 1.3, 0.9, 0.8, 1.8  # examples/lotka_volterra_ude.py
U0 = [0.44249296, 4.6280594]
x, y = sp.symbols("x y")
a, b, c, d = sp.symbols("alpha beta gamma delta")


def _lv(t):
    def rhs(_, u):
        return [ALPHA * u[0] - BETA * u[0] * u[1], GAMMA * u[0] * u[1] - DELTA * u[1]]

    return solve_ivp(rhs, (t[0], t[-1]), U0, t_eval=t, rtol=1e-11, atol=1e-12).y.T


def _lv_model():
    return SymbolicModel([x, y], [a, b, c, d], [a * x - b * x * y, c * x * y - d * y])


@pytest.fixture(scope="module")
def lv_problem():
    m = _lv_model()
    return m.problem(np.array(U0), (0.0, 3.0), m.pack(alpha=1.0, beta=1.0, gamma=1.0, delta=1.0))


def _central(fun, p, h=1e-6):
    g = np.empty_like(p)
    for k in range(p.size):
        e = np.zeros_like(p)
        e[k] = h
        g[k] = (fun(p + e) - fun(p - e)) / (2 * h)
    return g


def test_value_is_the_weighted_sum_of_squared_residuals(lv_problem):
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 3.0, 31)
    X = _lv(t) + 0.01 * rng.standard_normal((31, 2))
    dX = rng.standard_normal((31, 2))
    w = np.array([0.5, 2.0])
    obj = CollocationObjective(lv_problem, t, X, dX, weights=w)
    p = np.array([1.1, 0.7, 0.9, 1.5])
    al, be, ga, de = p
    F = np.stack(
        [al * X[:, 0] - be * X[:, 0] * X[:, 1], ga * X[:, 0] * X[:, 1] - de * X[:, 1]], axis=1
    )
    expected = float(np.sum(w * (F - dX) ** 2))
    assert obj.value(p) == pytest.approx(expected, rel=1e-13)
    value, g = obj.value_and_grad(p)
    assert value == pytest.approx(expected, rel=1e-13)
    # the gradient of the quadratic in closed form: dL/dp = sum 2 w r * dF/dp
    r = 2 * w * (F - dX)
    closed = np.array(
        [
            np.sum(r[:, 0] * X[:, 0]),
            -np.sum(r[:, 0] * X[:, 0] * X[:, 1]),
            np.sum(r[:, 1] * X[:, 0] * X[:, 1]),
            -np.sum(r[:, 1] * X[:, 1]),
        ]
    )
    np.testing.assert_allclose(g, closed, rtol=1e-12)
    # normalize: w_j = 1 / mean(dX_j^2)
    objn = CollocationObjective(lv_problem, t, X, dX, normalize=True)
    wn = 1 / np.mean(dX**2, axis=0)
    assert objn.value(p) == pytest.approx(float(np.sum(wn * (F - dX) ** 2)), rel=1e-13)


def test_gradient_of_a_symbolic_model_against_central_differences(lv_problem):
    t = np.linspace(0.0, 3.0, 31)
    obj = CollocationObjective(lv_problem, t, _lv(t) * 1.02)  # spline derivatives
    p = np.array([1.1, 0.7, 0.9, 1.5])
    value, g = obj.value_and_grad(p)
    np.testing.assert_allclose(g, _central(obj.value, p), rtol=1e-7, atol=1e-7 * np.abs(g).max())
    g2 = obj.value_and_grad(p)[1]
    assert g2 is not g  # a new array each call, the caller's
    np.testing.assert_array_equal(g, g2)


def test_gradient_through_a_network_term_against_central_differences():
    chain = sc.SimpleChain(2, sc.Dense(4, "tanh"), sc.Dense(2))
    U = NetworkTerm(chain, [x, y])
    model = SymbolicModel([x, y], [a], [a * x + U[0], -DELTA * y + U[1]], network=U)
    p = model.pack(network=chain.init_params(seed=3, dtype=np.float64), alpha=1.2)
    prob = model.problem(np.array(U0), (0.0, 3.0), p)
    t = np.linspace(0.0, 3.0, 31)
    obj = CollocationObjective(prob, t, _lv(t), method="savgol")
    value, g = obj.value_and_grad(p)
    assert np.isfinite(value) and g.shape == p.shape
    np.testing.assert_allclose(g, _central(obj.value, p), rtol=1e-6, atol=1e-6 * np.abs(g).max())


def test_clean_lotka_volterra_parameters_recovered(lv_problem):
    # 101 clean samples on [0, 10]: the spline's derivatives are accurate to ~1e-3, and the
    # collocation fit recovers alpha..delta to within 1%
    t = np.linspace(0.0, 10.0, 101)
    p = collocate(lv_problem, t, _lv(t), np.ones(4))
    np.testing.assert_allclose(p, [ALPHA, BETA, GAMMA, DELTA], rtol=1e-2)


def test_bad_input(lv_problem):
    t = np.linspace(0.0, 3.0, 31)
    X = _lv(t)
    with pytest.raises(ValueError, match="shape"):
        CollocationObjective(lv_problem, t, X[:, :1])
    with pytest.raises(ValueError, match="shape"):
        CollocationObjective(lv_problem, t[:-1], X)
    with pytest.raises(ValueError, match="shape"):
        CollocationObjective(lv_problem, t, X, X[:-1])
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        CollocationObjective(lv_problem, t, bad)
    with pytest.raises(ValueError, match="NaN"):
        CollocationObjective(lv_problem, t, X, bad)
    with pytest.raises(ValueError, match="increasing"):
        CollocationObjective(lv_problem, t[::-1], X)
    with pytest.raises(ValueError, match="unknown method"):
        CollocationObjective(lv_problem, t, X, method="magic")
    with pytest.raises(TypeError, match="options"):
        CollocationObjective(lv_problem, t, X, window=5)
    with pytest.raises(ValueError, match="weights"):
        CollocationObjective(lv_problem, t, X, weights=[1.0, -1.0])
    with pytest.raises(TypeError, match="ODEProblem"):
        CollocationObjective(object(), t, X)
    obj = CollocationObjective(lv_problem, t, X)
    with pytest.raises(ValueError, match="4 entries"):
        obj.value(np.ones(3))
    with pytest.raises(ValueError, match="NaN|finite"):
        obj.value(np.array([1.0, np.nan, 1.0, 1.0]))

    with pytest.raises(ValueError, match="p0"):
        collocate(lv_problem, t, X, np.ones(3))

    def python_rhs(du, u, p, t):
        du[:] = -u

    with pytest.raises(TypeError, match="compiled"):
        CollocationObjective(ODEProblem(python_rhs, np.array(U0), (0.0, 1.0)), t, X)
