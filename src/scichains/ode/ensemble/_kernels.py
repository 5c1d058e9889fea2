"""The compiled ensemble loop: many solves of one right-hand side on numba's threads.

One parallel kernel, cached per machine like the stepper it calls: the trajectories are split
into blocks, each block runs on one thread with step buffers of its own (grown as the solve
needs, exactly as :meth:`SolvePlan.grow` does) and runs the explicit stepper once per
trajectory, so no Python runs per trajectory. The kernels call the one loop
(:func:`scichains.ode._loop.run_loop`, inlined; the explicit family's step) as
:func:`scichains.ode.explicit._kernels.integrate` does, not ``integrate`` itself: through
``integrate`` the loop's module was linked and optimised once more in each kernel (the event
kernel's cold compile 42 s, 24 s without). A trajectory's result depends only on its own
``u0`` and ``p``: the saved states are identical bit for bit for any thread count and any
split into blocks or batches.
"""

from __future__ import annotations

import numba
import numpy as np

from ..._jit import FLAGS, parallel_kernel
from ...nn._chain import ChainKernel
from .._abi import EventTable, StepStore, Stops
from .._codes import GROW, SUCCESS
from .._loop import run_loop
from ..explicit._kernels import interpolate_saves


@parallel_kernel
def solve_batch(
    faddr,
    k,
    U0,
    P,
    t0,
    t1,
    method,
    control,
    stops,
    save,
    interp,
    cap0,
    nblocks,
    out,
    status,
    t_reached,
    fail,
    counts,
):
    """Solve ``m = out.shape[0]`` trajectories: trajectory ``i`` from ``U0[i]`` (or ``U0[0]``
    when ``U0`` has one row) with parameters ``P[i]`` (or ``P[0]``).

    ``out[i]`` (shape ``(len(save), n)``) receives the states at ``save``: by the continuous
    extension ``interp`` (shape ``(s, deg)``) when it has rows, else from the steps that landed
    on the save times (``save`` is then among ``stops``). Save times the solve did not reach
    are left as they are (the caller fills ``out`` with NaN). ``status[i]``: the stepper's
    return code; ``t_reached[i]``: the last time reached; ``fail[i]``: on RHS_ERROR the time
    and state of the failed call; ``counts[i] = [nf, naccept, nreject]``.
    """
    m = out.shape[0]
    n = out.shape[2]
    s = method.b.shape[0]
    use_interp = interp.shape[0] > 0
    # the stop tables (no events): each block builds its own tuple of them (numba's parallel
    # loop could not take the stops' nested event table among its variables)
    times, jump_index, jump_count, jump_state, jump_amount = stops[:5]
    for blk in numba.prange(nblocks):
        lo = m * blk // nblocks
        hi = m * (blk + 1) // nblocks
        # the block's own copies and buffers (see _block_buffers)
        kb, p, ts, us, fs, kstore, astore, stats, carry, fl, pos, inner, W = _block_buffers(
            k, P.shape[1], cap0, n, s, use_interp
        )
        block_stops = Stops(times, jump_index, jump_count, jump_state, jump_amount, None)
        for i in range(lo, hi):
            u0 = _load_trajectory(i, U0, P, p, stats)
            while True:
                code = run_loop(
                    faddr,
                    0,
                    kb,
                    u0,
                    p,
                    t0,
                    t1,
                    method,
                    control,
                    block_stops,
                    StepStore(ts, us, fs, stats, kstore, astore, carry, fl),
                )
                if code != GROW:
                    break
                # the buffers are full: double them, keeping what they hold, and resume
                ts, us, fs, kstore = _grown(ts, us, fs, kstore, stats[0], use_interp)
                stats[6] = 1
            _report(
                i,
                code,
                stats,
                ts,
                us,
                kstore,
                fl,
                t0,
                t1,
                interp,
                save,
                out,
                status,
                t_reached,
                fail,
                counts,
                pos,
                inner,
                W,
            )


@numba.njit(**FLAGS)
def _block_buffers(k, npar, cap, n, s, use_interp):
    """A block's own copies and buffers: ``(kb, p, ts, us, fs, kstore, astore, stats, carry,
    fail, pos, inner, W)``. Every array the right-hand side is handed is the block's own: the
    scratch (a network writes into ``k.work``), and the read-only ones too, so that threads
    never share the reference count of an array passed on each of the millions of calls."""
    kb = ChainKernel(k.spec.copy(), k.fspec.copy(), k.meta.copy(), k.work.copy(), k.samples.copy())
    return (
        kb,
        np.empty(npar),
        np.empty(cap),
        np.empty((cap, n)),
        np.empty((cap, n)),
        np.empty((cap if use_interp else 0, s, n)),
        np.zeros((0, s, 0)),
        np.zeros(7, dtype=np.int64),
        np.zeros(3),
        np.zeros(1 + n),
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.bool_),
        np.zeros((0, s)),
    )


@numba.njit(**FLAGS)
def _load_trajectory(i, U0, P, p, stats):
    """Trajectory ``i``'s parameters into ``p`` and its statistics zeroed; returns its initial
    state (a row of ``U0``, or the shared one)."""
    row = i if P.shape[0] > 1 else 0
    for j in range(p.shape[0]):
        p[j] = P[row, j]
    for j in range(stats.shape[0]):
        stats[j] = 0
    return U0[i] if U0.shape[0] > 1 else U0[0]


@numba.njit(**FLAGS)
def _grown(ts, us, fs, kstore, used, use_interp):
    """The step buffers doubled, keeping their first ``used`` entries (the loop returned
    GROW): ``(ts, us, fs, kstore)``, the stages' store grown only when it is kept."""
    cap, n = us.shape
    new = 2 * cap
    ts2 = np.empty(new)
    us2 = np.empty((new, n))
    fs2 = np.empty((new, n))
    ts2[:used] = ts[:used]
    us2[:used] = us[:used]
    fs2[:used] = fs[:used]
    if use_interp:
        ks2 = np.empty((new, kstore.shape[1], n))
        ks2[:used] = kstore[:used]
        kstore = ks2
    return ts2, us2, fs2, kstore


@numba.njit(**FLAGS)
def _report(
    i,
    code,
    stats,
    ts,
    us,
    kstore,
    fl,
    t0,
    t1,
    interp,
    save,
    out,
    status,
    t_reached,
    fail,
    counts,
    pos,
    inner,
    W,
):
    """Trajectory ``i``'s outcome into the results: its code, last time, counts, the failed
    call's time and state, and the states at the save times it reached (by the continuous
    extension ``interp`` where it has rows, else from the steps that landed on them)."""
    n = out.shape[2]
    nstored = stats[0]
    status[i] = code
    t_reached[i] = ts[nstored - 1]
    counts[i, 0] = stats[1]
    counts[i, 1] = stats[2]
    counts[i, 2] = stats[3]
    if code != SUCCESS:
        for j in range(1 + n):
            fail[i, j] = fl[j]
    if interp.shape[0] > 0:
        interpolate_saves(ts, us, kstore, nstored, interp, save, out[i], pos, inner, W)
        return
    # the steps landed on every save time reached: the right limit at each
    direction = 1.0 if t1 >= t0 else -1.0
    e = 0
    for q in range(save.shape[0]):
        tq = save[q]
        while e < nstored and direction * (ts[e] - tq) < 0.0:
            e += 1
        if e == nstored or ts[e] != tq:
            break
        while e + 1 < nstored and ts[e + 1] == tq:
            e += 1
        for c in range(n):
            out[i, q, c] = us[e, c]


@numba.njit(**FLAGS)
def solve_events_block(
    faddr,
    k,
    U0,
    P,
    t0,
    t1,
    method,
    control,
    stops,
    ev,
    save,
    interp,
    cap0,
    lo,
    hi,
    out,
    status,
    t_reached,
    fail,
    counts,
    raised,
    fired,
):
    """Trajectories ``lo..hi-1`` of an ensemble with state-dependent events, one after the
    other (the caller runs blocks on threads of its own: the kernel holds no GIL). As
    :func:`solve_batch` for the results; ``stops`` has no event table, ``ev`` is the block's
    own :class:`~scichains.ode._abi.EventTable` (its arrays written by this block only), reset
    for each trajectory and grown as its records need. A trajectory that ends with RHS_ERROR
    leaves in ``raised[i]`` what raised (0 the right-hand side, 1 a condition, 2 an affect)
    and in ``fired[i]`` (shape ``(m_events,)``) the events whose affects were acting.

    Returns the block's event records ``(count, trajectory, which, times, states)``: record
    ``r < count`` is event ``which[r]`` of trajectory ``trajectory[r]`` at ``times[r]`` with
    the state ``states[r]`` before its affect, in the order of the trajectories and, within
    one, of the events' times."""
    n = out.shape[2]
    s = method.b.shape[0]
    use_interp = interp.shape[0] > 0
    times, jump_index, jump_count, jump_state, jump_amount = stops[:5]
    nev = ev.direction.shape[0]
    kb, p, ts, us, fs, kstore, astore, stats, carry, fl, pos, inner, W = _block_buffers(
        k, P.shape[1], cap0, n, s, use_interp
    )
    count = 0
    rec_traj = np.empty(16, dtype=np.int64)
    rec_which = np.empty(16, dtype=np.int64)
    rec_t = np.empty(16)
    rec_u = np.empty((16, n))
    for i in range(lo, hi):
        u0 = _load_trajectory(i, U0, P, p, stats)
        ev.mark[:] = 0
        ev.state[:] = 0
        ev.g[:, :] = 0.0
        ev.s[:] = 0.0
        while True:
            code = run_loop(
                faddr,
                0,
                kb,
                u0,
                p,
                t0,
                t1,
                method,
                control,
                Stops(times, jump_index, jump_count, jump_state, jump_amount, ev),
                StepStore(ts, us, fs, stats, kstore, astore, carry, fl),
            )
            if code != GROW:
                break
            c = ev.state[0]
            size = ev.times.shape[0]
            if c + nev > size and size < ev.max_events:  # room for the records, as plan.grow
                new = min(max(2 * size, c + nev), ev.max_events)
                et = np.zeros(new)
                ew = np.zeros(new, dtype=np.int64)
                es = np.zeros((new, n))
                et[:c] = ev.times[:c]
                ew[:c] = ev.which[:c]
                es[:c] = ev.states[:c]
                ev = EventTable(
                    ev.cond,
                    ev.affect,
                    ev.max_events,
                    ev.points,
                    ev.direction,
                    ev.terminal,
                    ev.has_affect,
                    ev.mark,
                    ev.state,
                    ev.g,
                    ev.s,
                    et,
                    ew,
                    es,
                )
            ts, us, fs, kstore = _grown(ts, us, fs, kstore, stats[0], use_interp)
            stats[6] = 1
        _report(
            i,
            code,
            stats,
            ts,
            us,
            kstore,
            fl,
            t0,
            t1,
            interp,
            save,
            out,
            status,
            t_reached,
            fail,
            counts,
            pos,
            inner,
            W,
        )
        if code != SUCCESS:
            raised[i] = ev.state[1]
            for j in range(nev):
                fired[i, j] = ev.g[4, j]  # the FIRED row (see _event_search)
        c = ev.state[0]
        if count + c > rec_t.shape[0]:
            new = max(2 * rec_t.shape[0], count + c)
            rt = np.empty(new, dtype=np.int64)
            rw = np.empty(new, dtype=np.int64)
            rtt = np.empty(new)
            ru = np.empty((new, n))
            rt[:count] = rec_traj[:count]
            rw[:count] = rec_which[:count]
            rtt[:count] = rec_t[:count]
            ru[:count] = rec_u[:count]
            rec_traj, rec_which, rec_t, rec_u = rt, rw, rtt, ru
        for r in range(c):
            rec_traj[count] = i
            rec_which[count] = ev.which[r]
            rec_t[count] = ev.times[r]
            for j in range(n):
                rec_u[count, j] = ev.states[r, j]
            count += 1
    return count, rec_traj, rec_which, rec_t, rec_u
