"""The compiled stiff solvers (Rosenbrock23, Rodas5P, Kvaerno5, KenCarp4, RadauIIA5): measured
convergence orders of the steps and of the dense output, the Bari test set's reference solutions,
doses/tstops/saveat, status codes; then the Rosenbrock methods' own checks (test_esdirk.py
holds the ESDIRK methods' own)."""

import math

import numba
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from scichains import ode
from scichains.ode._testset import PROBLEMS, relative_error
from scichains.ode.stiff._linalg import lu_factor_solve, lu_solve_c, lu_solve_t

from ._stiff_problems import (
    STIFF,
    blowup,
    fixed_step_options,
    kaps,
    one_compartment,
    order,
    pk_exact,
    prothero_robinson,
    raising,
    sqrt_rhs,
    sqrt_vjp,
)

R23, R5P, K5, KC4, RAD = (m.name for m in STIFF)  # the tables below are keyed by name
NAME = lambda m: m.name  # noqa: E731

# fixed step sizes of the order measurements (in the asymptotic range of each method)
ORDER_DTS = {
    R23: [0.1, 0.05, 0.025, 0.0125],
    R5P: [0.2, 0.1, 0.05, 0.025],
    K5: [0.2, 0.1, 0.05, 0.025],
    KC4: [0.2, 0.1, 0.05, 0.025],
    RAD: [0.2, 0.1, 0.05, 0.025],
}
NONAUTONOMOUS_DTS = {
    R23: [0.1, 0.05, 0.025],
    R5P: [0.3, 0.15, 0.075],
    K5: [0.3, 0.15, 0.075, 0.0375],
    KC4: [0.3, 0.15, 0.075, 0.0375],
    RAD: [0.3, 0.15, 0.075, 0.0375],
}


@pytest.mark.parametrize("solver", STIFF, ids=NAME)
def test_measured_order_on_a_nonlinear_problem(solver):
    # Kaps' problem with eps = 1 (nonlinear, no boundary layer): the classical order
    prob = ode.ODEProblem(kaps, [1.0, 1.0], (0.0, 1.0), [1.0])
    exact = np.exp([-2.0, -1.0])
    dts = ORDER_DTS[solver.name]
    errs = []
    for dt in dts:
        sol = ode.solve(prob, solver(), dt0=dt, adaptive=False, **fixed_step_options(solver))
        assert sol.success and sol.stats["naccept"] == round(1.0 / dt)
        errs.append(np.abs(sol.u[-1] - exact).max())
    slope = order(errs, dts)
    assert abs(slope - solver.order) < 0.3, (solver.name, slope, errs)


@pytest.mark.parametrize("solver", STIFF, ids=NAME)
def test_measured_order_non_autonomous(solver):
    # Prothero-Robinson with lam = -2: df/dt enters every stage (Rosenbrock: the one-sided
    # difference)
    prob = ode.ODEProblem(prothero_robinson, [0.0], (0.0, 3.0), [-2.0])
    dts = NONAUTONOMOUS_DTS[solver.name]
    errs = []
    for dt in dts:
        sol = ode.solve(prob, solver(), dt0=dt, adaptive=False, **fixed_step_options(solver))
        errs.append(abs(sol.u[-1, 0] - (math.sin(3.0) + 2.25)))
    slope = order(errs, dts)
    assert abs(slope - solver.order) < 0.35, (solver.name, slope, errs)


@pytest.mark.parametrize("solver", STIFF, ids=NAME)
def test_dense_output_order(solver):
    # saves at the middle of every fixed step come from the continuous extension; its local
    # error is O(h^(q+1)) for a dense output of order q (the ESDIRK methods' third-order
    # ones: cubic Hermite for Kvaerno5, Kennedy & Carpenter's for KenCarp4)
    prob = ode.ODEProblem(kaps, [1.0, 1.0], (0.0, 1.0), [1.0])
    dts = [0.1, 0.05, 0.025]
    errs = []
    for dt in dts:
        mids = np.arange(0.5 * dt, 1.0, dt)
        sol = ode.solve(
            prob, solver(), dt0=dt, adaptive=False, saveat=mids, **fixed_step_options(solver)
        )
        assert sol.stats["naccept"] == round(1.0 / dt)  # the saves did not cut the steps
        exact = np.exp(-np.outer(mids, [2.0, 1.0]))
        errs.append(np.abs(sol.u - exact).max())
        # sol(t) uses the same extension
        np.testing.assert_allclose(sol(mids), sol.u, rtol=0, atol=1e-14)
    slope = order(errs, dts)
    want = min(solver.order, solver.interp_order + 1)
    assert slope > want - 0.4, (solver.name, slope, errs)  # Rodas5P: 4.75 (-> 5)


# (relative error landing on the save times, between steps, most accepted steps)
KAPS_TOLERANCES = {
    R23: (1e-5, 1e-5, 10_000),
    R5P: (1e-5, 1e-5, 10_000),
    K5: (1e-6, 3e-4, 1_000),
    KC4: (1e-6, 1e-6, 1_000),
    RAD: (1e-6, 1e-6, 1_000),
}


@pytest.mark.parametrize("eps", [1e-3, 1e-6, 1e-9])
@pytest.mark.parametrize("solver", STIFF, ids=NAME)
def test_stiff_kaps_within_tolerance(solver, eps):
    # the stiff limit: steps far longer than eps, the error still within the tolerance (an
    # explicit method needs ~1 / eps steps)
    prob = ode.ODEProblem(kaps, [1.0, 1.0], (0.0, 1.0), [eps])
    exact = np.exp(-np.outer([0.5, 1.0], [2.0, 1.0]))
    land, between, most = KAPS_TOLERANCES[solver.name]
    # landing on the save times: the steps' accuracy
    sol = ode.solve(prob, solver(), rtol=1e-7, atol=1e-10, saveat=[0.5, 1.0], tstops=[0.5])
    assert sol.success
    np.testing.assert_allclose(sol.u, exact, rtol=land)
    assert sol.stats["naccept"] < most
    # between steps the dense output. Kvaerno5's cubic Hermite interpolant takes its end
    # slope from the last stage derivative, which in the stiff limit is accurate to the stage
    # order (2) only, and so is the interpolant: measured at t = 0.5, 3.7e-8, 9.6e-6 and
    # 1.0e-4 relative for eps = 1e-3, 1e-6, 1e-9 (steps of ~0.1). KenCarp4's dense output
    # (Kennedy & Carpenter's) holds in the stiff limit: 1.6e-7, 2.3e-7, 2.6e-7.
    sol = ode.solve(prob, solver(), rtol=1e-7, atol=1e-10, saveat=[0.5, 1.0])
    assert sol.success
    np.testing.assert_allclose(sol.u, exact, rtol=between)
    assert sol.stats["naccept"] < most


# (relative error at rtol 1e-10, step limit). 5 significant digits asked; measured
# (2026-12-01) Rodas5P 8 or more, Kvaerno5 9.5-10.8, KenCarp4 9.3-10.5 on the four
BARI = {
    R23: (1e-5, 10**7),
    R5P: (1e-8, 10**6),
    K5: (5e-9, 10**6),
    KC4: (5e-9, 10**6),
    RAD: (5e-9, 10**6),
}


@pytest.mark.parametrize("solver", STIFF, ids=NAME)
@pytest.mark.parametrize("name", ["HIRES", "OREGO", "VDPOL", "POLLU", "ROBER"])
def test_five_digits_on_the_bari_test_set(name, solver):
    """Five significant digits or more at rtol 1e-10 on the Bari problems and Robertson."""
    tp = PROBLEMS[name]
    tol, max_steps = BARI[solver.name]
    sol = ode.solve(
        tp.problem(), solver(), rtol=1e-10, atol=1e-14, saveat=[tp.tspan[1]], max_steps=max_steps
    )
    assert sol.success
    assert relative_error(sol.u[-1], tp.reference) < tol


@pytest.mark.parametrize("solver", STIFF, ids=NAME)
def test_doses_tstops_and_saveat(solver):
    ka, ke = 1e3, 0.3
    prob = ode.ODEProblem(one_compartment, [0.0, 0.0], (0.0, 24.0), [ka, ke])
    doses = [(0.0, 0, 100.0), (8.0, 0, 100.0), (12.5, 0, 50.0)]
    saveat = np.linspace(0.0, 24.0, 97)
    sol = ode.solve(prob, solver(), saveat=saveat, jumps=doses, tstops=[3.3], rtol=1e-8, atol=1e-10)
    assert sol.success
    given = [(t, a) for t, _, a in doses]
    exact = pk_exact(saveat, given, ka, ke)
    # the dense output sets the accuracy between steps (Rodas5P's is of higher order)
    tol = 2e-6 if solver.name == R5P else 2e-5
    np.testing.assert_allclose(sol.u, exact, rtol=tol, atol=tol * 100)
    # the step times include the tstop and the doses (left and right limits)
    assert 3.3 in sol.step_times and np.sum(sol.step_times == 8.0) == 2
    # dense output between steps, never across a dose
    tq = np.array([7.99, 8.0, 8.01, 12.6])
    np.testing.assert_allclose(sol(tq), pk_exact(tq, given, ka, ke), rtol=tol, atol=tol * 100)
    # at the step points (every dose, tstop and t1 is one) the steps' own accuracy (the
    # second-order Rosenbrock23's global error: 4e-6 relative)
    at = np.array([3.3, 8.0, 12.5, 24.0])
    at_tol = 1e-5 if solver.name == R23 else 1e-6
    np.testing.assert_allclose(sol(at), pk_exact(at, given, ka, ke), rtol=at_tol, atol=1e-8)


@pytest.mark.parametrize("solver", STIFF, ids=NAME)
def test_nonfinite_jacobian_names_the_entry(solver):
    prob = ode.ODEProblem(sqrt_rhs, [0.0, 1.0], (0.0, 1.0), vjp=sqrt_vjp)
    sol = ode.solve(prob, solver())
    assert sol.status == ode.ReturnCode.JACOBIAN_NONFINITE
    assert "df[0]/du[0]" in sol.message and "t = 0.0" in sol.message
    with pytest.raises(ode.ODESolveError, match=r"JACOBIAN_NONFINITE.*df\[0\]/du\[0\]"):
        ode.solve(prob, solver(), throw=True)


@pytest.mark.parametrize("solver", STIFF, ids=NAME)
def test_rhs_exception_reaches_the_user(solver):
    prob = ode.ODEProblem(raising, [1.0], (0.0, 1.0), vjp=None)
    sol = ode.solve(prob, solver(jacobian="finite difference"))
    assert sol.status == ode.ReturnCode.RHS_ERROR
    assert isinstance(sol.exception, ValueError)
    with pytest.raises(ode.ODESolveError) as info:
        ode.solve(prob, solver(jacobian="finite difference"), throw=True)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize("solver", STIFF, ids=NAME)
def test_step_underflow(solver):
    # u' = u^2 from u = 1 blows up at t = 1: the solve stops there with a status (an ESDIRK
    # method's Newton iteration may be the first to fail). An implicit step can land a little
    # past the pole, where the solution continues from -inf (KenCarp4: t = 1.0000188, then
    # DT_UNDERFLOW), never far past it.
    prob = ode.ODEProblem(blowup, [1.0], (0.0, 2.0))
    sol = ode.solve(prob, solver())
    assert sol.status in (
        ode.ReturnCode.DT_UNDERFLOW,
        ode.ReturnCode.NONFINITE,
        ode.ReturnCode.NEWTON_FAILURE,
    )
    assert sol.t_reached < 1.0 + (1e-4 if solver.name == KC4 else 1e-6)


# ---- the Rosenbrock methods' own


@pytest.mark.parametrize("name", ["HIRES", "VDPOL"])
def test_finite_difference_jacobian_agrees(name):
    tp = PROBLEMS[name]
    prob = tp.problem()
    a = ode.solve(prob, ode.Rodas5P(jacobian="finite difference"), rtol=1e-8, atol=1e-12)
    assert a.success
    assert relative_error(a.u[-1], tp.reference) < 1e-6
    b = ode.solve(prob, ode.Rodas5P(), rtol=1e-8, atol=1e-12)
    # the Jacobian steers the step only through W: same accuracy, similar work
    assert abs(a.stats["naccept"] - b.stats["naccept"]) <= 0.1 * b.stats["naccept"]
    assert b.stats["nf"] < a.stats["nf"]  # the exact Jacobian needs no f calls


def test_backward_in_time_and_against_scipy_radau():
    tp = PROBLEMS["OREGO"]
    fwd = ode.solve(tp.problem(), ode.Rodas5P(), rtol=1e-9, atol=1e-12, saveat=[50.0])
    prob = ode.ODEProblem(tp.f, fwd.u[-1], (50.0, 40.0))
    back = ode.solve(prob, ode.Rodas5P(), rtol=1e-9, atol=1e-12, saveat=[45.0, 40.0])
    assert back.success

    def rhs(t, y):
        du = np.empty(3)
        tp.f(du, y, np.zeros(0), t)
        return du

    ref = solve_ivp(rhs, (50.0, 40.0), fwd.u[-1], method="Radau", rtol=1e-12, atol=1e-14,
                    t_eval=[45.0, 40.0]).y.T  # fmt: skip
    np.testing.assert_allclose(back.u, ref, rtol=1e-6)


def test_stats_and_jacobian_reuse_after_rejection():
    tp = PROBLEMS["VDPOL"]
    sol = ode.solve(tp.problem(), ode.Rodas5P(), rtol=1e-6, atol=1e-10)
    st = sol.stats
    assert st["nreject"] > 0
    # one Jacobian per accepted step (a rejected step reuses it); one LU per attempt
    assert st["njac"] == st["naccept"]
    assert st["nlu"] == st["naccept"] + st["nreject"]


# J = -1e308 G with G Wilkinson's growth matrix: partial pivoting doubles the last column at
# each elimination step, so W = I/(h gamma) - J overflows to an infinite pivot for every h
_G = np.array([[1.0, 0.0, 1.0], [-1.0, 1.0, 1.0], [-1.0, -1.0, 1.0]])


@numba.njit
def overflowing(du, u, p, t):
    for i in range(3):
        acc = 0.0
        for j in range(3):
            acc += p[3 * i + j] * u[j]
        du[i] = -1e308 * acc


@numba.njit
def overflowing_vjp(v, u, p, t, ubar, pbar):
    for j in range(3):
        acc = 0.0
        for i in range(3):
            acc += v[i] * p[3 * i + j]
        ubar[j] = -1e308 * acc
    for j in range(pbar.size):
        pbar[j] = 0.0


def test_singular_iteration_matrix():
    prob = ode.ODEProblem(overflowing, [0.0, 0.0, 0.0], (0.0, 1.0), _G.ravel(), vjp=overflowing_vjp)
    sol = ode.solve(prob, ode.Rodas5P(), dt0=0.1)
    assert sol.status == ode.ReturnCode.SINGULAR
    assert "singular" in sol.message
    assert sol.stats["naccept"] == 0 and sol.stats["nlu"] > 10  # it shrank the step first


def test_bad_options():
    with pytest.raises(ValueError, match="jacobian must be one of"):
        ode.Rodas5P(jacobian="numerical")

    def python_rhs(du, u, p, t):
        du[0] = -u[0]

    prob = ode.ODEProblem(python_rhs, [1.0], (0.0, 1.0))
    with pytest.raises(TypeError, match="compiled with numba"):
        ode.solve(prob, ode.Rodas5P())
    assert repr(ode.Rodas5P()) == "Rodas5P(jacobian='exact')"


# ---- the dense LU


@pytest.mark.parametrize("n", [1, 2, 5, 17, 50])
def test_lu_against_numpy(n):
    rng = np.random.default_rng(n)
    A = rng.standard_normal((n, n)) + 0.1 * np.eye(n)
    b = rng.standard_normal(n)
    LU = A.copy()
    piv = np.empty(n, dtype=np.int64)
    x = b.copy()
    assert lu_factor_solve(LU, piv, x) == -1
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-9, atol=1e-11)
    y = b.copy()
    lu_solve_t(LU, piv, y)
    np.testing.assert_allclose(y, np.linalg.solve(A.T, b), rtol=1e-9, atol=1e-11)
    z = b.copy()
    lu_solve_c(LU, piv, z)  # the column-oriented substitutions the stepper uses
    np.testing.assert_allclose(z, np.linalg.solve(A, b), rtol=1e-9, atol=1e-11)


def test_lu_reports_a_singular_column():
    A = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]])
    piv = np.empty(3, dtype=np.int64)
    assert lu_factor_solve(A, piv, np.ones(3)) == 1


@numba.njit
def _robertson(du, u, p, t):
    du[0] = -0.04 * u[0] + 1e4 * u[1] * u[2]
    du[1] = 0.04 * u[0] - 1e4 * u[1] * u[2] - 3e7 * u[1] ** 2
    du[2] = 3e7 * u[1] ** 2


@numba.njit
def _oscillator(du, u, p, t):
    du[0] = u[1]
    du[1] = -u[0]


def test_max_steps_on_a_stiff_problem_says_it_looks_stiff():
    # Tsit5 on Robertson: h |lambda| held at the stability limit (~3.3), never by accuracy
    prob = ode.ODEProblem(_robertson, [1.0, 0.0, 0.0], (0.0, 1e5))
    sol = ode.solve(prob, ode.Tsit5(), max_steps=20_000)
    assert sol.status == ode.ReturnCode.MAX_STEPS
    assert "looks stiff" in sol.message and "Rodas5P()" in sol.message
    ratio = float(sol.message.split("h |lambda| = ")[1].split(" ")[0])
    assert 1.5 < ratio < 5.0, sol.message
    with pytest.raises(ode.ODESolveError, match="looks stiff"):
        ode.solve(prob, ode.Tsit5(), max_steps=20_000, throw=True)
    # a non-stiff problem that runs out of steps (a long span) gets no such hint
    long = ode.ODEProblem(_oscillator, [1.0, 0.0], (0.0, 1e4))
    sol = ode.solve(long, ode.Tsit5(), max_steps=2_000)
    assert sol.status == ode.ReturnCode.MAX_STEPS and "stiff" not in sol.message
