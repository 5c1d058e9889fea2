"""Storage follows the steps taken, not ``max_steps``; truncated solves are never used."""

import tracemalloc

import numba
import numpy as np
import pytest

from scichains.adjoint import DiscreteAdjoint, InterpolatingAdjoint, Objective, SquaredError
from scichains.ode import RK4, ODEProblem, ODESolveError, ReturnCode, Tsit5, solve
from scichains.ode._plan import plan_solve, run_plan


@numba.njit
def decay2(du, u, p, t):
    du[0] = -u[0]
    du[1] = u[0]


@numba.njit
def decay2_vjp(v, u, p, t, ubar, pbar):
    ubar[0] = -v[0] + v[1]
    ubar[1] = 0.0


def _prob(t1=5.0):
    return ODEProblem(decay2, np.array([1.0, 0.0]), (0.0, t1), vjp=decay2_vjp)


def test_huge_max_steps_allocates_for_the_steps_taken():
    # before: MemoryError "Unable to allocate 104. GiB" (buffers sized for max_steps)
    prob = _prob()
    solve(prob, Tsit5())  # compile first: tracemalloc sees the compiler's objects too
    tracemalloc.start()
    sol = solve(prob, Tsit5(), saveat=np.linspace(0, 5, 21), max_steps=10**9)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sol.success
    np.testing.assert_allclose(sol.u[:, 0], np.exp(-sol.t), rtol=1e-5)
    assert peak < 1_000_000


def test_growing_buffers_resume_exactly():
    """A solve that outgrows its buffers many times takes bit-for-bit the steps of one that
    never had to grow."""
    kw = dict(rtol=1e-12, atol=1e-14)
    prob = _prob(40.0)
    small = plan_solve(prob, Tsit5(), None, 1e-12, 1e-14, None, 10**6, None, None, None, None)
    big = plan_solve(prob, Tsit5(), None, 1e-12, 1e-14, None, 10**6, None, None, None, None)
    while big.ts.size < 4096:
        big.grow()
    cap0 = small.ts.size
    assert run_plan(small, small.prob.u0, small.prob.p) == 0
    assert run_plan(big, big.prob.u0, big.prob.p) == 0
    m = int(small.stats[0])
    assert m > 2 * cap0 and small.ts.size > cap0  # it did grow, more than once
    assert m == int(big.stats[0])
    np.testing.assert_array_equal(small.stats[:6], big.stats[:6])  # [6]: the resume flag
    np.testing.assert_array_equal(small.ts[:m], big.ts[:m])
    np.testing.assert_array_equal(small.us[:m], big.us[:m])
    sol = solve(prob, Tsit5(), max_steps=10**9, **kw)
    np.testing.assert_array_equal(sol.u, small.us[:m])


@pytest.mark.parametrize("sensealg", [DiscreteAdjoint(), InterpolatingAdjoint()], ids=repr)
def test_gradients_with_grown_buffers_match_a_fresh_objective(sensealg):
    ts = np.linspace(0, 5, 11)
    data = np.zeros((11, 2))
    obj = Objective(_prob(), SquaredError(data), ts, rtol=1e-12, atol=1e-14, sensealg=sensealg)
    first = obj.value_and_grad()
    assert obj.plan.ts.size > 300  # grown during the first call
    again = obj.value_and_grad()  # the grown buffers are reused
    assert first[0] == again[0]
    np.testing.assert_array_equal(first[2], again[2])
    # d/du0 of sum_i |u(t_i)|^2 for this linear system, in closed form
    u1 = np.exp(-ts)
    u2 = 1.0 - u1
    g_x0 = np.sum(2 * u1 * u1 + 2 * u2 * (1 - u1))
    g_y0 = np.sum(2 * u2)
    np.testing.assert_allclose(first[2], [g_x0, g_y0], rtol=1e-8)


def test_many_save_points_peak_memory_within_three_results():
    """1e6 save points: the result (t and u) is 24 MB; the solve's peak stays within ~3x."""
    ts = np.linspace(0.0, 5.0, 1_000_000)
    prob = _prob()
    solve(prob, Tsit5(), saveat=ts[:10])  # compile first
    tracemalloc.start()
    sol = solve(prob, Tsit5(), saveat=ts)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sol.success
    result = sol.u.nbytes + sol.t.nbytes
    np.testing.assert_allclose(sol.u[::1000, 0], np.exp(-ts[::1000]), rtol=1e-5, atol=1e-8)
    assert peak < 3 * result, (peak, result)


def test_landing_saves_use_the_stored_steps():
    ts = np.linspace(0.0, 1.0, 11)
    sol = solve(_prob(1.0), RK4(), saveat=ts, dt0=0.1 / 8)
    np.testing.assert_allclose(sol.u[:, 0], np.exp(-ts), rtol=1e-8)


def test_max_steps_is_a_status_and_gradients_refuse_the_truncated_solve():
    sol = solve(_prob(), Tsit5(), max_steps=5)
    assert sol.status == ReturnCode.MAX_STEPS and not sol.success
    with pytest.raises(ODESolveError, match="MAX_STEPS"):
        solve(_prob(), Tsit5(), max_steps=5, throw=True)
    ts = np.linspace(0, 5, 6)
    for sensealg in (DiscreteAdjoint(), InterpolatingAdjoint()):
        obj = Objective(_prob(), SquaredError(np.zeros((6, 2))), ts, max_steps=5, sensealg=sensealg)
        with pytest.raises(ODESolveError, match="MAX_STEPS"):
            obj.value_and_grad()
        with pytest.raises(ODESolveError, match="MAX_STEPS"):
            obj.value()
