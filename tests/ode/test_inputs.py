"""Measured inputs (ode.Interpolation, ODEProblem(inputs=)) against independent references:
scipy's interpolants, the closed-form solution of a forced linear ODE, scipy's solve_ivp
with the same interpolant."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numba
import numpy as np
import pytest
from numba.core.runtime import rtsys
from scipy.integrate import solve_ivp
from scipy.interpolate import Akima1DInterpolator, CubicSpline

from scichains import ode

from ._forced import SIGNAL, TS, convolution, forced

TIGHT = dict(rtol=1e-12, atol=1e-14)


T_SAVE = np.linspace(0.0, 10.0, 41)


@pytest.mark.parametrize("kind", ["linear", "constant"])
@pytest.mark.parametrize("solver", [ode.Tsit5(), ode.Rodas5P()], ids=["Tsit5", "Rodas5P"])
def test_forced_linear_ode_matches_the_convolution(solver, kind):
    u = ode.Interpolation(TS, SIGNAL, kind=kind)
    prob = ode.ODEProblem(forced, np.array([1.0]), (0.0, 10.0), np.array([0.7]), inputs=u)
    sol = ode.solve(prob, solver, saveat=T_SAVE, **TIGHT)
    assert sol.success
    exact = convolution(0.7, 1.0, TS, SIGNAL, kind, T_SAVE)
    assert np.abs(sol.u[:, 0] - exact).max() < 1e-9


@pytest.mark.slow  # a cold compile of each family's kernel
@pytest.mark.parametrize(
    "solver",
    [ode.KenCarp4(), ode.Kvaerno5(), ode.RadauIIA5()],
    ids=["KenCarp4", "Kvaerno5", "Radau"],
)
def test_every_implicit_family_takes_inputs(solver):
    u = ode.Interpolation(TS, SIGNAL)
    prob = ode.ODEProblem(forced, np.array([1.0]), (0.0, 10.0), np.array([0.7]), inputs=u)
    sol = ode.solve(prob, solver, saveat=T_SAVE, **TIGHT)
    exact = convolution(0.7, 1.0, TS, SIGNAL, "linear", T_SAVE)
    assert np.abs(sol.u[:, 0] - exact).max() < 1e-9


def test_the_solver_stops_at_the_samples_of_a_linear_input():
    u = ode.Interpolation(TS, SIGNAL)
    prob = ode.ODEProblem(forced, np.array([1.0]), (0.5, 9.5), np.array([0.7]), inputs=u)
    sol = ode.solve(prob, ode.Tsit5(), rtol=1e-3, atol=1e-6)  # every step saved
    inside = TS[(TS > 0.5) & (TS < 9.5)]
    assert np.isin(inside, sol.t).all()
    assert np.isin(u.stops, TS).all()
    smooth = ode.Interpolation(TS, SIGNAL, kind="cubic")
    assert smooth.stops.size == 0


def test_a_constant_input_costs_no_more_steps_than_a_linear_one():
    # the step before each sample ends a float short of it (Interpolation.stops): without
    # that, the last stages of the step ending at the sample saw the new value, and the
    # error control shortened the steps before every sample (7-12x the calls, measured)
    u = ode.Interpolation(TS, SIGNAL, kind="constant")
    assert np.isin(np.nextafter(TS, -np.inf), u.stops).all()
    nf = {}
    for kind in ("constant", "linear"):
        inp = ode.Interpolation(TS, SIGNAL, kind=kind)
        prob = ode.ODEProblem(forced, np.array([1.0]), (0.0, 10.0), np.array([0.7]), inputs=inp)
        sol = ode.solve(prob, ode.Tsit5(), saveat=T_SAVE, rtol=1e-6, atol=1e-8)
        exact = convolution(0.7, 1.0, TS, SIGNAL, kind, T_SAVE)
        assert np.abs(sol.u[:, 0] - exact).max() < 1e-6
        nf[kind] = sol.stats["nf"]
    assert nf["constant"] < 1.5 * nf["linear"]
    # backward in time too
    x1 = convolution(0.7, 1.0, TS, SIGNAL, "constant", np.array([10.0]))
    back = ode.ODEProblem(forced, x1, (10.0, 0.0), np.array([0.7]), inputs=u)
    sol = ode.solve(back, ode.Tsit5(), saveat=[0.0], **TIGHT)
    np.testing.assert_allclose(sol.u[-1], [1.0], rtol=1e-9)


@pytest.mark.parametrize("kind", ["linear", "constant"])
def test_cvode_takes_inputs(kind):
    # CVODE restarts at the samples of a constant input (its multistep history would
    # straddle the jump)
    u = ode.Interpolation(TS, SIGNAL, kind=kind)
    prob = ode.ODEProblem(forced, np.array([1.0]), (0.0, 10.0), np.array([0.7]), inputs=u)
    sol = ode.solve(prob, ode.CVODE_BDF(), saveat=T_SAVE, rtol=1e-10, atol=1e-12)
    assert sol.success
    exact = convolution(0.7, 1.0, TS, SIGNAL, kind, T_SAVE)
    assert np.abs(sol.u[:, 0] - exact).max() < 1e-7


def test_backward_in_time():
    u = ode.Interpolation(TS, SIGNAL)
    prob = ode.ODEProblem(forced, np.array([1.0]), (0.0, 10.0), np.array([0.7]), inputs=u)
    x1 = ode.solve(prob, ode.Tsit5(), saveat=[10.0], **TIGHT).u[-1]
    back = ode.ODEProblem(forced, x1, (10.0, 0.0), np.array([0.7]), inputs=u)
    x0 = ode.solve(back, ode.Tsit5(), saveat=[0.0], **TIGHT).u[-1]
    np.testing.assert_allclose(x0, [1.0], rtol=1e-8)


@pytest.mark.parametrize(
    "kind, reference",
    [
        ("linear", lambda ts, y: lambda t: np.interp(t, ts, y)),
        ("constant", lambda ts, y: lambda t: y[np.searchsorted(ts, t, side="right") - 1]),
        ("cubic", lambda ts, y: CubicSpline(ts, y, bc_type="natural")),
        ("akima", lambda ts, y: Akima1DInterpolator(ts, y)),
    ],
)
def test_interpolants_match_scipy(kind, reference):
    rng = np.random.default_rng(3)
    ts = np.cumsum(rng.uniform(0.2, 1.0, 15))
    y = rng.standard_normal(15)
    t = np.linspace(ts[0], ts[-1], 301)[:-1]
    got = ode.Interpolation(ts, y, kind=kind)(t)
    np.testing.assert_allclose(got[:, 0], reference(ts, y)(t), rtol=1e-12, atol=1e-12)
    # several channels at once, and a scalar time
    two = ode.Interpolation(ts, np.stack([y, 2 * y], axis=1), kind=kind)
    assert two(t).shape == (t.size, 2)
    np.testing.assert_allclose(two(t)[:, 1], 2 * got[:, 0], rtol=1e-12, atol=1e-12)
    assert two(float(t[7])).shape == (2,)
    # the end values outside the samples
    np.testing.assert_allclose(two([ts[0] - 1.0, ts[-1] + 1.0]), two([ts[0], ts[-1]]))


@numba.njit
def copy_inputs(du, u, p, t, x):
    for j in range(x.shape[0]):
        du[j] = x[j]


@pytest.mark.parametrize("kind", ["constant", "linear", "cubic", "akima"])
def test_the_compiled_evaluation_agrees_with_the_interpolant(kind):
    # what the right-hand side sees in x, at the samples, between them and at the ends
    rng = np.random.default_rng(4)
    ts = np.cumsum(rng.uniform(0.2, 1.0, 12))
    y = rng.standard_normal((12, 5))
    u = ode.Interpolation(ts, y, kind=kind)
    prob = ode.ODEProblem(copy_inputs, np.zeros(5), (ts[0], ts[-1]), inputs=u)
    times = np.concatenate([ts, np.linspace(ts[0], ts[-1], 97), [ts[0] - 1.0, ts[-1] + 1.0]])
    du = np.empty(5)
    for t in times:
        prob.f(du, np.zeros(5), prob.p, t)
        np.testing.assert_allclose(du, u(t), rtol=1e-14, atol=1e-14)


@numba.njit
def driven_pendulum(du, u, p, t, x):
    du[0] = u[1]
    du[1] = -p[0] * np.sin(u[0]) - p[1] * u[1] + x[0] * np.cos(u[0]) + x[1]


def test_two_channels_match_solve_ivp_with_the_same_interpolant():
    rng = np.random.default_rng(5)
    ts = np.linspace(0.0, 6.0, 25)
    values = np.stack([np.cos(ts), 0.3 * rng.standard_normal(25)], axis=1)
    u = ode.Interpolation(ts, values, kind="akima")
    p = np.array([2.0, 0.3])
    prob = ode.ODEProblem(driven_pendulum, np.array([0.5, 0.0]), (0.0, 6.0), p, inputs=u)
    save = np.linspace(0.0, 6.0, 13)
    sol = ode.solve(prob, ode.Tsit5(), saveat=save, tstops=ts, **TIGHT)

    def rhs(t, y):
        du = np.empty(2)
        driven_pendulum.py_func(du, y, p, t, u(t))
        return du

    ref = solve_ivp(
        rhs, (0.0, 6.0), [0.5, 0.0], method="DOP853", t_eval=save, rtol=1e-12, atol=1e-14
    )
    np.testing.assert_allclose(sol.u, ref.y.T, rtol=1e-7, atol=1e-9)


def test_an_ensemble_solves_each_trajectory_with_the_inputs():
    u = ode.Interpolation(TS, SIGNAL)
    prob = ode.ODEProblem(forced, np.array([1.0]), (0.0, 10.0), np.array([0.7]), inputs=u)
    ks = np.array([[0.3], [0.7], [1.5], [2.0]])
    ens = ode.solve_ensemble(ode.EnsembleProblem(prob, ps=ks), ode.Tsit5(), saveat=T_SAVE, **TIGHT)
    for i, k in enumerate(ks[:, 0]):
        exact = convolution(k, 1.0, TS, SIGNAL, "linear", T_SAVE)
        assert np.abs(ens.u[i][:, 0] - exact).max() < 1e-9
    # threads share the problem (and its compiled input table): the same results, bit for bit
    one = ode.solve_ensemble(
        ode.EnsembleProblem(prob, ps=ks), ode.Tsit5(), saveat=T_SAVE, threads=1, **TIGHT
    )
    with ThreadPoolExecutor(2) as pool:
        pooled = ode.solve_ensemble(
            ode.EnsembleProblem(prob, ps=ks),
            ode.Tsit5(),
            saveat=T_SAVE,
            executor=pool,
            batch_size=1,
            **TIGHT,
        )
    np.testing.assert_array_equal(ens.u, one.u)
    np.testing.assert_array_equal(pooled.u, one.u)


@pytest.mark.slow  # starts worker processes, which compile the adapter again
def test_worker_processes_rebuild_a_problem_with_inputs():
    u = ode.Interpolation(TS, SIGNAL)
    prob = ode.ODEProblem(forced, np.array([1.0]), (0.0, 10.0), np.array([0.7]), inputs=u)
    ks = np.array([[0.3], [0.7], [1.5], [2.0]])
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        ens = ode.solve_ensemble(
            ode.EnsembleProblem(prob, ps=ks),
            ode.Tsit5(),
            saveat=T_SAVE,
            executor=pool,
            batch_size=2,
            **TIGHT,
        )
    for i, k in enumerate(ks[:, 0]):
        exact = convolution(k, 1.0, TS, SIGNAL, "linear", T_SAVE)
        assert np.abs(ens.u[i][:, 0] - exact).max() < 1e-9


def _allocations():
    s = rtsys.get_allocation_stats()
    return s.alloc + s.mi_alloc


@numba.njit
def _call_many(g, du, u, p, t1, calls):
    for i in range(calls):
        g(du, u, p, t1 * i / calls)
        u[0] += 1e-9 * du[0]


def test_an_interpolated_input_does_not_allocate():
    # the right-hand side the solvers call (the input evaluated on its stack, then f) makes
    # no allocation, whatever the number of calls
    ts = np.linspace(0.0, 1000.0, 2001)
    for kind in ("linear", "cubic"):
        u = ode.Interpolation(ts, np.stack([np.sin(ts), np.cos(ts)], axis=1), kind=kind)
        prob = ode.ODEProblem(
            driven_pendulum, np.array([0.5, 0.0]), (0.0, 1000.0), np.array([2.0, 0.3]), inputs=u
        )
        du, x = np.zeros(2), np.array([0.5, 0.0])
        counts = []
        for calls in (10, 100_000):
            _call_many(prob.f, du, x, prob.p, 1000.0, 10)  # compiled
            before = _allocations()
            _call_many(prob.f, du, x, prob.p, 1000.0, calls)
            counts.append(_allocations() - before)
        assert counts[0] == counts[1]

    # and a solve allocates in compiled code no more than the same solve without inputs
    def alloc_of_solve(prob):
        ode.solve(prob, ode.Tsit5(), saveat=[5.0])
        before = _allocations()
        ode.solve(prob, ode.Tsit5(), saveat=[5.0])
        return _allocations() - before

    plain = ode.ODEProblem(four_arguments, np.array([1.0]), (0.0, 5.0))
    short = ode.Interpolation([0.0, 5.0], [1.0, 2.0])
    forced_prob = ode.ODEProblem(forced, np.array([1.0]), (0.0, 5.0), np.array([0.7]), inputs=short)
    assert alloc_of_solve(forced_prob) == alloc_of_solve(plain)


@numba.njit
def fails_on_large_input(du, u, p, t, x):
    if x[0] > 1.5:
        raise ValueError("input out of range")
    du[0] = -p[0] * u[0] + x[0]


def test_an_error_in_the_right_hand_side_reaches_the_user():
    u = ode.Interpolation(TS, SIGNAL)
    prob = ode.ODEProblem(
        fails_on_large_input, np.array([1.0]), (0.0, 10.0), np.array([0.7]), inputs=u
    )
    sol = ode.solve(prob, ode.Tsit5())
    assert sol.status == ode.ReturnCode.RHS_ERROR
    assert isinstance(sol.exception, ValueError)
    assert "input out of range" in str(sol.exception)
    with pytest.raises(ode.ODESolveError) as info:
        ode.solve(prob, ode.Tsit5(), throw=True)
    assert isinstance(info.value.__cause__, ValueError)


@numba.njit
def four_arguments(du, u, p, t):
    du[0] = -u[0]


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="strictly increasing"):
        ode.Interpolation([0.0, 2.0, 1.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="NaN"):
        ode.Interpolation([0.0, 1.0, 2.0], [1.0, np.nan, 3.0])
    with pytest.raises(ValueError, match="NaN"):
        ode.Interpolation([0.0, np.nan, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="shape"):
        ode.Interpolation([0.0, 1.0, 2.0], np.ones((2, 2)))
    with pytest.raises(ValueError, match="at least 2"):
        ode.Interpolation([0.0], [1.0])
    with pytest.raises(ValueError, match="kind"):
        ode.Interpolation([0.0, 1.0], [1.0, 2.0], kind="quadratic")
    with pytest.raises(TypeError, match="real numbers"):
        ode.Interpolation([0.0, 1.0], ["a", "b"])
    u = ode.Interpolation(TS, SIGNAL)
    with pytest.raises(ValueError, match="not extrapolated"):
        ode.ODEProblem(forced, np.array([1.0]), (0.0, 11.0), np.array([0.7]), inputs=u)
    with pytest.raises(TypeError, match="Interpolation"):
        ode.ODEProblem(forced, np.array([1.0]), (0.0, 1.0), np.array([0.7]), inputs=SIGNAL)
    with pytest.raises(TypeError, match=r"f\(du, u, p, t, x\)"):
        ode.ODEProblem(four_arguments, np.array([1.0]), (0.0, 1.0), np.array([0.7]), inputs=u)
    with pytest.raises(TypeError, match="numba"):
        ode.ODEProblem(forced.py_func, np.array([1.0]), (0.0, 1.0), np.array([0.7]), inputs=u)
    two = ode.Interpolation(TS, np.ones((TS.size, 2)))

    @numba.njit
    def reads_three(du, u, p, t, x):
        du[0] = x[0] + x[1] + x[2]

    # x has m = 2 values: reading x[2] is found by the probe, not left to garbage
    with pytest.raises(ValueError, match="past the 2 input value"):
        ode.ODEProblem(reads_three, np.array([1.0]), (0.0, 1.0), None, inputs=two)
