"""Gradients through the compiled stiff solvers (Rodas5P, Rosenbrock23, Kvaerno5, KenCarp4,
RadauIIA5):
the discrete adjoint through the Rosenbrock steps (their default) and the interpolating adjoint
integrated backward by a Rosenbrock method (the same one; Rodas5P for the ESDIRK and Radau
methods, their only one), against a closed form, float64 central differences (of the discrete
solution itself, on fixed steps) and the CVODE adjoint."""

import numpy as np
import pytest
import sympy as sp

from scichains import Dense, SimpleChain
from scichains.adjoint import (
    DiscreteAdjoint,
    InterpolatingAdjoint,
    MultiObjective,
    Objective,
    SquaredError,
    Trajectory,
)
from scichains.adjoint._check import check_gradient
from scichains.ode import (
    CVODE_BDF,
    KenCarp4,
    Kvaerno5,
    NetworkTerm,
    RadauIIA5,
    Rodas5P,
    Rosenbrock23,
    SymbolicModel,
)
from scichains.ode._plan import plan_solve

TIGHT = dict(rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "solver,sensealg",
    [
        (Rodas5P(), DiscreteAdjoint()),
        pytest.param(Rodas5P(), InterpolatingAdjoint(), marks=pytest.mark.slow),
        (Rosenbrock23(), DiscreteAdjoint()),
        pytest.param(Rosenbrock23(), InterpolatingAdjoint(), marks=pytest.mark.slow),
        (Kvaerno5(), InterpolatingAdjoint()),
        pytest.param(KenCarp4(), InterpolatingAdjoint(), marks=pytest.mark.slow),
        (RadauIIA5(), InterpolatingAdjoint()),
    ],
)
def test_stiff_gradient_against_the_closed_form(solver, sensealg):
    """u' = -a (u - cos(b t)) - b sin(b t), u(0) = u0, stiff for a = 1e3, has the solution
    u = cos(b t) + (u0 - 1) exp(-a t): its exact derivatives are the reference."""
    u, a, b, t, u0s = sp.symbols("u a b t u0")
    model = SymbolicModel([u], [a, b], [-a * (u - sp.cos(b * t)) - b * sp.sin(b * t)], t=t)
    ts = np.array([0.001, 0.002, 0.005, 0.5, 1.0, 2.0, 3.0])
    data = np.linspace(0.2, -0.4, ts.size)
    exact = sp.cos(b * t) + (u0s - 1) * sp.exp(-a * t)
    L = sum((exact.subs(t, ti) - di) ** 2 for ti, di in zip(ts, data))
    at = {a: 1e3, b: 2.0, u0s: 3.0}
    ref = [float(sp.diff(L, s).subs(at)) for s in (a, b, u0s)]
    prob = model.problem([3.0], (0.0, 3.0), model.pack(a=1e3, b=2.0))
    tol = TIGHT if solver.order > 2 else dict(rtol=1e-8, atol=1e-10)
    obj = Objective(prob, SquaredError(data[:, None]), ts, solver=solver, sensealg=sensealg, **tol)
    value, dp, du0 = obj.value_and_grad()
    want = 1e-5 if solver.order > 2 else 1e-3
    assert value == pytest.approx(float(L.subs(at)), rel=want)
    np.testing.assert_allclose(dp, ref[:2], rtol=want)
    np.testing.assert_allclose(du0, ref[2:], rtol=want)
    st = obj.stats()
    assert st["adjoint_steps"] > 0 and st["vjp_calls"] > st["adjoint_steps"]
    if isinstance(sensealg, DiscreteAdjoint):  # one backward step per accepted step
        assert st["adjoint_steps"] == st["steps"]
    default = Objective(prob, SquaredError(data[:, None]), ts, solver=solver, **tol)
    if solver.family in ("esdirk", "radau"):  # their only adjoint
        assert isinstance(default.sensealg, InterpolatingAdjoint)
        return
    # the default with an exact Jacobian is the discrete adjoint; finite differences refuse it
    assert isinstance(default.sensealg, DiscreteAdjoint)
    fd = solver(jacobian="finite difference")
    assert isinstance(
        Objective(prob, SquaredError(data[:, None]), ts, solver=fd, **tol).sensealg,
        InterpolatingAdjoint,
    )
    with pytest.raises(TypeError, match="exact"):
        Objective(prob, SquaredError(data[:, None]), ts, solver=fd, sensealg=DiscreteAdjoint())


def _tmdd_model():
    """Target-mediated drug disposition (Mager & Jusko 2001) with a depot, fast binding
    (kon R ~ 1e3: stiff), and a network term scaling the linear elimination."""
    A, L, R, P = sp.symbols("A L R P")
    ka, kel, kon, koff, kint, ksyn, kdeg = sp.symbols("ka kel kon koff kint ksyn kdeg")
    chain = SimpleChain(1, Dense(5, "tanh"), Dense(1))
    U = NetworkTerm(chain, [L])
    eqs = [
        -ka * A,
        ka * A - kel * (1 + U[0] ** 2) * L - kon * L * R + koff * P,
        ksyn - kdeg * R - kon * L * R + koff * P,
        kon * L * R - (koff + kint) * P,
    ]
    model = SymbolicModel([A, L, R, P], [ka, kel, kon, koff, kint, ksyn, kdeg], eqs, network=U)
    w = chain.init_params(seed=3, dtype=np.float64) * 0.5
    p = model.pack(ka=1.0, kel=0.1, kon=100.0, koff=1.0, kint=0.5, ksyn=1.0, kdeg=0.1, network=w)
    return model, p


@pytest.fixture(scope="module")
def tmdd_discrete():
    """The TMDD UDE's loss with doses through Rodas5P's discrete adjoint (its default) at
    tight tolerances: the gradient at ``p`` and its check against Ridders-extrapolated
    central differences (~150 gradients), made once for the two tests that start from them."""
    obj, prob, p, ts, doses = _tmdd_objective(Rodas5P(), None, **TIGHT)
    value, dp, du0 = obj.value_and_grad(p)
    check = check_gradient(obj.value_and_grad, p, rtol=1e-5)
    return obj, prob, p, ts, doses, (value, dp, du0), check


def test_tmdd_with_network_and_doses_against_differences_and_cvode(tmdd_discrete):
    obj, prob, p, ts, doses, (value, dp, du0), check = tmdd_discrete
    u0 = [0.0, 0.0, 10.0, 0.0]
    data = np.abs(np.random.default_rng(0).normal(1.0, 0.5, (ts.size, 4)))  # the objective's
    assert check.ok, check
    # dL/du0 by central differences too
    num = np.empty(4)
    for j in range(4):
        up, um = np.array(u0, float), np.array(u0, float)
        h = 1e-6 * max(1.0, abs(u0[j]))
        up[j] += h
        um[j] -= h
        num[j] = (obj.value(p, up) - obj.value(p, um)) / (2 * h)
    np.testing.assert_allclose(du0, num, rtol=1e-5, atol=1e-7)
    # the CVODE adjoint on the same problem agrees
    cv = Objective(prob, SquaredError(data), ts, solver=CVODE_BDF(), jumps=doses, **TIGHT)
    v2, dp2, du02 = cv.value_and_grad(p)
    assert value == pytest.approx(v2, rel=1e-7)
    np.testing.assert_allclose(dp, dp2, rtol=1e-4, atol=1e-8 * np.abs(dp).max())
    np.testing.assert_allclose(du0, du02, rtol=1e-4, atol=1e-8 * np.abs(du0).max())


def test_kvaerno5_gradient_with_network_and_doses_against_the_checked_one(tmdd_discrete):
    """Kvaerno5 forward (landing on the save times), the adjoint by Rodas5P, on the TMDD UDE
    with doses: the loss and dL/dp of Rodas5P's discrete adjoint, which the fixture checks
    against Ridders-extrapolated central differences (Kvaerno5's own Ridders check, ~150
    gradients, is the slow test below), and dL/du0 against central differences of the
    Kvaerno5 loss."""
    _, prob, p, ts, doses, (value, dp, _), check = tmdd_discrete
    assert check.ok, check
    obj = _tmdd_objective(Kvaerno5(), None, **TIGHT)[0]
    assert isinstance(obj.sensealg, InterpolatingAdjoint)
    v2, dp2, du02 = obj.value_and_grad(p)
    assert v2 == pytest.approx(value, rel=1e-7)
    # every entry, the network's (~1e-6 of the largest) included
    np.testing.assert_allclose(dp2, dp, rtol=1e-4, atol=1e-7 * np.abs(dp).max())
    u0 = prob.u0
    num = np.empty(4)
    for j in range(4):
        up, um = u0.copy(), u0.copy()
        h = 1e-6 * max(1.0, abs(u0[j]))
        up[j] += h
        um[j] -= h
        num[j] = (obj.value(p, up) - obj.value(p, um)) / (2 * h)
    np.testing.assert_allclose(du02, num, rtol=1e-5, atol=1e-7)
    st = obj.stats()
    assert st["jacobians"] < st["steps"]  # the forward pass reused its Jacobians
    data = np.abs(np.random.default_rng(0).normal(1.0, 0.5, (ts.size, 4)))  # the objective's
    with pytest.raises(TypeError, match="InterpolatingAdjoint.*backward by Rodas5P"):
        Objective(prob, SquaredError(data), ts, solver=Kvaerno5(), sensealg=DiscreteAdjoint())


@pytest.mark.slow  # ~35 s of gradients; by default the test above compares with a checked one
def test_kvaerno5_gradient_with_network_and_doses_against_differences():
    """Kvaerno5 forward (landing on the save times), the adjoint by Rodas5P: dL/dp and dL/du0
    against float64 central differences of the Kvaerno5 loss."""
    model, p = _tmdd_model()
    u0 = np.array([0.0, 0.0, 10.0, 0.0])
    prob = model.problem(u0, (0.0, 24.0), p)
    ts = np.linspace(0.5, 24.0, 16)
    doses = [(0.0, 0, 5.0), (12.0, 0, 5.0)]
    data = np.abs(np.random.default_rng(0).normal(1.0, 0.5, (ts.size, 4)))
    obj = Objective(prob, SquaredError(data), ts, solver=Kvaerno5(), jumps=doses, **TIGHT)
    assert isinstance(obj.sensealg, InterpolatingAdjoint)
    value, dp, du0 = obj.value_and_grad(p)
    check = check_gradient(obj.value_and_grad, p, rtol=1e-5)
    assert check.ok, check
    num = np.empty(4)
    for j in range(4):
        up, um = u0.copy(), u0.copy()
        h = 1e-6 * max(1.0, abs(u0[j]))
        up[j] += h
        um[j] -= h
        num[j] = (obj.value(p, up) - obj.value(p, um)) / (2 * h)
    np.testing.assert_allclose(du0, num, rtol=1e-5, atol=1e-7)
    # the same loss as Rodas5P's at this tolerance
    ref = Objective(prob, SquaredError(data), ts, solver=Rodas5P(), jumps=doses, **TIGHT)
    assert value == pytest.approx(ref.value(p), rel=1e-7)
    st = obj.stats()
    assert st["jacobians"] < st["steps"]  # the forward pass reused its Jacobians
    with pytest.raises(TypeError, match="InterpolatingAdjoint.*backward by Rodas5P"):
        Objective(prob, SquaredError(data), ts, solver=Kvaerno5(), sensealg=DiscreteAdjoint())


def _tmdd_objective(solver, sensealg, **tol):
    model, p = _tmdd_model()
    prob = model.problem([0.0, 0.0, 10.0, 0.0], (0.0, 24.0), p)
    ts = np.linspace(0.5, 24.0, 16)
    doses = [(0.0, 0, 5.0), (12.0, 0, 5.0)]
    data = np.abs(np.random.default_rng(0).normal(1.0, 0.5, (ts.size, 4)))
    obj = Objective(
        prob, SquaredError(data), ts, solver=solver, sensealg=sensealg, jumps=doses, **tol
    )
    return obj, prob, p, ts, doses


@pytest.mark.parametrize("solver", [Rodas5P(), Rosenbrock23()])
def test_discrete_adjoint_is_the_gradient_of_the_discrete_solution(solver):
    """On fixed steps (no step-size control to jitter the differences) the discrete adjoint
    is the derivative of the computed solution: float64 central differences of the loss agree
    to their own accuracy, for the kinetic parameters and u0 (the network's derivatives are
    ~1e-6 of the loss, below the differences' noise, and are checked against the adjoints
    below)."""
    obj, prob, p, ts, doses = _tmdd_objective(solver, DiscreteAdjoint())
    plan = plan_solve(prob, solver, ts, 1e-6, 1e-8, 0.02, 10**6, None, doses, None, False)
    plan.keep_stages()
    plan.keep_jacobians()
    obj.method.plan = plan
    value, dp, du0 = obj.value_and_grad(p)
    assert obj.stats()["adjoint_steps"] == obj.stats()["steps"] > 1000
    num = np.empty(7)
    for j in range(7):
        h = 1e-5 * max(1.0, abs(p[j]))
        pp, pm = p.copy(), p.copy()
        pp[j] += h
        pm[j] -= h
        num[j] = (obj.value(pp) - obj.value(pm)) / (2 * h)
    np.testing.assert_allclose(dp[:7], num, rtol=1e-6, atol=1e-9 * np.abs(num).max())
    u0 = prob.u0
    nu = np.empty(4)
    for j in range(4):
        up, um = u0.copy(), u0.copy()
        h = 1e-5 * max(1.0, abs(u0[j]))
        up[j] += h
        um[j] -= h
        nu[j] = (obj.value(p, up) - obj.value(p, um)) / (2 * h)
    np.testing.assert_allclose(du0, nu, rtol=1e-6, atol=1e-9 * np.abs(nu).max())


def test_discrete_adjoint_against_the_continuous_adjoints_and_differences(tmdd_discrete):
    tight = dict(rtol=1e-10, atol=1e-12)
    obj, prob, p, ts, doses, (value, dp, du0), check = tmdd_discrete
    assert isinstance(obj.sensealg, DiscreteAdjoint)
    assert check.ok, check
    for other in (
        _tmdd_objective(Rodas5P(), InterpolatingAdjoint(), **tight)[0],
        _tmdd_objective(CVODE_BDF(), InterpolatingAdjoint(), **tight)[0],
    ):
        v2, dp2, du02 = other.value_and_grad(p)
        assert value == pytest.approx(v2, rel=1e-8)
        # every entry, the network's (~1e-6 of the largest) included
        np.testing.assert_allclose(dp, dp2, rtol=1e-4, atol=1e-7 * np.abs(dp).max())
        np.testing.assert_allclose(du0, du02, rtol=1e-5, atol=1e-9 * np.abs(du0).max())
    # the Jacobians recomputed in the sweep instead of kept: test_internals_stiff.py


def test_discrete_adjoint_of_a_non_autonomous_scalar_problem_on_fixed_steps():
    """n = 1 (the Jacobian store's smallest shape) and df/dt != 0 (the sweep differentiates
    the stepper's difference in t): central differences of the computed solution agree."""
    u, a, b, t = sp.symbols("u a b t")
    model = SymbolicModel([u], [a, b], [-a * (u - sp.cos(b * t)) - b * sp.sin(b * t)], t=t)
    ts = np.array([0.001, 0.005, 0.5, 1.0, 3.0])
    data = np.linspace(0.2, -0.4, ts.size)[:, None]
    prob = model.problem([3.0], (0.0, 3.0), model.pack(a=1e3, b=2.0))
    p = prob.p
    for solver in (Rodas5P(), Rosenbrock23()):
        obj = Objective(prob, SquaredError(data), ts, solver=solver)
        plan = plan_solve(prob, solver, ts, 1e-6, 1e-8, 2e-3, 10**6, None, None, None, False)
        plan.keep_stages()
        plan.keep_jacobians()
        obj.method.plan = plan
        _, dp, du0 = obj.value_and_grad(p)
        num = np.empty(3)
        for j in range(3):
            x = np.r_[p, prob.u0]
            h = 1e-6 * max(1.0, abs(x[j]))
            xp, xm = x.copy(), x.copy()
            xp[j] += h
            xm[j] -= h
            num[j] = (obj.value(xp[:2], xp[2:]) - obj.value(xm[:2], xm[2:])) / (2 * h)
        np.testing.assert_allclose(np.r_[dp, du0], num, rtol=1e-6, atol=1e-7 * np.abs(num).max())


@pytest.mark.parametrize("solver", [Rodas5P(), Rosenbrock23()])
def test_discrete_adjoint_backward_in_time_with_tstops_and_a_dose(solver):
    x, y, k1, k2 = sp.symbols("x y k1 k2")
    model = SymbolicModel([x, y], [k1, k2], [-k1 * x + k2 * y * x, k1 * x - k2 * y * x])
    prob = model.problem([1.0, 2.0], (3.0, 0.0), model.pack(k1=0.7, k2=0.3))
    ts = np.linspace(2.5, 0.0, 6)
    data = np.abs(np.random.default_rng(0).normal(1.0, 0.5, (ts.size, 2)))
    kw = dict(rtol=1e-10, atol=1e-12, tstops=[1.7], jumps=[(1.2, 1, 0.5)])
    disc = Objective(prob, SquaredError(data), ts, solver=solver, sensealg=DiscreteAdjoint(), **kw)
    cont = Objective(
        prob, SquaredError(data), ts, solver=solver, sensealg=InterpolatingAdjoint(), **kw
    )
    v1, dp1, du1 = disc.value_and_grad()
    v2, dp2, du2 = cont.value_and_grad()
    assert v1 == v2
    tol = 1e-8 if solver.order > 2 else 1e-5  # both approximate the exact gradient
    np.testing.assert_allclose(dp1, dp2, rtol=tol, atol=tol * np.abs(dp2).max())
    np.testing.assert_allclose(du1, du2, rtol=tol, atol=tol * np.abs(du2).max())


def test_multi_objective_with_stiff_solvers():
    """MultiObjective takes every family with an adjoint: the TMDD UDE over three subjects
    (their own doses and times) with Rodas5P and KenCarp4: the ordered sum of the
    single-trajectory objectives, bit for bit on any thread count, the two stiff methods'
    gradients equal at a tight tolerance, and dL/dp against central differences."""
    model, p = _tmdd_model()
    prob = model.problem([0.0, 0.0, 10.0, 0.0], (0.0, 24.0), p)
    rng = np.random.default_rng(1)
    specs = []
    for i, amount in enumerate((5.0, 2.0, 8.0)):
        ts = np.linspace(0.5, 12.0 + 6.0 * i, 6 + i)
        data = np.abs(rng.normal(1.0, 0.5, (ts.size, 4)))
        specs.append(
            Trajectory([0.0, 0.0, 10.0, 0.0], ts, data, jumps=[(0.0, 0, amount), (6.0, 0, amount)])
        )
    grads = {}
    for solver in (Rodas5P(), KenCarp4()):
        multi = MultiObjective(prob, specs, None, solver=solver, **TIGHT)
        value, dp, du0 = multi.value_and_grad(p, threads=1)
        assert du0.shape == (3, 4)
        singles = []
        for s in specs:
            one = model.problem(s.u0, (0.0, s.saveat[-1]), p)
            obj = Objective(
                one, SquaredError(s.data), s.saveat, solver=solver, jumps=s.jumps, **TIGHT
            )
            singles.append(obj.value_and_grad(p))
        assert value == sum(r[0] for r in singles)
        np.testing.assert_array_equal(dp, singles[0][1] + singles[1][1] + singles[2][1])
        again = multi.value_and_grad(p, threads=3)
        assert again[0] == value and again[1].tobytes() == dp.tobytes()
        grads[solver.name] = (value, dp)
    (v1, g1), (v2, g2) = grads["Rodas5P"], grads["KenCarp4"]
    assert v1 == pytest.approx(v2, rel=1e-8)
    np.testing.assert_allclose(g1, g2, rtol=1e-6, atol=1e-9 * np.abs(g1).max())
    multi = MultiObjective(prob, specs, None, solver=KenCarp4(), **TIGHT)
    for j in (0, 2, 7, p.size - 1):  # ka, kon, the first network weight, the last bias
        h = 1e-6 * max(1.0, abs(p[j]))
        e = np.zeros(p.size)
        e[j] = h
        num = (multi.value(p + e) - multi.value(p - e)) / (2 * h)
        assert g2[j] == pytest.approx(num, rel=1e-5, abs=1e-9 * np.abs(g2).max())
