"""Exact derivatives of a plain compiled right-hand side (the complex step), checked against
central differences and against SymbolicModel's generated ones."""

import math

import numba
import numpy as np
import pytest
import sympy as sp

from scichains import Dense, SimpleChain, nn
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


@numba.njit
def _saturation(x, k):
    return k * x / (1.0 + x)


@numba.njit
def forced_chain(du, u, p, t):
    """Loops, a helper @njit function, numpy scratch, math of u, p and t: traceable."""
    n = u.shape[0]
    flux = np.empty(n)
    for i in range(n):
        flux[i] = _saturation(u[i], p[i])
    du[0] = p[n] * (1.0 + 0.5 * math.sin(0.7 * t)) - flux[0]
    for i in range(1, n):
        du[i] = flux[i - 1] - flux[i] + 0.01 * math.exp(-u[i]) * np.tanh(p[n] * u[i - 1])
    du[n - 1] -= max(0.1, 0.2) * u[n - 1] ** 2  # max of plain numbers is fine


def _chain_problem(n=6):
    u0 = np.linspace(0.5, 1.5, n)
    p = np.r_[np.linspace(1.0, 2.0, n), 0.8]
    return ODEProblem(forced_chain, u0, (0.0, 2.0), p)


def test_traceable_code_gets_the_traced_vjp():
    prob = ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 5.0), [1.5, 1.0, 1.0, 3.0])
    assert prob.derivatives == "none"
    prob.ensure_vjp()
    assert prob.derivatives == "traced"
    prob = _chain_problem()
    prob.ensure_vjp()
    assert prob.derivatives == "traced"
    for scale in (1.0, 0.3, 2.0):
        r = check_vjp(prob, u=prob.u0 * scale, t=1.3, rtol=1e-8)
        assert r.ok, r


def test_value_dependent_code_falls_back_to_the_complex_step():
    prob = ODEProblem(branchy, [0.2, 0.7], (0.0, 1.0), [0.8, 1.3])
    prob.ensure_vjp()
    assert prob.derivatives == "complex step"

    @numba.njit
    def absolute(du, u, p, t):
        du[0] = -p[0] * abs(u[0])

    prob = ODEProblem(absolute, [1.0], (0.0, 1.0), [0.5])
    prob.ensure_vjp()
    assert prob.derivatives == "complex step"
    assert check_vjp(prob, u=[-0.7], rtol=1e-8).ok


def test_traced_and_complex_step_gradients_agree():
    ts = np.linspace(0.0, 2.0, 9)
    data = np.ones((9, 6))
    kw = dict(rtol=1e-10, atol=1e-12)
    grads = []
    for method in ("auto", "complex step"):
        prob = _chain_problem()
        prob.ensure_vjp(method=method)
        grads.append(gradient(prob, SquaredError(data), ts, **kw))
    assert grads[0][0] == grads[1][0]  # same forward solve: the user's own function
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-11)
    np.testing.assert_allclose(grads[0][2], grads[1][2], rtol=1e-11)
    with pytest.raises(ValueError, match="method must be"):
        _chain_problem().ensure_vjp(method="dual")


def test_trace_limits():
    from scichains.ode.derivatives._trace import NotTraceable, trace_rhs

    with pytest.raises(NotTraceable, match="states"):
        trace_rhs(lotka_volterra, 1000, 4)

    @numba.njit
    def forgets(du, u, p, t):
        du[0] = -u[0]

    with pytest.raises(NotTraceable, match=r"du\[1\] was not written"):
        trace_rhs(forgets, 2, 0)

    @numba.njit
    def branch(du, u, p, t):
        du[0] = -u[0] if u[0] > 0.0 else u[0]

    with pytest.raises(NotTraceable):
        trace_rhs(branch, 1, 0)


def test_cvode_gets_the_exact_jacobian_of_a_plain_compiled_rhs():
    from scichains.ode import CVODE_BDF, solve

    @numba.njit
    def robertson(du, u, p, t):
        du[0] = -p[0] * u[0] + p[1] * u[1] * u[2]
        du[1] = p[0] * u[0] - p[1] * u[1] * u[2] - p[2] * u[1] ** 2
        du[2] = p[2] * u[1] ** 2

    p = [0.04, 1e4, 3e7]
    prob = ODEProblem(robertson, [1.0, 0.0, 0.0], (0.0, 40.0), p)
    sol = solve(prob, CVODE_BDF(), saveat=[40.0], rtol=1e-8, atol=1e-10)
    assert prob.derivatives == "traced"
    ref = solve(
        ODEProblem(robertson, [1.0, 0.0, 0.0], (0.0, 40.0), p),
        CVODE_BDF(jacobian=False),
        saveat=[40.0],
        rtol=1e-8,
        atol=1e-10,
    )
    np.testing.assert_allclose(sol.u, ref.u, rtol=1e-5, atol=1e-9)
    assert sol.u[0, 0] == pytest.approx(0.7158, abs=1e-4)  # the classic value at t = 40

    @numba.njit
    def floors(du, u, p, t):
        du[0] = -math.floor(u[0]) * p[0]

    prob = ODEProblem(floors, [1.5], (0.0, 1.0), [1.0])
    assert solve(prob, CVODE_BDF(), saveat=[1.0]).success  # "auto": difference quotients
    with pytest.raises(TypeError, match="no automatic derivative"):
        solve(ODEProblem(floors, [1.5], (0.0, 1.0), [1.0]), CVODE_BDF(jacobian=True))


CHAIN = None


def _chain():
    global CHAIN
    if CHAIN is None:
        from scichains import Dense, SimpleChain

        CHAIN = SimpleChain(2, Dense(5, "tanh"), Dense(2))
    return CHAIN


@numba.njit
def lv_ude(du, u, p, t, k):
    """Known decay terms plus a network of (x, y/2); its parameters are p[2:]."""
    x = np.empty(2)
    out = np.empty(2)
    x[0] = u[0]
    x[1] = 0.5 * u[1]
    nn.chain_forward(k, p[2:], x, out)
    du[0] = p[0] * u[0] + out[0]
    du[1] = -p[1] * u[1] + out[1] * u[0] * math.exp(-0.1 * t)


def test_network_calling_rhs_is_traced_and_matches_symbolic_model():
    from scichains.ode import NetworkTerm

    chain = _chain()
    p = np.r_[1.3, 1.8, chain.init_params(seed=0, dtype=np.float64)]
    prob = ODEProblem(lv_ude, [0.44, 4.6], (0.0, 3.0), p, kernel=chain.kernel(np.float64))
    prob.ensure_vjp()
    assert prob.derivatives == "traced"
    for u in ([1.0, 2.0], [0.2, 5.0]):
        r = check_vjp(prob, u=u, t=0.7, rtol=1e-8)
        assert r.ok, r
    x, y, a, d, t = sp.symbols("x y a d t")
    term = NetworkTerm(chain, [x, y / 2])
    model = SymbolicModel(
        [x, y], [a, d], [a * x + term[0], -d * y + term[1] * x * sp.exp(-t / 10)], term, t=t
    )
    ts = np.linspace(0.0, 3.0, 11)
    data = np.ones((11, 2))
    kw = dict(rtol=1e-10, atol=1e-12)
    ref = gradient(model.problem([0.44, 4.6], (0.0, 3.0), p), SquaredError(data), ts, **kw)
    got = gradient(prob, SquaredError(data), ts, **kw)
    assert got[0] == pytest.approx(ref[0], rel=1e-12)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-9)


def test_network_calling_rhs_that_cannot_be_traced_is_refused_clearly():
    chain = SimpleChain(1, Dense(1))

    @numba.njit
    def net(du, u, p, t, k):
        nn.chain_forward(k, p, u, du)

    prob = ODEProblem(
        net, [1.0], (0.0, 1.0), chain.init_params(dtype=np.float64), kernel=chain.kernel(np.float64)
    )
    prob.ensure_vjp()  # du = chain(u): traced
    assert check_vjp(prob, rtol=1e-8).ok

    @numba.njit
    def clipped(du, u, p, t, k):
        nn.chain_forward(k, p, u, du)
        if u[0] > 2.0:
            du[0] = 0.0

    prob = ODEProblem(
        clipped,
        [1.0],
        (0.0, 1.0),
        chain.init_params(dtype=np.float64),
        kernel=chain.kernel(np.float64),
    )
    with pytest.raises(ValueError, match="network-calling right-hand side: tracing it failed"):
        Objective(prob, SquaredError(np.zeros((1, 1))), [1.0])
