"""Mass-matrix problems M du/dt = f (ODEProblem(..., mass_matrix=M)): index-1 DAEs of the test
set against their published references, measured orders against a closed form, a
non-singular M against the equivalent ODE, consistent initial states (checked, computed), the
gradient through a DAE solve against central differences and against the ODE form of the
same model, and the refusals of everything that cannot take a mass matrix."""

import numba
import numpy as np
import pytest

from scichains import ode
from scichains.adjoint import InterpolatingAdjoint, Objective, SquaredError
from scichains.ode._testset import DAE_PROBLEMS, chemakzo, significant_digits

DAE_SOLVERS = [ode.Rodas5P, ode.RadauIIA5]
NAME = lambda m: m.name  # noqa: E731


@numba.njit
def linear_dae(du, u, p, t):
    # x' = -x + z, 0 = z - cos(t): z = cos(t), x = (cos t + sin t) / 2 + (x0 - 1/2) e^-t
    du[0] = -u[0] + u[1]
    du[1] = u[1] - np.cos(p[0] * t)


def linear_exact(t, x0=2.0):
    return np.array([(np.cos(t) + np.sin(t)) / 2 + (x0 - 0.5) * np.exp(-t), np.cos(t)])


def linear_problem(z0=1.0):
    M = np.diag([1.0, 0.0])
    return ode.ODEProblem(linear_dae, [2.0, z0], (0.0, 1.0), np.array([1.0]), mass_matrix=M)


@numba.njit
def rober_p(du, u, p, t):
    du[0] = -p[0] * u[0] + p[1] * u[1] * u[2]
    du[1] = p[0] * u[0] - p[1] * u[1] * u[2] - p[2] * u[1] * u[1]
    du[2] = u[0] + u[1] + u[2] - 1.0


@numba.njit
def rober_ode(du, u, p, t):
    du[0] = -p[0] * u[0] + p[1] * u[1] * u[2]
    du[2] = p[2] * u[1] * u[1]
    du[1] = -du[0] - du[2]


@pytest.mark.parametrize("solver", DAE_SOLVERS, ids=NAME)
@pytest.mark.parametrize("name", ["CHEMAKZO", "ROBER_DAE"])
def test_five_digits_on_the_dae_test_set(name, solver):
    """Chemical Akzo Nobel (the Bari test set's reference) and Robertson as an index-1 DAE
    (the conservation law as its algebraic equation; ROBER's reference) at rtol 1e-10.
    Measured 2026-12-04: CHEMAKZO 11.7 (Rodas5P) / 13.2 (RadauIIA5), ROBER_DAE 10.7 / 12.2."""
    tp = DAE_PROBLEMS[name]
    sol = ode.solve(
        tp.problem(), solver(), rtol=1e-10, atol=1e-14, saveat=[tp.tspan[1]], max_steps=10**6
    )
    assert sol.success, sol.message
    assert significant_digits(sol.u[-1], tp.reference) >= 9.0


@pytest.mark.parametrize("solver", DAE_SOLVERS, ids=NAME)
def test_measured_order_on_a_dae_with_a_closed_form(solver):
    """Fixed steps on x' = -x + z, 0 = z - cos t: the differential component converges at
    order 5 (measured 5.03-5.09 Rodas5P, 4.98-5.00 RadauIIA5); both methods are stiffly
    accurate, so the algebraic one satisfies its equation at the step's end."""
    prob = linear_problem()
    errs = []
    for dt in [0.2, 0.1, 0.05, 0.025]:
        sol = ode.solve(prob, solver(), dt0=dt, adaptive=False, rtol=1e-13, atol=1e-15)
        assert sol.success
        err = np.abs(sol.u[-1] - linear_exact(1.0))
        assert err[1] < 1e-14
        errs.append(err[0])
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(np.abs(orders - 5.0) < 0.5), orders


@pytest.mark.parametrize("solver", DAE_SOLVERS, ids=NAME)
def test_dense_output_of_a_dae(solver):
    """Save times between steps come from the method's continuous extension, algebraic
    components included (measured at rtol 1e-8: 1.5e-8 Rodas5P, 3.4e-11 RadauIIA5)."""
    ts = np.linspace(0.0, 1.0, 37)
    sol = ode.solve(linear_problem(), solver(), rtol=1e-8, atol=1e-10, saveat=ts)
    assert sol.success
    assert np.setdiff1d(ts, sol.step_times).size > ts.size // 2  # most saves lie between steps
    exact = np.array([linear_exact(t) for t in ts])
    np.testing.assert_allclose(sol.u, exact, atol=5e-8)


@numba.njit
def oscillator(du, u, p, t):
    du[0] = u[1]
    du[1] = -u[0] - 0.1 * u[1]


@numba.njit
def oscillator_solved(du, u, p, t):
    g0 = u[1]
    g1 = -u[0] - 0.1 * u[1]
    du[0] = p[0] * g0 + p[1] * g1  # M^-1 [g0, g1], M^-1 in p
    du[1] = p[2] * g0 + p[3] * g1


@pytest.mark.parametrize("solver", [ode.Rodas5P, ode.Rosenbrock23, ode.RadauIIA5], ids=NAME)
def test_a_nonsingular_mass_matrix_solves_the_equivalent_ode(solver):
    """M du/dt = f with an invertible, non-diagonal M has the solution of du/dt = M^-1 f: the
    mass-matrix form is as accurate as the same method on that ODE (measured at rtol 1e-7:
    errors 3.80e-5 / 3.80e-5 Rosenbrock23, 7.0e-9 / 6.8e-9 Rodas5P, 2.1e-9 / 2.4e-9
    RadauIIA5; the first step differs, guessed from f, not M^-1 f)."""
    M = np.array([[2.0, 1.0], [0.5, 1.5]])
    span, ts = (0.0, 10.0), np.linspace(0.0, 10.0, 21)
    solved = ode.ODEProblem(oscillator_solved, [1.0, 0.0], span, np.linalg.inv(M).ravel())
    ref = ode.solve(solved, ode.Vern7(), ts, rtol=1e-12, atol=1e-14).u
    tol = dict(rtol=1e-7, atol=1e-9)
    with_m = ode.solve(
        ode.ODEProblem(oscillator, [1.0, 0.0], span, mass_matrix=M), solver(), ts, **tol
    )
    plain = ode.solve(solved, solver(), ts, **tol)
    assert with_m.success and plain.success
    err_m, err_plain = np.abs(with_m.u - ref).max(), np.abs(plain.u - ref).max()
    assert err_m < 2 * err_plain and err_m < 1e-4


def test_an_inconsistent_start_is_refused_and_init_algebraic_repairs_it():
    tp = DAE_PROBLEMS["CHEMAKZO"]
    u0 = tp.u0.copy()
    u0[5] *= 1.01  # the algebraic equation y6 = Ks y1 y4 broken by 1%
    prob = ode.ODEProblem(chemakzo, u0, tp.tspan, mass_matrix=tp.mass_matrix)
    with pytest.raises(ValueError, match="inconsistent initial state.*state 5.*init='algebraic'"):
        ode.solve(prob, ode.Rodas5P(), saveat=[180.0])
    fixed = prob.consistent_u0()
    assert fixed is not prob.u0 and np.array_equal(fixed[:5], u0[:5])  # only y6 moves
    assert fixed[5] == pytest.approx(115.83 * u0[0] * u0[3], rel=1e-15)
    for solver in DAE_SOLVERS:
        sol = ode.solve(
            prob, solver(), saveat=[0.0, 180.0], rtol=1e-10, atol=1e-14, init="algebraic"
        )
        assert sol.success and sol.u[0, 5] == fixed[5]
        assert significant_digits(sol.u[-1], tp.reference) >= 9.0
    np.testing.assert_array_equal(prob.u0, u0)  # the problem itself is left as it was
    # within the tolerance counts as consistent: a change of 1e-12 passes at rtol 1e-6
    u0[5] = fixed[5] * (1 + 1e-12)
    prob = ode.ODEProblem(chemakzo, u0, tp.tspan, mass_matrix=tp.mass_matrix)
    assert ode.solve(prob, ode.Rodas5P(), saveat=[1.0]).success
    with pytest.raises(ValueError, match="init must be 'check' or 'algebraic'"):
        ode.solve(prob, ode.Rodas5P(), init="fix")


@numba.njit
def not_index_one(du, u, p, t):
    du[0] = -u[0]
    du[1] = u[0] - 1.0  # 0 = u0 - 1 does not involve the algebraic variable u1


def test_the_default_solver_of_a_dae_is_rodas5p():
    prob = linear_problem()
    sol = ode.solve(prob, saveat=[1.0], rtol=1e-8, atol=1e-10)
    ref = ode.solve(prob, ode.Rodas5P(), saveat=[1.0], rtol=1e-8, atol=1e-10)
    assert sol.success
    np.testing.assert_array_equal(sol.u, ref.u)


def test_refusals_name_the_problem():
    prob = linear_problem()
    with pytest.raises(TypeError, match=r"solver instance, e.g. solver=AutoSwitch\(\)"):
        ode.solve(prob, ode.AutoSwitch)
    for solver in (ode.Tsit5(), ode.KenCarp4(), ode.Kvaerno5()):
        with pytest.raises(TypeError, match="mass matrix.*Rodas5P.*RadauIIA5"):
            ode.solve(prob, solver)
    with pytest.raises(TypeError, match="CVODE solves ODEs only"):
        ode.solve(prob, ode.CVODE_BDF())
    with pytest.raises(TypeError, match="Rosenbrock23 takes a non-singular mass matrix only"):
        ode.solve(prob, ode.Rosenbrock23())
    with pytest.raises(ValueError, match="jumps.*singular mass matrix"):
        ode.solve(prob, ode.Rodas5P(), jumps=[(0.5, 0, 1.0)])
    with pytest.raises(TypeError, match="mass matrix.*Rodas5P"):
        ode.solve_ensemble(ode.EnsembleProblem(prob, u0s=np.ones((3, 2))), ode.Tsit5(), [1.0])
    f, u0, span = linear_dae, [2.0, 1.0], (0.0, 1.0)
    with pytest.raises(ValueError, match=r"shape \(n, n\) = \(2, 2\).*got \(3, 3\)"):
        ode.ODEProblem(f, u0, span, [1.0], mass_matrix=np.eye(3))
    with pytest.raises(ValueError, match="mass_matrix contains NaN"):
        ode.ODEProblem(f, u0, span, [1.0], mass_matrix=[[1.0, np.nan], [0.0, 0.0]])
    with pytest.raises(TypeError, match="mass_matrix must hold real numbers"):
        ode.ODEProblem(f, u0, span, [1.0], mass_matrix=[["a", "b"], ["c", "d"]])
    with pytest.raises(ValueError, match="mass_matrix is zero"):
        ode.ODEProblem(f, u0, span, [1.0], mass_matrix=np.zeros((2, 2)))
    bad = ode.ODEProblem(not_index_one, [2.0, 0.0], span, mass_matrix=np.diag([1.0, 0.0]))
    with pytest.raises(ValueError, match="not of index 1"):
        ode.solve(bad, ode.Rodas5P(), init="algebraic")


@numba.njit
def raises_late(du, u, p, t):
    if t > 0.5:
        raise ValueError("the model failed at t > 0.5")
    du[0] = -u[0] + u[1]
    du[1] = u[1] - 1.0


@numba.njit
def blows_up(du, u, p, t):
    du[0] = u[0] * u[0]  # x' = x^2: x = 1 / (1 - t) blows up at t = 1
    du[1] = u[1] - u[0]


@pytest.mark.parametrize("solver", DAE_SOLVERS, ids=NAME)
def test_errors_inside_a_dae_solve_reach_the_user(solver):
    M = np.diag([1.0, 0.0])
    prob = ode.ODEProblem(raises_late, [1.0, 1.0], (0.0, 1.0), mass_matrix=M)
    sol = ode.solve(prob, solver())
    assert sol.status == ode.ReturnCode.RHS_ERROR
    assert isinstance(sol.exception, ValueError) and "t > 0.5" in str(sol.exception)
    # no solution past t = 1: never SUCCESS (the implicit steps may cross the pole before
    # the step size underflows), never a non-finite value reported as a state
    prob = ode.ODEProblem(blows_up, [1.0, 1.0], (0.0, 2.0), mass_matrix=M)
    sol = ode.solve(prob, solver())
    assert not sol.success and sol.message
    assert np.all(np.isfinite(sol.u))


def _rober_objectives(rtol=1e-10):
    p = np.array([0.04, 1e4, 3e7])
    ts = np.array([0.4, 4.0, 40.0])
    data = np.array([[0.98, 3.4e-5, 0.0165], [0.9, 2.2e-5, 0.09], [0.71, 9.2e-6, 0.28]])
    tol = dict(rtol=rtol, atol=1e-6 * rtol)
    M = np.diag([1.0, 1.0, 0.0])
    dae = ode.ODEProblem(rober_p, [1.0, 0.0, 0.0], (0.0, 40.0), p, mass_matrix=M)
    plain = ode.ODEProblem(rober_ode, [1.0, 0.0, 0.0], (0.0, 40.0), p)
    make = lambda prob, **kw: Objective(prob, SquaredError(data), ts, **tol, **kw)  # noqa: E731
    return p, dae, plain, make


def test_gradient_through_a_dae_against_central_differences():
    """Robertson's rates through the DAE form (Rodas5P's discrete adjoint, W = M/(h gamma) -
    J): against float64 central differences (step 1e-5 of each rate; measured 4e-9 to 1e-8,
    the differences' own truncation error: 4e-7 at 1e-4, 4e-5 at 1e-3) and against the
    gradient of the ODE form of the same model (measured 6e-13). dL/du0 is that of the
    consistent start: zero along the algebraic variable."""
    p, dae, plain, make = _rober_objectives()
    obj = make(dae, solver=ode.Rodas5P())
    value, dp, du0 = obj.value_and_grad(p)
    st = obj.stats()
    assert st["adjoint_steps"] == st["steps"]  # one backward step per accepted step
    fd = np.empty(3)
    for j in range(3):
        h = 1e-5 * p[j]
        up, um = p.copy(), p.copy()
        up[j] += h
        um[j] -= h
        fd[j] = (obj.value(up) - obj.value(um)) / (2 * h)
    np.testing.assert_allclose(dp, fd, rtol=1e-7)
    # dL/du0: the algebraic variable's given value does not matter (it is solved for); the
    # differential ones move it (y3 = 1 - y1 - y2): the ODE form's derivatives along (1, 0,
    # -1) and (0, 1, -1) (measured 1.4e-10), and central differences in y1 (y2 ~ 3e-5 is a
    # fast variable: a difference step in it perturbs the stiff transient)
    assert abs(du0[2]) <= 1e-12 * np.abs(du0).max()
    u0 = dae.u0
    h = 1e-6
    fdu = (obj.value(p, u0 + [h, 0, 0]) - obj.value(p, u0 - [h, 0, 0])) / (2 * h)
    assert du0[0] == pytest.approx(fdu, rel=1e-6)
    ref_value, ref_dp, ref_du0 = make(plain, solver=ode.Rodas5P()).value_and_grad(p)
    projected = [ref_du0[0] - ref_du0[2], ref_du0[1] - ref_du0[2]]
    np.testing.assert_allclose(du0[:2], projected, rtol=1e-8)
    assert value == pytest.approx(ref_value, rel=1e-10)
    np.testing.assert_allclose(dp, ref_dp, rtol=1e-9)


def test_gradients_through_a_dae_other_than_rodas5p_discrete_are_refused():
    p, dae, _, make = _rober_objectives()
    match = "mass matrix.*Rodas5P\\(\\) with DiscreteAdjoint"
    with pytest.raises(TypeError, match=match):
        make(dae, solver=ode.RadauIIA5())
    with pytest.raises(TypeError, match=match):
        make(dae, solver=ode.Rodas5P(), sensealg=InterpolatingAdjoint())
    with pytest.raises(TypeError, match=match):
        make(dae, solver=ode.Rodas5P(jacobian="finite difference"))


def test_a_ude_with_a_network_in_its_algebraic_equation():
    """A SymbolicModel whose algebraic equation holds a network (x' = -k x + z, 0 = z -
    U(x)): solved by Rodas5P and RadauIIA5 alike, its gradient (network weights and k)
    against Ridders-extrapolated central differences."""
    import sympy as sp

    from scichains import Dense, SimpleChain
    from scichains.adjoint._check import check_gradient
    from scichains.ode import NetworkTerm, SymbolicModel

    x, z, k = sp.symbols("x z k")
    chain = SimpleChain(1, Dense(4, "tanh"), Dense(1))
    U = NetworkTerm(chain, [x])
    model = SymbolicModel([x, z], [k], [-k * x + z, z - U[0]], network=U)
    w = chain.init_params(seed=1, dtype=np.float64)
    p = model.pack(k=0.7, network=w)
    u0 = np.array([1.0, 0.0])
    prob = model.problem(u0, (0.0, 3.0), p, mass_matrix=np.diag([1.0, 0.0]))
    prob.u0 = prob.consistent_u0()  # z0 = U(x0)
    ts = np.linspace(0.5, 3.0, 6)
    tight = dict(rtol=1e-10, atol=1e-12, saveat=ts)
    a = ode.solve(prob, ode.Rodas5P(), **tight)
    b = ode.solve(prob, ode.RadauIIA5(), **tight)
    assert a.success and b.success
    np.testing.assert_allclose(a.u, b.u, rtol=1e-8, atol=1e-10)
    data = a.u * 1.1 + 0.05
    obj = Objective(prob, SquaredError(data), ts, solver=ode.Rodas5P(), rtol=1e-10, atol=1e-12)
    check = check_gradient(obj.value_and_grad, p, rtol=1e-6)
    assert check.ok, check
