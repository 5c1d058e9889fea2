"""The compiled ensemble loop: many solves of one right-hand side on numba's threads.

One parallel kernel, cached per machine like the stepper it calls: the trajectories are split
into blocks, each block runs on one thread with step buffers of its own (grown as the solve
needs, exactly as :meth:`SolvePlan.grow` does) and calls the compiled stepper
:func:`scichains.ode.explicit._kernels.integrate` once per trajectory, so no Python runs per
trajectory. A trajectory's result depends only on its own ``u0`` and ``p``: the saved states
are identical bit for bit for any thread count and any split into blocks or batches.
"""

from __future__ import annotations

import numba
import numpy as np

from ..._jit import parallel_kernel
from ...nn._chain import ChainKernel
from .._abi import StepStore, Stops
from .._codes import GROW, SUCCESS
from ..explicit._kernels import integrate, interpolate_saves


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
    nsave = save.shape[0]
    use_interp = interp.shape[0] > 0
    # the stop tables (no events): each block builds its own tuple of them (numba's parallel
    # loop could not take the stops' nested event table among its variables)
    times, jump_index, jump_count, jump_state, jump_amount = stops[:5]
    for blk in numba.prange(nblocks):
        lo = m * blk // nblocks
        hi = m * (blk + 1) // nblocks
        # every array the right-hand side is handed is the block's own: the scratch (a
        # network writes into k.work), and the read-only ones too, so that threads never
        # share the reference count of an array passed on each of the millions of calls
        kb = ChainKernel(
            k.spec.copy(), k.fspec.copy(), k.meta.copy(), k.work.copy(), k.samples.copy()
        )
        p = np.empty(P.shape[1])
        block_stops = Stops(times, jump_index, jump_count, jump_state, jump_amount, None)
        cap = cap0
        ts = np.empty(cap)
        us = np.empty((cap, n))
        fs = np.empty((cap, n))
        kstore = np.empty((cap if use_interp else 0, s, n))
        astore = np.zeros((0, s, 0))
        stats = np.zeros(7, dtype=np.int64)
        carry = np.zeros(3)
        fl = np.zeros(1 + n)
        pos = np.zeros(0, dtype=np.int64)
        inner = np.zeros(0, dtype=np.bool_)
        W = np.zeros((0, s))
        for i in range(lo, hi):
            u0 = U0[i] if U0.shape[0] > 1 else U0[0]
            row = i if P.shape[0] > 1 else 0
            for j in range(p.shape[0]):
                p[j] = P[row, j]
            for j in range(7):
                stats[j] = 0
            while True:
                code = integrate(
                    faddr,
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
                used = stats[0]
                new = 2 * cap
                ts2 = np.empty(new)
                us2 = np.empty((new, n))
                fs2 = np.empty((new, n))
                ts2[:used] = ts[:used]
                us2[:used] = us[:used]
                fs2[:used] = fs[:used]
                ts, us, fs = ts2, us2, fs2
                if use_interp:
                    ks2 = np.empty((new, s, n))
                    ks2[:used] = kstore[:used]
                    kstore = ks2
                cap = new
                stats[6] = 1
            nstored = stats[0]
            status[i] = code
            t_reached[i] = ts[nstored - 1]
            counts[i, 0] = stats[1]
            counts[i, 1] = stats[2]
            counts[i, 2] = stats[3]
            if code != SUCCESS:
                for j in range(1 + n):
                    fail[i, j] = fl[j]
            if use_interp:
                interpolate_saves(ts, us, kstore, nstored, interp, save, out[i], pos, inner, W)
            else:
                # the steps landed on every save time reached: the right limit at each
                direction = 1.0 if t1 >= t0 else -1.0
                e = 0
                for q in range(nsave):
                    tq = save[q]
                    while e < nstored and direction * (ts[e] - tq) < 0.0:
                        e += 1
                    if e == nstored or ts[e] != tq:
                        break
                    while e + 1 < nstored and ts[e + 1] == tq:
                        e += 1
                    for c in range(n):
                        out[i, q, c] = us[e, c]
