"""State-dependent events in ensembles (solve_ensemble(..., events=...)): each trajectory's
events, saves and counts are solve's, bit for bit, for any thread count; closed forms; terminal
events, max_events and errors per trajectory."""

import numba
import numpy as np
import pytest
from _local_dask import local_dask_client

from scichains import ode

from ._ball import bounce, falling, ground

G = 9.81
M = 24
HEIGHTS = np.linspace(0.5, 2.0, M)
RESTITUTION = np.linspace(0.5, 0.9, M)
SAVE = np.linspace(0.0, 4.0, 9)
TOL = dict(rtol=1e-10, atol=1e-12)


def _ensemble():
    prob = ode.ODEProblem(falling, np.array([1.0, 0.0]), (0.0, 4.0), np.array([G, 0.8]))
    u0s = np.column_stack([HEIGHTS, np.zeros(M)])
    ps = np.column_stack([np.full(M, G), RESTITUTION])
    return prob, ode.EnsembleProblem(prob, u0s=u0s, ps=ps)


def _landings(x0, e, t_end):
    """Closed form: the landing times of a ball dropped from ``x0`` before ``t_end``."""
    v = np.sqrt(2 * G * x0)
    times = [np.sqrt(2 * x0 / G)]
    while True:
        v *= e
        nxt = times[-1] + 2 * v / G
        if nxt >= t_end or v < 1e-3:
            return np.array(times)
        times.append(nxt)


def test_each_trajectory_is_solves_bit_for_bit_for_any_thread_count():
    prob, eprob = _ensemble()
    event = ode.Event(ground, bounce, direction=-1)
    runs = [
        ode.solve_ensemble(eprob, ode.Tsit5(), saveat=SAVE, events=event, threads=k, **TOL)
        for k in (1, 2)
    ]
    for es in runs:
        assert es.success.all()
        for i in range(M):
            one = ode.ODEProblem(falling, eprob.u0(i), (0.0, 4.0), eprob.p(i))
            sol = ode.solve(one, ode.Tsit5(), saveat=SAVE, events=event, **TOL)
            np.testing.assert_array_equal(es.t_events[i][0], sol.t_events[0])
            np.testing.assert_array_equal(es.u_events[i][0], sol.u_events[0])
            np.testing.assert_array_equal(es.u[i], sol.u)
            assert (es.nf[i], es.naccept[i], es.nreject[i]) == tuple(
                sol.stats[k] for k in ("nf", "naccept", "nreject")
            )
    a, b = runs
    np.testing.assert_array_equal(a.u, b.u)
    # the closed form, on the trajectories whose bounces stay well apart (records grow past
    # the first 16 on the bounciest)
    assert max(len(t[0]) for t in a.t_events) > 16
    for i in range(M):
        want = _landings(HEIGHTS[i], RESTITUTION[i], 4.0)
        k = min(10, want.size)
        np.testing.assert_allclose(a.t_events[i][0][:k], want[:k], rtol=1e-11)


@numba.njit
def below(u, t, p):
    return u[0] - 0.25


def test_terminal_event_ends_its_trajectory_only():
    _, eprob = _ensemble()
    stop = ode.Event(below, direction=-1, terminal=True)
    es = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=SAVE, events=stop, **TOL)
    assert (es.status == ode.ReturnCode.SUCCESS).all()
    t_hit = np.sqrt(2 * (HEIGHTS - 0.25) / G)
    np.testing.assert_allclose(es.t_reached, t_hit, rtol=1e-12)
    np.testing.assert_allclose([t[0][0] for t in es.t_events], t_hit, rtol=1e-12)
    for i in range(M):
        reached = SAVE <= t_hit[i]
        assert np.isfinite(es.u[i][reached]).all() and np.isnan(es.u[i][~reached]).all()


def test_max_events_stops_the_trajectories_past_it():
    _, eprob = _ensemble()
    event = ode.Event(ground, bounce, direction=-1)
    es = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=SAVE, events=event, max_events=5, **TOL)
    full = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=SAVE, events=event, **TOL)
    many = np.array([len(t[0]) > 5 for t in full.t_events])
    assert many.any() and (~many).any()
    np.testing.assert_array_equal(es.status[many], ode.ReturnCode.MAX_EVENTS)
    np.testing.assert_array_equal(es.status[~many], ode.ReturnCode.SUCCESS)
    for i in np.flatnonzero(~many):
        np.testing.assert_array_equal(es.u[i], full.u[i])


@numba.njit
def refuses_high_bounce(u, t, p):
    if p[1] > 0.8 and t > 1.0:
        raise ValueError("condition says no")
    return u[0]


def test_an_event_function_that_raises_fails_its_trajectories_with_the_exception():
    _, eprob = _ensemble()
    es = ode.solve_ensemble(
        eprob, ode.Tsit5(), saveat=SAVE, events=ode.Event(refuses_high_bounce, bounce, -1)
    )
    bad = RESTITUTION > 0.8
    np.testing.assert_array_equal(es.status[bad], ode.ReturnCode.RHS_ERROR)
    np.testing.assert_array_equal(es.status[~bad], ode.ReturnCode.SUCCESS)
    i = int(np.flatnonzero(bad)[0])
    assert isinstance(es.exception(i), ValueError)
    assert es.exception(int(np.flatnonzero(~bad)[0])) is None


def test_batches_and_executors_give_the_same_bits():
    _, eprob = _ensemble()
    event = ode.Event(ground, bounce, direction=-1)
    kw = dict(saveat=SAVE, events=event, **TOL)
    ref = ode.solve_ensemble(eprob, ode.Tsit5(), **kw)
    from concurrent.futures import ThreadPoolExecutor

    runs = [ode.solve_ensemble(eprob, ode.Tsit5(), batch_size=5, **kw)]
    with ThreadPoolExecutor(2) as pool:
        runs.append(ode.solve_ensemble(eprob, ode.Tsit5(), executor=pool, **kw))
        runs.append(ode.solve_ensemble(eprob, ode.Tsit5(), executor=pool, batch_size=7, **kw))
    with local_dask_client() as client:
        runs.append(ode.solve_ensemble(eprob, ode.Tsit5(), executor=client, **kw))
    for got in runs:
        np.testing.assert_array_equal(got.u, ref.u)
        np.testing.assert_array_equal(got.status, ref.status)
        np.testing.assert_array_equal(got.naccept, ref.naccept)
        for i in range(M):
            np.testing.assert_array_equal(got.t_events[i][0], ref.t_events[i][0])
            np.testing.assert_array_equal(got.u_events[i][0], ref.u_events[i][0])


def test_events_refuse_output_funcs_and_non_events():
    prob, eprob = _ensemble()
    event = ode.Event(ground, bounce, direction=-1)
    reduced = ode.EnsembleProblem(prob, u0s=eprob.u0s, output_func=lambda u, s, i: u)
    with pytest.raises(TypeError, match="output_func"):
        ode.solve_ensemble(reduced, ode.Tsit5(), saveat=SAVE, events=event)
    with pytest.raises(TypeError, match=r"events\[0\] must be an ode.Event"):
        ode.solve_ensemble(eprob, ode.Tsit5(), saveat=SAVE, events=[ground])


@numba.njit
def falling_or_not(du, u, p, t):
    if p[0] < 0.0:
        raise ZeroDivisionError("the right-hand side says no")
    du[0] = u[1]
    du[1] = -p[0]


@numba.njit
def bounce_or_not(u, t, p):
    if p[1] < 0.55:
        raise KeyError("the affect says no")
    u[1] = -p[1] * u[1]


def test_each_failed_trajectory_names_what_raised_in_it():
    # in one block: a condition raises, then the right-hand side, then an affect; each
    # trajectory's exception is its own (nothing carried over from the one before)
    prob = ode.ODEProblem(falling_or_not, np.array([1.0, 0.0]), (0.0, 4.0), np.array([G, 0.8]))
    u0s = np.array([[1.0, 0.0]] * 4)
    ps = np.array([[G, 0.9], [-1.0, 0.7], [G, 0.5], [G, 0.7]])
    event = ode.Event(refuses_high_bounce, bounce_or_not, direction=-1)
    es = ode.solve_ensemble(
        ode.EnsembleProblem(prob, u0s=u0s, ps=ps),
        ode.Tsit5(),
        saveat=SAVE,
        events=event,
        threads=1,
    )
    np.testing.assert_array_equal(es.status[:3], ode.ReturnCode.RHS_ERROR)
    assert es.status[3] == ode.ReturnCode.SUCCESS
    assert isinstance(es.exception(0), ValueError)
    assert isinstance(es.exception(1), ZeroDivisionError)
    assert isinstance(es.exception(2), KeyError)
    assert es.exception(3) is None


@numba.njit
def lotka(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = -p[2] * u[1] + p[3] * u[0] * u[1]


@numba.njit
def prey_above(u, t, p):
    return u[0] - 6.5


@numba.njit
def never(u, t, p):
    return u[0] + 1.0


@numba.njit
def fails_late(u, t, p):
    if t > 5.0 and p[0] > 1.6:
        raise ValueError("the condition gives up late")
    return u[0] + 1.0


def _lotka_ensemble(m=40):
    """Prey peaks from about 5.7 to 7.5: some trajectories cross 6.5, the others never."""
    rng = np.random.default_rng(3)
    u0s = np.column_stack([0.9 + 0.5 * rng.random(m), np.full(m, 1.0)])
    ps = np.column_stack([1.3 + 0.5 * rng.random(m), np.ones(m), np.full(m, 3.0), np.ones(m)])
    prob = ode.ODEProblem(lotka, u0s[0], (0.0, 8.0), ps[0])
    return prob, ode.EnsembleProblem(prob, u0s=u0s, ps=ps)


@pytest.mark.parametrize("terminal", [False, True])
def test_lanes_with_events_give_solves_bits_where_events_fire_and_where_they_do_not(terminal):
    # the lane loop checks the conditions after each step and hands a trajectory where one
    # may have fired to the scalar stepper: either way each trajectory is solve's
    _, eprob = _lotka_ensemble()
    event = ode.Event(prey_above, direction=1, terminal=terminal)
    save = np.linspace(0.0, 8.0, 17)
    es = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=save, events=event, threads=2, **TOL)
    fired = np.array([t[0].size > 0 for t in es.t_events])
    assert 0 < fired.sum() < fired.size
    for i in range(eprob.m):
        one = ode.ODEProblem(lotka, eprob.u0(i), (0.0, 8.0), eprob.p(i))
        sol = ode.solve(one, ode.Tsit5(), saveat=save, events=event, **TOL)
        np.testing.assert_array_equal(es.t_events[i][0], sol.t_events[0])
        np.testing.assert_array_equal(es.u_events[i][0], sol.u_events[0])
        got = es.u[i][: sol.u.shape[0]]
        np.testing.assert_array_equal(got, sol.u)
        assert np.isnan(es.u[i][sol.u.shape[0] :]).all()
        assert es.naccept[i] == sol.stats["naccept"] and es.nf[i] == sol.stats["nf"]


def _count_scalar_runs(monkeypatch):
    """The trajectories handed to the scalar stepper, per call."""
    from scichains.ode.ensemble import _solve

    calls, real = [], _solve._scalar_events

    def spy(prob, settings, found, U0, P, m, threads):
        calls.append(m)
        return real(prob, settings, found, U0, P, m, threads)

    monkeypatch.setattr(_solve, "_scalar_events", spy)
    return calls


def test_only_the_trajectories_whose_events_fire_leave_the_lanes(monkeypatch):
    calls = _count_scalar_runs(monkeypatch)
    _, eprob = _lotka_ensemble()
    save = np.linspace(0.0, 8.0, 17)
    event = ode.Event(prey_above, direction=1)
    es = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=save, events=event, **TOL)
    assert calls == [sum(t[0].size > 0 for t in es.t_events)]


def test_an_event_that_never_fires_changes_no_bit_of_the_lane_loop(monkeypatch):
    calls = _count_scalar_runs(monkeypatch)
    _, eprob = _lotka_ensemble()
    save = np.linspace(0.0, 8.0, 17)
    plain = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=save, **TOL)
    es = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=save, events=ode.Event(never), **TOL)
    assert calls == []
    np.testing.assert_array_equal(es.u, plain.u)
    np.testing.assert_array_equal(es.naccept, plain.naccept)
    assert all(t[0].size == 0 for t in es.t_events)


def test_a_condition_raising_without_a_crossing_fails_its_trajectories():
    _, eprob = _lotka_ensemble()
    save = np.linspace(0.0, 8.0, 17)
    es = ode.solve_ensemble(
        eprob, ode.Tsit5(), saveat=save, events=ode.Event(fails_late), threads=2, **TOL
    )
    bad = eprob.ps[:, 0] > 1.6
    assert bad.any() and not bad.all()
    np.testing.assert_array_equal(es.status[bad], ode.ReturnCode.RHS_ERROR)
    np.testing.assert_array_equal(es.status[~bad], ode.ReturnCode.SUCCESS)
    assert isinstance(es.exception(int(np.flatnonzero(bad)[0])), ValueError)


def test_interior_points_run_every_trajectory_on_the_scalar_stepper():
    _, eprob = _lotka_ensemble(12)
    save = np.linspace(0.0, 8.0, 17)
    event = ode.Event(prey_above, direction=1, interp_points=3)
    es = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=save, events=event, **TOL)
    for i in range(eprob.m):
        one = ode.ODEProblem(lotka, eprob.u0(i), (0.0, 8.0), eprob.p(i))
        sol = ode.solve(one, ode.Tsit5(), saveat=save, events=event, **TOL)
        np.testing.assert_array_equal(es.t_events[i][0], sol.t_events[0])
        np.testing.assert_array_equal(es.u[i], sol.u)
