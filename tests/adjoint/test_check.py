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


def test_bad_input():
    with pytest.raises(ValueError, match="no vjp"):
        check_vjp(ODEProblem(sir, U0, (0.0, 1.0), P))
    with pytest.raises(ValueError, match="shape"):
        check_vjp(ODEProblem(sir, U0, (0.0, 1.0), P, vjp=sir_vjp), v=[1.0])
    with pytest.raises(TypeError, match="real"):
        check_gradient(lambda x: (0.0, x), np.array([1j]))


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
