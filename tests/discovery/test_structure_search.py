"""Structure search on data simulated from a known SymbolicModel: the right terms come back,
the discovered structure becomes a SymbolicModel that reproduces the truth, user functions and
SymPy export work."""

import numpy as np
import pytest
import sympy as sp

from scichains import Dense, SimpleChain
from scichains.discovery import (
    CustomLibrary,
    PolynomialLibrary,
    StructureSearch,
    candidate_structures,
    identifiable,
    polynomial_sublibraries,
    sparse_regression,
    ude_samples,
)
from scichains.ode import KenCarp4, NetworkTerm, Rodas5P, SymbolicModel, solve

x, y = sp.symbols("x y")
a, b, c, d = sp.symbols("alpha beta gamma delta")
TRUE = dict(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
U0 = np.array([0.44249296, 4.6280594])
TS = np.linspace(0.0, 3.0, 31)
U1, U2 = sp.symbols("U1 U2")


def _truth():
    return SymbolicModel([x, y], [a, b, c, d], [a * x - b * x * y, c * x * y - d * y])


def _solve_truth(t):
    m = _truth()
    prob = m.problem(U0, (0.0, float(t[-1])), m.pack(**TRUE))
    return solve(prob, saveat=t, rtol=1e-10, atol=1e-12, throw=True).u


@pytest.fixture(scope="module")
def lv():
    clean = _solve_truth(TS)
    rng = np.random.default_rng(0)
    data = clean + 0.01 * clean.mean(axis=0) * rng.standard_normal(clean.shape)
    search = StructureSearch(
        [x, y],
        [1.3 * x + U1, -1.8 * y + U2],
        [U1, U2],
        PolynomialLibrary(2),
        data,
        TS,
        U0,
    )
    # the learned terms as a trained network would give them: the true missing terms on the
    # true trajectory, with a small error
    targets = np.stack([-0.9 * clean[:, 0] * clean[:, 1], 0.8 * clean[:, 0] * clean[:, 1]], 1)
    targets += 0.01 * rng.standard_normal(targets.shape)
    return search, clean, data, targets


def test_search_recovers_the_missing_terms(lv):
    search, clean, data, targets = lv
    result = search.run(clean, targets)
    best = result.best
    names = search.feature_names
    assert {(names[i], j) for i, j in zip(*np.nonzero(best.support))} == {
        ("x*y", 0),
        ("x*y", 1),
    }
    assert best.terms()["U1"]["x*y"] == pytest.approx(-0.9, rel=0.03)
    assert best.terms()["U2"]["x*y"] == pytest.approx(0.8, rel=0.03)
    # the score is the BIC plus the margin per term, from the refit's SSE
    m = data.size
    assert best.score == pytest.approx(m * np.log(best.sse / m) + 2 * np.log(m) + 2 * 2.0)
    assert best.sse == pytest.approx(float(np.sum((best.simulate(TS) - data) ** 2)), rel=1e-6)
    # every candidate scored no better than the selection
    assert all(s.score >= best.score - 1e-9 for s in result.candidates)


def test_stepwise_search_repairs_a_wrong_start(lv):
    """From a candidate with a spurious term and a missing one, the add/drop search on the data
    reaches the true structure."""
    search, clean, data, _ = lv
    names = search.feature_names
    Xi = np.zeros((len(names), 2))
    Xi[names.index("x*y"), 0] = -0.9
    Xi[names.index("y^2"), 1] = 0.05
    Xi[names.index("1"), 1] = 0.1
    start = search.refit(Xi)
    end = search.stepwise(start, search.library_matrix(clean))
    assert {(names[i], j) for i, j in zip(*np.nonzero(end.support))} == {
        ("x*y", 0),
        ("x*y", 1),
    }
    assert end.score < start.score
    assert ("added", "x*y", "U2") in end.moves


def test_to_symbolic_model_round_trip(lv):
    """The discovered structure as a SymbolicModel reproduces the search's own simulation, and
    with the true coefficients the true model's solution, far past the data."""
    search, clean, data, targets = lv
    best = search.run(clean, targets).best
    model, p = best.to_symbolic_model()
    assert [str(s) for s in model.params] == ["U1__x_y", "U2__x_y"]
    t_long = np.linspace(0.0, 20.0, 201)
    own = solve(model.problem(U0, (0.0, 20.0), p), saveat=t_long, rtol=1e-10, atol=1e-12).u
    np.testing.assert_allclose(own, best.simulate(t_long), rtol=1e-5, atol=1e-6)
    exact = solve(
        model.problem(U0, (0.0, 20.0), np.array([-0.9, 0.8])),
        saveat=t_long,
        rtol=1e-10,
        atol=1e-12,
    ).u
    np.testing.assert_allclose(exact, _solve_truth(t_long), rtol=1e-7, atol=1e-8)
    # the SymPy right-hand side, numbers and symbols
    rhs = best.to_sympy()
    assert sp.simplify(rhs[0] - (1.3 * x + best.coefficients[4, 0] * x * y)) == 0
    sym = best.to_sympy(symbolic=True)
    assert sym[1] == -1.8 * y + sp.Symbol("U2__x_y") * x * y
    assert best.equations()[0].startswith("x' = ")


def test_known_parameters_are_refitted():
    """A known part with an unknown parameter (delta, started 20% off) is refitted with the
    terms."""
    clean = _solve_truth(TS)
    dd = sp.Symbol("dd")
    search = StructureSearch(
        [x, y],
        [1.3 * x + U1, -dd * y + U2],
        [U1, U2],
        PolynomialLibrary(2),
        clean,
        TS,
        U0,
        params={dd: 1.5},
    )
    names = search.feature_names
    Xi = np.zeros((len(names), 2))
    Xi[names.index("x*y")] = [-0.85, 0.85]
    s = search.refit(Xi)
    assert s.params[0] == pytest.approx(1.8, rel=1e-5)
    assert s.terms()["U2"]["x*y"] == pytest.approx(0.8, rel=1e-5)
    model, p = s.to_symbolic_model()
    assert [str(q) for q in model.params] == ["dd", "U1__x_y", "U2__x_y"]
    # k counts the fitted parameter
    m = clean.size
    assert s.score == pytest.approx(m * np.log(s.sse / m) + 3 * np.log(m) + 2 * 2.0)


def test_custom_library_functions():
    lib = CustomLibrary([lambda u: sp.exp(-u), lambda u, v: u / (1 + v)])
    X = np.array([[0.5, 2.0], [1.0, -0.5]])
    Th = lib(X)
    np.testing.assert_allclose(
        Th,
        [
            [np.exp(-0.5), np.exp(-2.0), 0.5 / 3.0],
            [np.exp(-1.0), np.exp(0.5), 1.0 / 0.5],
        ],
    )
    assert lib.names(["x", "y"]) == ["exp(-x)", "exp(-y)", "x/(y + 1)"]
    assert lib.expressions([x, y])[2] == x / (1 + y)
    both = PolynomialLibrary(1) + lib
    assert both.names(["x", "y"]) == ["1", "x", "y", "exp(-x)", "exp(-y)", "x/(y + 1)"]
    np.testing.assert_allclose(both(X)[:, 3:], Th)
    # sparse regression with user functions, exported to SymPy
    rng = np.random.default_rng(3)
    Z = rng.uniform(0.1, 2.0, (100, 2))
    Y = 2.0 * np.exp(-Z[:, 0]) - 0.5 * Z[:, 0] / (1 + Z[:, 1])
    fit = sparse_regression(Z, Y, both, input_names=["x", "y"])
    (expr,) = fit.to_sympy()
    target = 2.0 * sp.exp(-x) - 0.5 * x / (1 + y)
    assert float(sp.Abs((expr - target).subs({x: 0.7, y: 1.1}))) < 1e-8
    assert fit.to_sympy([y, x])[0].free_symbols == {x, y}


def test_custom_library_rejects_numpy_functions_and_bad_names():
    with pytest.raises(TypeError, match="SymPy expression"):
        CustomLibrary([lambda u: np.exp(u)]).expressions([x])
    with pytest.raises(TypeError, match="callable"):
        CustomLibrary(["x"])
    with pytest.raises(ValueError, match="3 inputs|arguments"):
        CustomLibrary([lambda p, q, r: p * q * r])(np.ones((2, 2)))
    with pytest.raises(ValueError, match="not finite"):
        CustomLibrary([lambda u: 1 / u])(np.zeros((2, 1)))


def test_candidates_and_sublibraries():
    lib = PolynomialLibrary(3, sin=True)
    subs = polynomial_sublibraries(lib.expressions([x, y]), [x, y])
    names = lib.names(["x", "y"])
    assert list(subs) == ["all", "degree<=3", "degree<=2"]
    assert [names[i] for i in subs["degree<=2"]] == ["1", "x", "y", "x^2", "x*y", "y^2"]
    rng = np.random.default_rng(0)
    X = rng.uniform(0.2, 3.0, (80, 2))
    Th = lib(X)
    U = np.stack([-0.9 * X[:, 0] * X[:, 1], 0.8 * X[:, 0] * X[:, 1]], 1)
    cands = candidate_structures(Th, U, sublibraries=subs)
    true = np.zeros((len(names), 2), bool)
    true[names.index("x*y")] = True
    assert any(np.array_equal(c.support, true) for c in cands)
    assert len({c.support.tobytes() for c in cands}) == len(cands)
    # collinear columns are rejected
    assert not identifiable(np.stack([X[:, 0], 2 * X[:, 0] + 1e-9 * X[:, 1]], 1), [1, 1])
    assert identifiable(Th, true)
    with pytest.raises(ValueError, match="same rows"):
        candidate_structures(Th, U[:5])


def test_search_rejects_bad_input(lv):
    search, clean, data, _ = lv
    with pytest.raises(ValueError, match="data must have shape"):
        StructureSearch([x, y], [x + U1, y], [U1], PolynomialLibrary(1), data[:5], TS, U0)
    with pytest.raises(ValueError, match="appear in no"):
        StructureSearch([x, y], [x, y], [U1], PolynomialLibrary(1), data, TS, U0)
    with pytest.raises(ValueError, match="unknown criterion"):
        StructureSearch(
            [x, y], [x + U1, y], [U1], PolynomialLibrary(1), data, TS, U0, criterion="xic"
        )
    with pytest.raises(ValueError, match="coefficients must have shape"):
        search.refit(np.zeros((3, 2)))


def test_stiff_solvers_serve_the_search_and_the_ude_samples(lv):
    """Every solver family with an adjoint serves the refits (the family looked up, not the
    class): Rodas5P's refit of the true structure agrees with Tsit5's; ``ude_samples`` and
    ``run_ude`` solve the trained UDE with the search's solver; other objects are refused
    naming the solvers that work."""
    search, clean, data, _ = lv
    names = search.feature_names
    Xi = np.zeros((len(names), 2))
    Xi[names.index("x*y")] = [-0.85, 0.85]
    ref = search.refit(Xi)
    stiff = StructureSearch(
        [x, y],
        [1.3 * x + U1, -1.8 * y + U2],
        [U1, U2],
        PolynomialLibrary(2),
        data,
        TS,
        U0,
        solver=Rodas5P(),
    )
    got = stiff.refit(Xi)
    np.testing.assert_allclose(got.coefficients, ref.coefficients, rtol=1e-6, atol=1e-9)
    assert got.sse == pytest.approx(ref.sse, rel=1e-6)
    # a UDE: the missing terms as a network, sampled with the search's solver
    U = NetworkTerm(SimpleChain(2, Dense(4, "tanh"), Dense(2)), [x, y])
    ude = SymbolicModel([x, y], [], [1.3 * x + U[0], -1.8 * y + U[1]], network=U)
    p = U.chain.init_params(seed=0, dtype=np.float64) * 0.1
    s_ref, o_ref = ude_samples(ude, p, U0, TS)
    s_ros, o_ros = ude_samples(ude, p, U0, TS, solver=Rodas5P())
    np.testing.assert_allclose(s_ros, s_ref, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(o_ros, o_ref, rtol=1e-6, atol=1e-8)
    from_ude = StructureSearch.from_ude(
        ude, p, PolynomialLibrary(2), data, TS, U0, solver=KenCarp4()
    )
    assert from_ude.engine.solver.name == "KenCarp4"
    for bad in ("Rodas5P", object()):
        with pytest.raises(TypeError, match="explicit .*Rosenbrock .*ESDIRK .*CVODE"):
            StructureSearch(
                [x, y], [x + U1, y], [U1], PolynomialLibrary(1), data, TS, U0, solver=bad
            )
