"""The lane-parallel ensemble loop (``ode/ensemble/_lanes.py``): chosen for plain compiled
right-hand sides without doses; each trajectory exactly what ``solve`` computes (every saved
value, status, count and end time; the controller's powers are the same log/exp code on vectors
and on scalars); identical bit for bit in any lane, block, thread count or
batch; failures stay in place; the scalar path still serves what the lanes do not. How the
path is chosen, the split into blocks and the lanes' own arithmetic: test_internals_ensemble.py."""

import numba
import numpy as np
import pytest

from scichains.ode import (
    BS3,
    DP5,
    RK4,
    EnsembleProblem,
    ODEProblem,
    ReturnCode,
    Tsit5,
    Vern7,
    solve,
    solve_ensemble,
)

from ._ensemble_models import fragile, lotka_volterra

P0 = np.array([1.5, 1.0, 1.0, 3.0])
TS = np.linspace(0.0, 10.0, 50)


@numba.njit(cache=True)
def _decay(du, u, p, t):
    # no parameters: p has length 0
    du[0] = -u[0] + np.sin(t)
    du[1] = -2.0 * u[1] + u[0]
    du[2] = u[0] * u[1] - 0.5 * u[2]


def _rows(m, seed=0):
    rng = np.random.default_rng(seed)
    return 1.0 + rng.random((m, 2)), P0 * (1.0 + 0.2 * rng.random((m, 4)))


def _lv(tspan=(0.0, 10.0)):
    return ODEProblem(lotka_volterra, [1.0, 1.0], tspan, P0)


def _solve_each(prob, u0s, ps, solver, saveat, **kw):
    """solve() per trajectory: saved states (NaN where not reached), status, end time and
    counts."""
    m = len(u0s)
    u = np.full((m, len(saveat), prob.u0.size), np.nan)
    status, t_end, counts = np.zeros(m, int), np.zeros(m), np.zeros((m, 3), int)
    for i in range(m):
        q = ODEProblem(prob.f, u0s[i], prob.tspan, ps[i])
        sol = solve(q, solver, saveat=saveat, **kw)
        u[i, : len(sol.t)] = sol.u
        status[i], t_end[i] = sol.status, sol.t_reached
        counts[i] = [sol.stats[k] for k in ("nf", "naccept", "nreject")]
    return u, status, t_end, counts


def _check(sol, want, exact, rtol=1e-12):
    u, status, t_end, counts = want
    np.testing.assert_array_equal(sol.status, status)
    np.testing.assert_array_equal(np.c_[sol.nf, sol.naccept, sol.nreject], counts)
    if exact:
        np.testing.assert_array_equal(sol.u, u)
        np.testing.assert_array_equal(sol.t_reached, t_end)
    else:
        np.testing.assert_allclose(sol.u, u, rtol=rtol, atol=1e-300)
        np.testing.assert_allclose(sol.t_reached, t_end, rtol=rtol)


@pytest.mark.parametrize(
    "solver, kw",
    [
        (Tsit5(), {}),  # FSAL, saves by its continuous extension
        (DP5(), {}),
        (BS3(), {}),
        (Vern7(), {}),  # not FSAL, lands on the save times
        (RK4(), dict(dt0=0.01)),  # fixed steps
    ],
    ids=lambda x: getattr(x, "name", ""),
)
def test_exactly_what_solve_computes(solver, kw):
    # 21 trajectories: lanes refilled mid-block, and a last round with idle lanes
    u0s, ps = _rows(21, seed=1)
    prob = _lv()
    sol = solve_ensemble(
        EnsembleProblem(prob, u0s=u0s, ps=ps), solver, saveat=TS, rtol=1e-7, threads=1, **kw
    )
    _check(sol, _solve_each(prob, u0s, ps, solver, TS, rtol=1e-7, **kw), exact=True)


def test_backward_in_time_landing_on_tstops():
    # integration backward in time, landing on tstops, saves at both ends
    prob = _lv((10.0, 0.0))
    u0s, ps = _rows(13, seed=9)
    ts = np.linspace(10.0, 0.0, 21)
    kw = dict(rtol=1e-8, atol=1e-10, tstops=[7.3, 2.9])
    e = EnsembleProblem(prob, u0s=u0s, ps=ps)
    sol = solve_ensemble(e, Tsit5(), saveat=ts, **kw)
    _check(sol, _solve_each(prob, u0s, ps, Tsit5(), ts, **kw), exact=True)


def test_three_states_without_parameters():
    # len(p) = 0 and n = 3. Not bit for bit: LLVM vectorises some of the scalar stepper's
    # sums (over the components, or over the stages when they are contiguous: n = 1) under
    # fast-math reassociation, in another order than the lanes' in-order sums; the error
    # estimate cancels to ~1e-9 of its terms, so the step sizes differ at ~1e-7 and the
    # values by a small fraction of the solver's own error
    prob = ODEProblem(_decay, [1.0, 0.5, 0.2], (0.0, 4.0))
    u0s = np.random.default_rng(7).random((11, 3))
    ts = np.linspace(0.0, 4.0, 9)
    kw = dict(rtol=1e-8, atol=1e-10, tstops=[1.7])
    sol = solve_ensemble(EnsembleProblem(prob, u0s=u0s), Tsit5(), saveat=ts, **kw)
    _check(sol, _solve_each(prob, u0s, np.zeros((11, 0)), Tsit5(), ts, **kw), False, 1e-9)


def test_other_methods_and_thread_counts_are_exactly_solve():
    u0s, ps = _rows(40, seed=2)
    prob = _lv()
    e = EnsembleProblem(prob, u0s=u0s, ps=ps)
    for solver in (Tsit5(), DP5(), Vern7()):
        sol = solve_ensemble(e, solver, saveat=TS)
        _check(sol, _solve_each(prob, u0s, ps, solver, TS), exact=True)
        # and the same for any thread count and batch
        again = solve_ensemble(e, solver, saveat=TS, threads=2, batch_size=13)
        np.testing.assert_array_equal(again.u, sol.u)


def test_identical_in_any_lane_block_thread_count_or_batch():
    # each trajectory's arithmetic is its own: permuting the rows permutes the results,
    # bit for bit, whatever lane and block each lands in
    u0s, ps = _rows(203, seed=4)
    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps)
    ref = solve_ensemble(e, Tsit5(), saveat=TS, threads=1)
    perm = np.random.default_rng(5).permutation(203)
    shuffled = EnsembleProblem(_lv(), u0s=u0s[perm], ps=ps[perm])
    for kw in (dict(threads=2), dict(threads=1, batch_size=5), dict(threads=2, batch_size=64)):
        got = solve_ensemble(shuffled, Tsit5(), saveat=TS, **kw)
        np.testing.assert_array_equal(got.u, ref.u[perm])
        np.testing.assert_array_equal(got.status, ref.status[perm])
        np.testing.assert_array_equal(got.naccept, ref.naccept[perm])


def test_failures_stay_in_their_lanes():
    # two states, exactly solve's: among 30 trajectories, blow-ups (p = (1, -1, 1, -1):
    # both states feed each other's growth) and one that runs out of steps (fast cycles)
    u0s, ps = _rows(30, seed=10)
    ps[[4, 11, 23]] = [1.0, -1.0, 1.0, -1.0]
    ps[17] = P0 * 40.0
    prob = _lv()
    sol = solve_ensemble(EnsembleProblem(prob, u0s=u0s, ps=ps), Tsit5(), saveat=TS, max_steps=400)
    _check(sol, _solve_each(prob, u0s, ps, Tsit5(), TS, max_steps=400), exact=True)
    assert set(sol.failed) == {4, 11, 17, 23}
    assert sol.status[17] == ReturnCode.MAX_STEPS
    assert np.isin(sol.status[[4, 11, 23]], [ReturnCode.NONFINITE, ReturnCode.DT_UNDERFLOW]).all()
    assert np.isnan(sol.u[4, -1]).all() and np.isfinite(sol.u[4, 0]).all()


def test_errors_raised_in_the_right_hand_side_stay_in_their_lanes():
    # one state: blow-ups (p0 = 2: u = 1 / (1 - 2t) reaches infinity at 0.5) and raises
    # (p1 < 0), each ended as solve ends it (status, counts), the values solve's to 1e-9
    # (one state: see test_three_states_without_parameters)
    rng = np.random.default_rng(6)
    m = 40
    ps = np.c_[0.1 + 0.3 * rng.random(m), np.zeros(m)]
    ps[[3, 17, 30], 0] = 2.0
    ps[[5, 6, 25], 1] = -1.0
    prob = ODEProblem(fragile, [1.0], (0.0, 0.999), [0.1, 0.0])
    ts = np.linspace(0.0, 0.999, 11)
    sol = solve_ensemble(EnsembleProblem(prob, ps=ps), Tsit5(), saveat=ts)
    _check(sol, _solve_each(prob, np.ones((m, 1)), ps, Tsit5(), ts), exact=False, rtol=1e-9)
    assert set(sol.failed) == {3, 5, 6, 17, 25, 30}
    assert (sol.status[[5, 6, 25]] == ReturnCode.RHS_ERROR).all()
    assert np.isin(sol.status[[3, 17, 30]], [ReturnCode.NONFINITE, ReturnCode.DT_UNDERFLOW]).all()
    assert sol.t_reached[5] == 0.0 and np.isnan(sol.u[5, 1:]).all()
    exc = sol.exception(25)
    assert isinstance(exc, ValueError) and "non-negative" in str(exc)


def test_doses_give_what_solve_gives():
    # doses take the scalar path (one solve per trajectory): checked against solve
    u0s, ps = _rows(19, seed=8)
    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps)
    jumps = [(4.0, 0, 0.5)]
    dosed = solve_ensemble(e, Tsit5(), saveat=TS, jumps=jumps)
    _check(dosed, _solve_each(_lv(), u0s, ps, Tsit5(), TS, jumps=jumps), exact=True)
