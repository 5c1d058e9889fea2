"""State-dependent events with the CVODE solvers (CVODE's own root finding), on both of its
paths: compiled callbacks (a compiled problem with the dense linear solver) and
scikit-sundae's Python callbacks (here: a plain Python right-hand side)."""

import numba
import numpy as np
import pytest

from scichains import ode

from ._ball import bounce, falling, ground
from .test_events import X0, E, G, affect_raises, bounce_times, oscillator, position, raises_late


def falling_py(du, u, p, t):  # a plain Python right-hand side: scikit-sundae's callbacks
    du[0] = u[1]
    du[1] = -p[0]


def oscillator_py(du, u, p, t):
    du[0] = u[1]
    du[1] = -u[0]


PATHS = {"compiled": (falling, oscillator), "python": (falling_py, oscillator_py)}


def ball(rhs, t1, e=E):
    return ode.ODEProblem(rhs, np.array([X0, 0.0]), (0.0, t1), np.array([G, e]))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("saveat", [None, "grid"])
def test_bouncing_ball_ten_bounces_closed_form(path, saveat):
    times, speeds = bounce_times(12)
    prob = ball(PATHS[path][0], times[10] + 0.01)
    grid = None if saveat is None else np.linspace(0.0, prob.tspan[1], 41)
    sol = ode.solve(
        prob,
        ode.CVODE_BDF(),
        saveat=grid,
        rtol=1e-10,
        atol=1e-12,
        events=ode.Event(ground, bounce, direction=-1),
    )
    assert sol.success, sol.message
    te, ue = sol.t_events[0], sol.u_events[0]
    assert te.shape == (11,) and ue.shape == (11, 2)
    # CVODE's root is found on its interpolating polynomial, whose error (BDF at rtol 1e-10)
    # sets the accuracy: measured 6.4e-11 relative after 10 bounces (Adams: 6e-14)
    np.testing.assert_allclose(te, times[:11], rtol=1e-9)
    np.testing.assert_allclose(ue[:, 1], -speeds[:11], rtol=1e-8)
    assert np.abs(ue[:, 0]).max() < 1e-9
    dt = prob.tspan[1] - times[10]
    v_after = E * speeds[10]
    np.testing.assert_allclose(
        sol.u[-1], [v_after * dt - G * dt**2 / 2, v_after - G * dt], rtol=1e-6
    )
    if grid is not None:  # the save times between bounces lie on the parabolas
        t = sol.t
        k = np.searchsorted(times[:11], t)  # bounces before each save time
        t_last = np.where(k > 0, times[np.maximum(k - 1, 0)], 0.0)
        v0 = np.where(k > 0, E * speeds[np.maximum(k - 1, 0)], 0.0)
        x0 = np.where(k > 0, 0.0, X0)
        s = t - t_last
        np.testing.assert_allclose(sol.u[:, 0], x0 + v0 * s - G * s**2 / 2, atol=1e-7)
    else:  # the stored steps land on each event twice (left and right limit)
        for t in te:
            assert np.count_nonzero(sol.step_times == t) == 2


@pytest.mark.parametrize("path", PATHS)
def test_directions_and_terminal(path):
    prob = ode.ODEProblem(PATHS[path][1], np.array([0.0, 1.0]), (0.0, 20.0))
    events = [
        ode.Event(position, direction=1),
        ode.Event(position, direction=-1),
        ode.Event(position),
    ]
    sol = ode.solve(prob, ode.CVODE_Adams(), rtol=1e-10, atol=1e-12, events=events)
    assert sol.success, sol.message
    # a zero at t0 is not an event
    np.testing.assert_allclose(sol.t_events[0], 2 * np.pi * np.arange(1, 4), atol=1e-7)
    np.testing.assert_allclose(sol.t_events[1], np.pi * np.array([1, 3, 5]), atol=1e-7)
    np.testing.assert_allclose(sol.t_events[2], np.pi * np.arange(1, 7), atol=1e-7)
    np.testing.assert_allclose(sol.u_events[2][:, 1], (-1.0) ** np.arange(1, 7), atol=1e-7)
    # terminal: ends at the first down-crossing, the later save times not reached
    saveat = np.linspace(0.0, 20.0, 41)
    end = ode.solve(
        prob,
        ode.CVODE_BDF(),
        saveat=saveat,
        rtol=1e-10,
        atol=1e-12,
        events=ode.Event(position, direction=-1, terminal=True),
    )
    assert end.status == ode.ReturnCode.SUCCESS
    np.testing.assert_allclose(end.t_reached, np.pi, rtol=1e-8)
    np.testing.assert_allclose(end.t_events[0], [np.pi], rtol=1e-8)
    np.testing.assert_array_equal(end.t, saveat[saveat <= np.pi])
    np.testing.assert_allclose(end.u[:, 0], np.sin(end.t), atol=1e-8)


def test_agrees_with_the_compiled_methods_and_backward():
    # a dose and an event: the same record as Rodas5P; backward in time as well
    times, _ = bounce_times(4)
    prob = ball(falling, 3.0)
    kw = dict(rtol=1e-11, atol=1e-13, jumps=[(0.7, 1, 2.0)])
    ev = ode.Event(ground, bounce, direction=-1)
    ref = ode.solve(prob, ode.Rodas5P(), events=ev, **kw)
    got = ode.solve(prob, ode.CVODE_BDF(), events=ev, **kw)
    assert ref.success and got.success
    np.testing.assert_allclose(got.t_events[0], ref.t_events[0], rtol=1e-9)
    np.testing.assert_allclose(got.u[-1], ref.u[-1], rtol=1e-7)
    back = ode.ODEProblem(oscillator, np.array([np.sin(10.0), np.cos(10.0)]), (10.0, 0.5))
    sol = ode.solve(back, ode.CVODE_BDF(), rtol=1e-10, atol=1e-12, events=ode.Event(position))
    np.testing.assert_allclose(sol.t_events[0], np.pi * np.array([3, 2, 1]), rtol=1e-8)


@pytest.mark.parametrize("path", PATHS)
def test_chattering_stops_at_max_events(path):
    prob = ball(PATHS[path][0], 5.0, e=0.5)
    ev = ode.Event(ground, bounce, direction=-1)
    sol = ode.solve(prob, ode.CVODE_BDF(), rtol=1e-10, atol=1e-12, max_events=12, events=ev)
    assert sol.status == ode.ReturnCode.MAX_EVENTS
    assert "max_events" in sol.message
    assert sol.t_events[0].size == 12
    np.testing.assert_allclose(sol.t_events[0], bounce_times(12, e=0.5)[0], rtol=1e-7)


@numba.njit
def condition_raises(u, t, p):
    if t > 1.0:
        raise ValueError("condition says no")
    return u[0] - 2.0


@pytest.mark.parametrize("path", PATHS)
def test_errors_in_event_functions_reach_the_user(path):
    prob = ode.ODEProblem(PATHS[path][1], np.array([0.0, 1.0]), (0.0, 5.0))
    for cond in (raises_late, condition_raises):
        sol = ode.solve(prob, ode.CVODE_BDF(), events=ode.Event(cond))
        assert sol.status == ode.ReturnCode.RHS_ERROR
        assert isinstance(sol.exception, ValueError), sol.message
        assert "condition of events[0]" in sol.message
    with pytest.raises(ode.ODESolveError) as info:
        ode.solve(prob, ode.CVODE_BDF(), events=ode.Event(position, affect_raises), throw=True)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "affect of events[0]" in str(info.value)
