"""Exact derivatives of a plain compiled right-hand side (the complex step), checked against
central differences and against SymbolicModel's generated ones."""

import math

import numba
import numpy as np
import pytest
import sympy as sp

from scichains.adjoint import Objective, SquaredError, check_vjp, gradient
from scichains.ode import ODEProblem, SymbolicModel


@numba.njit
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = p[2] * u[0] * u[1] - p[3] * u[1]


@numba.njit
def branchy(du, u, p, t):
    """Branches on values, abs, min/max, math and numpy functions."""
    if u[0] < 0.5:
        du[0] = math.exp(-p[0] * u[0]) * math.sqrt(u[1] * u[1] + 1.0)
    else:
        du[0] = np.tanh(p[0] * u[0]) - abs(u[1] - 0.3)
    du[1] = max(u[0], 0.2) * p[1] - np.maximum(u[1], 0.1) * math.sin(t) + np.abs(u[0] - 1.0)


def test_plain_rhs_gets_an_exact_vjp():
    prob = ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 5.0), [1.5, 1.0, 1.0, 3.0])
    assert prob.vjp is None
    prob.ensure_vjp()
    assert prob.automatic_vjp
    for u in ([1.0, 1.0], [0.3, 2.5], [4.0, 0.1]):
        r = check_vjp(prob, u=u, rtol=1e-8)
        assert r.ok, r


@pytest.mark.parametrize("u", [[0.25, 0.7], [0.9, 0.15], [1.7, -0.4]])
def test_branches_abs_min_max_take_the_derivative_of_the_branch_taken(u):
    # u0 on the kink of max(u[0], 0.2): the construction's check looks nearby too
    prob = ODEProblem(branchy, [0.2, 0.7], (0.0, 1.0), [0.8, 1.3])
    prob.ensure_vjp()
    r = check_vjp(prob, u=u, t=0.4, rtol=1e-7)
    assert r.ok, r


def test_gradient_matches_symbolic_model():
    x, y, a, b, c, d = sp.symbols("x y a b c d")
    model = SymbolicModel([x, y], [a, b, c, d], [a * x - b * x * y, c * x * y - d * y])
    p = np.array([1.5, 1.0, 1.0, 3.0])
    ts = np.linspace(0.0, 5.0, 11)
    data = np.full((11, 2), 1.0)
    kw = dict(rtol=1e-10, atol=1e-12)
    ref = gradient(model.problem(np.ones(2), (0.0, 5.0), p), SquaredError(data), ts, **kw)
    got = gradient(
        ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 5.0), p), SquaredError(data), ts, **kw
    )
    assert got[0] == pytest.approx(ref[0], rel=1e-10)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-8)
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-8)


def test_what_the_complex_step_cannot_do_is_refused_clearly():
    @numba.njit
    def floors(du, u, p, t):
        du[0] = math.floor(u[0]) * p[0]

    with pytest.raises(TypeError, match="no automatic derivative"):
        ODEProblem(floors, [1.5], (0.0, 1.0), [1.0]).ensure_vjp()

    from scichains import Dense, SimpleChain, nn

    chain = SimpleChain(1, Dense(1))

    @numba.njit
    def net(du, u, p, t, k):
        nn.chain_forward(k, p, u, du)

    prob = ODEProblem(
        net, [1.0], (0.0, 1.0), chain.init_params(dtype=np.float64), kernel=chain.kernel(np.float64)
    )
    with pytest.raises(ValueError, match="network-calling"):
        Objective(prob, SquaredError(np.zeros((1, 1))), [1.0])
