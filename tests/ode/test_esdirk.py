"""The compiled ESDIRK solvers (Kvaerno5, KenCarp4): measured convergence orders of the steps
and of the dense output, the Bari test set's reference solutions, doses/tstops/saveat,
backward time, Jacobian reuse and the status codes of the Newton iteration."""

import math

import numba
import numpy as np
import pytest

from scichains import ode
from scichains.ode._testset import PROBLEMS, relative_error

# tight tolerances for the fixed-step order measurements: they set the Newton iteration's
# stopping test, whose error must stay below the truncation error being measured
NEWTON_TIGHT = dict(rtol=1e-13, atol=1e-15)

ESDIRKS = [ode.Kvaerno5, ode.KenCarp4]


@numba.njit
def kaps(du, u, p, t):
    # Kaps' problem: stiff (eps = p[0]) and nonlinear, u = (exp(-2t), exp(-t)) for every eps
    du[0] = -(2.0 + 1.0 / p[0]) * u[0] + u[1] * u[1] / p[0]
    du[1] = u[0] - u[1] * (1.0 + u[1])


@numba.njit
def prothero_robinson(du, u, p, t):
    # u' = lam (u - phi(t)) + phi'(t), phi = sin t + t^2 / 4: non-autonomous, u = phi exactly
    du[0] = p[0] * (u[0] - math.sin(t) - 0.25 * t * t) + math.cos(t) + 0.5 * t


def _order(errs, dts):
    return np.polyfit(np.log(dts), np.log(errs), 1)[0]


def test_tableau_and_api():
    k5 = ode.Kvaerno5
    assert k5.stages == 7 and k5.order == 5 and k5.error_order == 4
    A = k5.butcher()
    # stiffly accurate: u_new is the last stage; the error estimate is Y_7 - Y_6
    np.testing.assert_allclose(A[-1].sum(), 1.0, atol=1e-15)
    np.testing.assert_allclose(k5.btilde, A[-1] - A[-2], atol=1e-16)
    # the three fifth-order conditions of the deepest trees, independent of the ones asserted
    # when the method is made
    b, c = A[-1], k5.c
    assert abs(b @ (A @ (A @ (A @ c))) - 1 / 120) < 1e-14
    assert abs(b @ (c * (A @ (A @ c))) - 1 / 30) < 1e-14
    assert abs(b @ ((A @ c) ** 2) - 1 / 20) < 1e-14
    assert repr(ode.Kvaerno5()) == "Kvaerno5(jacobian='exact')"
    assert ode.Kvaerno5(jacobian="finite difference").jacobian == "finite difference"
    with pytest.raises(ValueError, match="jacobian must be one of"):
        ode.Kvaerno5(jacobian="numerical")


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_measured_order_on_a_nonlinear_problem(solver):
    # Kaps' problem with eps = 1 (nonlinear, no boundary layer): the classical order
    prob = ode.ODEProblem(kaps, [1.0, 1.0], (0.0, 1.0), [1.0])
    exact = np.exp([-2.0, -1.0])
    dts = [0.2, 0.1, 0.05, 0.025]
    errs = []
    for dt in dts:
        sol = ode.solve(prob, solver(), dt0=dt, adaptive=False, **NEWTON_TIGHT)
        assert sol.success and sol.stats["naccept"] == round(1.0 / dt)
        errs.append(np.abs(sol.u[-1] - exact).max())
    slope = _order(errs, dts)
    assert abs(slope - solver.order) < 0.3, (solver.name, slope, errs)


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_measured_order_non_autonomous(solver):
    prob = ode.ODEProblem(prothero_robinson, [0.0], (0.0, 3.0), [-2.0])
    dts = [0.3, 0.15, 0.075, 0.0375]
    errs = []
    for dt in dts:
        sol = ode.solve(prob, solver(), dt0=dt, adaptive=False, **NEWTON_TIGHT)
        errs.append(abs(sol.u[-1, 0] - (math.sin(3.0) + 2.25)))
    slope = _order(errs, dts)
    assert abs(slope - solver.order) < 0.35, (solver.name, slope, errs)


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_dense_output_order(solver):
    # saves in the middle of every fixed step come from the third-order dense output (cubic
    # Hermite for Kvaerno5, Kennedy & Carpenter's for KenCarp4): local error O(h^4)
    prob = ode.ODEProblem(kaps, [1.0, 1.0], (0.0, 1.0), [1.0])
    dts = [0.1, 0.05, 0.025]
    errs = []
    for dt in dts:
        mids = np.arange(0.5 * dt, 1.0, dt)
        sol = ode.solve(prob, solver(), dt0=dt, adaptive=False, saveat=mids, **NEWTON_TIGHT)
        assert sol.stats["naccept"] == round(1.0 / dt)  # the saves did not cut the steps
        exact = np.exp(-np.outer(mids, [2.0, 1.0]))
        errs.append(np.abs(sol.u - exact).max())
        np.testing.assert_allclose(sol(mids), sol.u, rtol=0, atol=1e-14)
    slope = _order(errs, dts)
    assert slope > solver.interp_order + 1 - 0.4, (solver.name, slope, errs)


@pytest.mark.parametrize("eps", [1e-3, 1e-6, 1e-9])
@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_stiff_kaps_within_tolerance(eps, solver):
    prob = ode.ODEProblem(kaps, [1.0, 1.0], (0.0, 1.0), [eps])
    exact = np.exp(-np.outer([0.5, 1.0], [2.0, 1.0]))
    # landing on the save times: the steps' accuracy
    sol = ode.solve(prob, solver(), rtol=1e-7, atol=1e-10, saveat=[0.5, 1.0], tstops=[0.5])
    assert sol.success
    np.testing.assert_allclose(sol.u, exact, rtol=1e-6)
    assert sol.stats["naccept"] < 1_000  # an explicit method needs ~1 / eps steps
    # between steps the dense output. Kvaerno5's cubic Hermite interpolant takes its end
    # slope from the last stage derivative, which in the stiff limit is accurate to the stage
    # order (2) only, and so is the interpolant: measured at t = 0.5, 3.7e-8, 9.6e-6 and
    # 1.0e-4 relative for eps = 1e-3, 1e-6, 1e-9 (steps of ~0.1). KenCarp4's dense output
    # (Kennedy & Carpenter's) holds in the stiff limit: 1.6e-7, 2.3e-7, 2.6e-7.
    between = ode.solve(prob, solver(), rtol=1e-7, atol=1e-10, saveat=[0.5, 1.0])
    np.testing.assert_allclose(between.u, exact, rtol=3e-4 if solver is ode.Kvaerno5 else 1e-6)


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
@pytest.mark.parametrize("name", ["HIRES", "OREGO", "VDPOL", "POLLU"])
def test_five_digits_on_the_bari_test_set(name, solver):
    tp = PROBLEMS[name]
    sol = ode.solve(
        tp.problem(), solver(), rtol=1e-10, atol=1e-14, saveat=[tp.tspan[1]], max_steps=10**6
    )
    assert sol.success
    # 5 significant digits asked; measured (2026-12-01) 9.5-10.8 for Kvaerno5, 9.3-10.5 for
    # KenCarp4 on the four
    assert relative_error(sol.u[-1], tp.reference) < 5e-9


@pytest.mark.parametrize("name", ["HIRES", "VDPOL"])
def test_finite_difference_jacobian_and_reuse(name):
    tp = PROBLEMS[name]
    prob = tp.problem()
    a = ode.solve(prob, ode.Kvaerno5(jacobian="finite difference"), rtol=1e-8, atol=1e-12)
    b = ode.solve(prob, ode.Kvaerno5(), rtol=1e-8, atol=1e-12)
    assert a.success and b.success
    assert relative_error(a.u[-1], tp.reference) < 1e-6
    assert relative_error(b.u[-1], tp.reference) < 1e-6
    st = b.stats
    # the Jacobian is kept across steps, the LU while the step size is
    assert st["njac"] < 0.5 * st["naccept"]
    assert st["nlu"] < st["naccept"] + st["nreject"]
    # f is called once per Newton iteration (plus the first f and the initial step's guess)
    assert st["nf"] == st["nnewton"] + 2


@numba.njit
def one_compartment(du, u, p, t):
    du[0] = -p[0] * u[0]
    du[1] = p[0] * u[0] - p[1] * u[1]


def _pk_exact(t, doses, ka, ke):
    out = np.zeros((t.size, 2))
    for td, amount in doses:
        s = np.clip(t - td, 0.0, None)
        on = t >= td
        out[:, 0] += on * amount * np.exp(-ka * s)
        out[:, 1] += on * amount * ka / (ka - ke) * (np.exp(-ke * s) - np.exp(-ka * s))
    return out


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_doses_tstops_and_saveat(solver):
    ka, ke = 1e3, 0.3
    prob = ode.ODEProblem(one_compartment, [0.0, 0.0], (0.0, 24.0), [ka, ke])
    doses = [(0.0, 0, 100.0), (8.0, 0, 100.0), (12.5, 0, 50.0)]
    saveat = np.linspace(0.0, 24.0, 97)
    sol = ode.solve(prob, solver(), saveat=saveat, jumps=doses, tstops=[3.3], rtol=1e-8, atol=1e-10)
    assert sol.success
    exact = _pk_exact(saveat, [(t, a) for t, _, a in doses], ka, ke)
    # the cubic Hermite dense output sets the accuracy between steps
    np.testing.assert_allclose(sol.u, exact, rtol=2e-5, atol=2e-3)
    assert 3.3 in sol._st and np.sum(sol._st == 8.0) == 2
    tq = np.array([7.99, 8.0, 8.01, 12.6])
    np.testing.assert_allclose(
        sol(tq), _pk_exact(tq, [(t, a) for t, _, a in doses], ka, ke), rtol=2e-5, atol=2e-3
    )
    # at the step points (every dose, tstop and t1 is one) the steps' own accuracy
    at = np.array([3.3, 8.0, 12.5, 24.0])
    np.testing.assert_allclose(
        sol(at), _pk_exact(at, [(t, a) for t, _, a in doses], ka, ke), rtol=1e-6, atol=1e-8
    )


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_backward_in_time_stiff(solver):
    # Prothero-Robinson with lam = +1e4 is stiff and stable backward in time: u = phi exactly
    phi = lambda t: np.sin(t) + 0.25 * t**2  # noqa: E731
    prob = ode.ODEProblem(prothero_robinson, [phi(3.0)], (3.0, 0.0), [1e4])
    sol = ode.solve(prob, solver(), rtol=1e-9, atol=1e-12, saveat=[2.0, 1.5, 0.0],
                    tstops=[1.5])  # fmt: skip
    assert sol.success and sol.stats["naccept"] < 2_000
    np.testing.assert_allclose(sol.u[:, 0], phi(np.array([2.0, 1.5, 0.0])), rtol=1e-7, atol=1e-9)
    assert 1.5 in sol._st


# ---- status codes and bad input


@numba.njit
def fast_decay(du, u, p, t):
    du[0] = -1e12 * u[0]


@numba.njit
def wrong_sign_vjp(v, u, p, t, ubar, pbar):
    ubar[0] = 1e12 * v[0]  # the true derivative is -1e12: simplified Newton diverges


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_newton_failure_is_a_status(solver):
    prob = ode.ODEProblem(fast_decay, [1.0], (0.0, 1.0), vjp=wrong_sign_vjp)
    sol = ode.solve(prob, solver(), dt0=0.1)
    assert sol.status == ode.ReturnCode.NEWTON_FAILURE
    assert "Newton iteration" in sol.message and "failed to converge" in sol.message
    assert sol.stats["nnewton_fail"] == 10 and sol.stats["naccept"] == 0
    with pytest.raises(ode.ODESolveError, match="NEWTON_FAILURE"):
        ode.solve(prob, solver(), dt0=0.1, throw=True)
    # the right Jacobian: the same problem is easy
    good = ode.ODEProblem(fast_decay, [1.0], (0.0, 1.0))
    assert ode.solve(good, solver(), dt0=0.1).success


@numba.njit
def sqrt_rhs(du, u, p, t):
    du[0] = -math.sqrt(abs(u[0]))
    du[1] = -u[1]


@numba.njit
def sqrt_vjp(v, u, p, t, ubar, pbar):
    r = math.sqrt(abs(u[0]))
    ubar[0] = -v[0] * (0.5 / r if r > 0.0 else math.inf)
    ubar[1] = -v[1]


def test_nonfinite_jacobian_names_the_entry():
    prob = ode.ODEProblem(sqrt_rhs, [0.0, 1.0], (0.0, 1.0), vjp=sqrt_vjp)
    sol = ode.solve(prob, ode.Kvaerno5())
    assert sol.status == ode.ReturnCode.JACOBIAN_NONFINITE
    assert "df[0]/du[0]" in sol.message and "t = 0.0" in sol.message


@numba.njit
def raising(du, u, p, t):
    if t > 0.5:
        raise ValueError("boom at t > 0.5")
    du[0] = -u[0]


def test_rhs_exception_reaches_the_user():
    prob = ode.ODEProblem(raising, [1.0], (0.0, 1.0), vjp=None)
    with pytest.raises(ode.ODESolveError) as info:
        ode.solve(prob, ode.Kvaerno5(jacobian="finite difference"), throw=True)
    assert isinstance(info.value.__cause__, ValueError)


def test_step_underflow():
    @numba.njit
    def blowup(du, u, p, t):
        du[0] = u[0] * u[0]

    prob = ode.ODEProblem(blowup, [1.0], (0.0, 2.0))
    sol = ode.solve(prob, ode.Kvaerno5())
    assert sol.status in (
        ode.ReturnCode.DT_UNDERFLOW,
        ode.ReturnCode.NONFINITE,
        ode.ReturnCode.NEWTON_FAILURE,
    )
    assert sol.t_reached < 1.0 + 1e-6
