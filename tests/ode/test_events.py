"""State-dependent events (ode.Event): located against closed forms on every compiled family."""

import numba
import numpy as np
import pytest

from scichains import ode
from scichains.ode._family import registered

from ._ball import bounce, falling, ground

G, E, X0 = 9.81, 0.8, 1.0


def bounce_times(k, x0=X0, g=G, e=E):
    """Closed form: the first k landing times and the velocities just before them."""
    v = np.sqrt(2 * g * x0)
    times, speeds = [np.sqrt(2 * x0 / g)], [v]
    for _ in range(k - 1):
        v *= e
        times.append(times[-1] + 2 * v / g)
        speeds.append(v)
    return np.array(times), np.array(speeds)


def ball(t1, x0=X0, e=E):
    return ode.ODEProblem(falling, np.array([x0, 0.0]), (0.0, t1), np.array([G, e]))


@pytest.mark.parametrize("solver", [ode.Tsit5(), ode.Rodas5P()], ids=lambda s: s.name)
def test_bouncing_ball_ten_bounces_closed_form(solver):
    times, speeds = bounce_times(12)
    prob = ball(times[10] + 0.01)
    sol = ode.solve(
        prob, solver, rtol=1e-10, atol=1e-12, events=ode.Event(ground, bounce, direction=-1)
    )
    assert sol.success, sol.message
    te, ue = sol.t_events[0], sol.u_events[0]
    assert te.shape == (11,) and ue.shape == (11, 2)
    np.testing.assert_allclose(te, times[:11], rtol=1e-12, atol=0)
    # the state recorded is the left limit: on the ground, falling at the closed-form speed
    np.testing.assert_allclose(ue[:, 1], -speeds[:11], rtol=1e-11)
    assert np.abs(ue[:, 0]).max() < 1e-12
    # after the last bounce the ball rises with e times that speed
    t_end = prob.tspan[1]
    v_after = E * speeds[10]
    dt = t_end - times[10]
    np.testing.assert_allclose(
        sol.u[-1], [v_after * dt - G * dt**2 / 2, v_after - G * dt], rtol=1e-9
    )
    # the stored steps land on each event twice (left and right limit)
    st = sol.step_times
    for t in te:
        assert np.count_nonzero(st == t) == 2


def test_direction_zero_ignores_its_own_repeat():
    # g = x is 0 (or a rounding below) right after each bounce and rises: with direction 0
    # that is not a new event; the landings are the same as with direction -1
    times, _ = bounce_times(6)
    prob = ball(times[4] + 0.01)
    both = ode.solve(prob, ode.Tsit5(), rtol=1e-10, atol=1e-12, events=ode.Event(ground, bounce))
    np.testing.assert_allclose(both.t_events[0], times[:5], rtol=1e-12)


@numba.njit
def oscillator(du, u, p, t):
    du[0] = u[1]
    du[1] = -u[0]


@numba.njit
def position(u, t, p):
    return u[0]


# each family compiles its own event kernel (about a minute cold): the explicit and Rosenbrock
# ones run by default, the ESDIRK, Radau and automatic ones with the slow tests
_DEFAULT_FAMILIES = ("explicit", "rosenbrock")
FAMILIES = [
    s if s.family in _DEFAULT_FAMILIES else pytest.param(s, marks=pytest.mark.slow)
    for s in registered()
    if s.family != "cvode" and getattr(s, "adaptive", True)
]


@pytest.mark.parametrize("solver", FAMILIES, ids=lambda s: getattr(s, "name", None))
def test_every_compiled_family_finds_the_crossings_of_sine(solver):
    # u = (sin t, cos t): up-crossings of u[0] at 2 k pi, down-crossings at (2 k + 1) pi
    prob = ode.ODEProblem(oscillator, np.array([0.0, 1.0]), (0.0, 20.0))
    rtol = 1e-6 if solver.name == "Rosenbrock23" else 1e-10
    events = [
        ode.Event(position, direction=1),
        ode.Event(position, direction=-1),
        ode.Event(position),
    ]
    sol = ode.solve(prob, solver, rtol=rtol, atol=rtol * 1e-2, events=events)
    assert sol.success, sol.message
    tol = 1e3 * rtol
    # a zero at t0 is not an event
    np.testing.assert_allclose(sol.t_events[0], 2 * np.pi * np.arange(1, 4), atol=tol)
    np.testing.assert_allclose(sol.t_events[1], np.pi * np.array([1, 3, 5]), atol=tol)
    np.testing.assert_allclose(sol.t_events[2], np.pi * np.arange(1, 7), atol=tol)
    # located on the solution: the recorded state is on the crossed side or zero, tiny
    assert np.abs(sol.u_events[2][:, 0]).max() < 1e-12
    np.testing.assert_allclose(sol.u_events[2][:, 1], (-1.0) ** np.arange(1, 7), atol=tol)


def test_terminal_event_ends_the_solve_there():
    times, _ = bounce_times(1)
    prob = ball(5.0)
    saveat = np.linspace(0.0, 5.0, 51)
    sol = ode.solve(
        prob,
        ode.Tsit5(),
        saveat=saveat,
        rtol=1e-10,
        atol=1e-12,
        events=ode.Event(ground, direction=-1, terminal=True),
    )
    assert sol.status == ode.ReturnCode.SUCCESS
    np.testing.assert_allclose(sol.t_reached, times[0], rtol=1e-13)
    np.testing.assert_allclose(sol.t_events[0], times[:1], rtol=1e-13)
    # the save times after the event are not reached
    np.testing.assert_array_equal(sol.t, saveat[saveat <= sol.t_reached])
    np.testing.assert_allclose(sol.u[:, 0], X0 - G * sol.t**2 / 2, atol=1e-12)


@numba.njit
def double(u, t, p):
    return 2.0 * u[0]


@numba.njit
def later(u, t, p):
    return u[0] - 0.5


@numba.njit
def kick(u, t, p):
    u[1] += 1.0


@numba.njit
def kick_more(u, t, p):
    u[1] += 10.0


def test_simultaneous_events_all_fire_in_list_order():
    prob = ode.ODEProblem(oscillator, np.array([0.0, 1.0]), (0.0, 4.0))
    events = [ode.Event(double, kick, direction=-1), ode.Event(position, kick_more, direction=-1)]
    sol = ode.solve(prob, ode.Tsit5(), rtol=1e-10, atol=1e-12, events=events)
    assert sol.success
    np.testing.assert_allclose(sol.t_events[0], [np.pi], rtol=1e-10)
    np.testing.assert_array_equal(sol.t_events[0], sol.t_events[1])
    # both affects acted (1 + 10 added to u[1] = -1 at pi): after pi, u = 10 sin(t - pi) ...
    t = 4.0 - np.pi
    np.testing.assert_allclose(sol.u[-1], [10 * np.sin(t), 10 * np.cos(t)], rtol=1e-8)


def test_earlier_event_in_the_same_step_wins():
    # u[0] = sin t reaches 0.5 at pi/6 (up) and 5 pi/6 (down), before its zero at pi
    prob = ode.ODEProblem(oscillator, np.array([0.0, 1.0]), (0.0, 3.5))
    events = [ode.Event(position, direction=-1), ode.Event(later)]
    sol = ode.solve(prob, ode.Tsit5(), rtol=1e-10, atol=1e-12, events=events)
    np.testing.assert_allclose(sol.t_events[1], [np.pi / 6, 5 * np.pi / 6], rtol=1e-9)
    np.testing.assert_allclose(sol.t_events[0], [np.pi], rtol=1e-9)


@numba.njit
def still(du, u, p, t):
    du[0] = 0.0


@numba.njit
def two_roots_in_time(u, t, p):
    return (t - 2.0) * (t - 6.0)


def test_two_crossings_within_one_step_are_seen_with_interior_points():
    # u' = 0: the steps are as long as the controller allows, so one step covers both roots;
    # any step holding both has its 4 interior points closer than the roots are (10 / 5 < 4)
    prob = ode.ODEProblem(still, np.array([1.0]), (0.0, 10.0))
    sol = ode.solve(prob, ode.Tsit5(), events=ode.Event(two_roots_in_time, interp_points=4))
    np.testing.assert_allclose(sol.t_events[0], [2.0, 6.0], rtol=1e-14)
    # the default checks the ends of the steps only and misses both, as documented: one step
    # held both
    ends = ode.solve(prob, ode.Tsit5(), events=ode.Event(two_roots_in_time))
    assert ends.t_events[0].size == 0
    assert np.diff(ends.step_times).max() > 4.0


@numba.njit
def at_one(u, t, p):
    return t - 1.0


@numba.njit
def doubles(u, t, p):
    u[0] *= 2.0


def test_event_at_a_stop_a_save_time_and_a_dose_at_the_same_time():
    # g = t - 1 is exactly zero at the stop t = 1 (a dose there, and a save time): the event
    # happens there, its affect (x2) acts first, then the dose (+1); the save is the right limit
    prob = ode.ODEProblem(still, np.array([1.0]), (0.0, 2.0))
    sol = ode.solve(
        prob,
        ode.Tsit5(),
        saveat=[0.5, 1.0, 1.5],
        jumps=[(1.0, 0, 1.0)],
        events=ode.Event(at_one, doubles),
    )
    assert sol.success, sol.message
    np.testing.assert_array_equal(sol.t_events[0], [1.0])
    np.testing.assert_array_equal(sol.u_events[0], [[1.0]])
    np.testing.assert_array_equal(sol.u[:, 0], [1.0, 3.0, 3.0])


def test_backward_integration_finds_crossings_in_reverse_order():
    prob = ode.ODEProblem(oscillator, np.array([np.sin(10.0), np.cos(10.0)]), (10.0, 0.5))
    sol = ode.solve(prob, ode.Tsit5(), rtol=1e-10, atol=1e-12, events=ode.Event(position))
    np.testing.assert_allclose(sol.t_events[0], np.pi * np.array([3, 2, 1]), rtol=1e-9)


def test_chattering_stops_at_max_events_with_its_status():
    # restitution 0.5: infinitely many bounces before t = 3 sqrt(2 x0 / g) (Zeno)
    prob = ball(5.0, e=0.5)
    sol = ode.solve(
        prob,
        ode.Tsit5(),
        rtol=1e-10,
        atol=1e-12,
        max_events=30,
        events=ode.Event(ground, bounce, direction=-1),
    )
    assert sol.status == ode.ReturnCode.MAX_EVENTS
    assert "max_events" in sol.message
    assert sol.t_events[0].size == 30
    times, _ = bounce_times(30, e=0.5)
    np.testing.assert_allclose(sol.t_events[0][:10], times[:10], rtol=1e-11)
    with pytest.raises(ode.ODESolveError, match="max_events"):
        ode.solve(
            prob,
            ode.Tsit5(),
            max_events=30,
            throw=True,
            events=ode.Event(ground, bounce, direction=-1),
        )


def test_many_events_grow_their_records():
    # 60 crossings: more than the first allocation of records
    prob = ode.ODEProblem(oscillator, np.array([0.0, 1.0]), (0.0, 60 * np.pi + 1.0))
    sol = ode.solve(prob, ode.Tsit5(), rtol=1e-9, atol=1e-11, events=ode.Event(position))
    np.testing.assert_allclose(sol.t_events[0], np.pi * np.arange(1, 61), rtol=1e-7)


@numba.njit
def raises_late(u, t, p):
    if t > 1.0:
        raise ValueError("condition says no")
    return u[0] + 1.0


@numba.njit
def affect_raises(u, t, p):
    raise RuntimeError("affect says no")


def test_errors_in_event_functions_reach_the_user():
    prob = ode.ODEProblem(oscillator, np.array([0.0, 1.0]), (0.0, 5.0))
    sol = ode.solve(prob, ode.Tsit5(), events=ode.Event(raises_late))
    assert sol.status == ode.ReturnCode.RHS_ERROR
    assert isinstance(sol.exception, ValueError) and "condition of events[0]" in sol.message
    with pytest.raises(ode.ODESolveError) as info:
        ode.solve(prob, ode.Tsit5(), events=ode.Event(position, affect_raises), throw=True)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "affect of events[0]" in str(info.value)


@numba.njit
def decay(du, u, p, t):
    du[0] = -p[0] * u[0]


@numba.njit
def nan_below(u, t, p):  # sqrt of a negative number once u[0] < 0.3: NaN, no sign
    return np.sqrt(u[0] - 0.3) - 0.5


def test_a_condition_that_turns_nan_fails_the_solve_instead_of_missing_events():
    # before, a step from g > 0 to g = NaN showed no sign change and the solve went on
    prob = ode.ODEProblem(decay, np.array([1.0]), (0.0, 5.0), np.array([1.0]))
    sol = ode.solve(prob, ode.Tsit5(), events=ode.Event(nan_below, direction=-1))
    assert sol.status == ode.ReturnCode.RHS_ERROR
    assert isinstance(sol.exception, ValueError)
    assert "condition of events[0] returned nan" in sol.message
    # the event itself (u = 0.55, t = log(1 / 0.55)) was found before it turned NaN
    np.testing.assert_allclose(sol.t_events[0], [np.log(1 / 0.55)], rtol=1e-6)
    # in an ensemble's lanes too (they hand such a trajectory to the scalar stepper)
    ep = ode.EnsembleProblem(prob, u0s=np.array([[1.0], [2.0]]))
    event = ode.Event(nan_below, direction=-1)
    es = ode.solve_ensemble(ep, ode.Tsit5(), saveat=[5.0], events=event)
    np.testing.assert_array_equal(es.status, ode.ReturnCode.RHS_ERROR)
    assert isinstance(es.exception(1), ValueError)


def test_bad_events_are_refused_by_name():
    prob = ode.ODEProblem(oscillator, np.array([0.0, 1.0]), (0.0, 5.0))
    with pytest.raises(ValueError, match="direction"):
        ode.Event(position, direction=2)
    with pytest.raises(TypeError, match="terminal"):
        ode.Event(position, terminal="yes")
    with pytest.raises(TypeError, match=r"events\[1\] must be an ode.Event"):
        ode.solve(prob, ode.Tsit5(), events=[ode.Event(position), position])
    with pytest.raises(ValueError, match="max_events"):
        ode.solve(prob, ode.Tsit5(), events=ode.Event(position), max_events=0)

    @numba.njit
    def vector(u, t, p):
        return u

    with pytest.raises(TypeError, match="must return a real number"):
        ode.solve(prob, ode.Tsit5(), events=ode.Event(vector))

    def past_the_end(u, t, p):  # a plain function is compiled; its probe runs in Python
        return u[5]

    with pytest.raises(IndexError):
        ode.solve(prob, ode.Tsit5(), events=ode.Event(past_the_end))


def test_plain_python_condition_and_no_events_field():
    prob = ode.ODEProblem(oscillator, np.array([0.0, 1.0]), (0.0, 4.0))
    sol = ode.solve(
        prob,
        ode.Tsit5(),
        rtol=1e-10,
        atol=1e-12,
        events=ode.Event(lambda u, t, p: u[0], direction=-1),
    )
    np.testing.assert_allclose(sol.t_events[0], [np.pi], rtol=1e-10)
    plain = ode.solve(prob, ode.Tsit5())
    assert plain.t_events is None and plain.u_events is None


def test_threads_sharing_events_get_serial_results():
    from concurrent.futures import ThreadPoolExecutor

    times, _ = bounce_times(6)
    event = ode.Event(ground, bounce, direction=-1)
    probs = [ball(times[4] + 0.01, x0=x0) for x0 in (0.5, 1.0, 1.5, 2.0)] * 3

    def run(prob):
        sol = ode.solve(prob, ode.Tsit5(), rtol=1e-10, atol=1e-12, events=event)
        return sol.t_events[0], sol.u

    serial = [run(prob) for prob in probs]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(run, probs))
    for (ts, us), (tt, ut) in zip(serial, threaded):
        np.testing.assert_array_equal(ts, tt)
        np.testing.assert_array_equal(us, ut)


def test_repeated_and_concurrent_solves_with_the_same_events_agree():
    # a solve repeated with the same events reuses its thread's table (reset), and the next
    # solve of a problem starts with the room the last one needed: neither changes a result
    from concurrent.futures import ThreadPoolExecutor

    prob = ball(4.0)
    event = ode.Event(ground, bounce, direction=-1)
    other = ode.Event(position)
    kw = dict(rtol=1e-10, atol=1e-12, saveat=np.linspace(0.0, 4.0, 9))
    first = ode.solve(prob, ode.Tsit5(), events=event, **kw)
    assert first.t_events[0].size > 16  # the records grew in the first solve
    again = [ode.solve(prob, ode.Tsit5(), events=e, **kw) for e in (event, other, event)]
    fresh = ode.solve(ball(4.0), ode.Tsit5(), events=ode.Event(ground, bounce, direction=-1), **kw)
    for sol in (again[0], again[2], fresh):
        np.testing.assert_array_equal(sol.t_events[0], first.t_events[0])
        np.testing.assert_array_equal(sol.u_events[0], first.u_events[0])
        np.testing.assert_array_equal(sol.u, first.u)
        np.testing.assert_array_equal(sol.step_times, first.step_times)
    short = ode.solve(ball(0.5), ode.Tsit5(), events=event, **kw | {"saveat": None})
    assert short.t_events[0].size == 1
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: ode.solve(prob, ode.Tsit5(), events=event, **kw), range(8)))
    for sol in runs:
        np.testing.assert_array_equal(sol.t_events[0], first.t_events[0])
        np.testing.assert_array_equal(sol.u, first.u)
    with pytest.raises(AttributeError, match="cannot be changed"):
        event.direction = 1


def test_a_reused_event_table_does_not_blame_the_last_failure():
    @numba.njit
    def rhs_raises(du, u, p, t):
        if t > 0.5:
            raise ZeroDivisionError("the right-hand side says no")
        du[0] = u[1]
        du[1] = -p[0]

    event = ode.Event(raises_late)
    prob = ode.ODEProblem(oscillator, np.array([0.0, 1.0]), (0.0, 5.0))
    first = ode.solve(prob, ode.Tsit5(), events=event)
    assert isinstance(first.exception, ValueError) and "condition of events[0]" in first.message
    second = ode.solve(
        ode.ODEProblem(rhs_raises, np.array([1.0, 0.0]), (0.0, 5.0), np.array([G, E])),
        ode.Tsit5(),
        events=event,
    )
    assert second.status == ode.ReturnCode.RHS_ERROR
    assert isinstance(second.exception, ZeroDivisionError)
    assert "condition" not in second.message
