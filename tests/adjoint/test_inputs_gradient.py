"""Gradients of problems with measured inputs (ODEProblem(inputs=)): with respect to p and
u0, the inputs being data; against central differences of the closed-form solution."""

import numba
import numpy as np
import pytest
from ode._forced import SIGNAL, TS, convolution, forced

from scichains import ode
from scichains.adjoint import (
    BacksolveAdjoint,
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    QuadratureAdjoint,
    SquaredError,
    gradient,
)

SAVE = np.linspace(0.0, 10.0, 41)
DATA = 0.5 * np.cos(0.7 * SAVE)[:, None]
TIGHT = dict(rtol=1e-12, atol=1e-14)


@numba.njit
def forced_vjp(v, u, p, t, x, ubar, pbar):
    ubar[0] = -p[0] * v[0]
    pbar[0] = -u[0] * v[0]


def exact_loss(k, x0):
    """sum((x(SAVE) - DATA)^2) from the closed-form convolution (u linear between samples)."""
    return float(np.sum((convolution(k, x0, TS, SIGNAL, "linear", SAVE) - DATA[:, 0]) ** 2))


def central(fn, x, h=1e-6):
    return (fn(x + h) - fn(x - h)) / (2 * h)


K, X0 = 0.7, 1.0
DK = central(lambda k: exact_loss(k, X0), K)
DX0 = central(lambda x0: exact_loss(K, x0), X0)


def problem(vjp=None):
    u = ode.Interpolation(TS, SIGNAL)
    return ode.ODEProblem(forced, np.array([X0]), (0.0, 10.0), np.array([K]), inputs=u, vjp=vjp)


@pytest.mark.parametrize(
    "sensealg",
    [None, DiscreteAdjoint(), InterpolatingAdjoint(), QuadratureAdjoint(), ForwardSensitivity()],
    ids=["default", "discrete", "interpolating", "quadrature", "forward"],
)
def test_gradient_with_respect_to_k_matches_central_differences(sensealg):
    kw = {} if sensealg is None else {"sensealg": sensealg}
    prob = problem()
    value, dp, du0 = gradient(prob, SquaredError(DATA), SAVE, solver=ode.Tsit5(), **kw, **TIGHT)
    assert value == pytest.approx(exact_loss(K, X0), rel=1e-9)
    assert abs(dp[0] - DK) < 1e-6
    assert abs(du0[0] - DX0) < 1e-6
    assert prob.derivatives == "traced"  # x entered as data, the rest differentiated exactly


@pytest.mark.slow
@pytest.mark.parametrize(
    "solver, sensealg",
    [
        (ode.Tsit5(), InterpolatingAdjoint(checkpointing=True)),
        (ode.CVODE_BDF(), InterpolatingAdjoint()),
    ],
    ids=["checkpointed", "cvode"],
)
def test_checkpointed_and_cvode_gradients(solver, sensealg):
    value, dp, du0 = gradient(
        problem(), SquaredError(DATA), SAVE, solver=solver, sensealg=sensealg, **TIGHT
    )
    assert abs(dp[0] - DK) < 1e-5
    assert abs(du0[0] - DX0) < 1e-5


def test_gradient_with_a_constant_input():
    def loss(k, x0):
        x = convolution(k, x0, TS, SIGNAL, "constant", SAVE)
        return float(np.sum((x - DATA[:, 0]) ** 2))

    u = ode.Interpolation(TS, SIGNAL, kind="constant")
    prob = ode.ODEProblem(forced, np.array([X0]), (0.0, 10.0), np.array([K]), inputs=u)
    value, dp, du0 = gradient(prob, SquaredError(DATA), SAVE, solver=ode.Tsit5(), **TIGHT)
    assert abs(dp[0] - central(lambda k: loss(k, X0), K)) < 1e-6
    assert abs(du0[0] - central(lambda x0: loss(K, x0), X0)) < 1e-6


@pytest.mark.slow
def test_backsolve_gradient():
    value, dp, du0 = gradient(
        problem(), SquaredError(DATA), SAVE, sensealg=BacksolveAdjoint(), **TIGHT
    )
    assert abs(dp[0] - DK) < 1e-6
    assert abs(du0[0] - DX0) < 1e-6


def test_rodas5p_discrete_adjoint():
    value, dp, du0 = gradient(
        problem(),
        SquaredError(DATA),
        SAVE,
        solver=ode.Rodas5P(),
        sensealg=DiscreteAdjoint(),
        **TIGHT,
    )
    assert abs(dp[0] - DK) < 1e-6
    assert abs(du0[0] - DX0) < 1e-6


def test_a_hand_written_vjp_with_inputs_gives_the_same_gradient():
    hand = gradient(problem(vjp=forced_vjp), SquaredError(DATA), SAVE, **TIGHT)
    auto = gradient(problem(), SquaredError(DATA), SAVE, **TIGHT)
    np.testing.assert_allclose(hand[1], auto[1], rtol=1e-10)
    np.testing.assert_allclose(hand[2], auto[2], rtol=1e-10)
    assert abs(hand[1][0] - DK) < 1e-6


@numba.njit
def branchy(du, u, p, t, x):
    if x[0] > 0.0:  # value-dependent: no tracing, the complex step instead
        du[0] = -p[0] * u[0] + x[0]
    else:
        du[0] = -p[0] * u[0] + x[0]


def test_the_complex_step_vjp_also_treats_inputs_as_data():
    u = ode.Interpolation(TS, SIGNAL)
    prob = ode.ODEProblem(branchy, np.array([X0]), (0.0, 10.0), np.array([K]), inputs=u)
    value, dp, du0 = gradient(prob, SquaredError(DATA), SAVE, solver=ode.Tsit5(), **TIGHT)
    assert prob.derivatives == "complex step"
    assert abs(dp[0] - DK) < 1e-6
    assert abs(du0[0] - DX0) < 1e-6
