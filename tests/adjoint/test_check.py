"""check_vjp / check_gradient: hand-written derivatives against central differences."""

import numba
import numpy as np
import pytest

from scichains.adjoint import Objective, SquaredError, check_gradient, check_vjp
from scichains.ode import ODEProblem


@numba.njit
def sir(du, u, p, t):
    s, i = u[0], u[1]
    du[0] = -p[0] * s * i
    du[1] = p[0] * s * i - p[1] * i
    du[2] = p[1] * i


@numba.njit
def sir_vjp(v, u, p, t, ubar, pbar):
    s, i = u[0], u[1]
    a = v[1] - v[0]
    ubar[0] = a * p[0] * i
    ubar[1] = a * p[0] * s + (v[2] - v[1]) * p[1]
    ubar[2] = 0.0
    pbar[0] = a * s * i
    pbar[1] = (v[2] - v[1]) * i


@numba.njit
def sir_vjp_wrong(v, u, p, t, ubar, pbar):
    sir_vjp(v, u, p, t, ubar, pbar)
    pbar[1] = 0.0  # a forgotten term


@numba.njit
def zeros_vjp(v, u, p, t, ubar, pbar):
    ubar[:] = 0.0
    pbar[:] = 0.0


U0, P = np.array([0.9, 0.1, 0.0]), np.array([0.5, 0.25])


def test_a_correct_vjp_agrees():
    r = check_vjp(ODEProblem(sir, U0, (0.0, 10.0), P, vjp=sir_vjp))
    assert r.ok and r.rel_error < 1e-8
    assert "agrees" in repr(r)


@pytest.mark.parametrize("vjp, worst", [(sir_vjp_wrong, "dp[1]"), (zeros_vjp, None)])
def test_a_wrong_vjp_is_reported_with_its_worst_entry(vjp, worst):
    r = check_vjp(ODEProblem(sir, U0, (0.0, 10.0), P, vjp=vjp), u=[0.7, 0.2, 0.1])
    assert not r.ok and "DISAGREES" in repr(r)
    if worst:
        assert r.worst == worst
        assert r.analytic[4] == 0.0 and abs(r.numeric[4]) > 0.1


def test_check_gradient_of_an_objective():
    ts = np.linspace(1.0, 10.0, 10)
    data = np.full((10, 3), 0.3)
    obj = Objective(
        ODEProblem(sir, U0, (0.0, 10.0), P, vjp=sir_vjp),
        SquaredError(data),
        ts,
        rtol=1e-10,
        atol=1e-12,
    )
    assert check_gradient(obj.value_and_grad, P, rtol=1e-5).ok
    wrong = Objective(
        ODEProblem(sir, U0, (0.0, 10.0), P, vjp=sir_vjp_wrong),
        SquaredError(data),
        ts,
        rtol=1e-10,
        atol=1e-12,
    )
    r = check_gradient(wrong.value_and_grad, P)
    assert not r.ok and r.worst == "dx[1]"


@numba.njit
def chain_rhs(du, u, p, t):
    """A -> B -> (out), rates p[0], p[1] per second, a fraction p[2] of A becomes B."""
    du[0] = -p[0] * u[0]
    du[1] = p[2] * p[0] * u[0] - p[1] * u[1]


@numba.njit
def chain_vjp(v, u, p, t, ubar, pbar):
    ubar[0] = -p[0] * v[0] + p[2] * p[0] * v[1]
    ubar[1] = -p[1] * v[1]
    pbar[0] = -u[0] * v[0] + p[2] * u[0] * v[1]
    pbar[1] = -u[1] * v[1]
    pbar[2] = p[0] * u[0] * v[1]


def _chain_case():
    """Rates of 5e-4 and 8e-5 per second beside a fraction of 0.6, observed over 8 hours:
    the objective at tight tolerances, the point and the exact gradient of the closed-form
    loss (by the complex step)."""
    u0, ts = np.array([10.0, 0.0]), np.linspace(600.0, 28800.0, 24)

    def exact(q):
        k1, k2, f = q
        a = u0[0] * np.exp(-k1 * ts)
        b = f * k1 * u0[0] / (k2 - k1) * (np.exp(-k1 * ts) - np.exp(-k2 * ts))
        return np.stack([a, b], axis=1)

    rng = np.random.default_rng(0)
    data = exact(np.array([4e-4, 1e-4, 0.7])) * (1 + 0.05 * rng.standard_normal((24, 2)))
    p = np.array([5e-4, 8e-5, 0.6])
    g_exact = np.array(
        [np.sum((exact(p + 1e-30j * e) - data) ** 2).imag / 1e-30 for e in np.eye(3)]
    )
    prob = ODEProblem(chain_rhs, u0, (0.0, 28800.0), p, vjp=chain_vjp)
    obj = Objective(prob, SquaredError(data), ts, rtol=1e-10, atol=1e-12)
    return obj, p, g_exact


def test_check_gradient_with_parameters_of_very_different_scales():
    """A correct gradient agrees (the default step of 1e-6 absolute was 1e-2 of the slow rate
    times the 8 hours: 'DISAGREES ... relative 0.0035'); each entry's error estimate is
    reported; an entry 1e-3 off (relative) is still found, whichever it is."""
    obj, p, g_exact = _chain_case()
    g = obj.value_and_grad(p)[1]
    np.testing.assert_allclose(g, g_exact, rtol=1e-9)  # the gradient is right
    r = check_gradient(obj.value_and_grad, p)
    assert r.ok and r.verdict == "agrees", r
    np.testing.assert_allclose(r.numeric, g_exact, rtol=1e-7)
    # the estimates: small against the tolerance, and about the size of the actual error
    assert np.all(r.error_estimate < 1e-6 * np.abs(r.numeric))
    assert np.all(np.abs(r.numeric - g) < 10 * r.error_estimate + 1e-9 * np.abs(g))
    assert np.all(r.steps < 1e-3 * p) and np.all(r.rounding > 0)
    assert "agrees" in repr(r) and "truncation" in repr(r) and "rounding" in repr(r)
    for j in range(3):
        wrong = np.ones(3)
        wrong[j] += 1e-3

        def off(q, wrong=wrong):
            value, grad, du0 = obj.value_and_grad(q)
            return value, grad * wrong, du0

        r = check_gradient(off, p)
        assert not r.ok and r.verdict == "DISAGREES" and r.worst == f"dx[{j}]", r
        assert r.rel_error == pytest.approx(1e-3, rel=1e-3)
        assert "DISAGREES" in repr(r)


def test_check_gradient_says_when_the_differences_cannot_tell():
    """A value known to 7 digits (float32) cannot resolve rtol=1e-5 at any step: neither
    'agrees' nor 'DISAGREES'."""
    x = np.array([1.3, -0.7])
    r = check_gradient(lambda q: (float(np.float32(q @ q)), 2 * q), x)
    assert not r.ok and r.verdict == "UNRESOLVED", r
    assert "UNRESOLVED" in repr(r)
    assert r.error_estimate[r.worst_index] > 1e-5 * abs(r.numeric[r.worst_index])
    # an exactly constant value: a zero gradient agrees, a non-zero one does not
    assert check_gradient(lambda q: (1.0, np.zeros(2)), x).ok
    assert not check_gradient(lambda q: (1.0, np.array([0.0, 1e-3])), x).ok


def test_bad_input():
    with pytest.raises(ValueError, match="no vjp"):
        check_vjp(ODEProblem(sir, U0, (0.0, 1.0), P))
    with pytest.raises(ValueError, match="shape"):
        check_vjp(ODEProblem(sir, U0, (0.0, 1.0), P, vjp=sir_vjp), v=[1.0])
    with pytest.raises(TypeError, match="real"):
        check_gradient(lambda x: (0.0, x), np.array([1j]))
    with pytest.raises(ValueError, match="eps"):
        check_gradient(lambda x: (0.0, x), np.array([1.0]), eps=0.0)


def test_default_sensitivity_method():
    """The fastest method that is exact for the problem: the discrete adjoint with explicit RK
    methods, CVODE's interpolating adjoint with CVODE."""
    import scichains as sc
    from scichains.adjoint import DiscreteAdjoint, InterpolatingAdjoint
    from scichains.models import NeuralODE
    from scichains.ode import CVODE_BDF

    ts = np.linspace(1.0, 10.0, 10)
    prob = ODEProblem(sir, U0, (0.0, 10.0), P, vjp=sir_vjp)
    data = np.zeros((10, 3))
    assert isinstance(Objective(prob, SquaredError(data), ts).sensealg, DiscreteAdjoint)
    cv = Objective(prob, SquaredError(data), ts, solver=CVODE_BDF())
    assert isinstance(cv.sensealg, InterpolatingAdjoint)
    chain = sc.SimpleChain(2, sc.Dense(2))
    assert isinstance(NeuralODE(chain, (0.0, 1.0), [1.0]).sensealg, DiscreteAdjoint)


def test_huber_loss_value_gradient_and_robustness():
    from scichains.adjoint import HuberLoss

    ts = np.linspace(1.0, 10.0, 10)
    prob = ODEProblem(sir, U0, (0.0, 10.0), P, vjp=sir_vjp)
    data = np.zeros((10, 3))
    data[4, 1] = 50.0  # an outlier
    w = np.broadcast_to([0.0, 1.0, 1.0], data.shape)
    huber = Objective(prob, HuberLoss(data, delta=0.5, weights=w), ts, rtol=1e-10, atol=1e-12)
    assert check_gradient(huber.value_and_grad, P, rtol=1e-5).ok
    # small residuals count as squares, the outlier linearly
    r = np.array([[0.1, -0.2], [0.7, -3.0]])
    loss = HuberLoss(np.zeros((2, 2)), delta=0.5)
    g = np.zeros((2, 2))
    value = loss.value_and_grad(None, r, g)
    assert value == pytest.approx(0.01 + 0.04 + (0.7 - 0.25) + (3.0 - 0.25))
    np.testing.assert_allclose(g, [[0.2, -0.4], [1.0, -1.0]])
    with pytest.raises(ValueError, match="delta"):
        HuberLoss(np.zeros((2, 2)), delta=0.0)
    one = HuberLoss(np.ones((3, 2, 2)), delta=0.5).trajectory(1)  # for MultiObjective
    assert isinstance(one, HuberLoss) and one.delta == 0.5 and one.data.shape == (2, 2)
