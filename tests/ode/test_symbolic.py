"""SymbolicModel: generated right-hand sides and vjps against independent references."""

import numpy as np
import pytest
import sympy as sp

from scichains import Dense, SimpleChain
from scichains.ode import NetworkTerm, SymbolicModel, solve

x, y = sp.symbols("x y")
alpha, beta, gamma, delta = sp.symbols("alpha beta gamma delta")


def _lv():
    return SymbolicModel(
        [x, y], [alpha, beta, gamma, delta], [alpha * x - beta * x * y, gamma * x * y - delta * y]
    )


def _jacobians_by_differences(model, u, p, t, k, h=1e-6):
    """(df/du, df/dp) by central differences of the generated right-hand side."""
    n = u.size
    f = model.rhs
    Ju = np.zeros((n, n))
    Jp = np.zeros((n, p.size))
    du1, du2 = np.zeros(n), np.zeros(n)
    for j in range(n):
        e = np.zeros(n)
        e[j] = h
        f(du1, u + e, p, t, k)
        f(du2, u - e, p, t, k)
        Ju[:, j] = (du1 - du2) / (2 * h)
    for j in range(p.size):
        e = np.zeros(p.size)
        e[j] = h
        f(du1, u, p + e, t, k)
        f(du2, u, p - e, t, k)
        Jp[:, j] = (du1 - du2) / (2 * h)
    return Ju, Jp


def test_rhs_matches_the_equations():
    model = _lv()
    p = model.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
    du = np.zeros(2)
    model.rhs(du, np.array([2.0, 3.0]), p, 0.0, model.kernel())
    assert du == pytest.approx([1.3 * 2 - 0.9 * 6, 0.8 * 6 - 1.8 * 3], rel=1e-14)


def test_vjp_is_the_exact_transposed_jacobian():
    model = _lv()
    p = model.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
    u = np.array([0.7, 1.9])
    k = model.kernel()
    v = np.array([0.3, -1.1])
    ubar, pbar = np.zeros(2), np.zeros(4)
    model.vjp(v, u, p, 0.0, k, ubar, pbar)
    # analytic Jacobians of Lotka-Volterra, written out independently
    Ju = np.array([[1.3 - 0.9 * u[1], -0.9 * u[0]], [0.8 * u[1], 0.8 * u[0] - 1.8]])
    Jp = np.array([[u[0], -u[0] * u[1], 0, 0], [0, 0, u[0] * u[1], -u[1]]])
    np.testing.assert_allclose(ubar, v @ Ju, rtol=1e-14)
    np.testing.assert_allclose(pbar, v @ Jp, rtol=1e-14)


def test_network_term_vjp_matches_finite_differences():
    chain = SimpleChain(2, Dense(5, "rbf"), Dense(5, "tanh"), Dense(2))
    # inputs that mix states, parameters and time
    t = sp.Symbol("t")
    U = NetworkTerm(chain, [x * alpha, y + sp.sin(t)])
    model = SymbolicModel(
        [x, y], [alpha, delta], [alpha * x + U[0] * y, -delta * y + U[1] ** 2], network=U, t=t
    )
    w = chain.init_params(seed=4, dtype=np.float64)
    p = model.pack(alpha=1.3, delta=1.8, network=w)
    assert p.size == 2 + chain.num_params
    views = model.views(p)
    assert views["alpha"][0] == 1.3 and np.shares_memory(views["U"], p)
    u, tt, k = np.array([0.6, 1.4]), 0.37, model.kernel()
    Ju, Jp = _jacobians_by_differences(model, u, p, tt, k)
    v = np.array([0.8, -0.45])
    ubar, pbar = np.zeros(2), np.zeros(p.size)
    model.vjp(v, u, p, tt, k, ubar, pbar)
    np.testing.assert_allclose(ubar, v @ Ju, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(pbar, v @ Jp, rtol=1e-6, atol=1e-8)
    # and the right-hand side agrees with the chain evaluated from Python
    du = np.zeros(2)
    model.rhs(du, u, p, tt, k)
    out = chain(np.array([u[0] * 1.3, u[1] + np.sin(tt)]), w)
    np.testing.assert_allclose(du, [1.3 * u[0] + out[0] * u[1], -1.8 * u[1] + out[1] ** 2])


def test_max_in_the_physics_is_differentiated_exactly():
    c, vc = sp.symbols("c vc")
    model = SymbolicModel([c], [vc], [-(sp.Max(c / vc, 0) ** 1.5)])
    p = model.pack(vc=2.0)
    k = model.kernel()
    for cval, slope in [(3.0, -1.5 * (1.5**0.5) / 2.0), (-3.0, 0.0)]:
        ubar, pbar = np.zeros(1), np.zeros(1)
        model.vjp(np.array([1.0]), np.array([cval]), p, 0.0, k, ubar, pbar)
        assert ubar[0] == pytest.approx(slope, rel=1e-13, abs=1e-300)


def test_solve_a_symbolic_problem_against_the_closed_form():
    a = sp.Symbol("a")
    model = SymbolicModel([x], [a], [-a * x])
    prob = model.problem([2.0], (0.0, 1.0), model.pack(a=0.7))
    sol = solve(prob, saveat=[0.5, 1.0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sol.u[:, 0], 2.0 * np.exp(-0.7 * np.array([0.5, 1.0])), rtol=1e-9)


def test_bad_models_raise_clear_errors():
    z = sp.Symbol("z")
    with pytest.raises(ValueError, match="neither states"):
        SymbolicModel([x], [alpha], [alpha * z])
    with pytest.raises(ValueError, match="2 states but 1 equations"):
        SymbolicModel([x, y], [alpha], [alpha * x])
    with pytest.raises(ValueError, match="used twice"):
        SymbolicModel([x], [x], [x])
    model = _lv()
    with pytest.raises(ValueError, match="missing parameter values"):
        model.pack(alpha=1.0)
    with pytest.raises(ValueError, match="unknown parameters"):
        model.pack(alpha=1, beta=1, gamma=1, delta=1, eps=2)
    with pytest.raises(ValueError, match="u0 must have shape"):
        model.problem([1.0, 2.0, 3.0], (0, 1), model.pack(alpha=1, beta=1, gamma=1, delta=1))
    with pytest.raises(ValueError, match="input expressions"):
        NetworkTerm(SimpleChain(3, Dense(2)), [x, y])


def test_vjp_false_defers_the_vjp_to_its_first_use():
    from scichains.ode.ensemble._spec import FunctionRef

    chain = SimpleChain(2, Dense(3, "tanh"), Dense(1))
    U = NetworkTerm(chain, [x, alpha * y])
    model = SymbolicModel([x, y], [alpha], [-alpha * x * U[0], x - y**2], network=U, vjp=False)
    assert not model.has_vjp and "def _vjp" not in model.source
    p = model.pack(alpha=0.7, network=chain.init_params(seed=2, dtype=np.float64))
    prob = model.problem([1.0, 0.5], (0.0, 1.0), p)
    assert prob.vjp is None and not model.has_vjp  # a forward solve never generates it
    sol = solve(prob, saveat=[1.0])
    assert sol.u.shape == (1, 2) and np.all(np.isfinite(sol.u))
    # generated on first use, in a module of its own, and exact
    u, k, v = np.array([0.6, -1.3]), model.kernel(), np.array([0.4, 1.7])
    ubar, pbar = np.zeros(2), np.zeros(p.size)
    model.vjp(v, u, p, 0.0, k, ubar, pbar)
    assert model.has_vjp and "def _f" not in model.vjp_source
    Ju, Jp = _jacobians_by_differences(model, u, p, 0.0, k)
    np.testing.assert_allclose(ubar, v @ Ju, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(pbar, v @ Jp, rtol=1e-6, atol=1e-8)
    assert model.problem([1.0, 0.5], (0.0, 1.0), p, vjp=True).vjp is model.vjp
    assert FunctionRef(model.vjp).kind == "generated"  # it travels to workers as source
    with pytest.raises(TypeError, match="vjp must be True or False"):
        SymbolicModel([x], [alpha], [-alpha * x], vjp="no")


def test_llvm_codegen_and_intermediates_match_the_equations():
    a, b, t = sp.symbols("a b t")
    q1, q2 = sp.symbols("q1 q2")
    inter = [(q1, sp.tanh(x * y) / (1 + y**2)), (q2, sp.exp(-b * t) * q1 + a**b)]
    eqs = [
        a * q1 - q2 * sp.sqrt(x**2 + 1) + x**-3,
        sp.log(1 + sp.exp(x)) * y ** sp.Rational(3, 2) - q2 * sp.Abs(y) + sp.sin(t) * sp.cos(x),
    ]
    full = {q1: inter[0][1]}
    full[q2] = inter[1][1].xreplace(full)
    ref = sp.lambdify([x, y, a, b, t], [e.xreplace(full) for e in eqs])
    u, p, tt = np.array([0.7, 1.3]), np.array([0.4, 1.9]), 0.3
    for codegen in ("numba", "llvm"):
        model = SymbolicModel(
            [x, y], [a, b], eqs, t=t, vjp=False, rhs_codegen=codegen, intermediates=inter
        )
        assert model.rhs_codegen == codegen
        assert ("_PROGRAM" in model.source) == (codegen == "llvm")
        du = np.zeros(2)
        model.rhs(du, u, p, tt, model.kernel())
        np.testing.assert_allclose(du, ref(*u, *p, tt), rtol=1e-14)
    # the vjp differentiates through the intermediates
    k, v = model.kernel(), np.array([0.3, -0.8])
    ubar, pbar = np.zeros(2), np.zeros(2)
    model.vjp(v, u, p, tt, k, ubar, pbar)
    Ju, Jp = _jacobians_by_differences(model, u, p, tt, k)
    np.testing.assert_allclose(ubar, v @ Ju, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(pbar, v @ Jp, rtol=1e-7, atol=1e-9)
    assert all(q1 not in e.free_symbols for e in model.equations)


def test_llvm_codegen_falls_back_for_what_it_cannot_express():
    c = sp.Symbol("c")
    model = SymbolicModel([x], [c], [-sp.Max(x - c, 0)], vjp=False, rhs_codegen="llvm")
    assert model.rhs_codegen == "numba"
    du = np.zeros(1)
    model.rhs(du, np.array([2.0]), np.array([0.5]), 0.0, model.kernel())
    assert du[0] == -1.5
    with pytest.raises(ValueError, match="rhs_codegen must be"):
        SymbolicModel([x], [c], [-c * x], rhs_codegen="gcc")
    with pytest.raises(ValueError, match="intermediate q uses symbols"):
        SymbolicModel([x], [c], [-c * x], intermediates=[(sp.Symbol("q"), y)])
    U = NetworkTerm(SimpleChain(1, Dense(1)), [x])
    with pytest.raises(ValueError, match="intermediates are supported for models without"):
        SymbolicModel([x], [], [U[0]], network=U, intermediates=[(sp.Symbol("q"), x)])
