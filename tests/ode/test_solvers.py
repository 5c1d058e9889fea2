"""Explicit RK solvers: measured convergence orders, accuracy against scipy's DOP853."""

import numba
import numpy as np
import pytest
from scipy.integrate import quad, solve_ivp
from scipy.linalg import expm

from scichains import ode
from scichains.ode._family import registered

M = np.array([[-0.5, 2.0, 0.0], [-2.0, -0.5, 0.3], [0.1, 0.0, -1.0]])

# every explicit method registered, and those with an error estimate / a continuous extension
# (a new tableau is tested by registering it)
EXPLICIT = registered("explicit")
ADAPTIVE = [s for s in EXPLICIT if s.btilde is not None]
WITH_EXTENSION = [s for s in EXPLICIT if s.interp is not None]
FOURTH_ORDER_EXTENSION = [s for s in WITH_EXTENSION if s.interp_order >= 4]


def NAME(solver):  # noqa: N802 - a pytest id function
    return solver.name


@numba.njit
def linear(du, u, p, t):
    for i in range(3):
        acc = 0.0
        for j in range(3):
            acc += p[3 * i + j] * u[j]
        du[i] = acc


@numba.njit
def logistic_forced(du, u, p, t):
    # u' = u (1 - u) + sin t u: nonlinear and time-dependent; exact solution below
    du[0] = u[0] * (1.0 - u[0]) + np.sin(t) * u[0]


def logistic_exact(t, u0=0.1):
    # Bernoulli equation: v = 1/u satisfies v' = -(1 + sin t) v + 1
    g = t - np.cos(t) + 1.0  # integral of (1 + sin s) from 0 to t
    integral = quad(lambda s: np.exp(s - np.cos(s) + 1.0), 0.0, t, epsabs=0, epsrel=1e-13)[0]
    v = np.exp(-g) * (1.0 / u0 + integral)
    return 1.0 / v


@pytest.mark.parametrize("solver", EXPLICIT, ids=NAME)
def test_measured_convergence_order_linear(solver):
    prob = ode.ODEProblem(linear, [1.0, 0.5, -0.3], (0.0, 2.0), M.ravel())
    exact = expm(2.0 * M) @ prob.u0
    dts = [0.1, 0.05, 0.025] if solver.order < 5 else [0.2, 0.1, 0.05]
    errs = []
    for dt in dts:
        sol = ode.solve(prob, solver=solver(), dt0=dt, adaptive=False)
        assert sol.stats["naccept"] == round(2.0 / dt)
        errs.append(np.abs(sol.u[-1] - exact).max())
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert abs(slope - solver.order) < 0.5, (solver.name, slope, errs)


@numba.njit
def cubic_decay(du, u, p, t):
    # u' = -(1 + t) u^3: nonlinear and time-dependent, u = 1 / (1 + t) from u(1) = 1/2
    du[0] = -(1.0 + t) * u[0] ** 3


@numba.njit
def kepler(du, u, p, t):
    # a circular orbit: x = cos t, y = sin t
    r3 = (u[0] ** 2 + u[1] ** 2) ** 1.5
    du[0] = u[2]
    du[1] = u[3]
    du[2] = -u[0] / r3
    du[3] = -u[1] / r3


# step sizes in each method's asymptotic range and above rounding, found by measurement:
# the 5th- and 7th-order pairs approach their order from above on u' = -(1 + t) u^3 (their
# next-order terms are relatively large), so Vern7 is measured on the Kepler orbit instead
NONLINEAR = {
    "Euler": ("cubic", 0.1),
    "RK4": ("cubic", 0.1),
    "BS3": ("cubic", 0.1),
    "DP5": ("cubic", 0.05),
    "Tsit5": ("cubic", 0.05),
    "Vern7": ("kepler", 0.2),
}


@pytest.mark.parametrize("solver", EXPLICIT, ids=NAME)
def test_measured_convergence_order_nonlinear(solver):
    which, dt0 = NONLINEAR[solver.name]
    if which == "cubic":
        prob = ode.ODEProblem(cubic_decay, [0.5], (1.0, 5.0))
        dts = dt0 * 0.5 ** np.arange(2)
    else:
        prob = ode.ODEProblem(kepler, [1.0, 0.0, 0.0, 1.0], (0.0, 6.0))
        dts = dt0 * 0.5 ** np.arange(3)
    errs = []
    for dt in dts:
        sol = ode.solve(prob, solver=solver(), dt0=dt, adaptive=False)
        if which == "cubic":
            exact = (1.0 / (1.0 + sol.t))[:, None]
        else:
            exact = np.stack([np.cos(sol.t), np.sin(sol.t)], axis=1)
        errs.append(np.abs(sol.u[:, : exact.shape[1]] - exact).max())  # global error
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert abs(slope - solver.order) < 0.5, (solver.name, slope, errs)


@numba.njit
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = p[2] * u[0] * u[1] - p[3] * u[1]


@numba.njit
def van_der_pol(du, u, p, t):
    du[0] = u[1]
    du[1] = p[0] * (1.0 - u[0] * u[0]) * u[1] - u[0]


@numba.njit
def detest_a4(du, u, p, t):
    # DETEST A4: u' = u/4 (1 - u/20)
    du[0] = 0.25 * u[0] * (1.0 - u[0] / 20.0)


@numba.njit
def detest_b5(du, u, p, t):
    # DETEST B5 (Euler's rigid body)
    du[0] = u[1] * u[2]
    du[1] = -u[0] * u[2]
    du[2] = -0.51 * u[0] * u[1]


CASES = {
    "lotka_volterra": (
        lotka_volterra,
        [1.0, 1.0],
        (0.0, 10.0),
        [1.5, 1.0, 1.0, 3.0],
        lambda t, u: [1.5 * u[0] - u[0] * u[1], u[0] * u[1] - 3 * u[1]],
    ),
    "van_der_pol": (
        van_der_pol,
        [2.0, 0.0],
        (0.0, 10.0),
        [2.0],
        lambda t, u: [u[1], 2.0 * (1 - u[0] ** 2) * u[1] - u[0]],
    ),
    "detest_a4": (
        detest_a4,
        [1.0],
        (0.0, 20.0),
        None,
        lambda t, u: [0.25 * u[0] * (1 - u[0] / 20)],
    ),
    "detest_b5": (
        detest_b5,
        [0.0, 1.0, 1.0],
        (0.0, 12.0),
        None,
        lambda t, u: [u[1] * u[2], -u[0] * u[2], -0.51 * u[0] * u[1]],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("solver", ADAPTIVE, ids=NAME)
def test_adaptive_against_dop853(case, solver):
    f, u0, tspan, p, pyf = CASES[case]
    ts = np.linspace(*tspan, 21)
    ref = solve_ivp(pyf, tspan, u0, method="DOP853", rtol=1e-12, atol=1e-12, t_eval=ts).y.T
    scale = np.abs(ref).max()
    prob = ode.ODEProblem(f, u0, tspan, p)
    errs = {}
    for rtol in (1e-4, 1e-7):
        sol = ode.solve(prob, solver=solver(), saveat=ts, rtol=rtol, atol=rtol * 1e-2)
        assert sol.success
        np.testing.assert_array_equal(sol.t, ts)
        errs[rtol] = np.abs(sol.u - ref).max() / scale
        # global error consistent with the tolerance (accumulated over the span)
        assert errs[rtol] < 200 * rtol, (case, solver.name, rtol, errs[rtol])
    # tighter is better, until both reach the reference's own accuracy (Vern7 on A4)
    assert errs[1e-7] < errs[1e-4] or errs[1e-4] < 1e-9


def test_backward_in_time_recovers_initial_value():
    prob = ode.ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 5.0), [1.5, 1.0, 1.0, 3.0])
    fwd = ode.solve(prob, rtol=1e-10, atol=1e-12)
    back = ode.ODEProblem(lotka_volterra, fwd.u[-1], (5.0, 0.0), [1.5, 1.0, 1.0, 3.0])
    sol = ode.solve(back, rtol=1e-10, atol=1e-12, saveat=[5.0, 2.5, 0.0])
    np.testing.assert_allclose(sol.u[-1], [1.0, 1.0], rtol=1e-7)
    np.testing.assert_allclose(sol.u[1], fwd(2.5), rtol=1e-6)
    assert np.all(np.diff(sol.t) < 0)


def test_dense_output_is_third_order_and_exact_at_steps():
    prob = ode.ODEProblem(linear, [1.0, 0.5, -0.3], (0.0, 2.0), M.ravel())
    sol = ode.solve(prob, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(sol(sol.t[5]), sol.u[5])
    tq = np.linspace(0, 2, 57)
    exact = np.array([expm(t * M) @ prob.u0 for t in tq])
    assert np.abs(sol(tq) - exact).max() < 1e-6
    with pytest.raises(ValueError, match="within the solved interval"):
        sol(2.5)


def test_statistics_and_fsal():
    prob = ode.ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 10.0), [1.5, 1.0, 1.0, 3.0])
    sol = ode.solve(prob)
    s = sol.stats
    # Tsit5 is FSAL: 6 new evaluations per attempted step, plus 2 at the start (f(u0) and
    # the initial-step estimate)
    assert s["nf"] == 6 * (s["naccept"] + s["nreject"]) + 2
    assert sol.t[0] == 0.0 and sol.t[-1] == 10.0


@pytest.mark.parametrize("solver", WITH_EXTENSION, ids=NAME)
def test_continuous_extensions_satisfy_their_order_conditions(solver):
    # b_i(theta) of an order-q extension satisfies the quadrature/tree conditions up to q
    # with theta^k/k! style right-hand sides; at theta = 1 it is the method's b
    A, b, c, _ = solver.arrays()
    np.testing.assert_allclose(solver.interp_weights(1.0), b, atol=1e-13)
    np.testing.assert_allclose(solver.interp_weights(0.0), 0.0, atol=0)
    for th in (0.2, 0.5, 0.9):
        w = solver.interp_weights(th)
        conds = [
            (w.sum(), th),
            (w @ c, th**2 / 2),
            (w @ c**2, th**3 / 3),
            (w @ (A @ c), th**3 / 6),
            (w @ c**3, th**4 / 4),
            (w @ (c * (A @ c)), th**4 / 8),
            (w @ (A @ c**2), th**4 / 12),
            (w @ (A @ (A @ c)), th**4 / 24),
        ]
        n_conds = {3: 4, 4: 8}[solver.interp_order]
        for got, want in conds[:n_conds]:
            assert abs(got - want) < 1e-13
        if solver.interp_order == 3:  # and it is not of order 4
            assert max(abs(g - w_) for g, w_ in conds[4:]) > 1e-3


@pytest.mark.parametrize("solver", FOURTH_ORDER_EXTENSION, ids=NAME)
def test_dense_output_between_steps_is_fifth_order(solver):
    # fixed steps; error halfway between steps: the fourth-order extension has local error
    # O(h^5), so the slope is 5 (cubic Hermite would give 4)
    prob = ode.ODEProblem(linear, [1.0, 0.5, -0.3], (0.0, 2.0), M.ravel())
    dts = [0.1, 0.05, 0.025]
    errs = []
    for dt in dts:
        sol = ode.solve(prob, solver=solver(), dt0=dt, adaptive=False)
        tq = np.arange(0.5, round(2.0 / dt)) * dt
        exact = np.array([expm(t * M) @ prob.u0 for t in tq])
        errs.append(np.abs(sol(tq) - exact).max())
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert 4.5 < slope < 6.0, (solver.name, slope, errs)


@pytest.mark.parametrize("solver", ADAPTIVE, ids=NAME)
def test_saveat_interpolates_without_shortening_steps(solver):
    prob = ode.ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 10.0), [1.5, 1.0, 1.0, 3.0])
    ts = np.linspace(0.0, 10.0, 201)
    free = ode.solve(prob, solver=solver(), rtol=1e-8, atol=1e-10)
    saved = ode.solve(prob, solver=solver(), saveat=ts, rtol=1e-8, atol=1e-10)
    ref = solve_ivp(
        lambda t, u: [1.5 * u[0] - u[0] * u[1], u[0] * u[1] - 3.0 * u[1]],
        (0.0, 10.0),
        [1.0, 1.0],
        method="DOP853",
        rtol=1e-13,
        atol=1e-13,
        t_eval=ts,
    ).y.T
    np.testing.assert_array_equal(saved.t, ts)
    assert np.abs(saved.u - ref).max() < 1e-5
    if solver.interp is not None:
        # the save times do not shorten the steps: the same steps as without them
        assert saved.stats == free.stats
        np.testing.assert_allclose(saved.u, free(ts), rtol=0, atol=1e-14)
    else:
        # no continuous extension of its own: the stepper lands on every save time
        assert saved.stats["naccept"] > free.stats["naccept"]
