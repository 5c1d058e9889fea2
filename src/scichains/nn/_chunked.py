"""Training steps whose batch is cut into chunks that any free thread takes.

Each optimizer step cuts its batch into ``m`` chunks of whole tiles. The threads (the caller
and the helpers of :mod:`scichains._workers`) take the next chunk from a counter until none
is left. Each chunk's gradient goes to its own row (``gch[c]``), and the thread that finishes
the last chunk adds the rows in chunk order and updates the parameters. So the bits depend on
the chunking only, not on which thread ran which chunk.

A thread with nothing left to take waits for the step to end. If a chunk taken by another
thread is still not done after twice the time a chunk takes (that thread was descheduled: a
process beside us took its core), the waiting thread computes the chunk too, into its own
scratch. The first to finish publishes it (``cstat[c]``: ``k`` while chunk ``c`` of step ``k``
is open, ``k + 1`` once published, by compare-and-swap); the other drops its copy at its
next tile. The step never waits a whole time slice for a thread that lost its core.

``ctl[0]``: the step under way (``nsteps`` once finished); ``ctl[1]``: the steps completed;
``ctl[2]``: chunks taken over from another thread. ``speed`` (kept between calls): the fewest
cycles a tile has taken, the patience (in chunk times; 0 takes over any open chunk at once,
which the tests use) and whether a waiting thread yields its CPU (when the threads may share
one, see :func:`scichains._workers.pinned`).
"""

from __future__ import annotations

import math

from .._atomics import atomic_add, atomic_cas, atomic_load, atomic_store, backoff, cycles, stalled
from .._jit import kernel
from .._native import call_native
from ._loss import penalty_grad
from ._optim import opt_update

CHUNKS_PER_WORKER = 1
"""Chunks per thread in a step (fewer when the batch has fewer tiles). More chunks lose less
work when a thread stalls, but each costs a pass over the dense layers' partial sums and a
copy of the gradient: two per thread made the matrix-exponential step 8-12% slower on an
idle machine (3.32-3.44 s against 2.98-3.12 s per 10,000 steps, AMD EPYC Zen 4, 2 threads),
and with one per thread it already keeps within 1.25-1.41x of idle beside a busy process."""


def chunk_count(ntiles: int, workers: int) -> int:
    """The chunks of a step of ``ntiles`` tiles on ``workers`` threads (one thread: one chunk,
    the same arithmetic as the serial kernel)."""
    return 1 if workers == 1 else max(1, min(ntiles, CHUNKS_PER_WORKER * workers))


@kernel
def _await_step(ctl, cstat, cstart, speed, k, m, tiles):
    """Wait for step ``k`` to end (returns -1) or return an open chunk to compute as well:
    one taken ``speed[1]`` times longer ago than a chunk of ``tiles`` tiles takes."""
    patience = speed[1] * atomic_load(speed, 0) * tiles
    spins = 0
    while atomic_load(ctl, 0) == k:
        c = stalled(cstat, cstart, k, m, patience)
        if c >= 0:
            return c
        spins = backoff(spins, speed[2])
    return -1


@kernel
def train_worker(
    slot,
    ctl,
    claims,
    done,
    cstat,
    cstart,
    speed,
    body,
    spec,
    fspec,
    meta,
    loss_kind,
    p,
    X,
    Y,
    labels,
    samples,
    batch,
    nsteps,
    nch,
    T,
    work,
    gbuf,
    gch,
    lch,
    grad,
    gX,
    pen,
    okind,
    hyper,
    state,
    tcount,
    pprev,
    losses,
    seed,
    step0,
    XYt,
):
    """Thread ``slot``'s part in ``nsteps`` optimizer steps; batch ``j`` of an epoch is
    ``samples[j*batch:...]``, cut into at most ``nch`` chunks of tiles of ``T``.

    ``body``: ``_batch.valgrad_body`` of the arrays. ``work``/``gbuf``: one row per thread;
    ``gch`` (nch, P) and ``lch`` (nch,): each chunk's gradient and loss. ``claims`` and
    ``done`` (nsteps,): per step, chunks taken and chunks published; ``cstat`` (nch,) zero and
    ``ctl`` ``[0, nsteps]`` at the start. ``XYt``: the batch pre-tiled in one run of tiles
    (``_batch.pretile`` with one share), or shape ``(0, 0)``.

    ``losses[k]`` receives the loss of step ``k``. Returns the number of steps completed: less
    than ``nsteps`` when a loss was not finite, in which case ``p`` is restored to the last
    parameters whose loss was finite.
    """
    N = samples.shape[0]
    nb = (N + batch - 1) // batch
    P = p.shape[0]
    while True:
        k = atomic_load(ctl, 0)
        if k >= nsteps:
            return atomic_load(ctl, 1)
        start = (k % nb) * batch
        count = min(batch, N - start)
        ntiles = (count + T - 1) // T
        m = min(nch, ntiles)
        c = atomic_add(claims, k, 1)
        if c < m:
            atomic_store(cstart, c, cycles())
        else:
            c = _await_step(ctl, cstat, cstart, speed, k, m, (ntiles + m - 1) // m)
            if c < 0:
                continue
            atomic_add(ctl, 2, 1)  # counted for tests and diagnostics
        a = (ntiles * c) // m
        b = (ntiles * (c + 1)) // m
        lo = start + a * T
        hi = min(start + count, start + b * T)
        t0 = cycles()
        acc = call_native(
            body, lo, hi, a, slot, spec, fspec, meta, loss_kind, p, X, Y, labels, samples,
            count, T, work, gbuf, gX, False, True, seed, step0 + k, XYt, cstat, c, k,
        )  # fmt: skip
        if atomic_cas(cstat, c, k, k + 1) != k:
            continue  # another thread published this chunk first
        per_tile = (cycles() - t0) // (b - a)
        if 0 < per_tile < atomic_load(speed, 0):
            atomic_store(speed, 0, per_tile)
        g = gbuf[slot]
        gc = gch[c]
        for j in range(P):
            gc[j] = g[j]
        lch[c] = acc
        if atomic_add(done, k, 1) != m - 1:
            continue
        # the last chunk of step k: reduce in chunk order, then the update
        for j in range(P):
            grad[j] = gch[0, j]
        for cc in range(1, m):
            gc = gch[cc]
            for j in range(P):
                grad[j] += gc[j]
        total = 0.0
        for cc in range(m):
            total += lch[cc]
        value = total * (1.0 / count) + penalty_grad(pen, p, grad)
        losses[k] = value
        for cc in range(m, nch):  # chunks this step did not use
            atomic_store(cstat, cc, k + 1)
        if not math.isfinite(value):
            # pprev holds the parameters of the previous step, whose loss was finite (or the
            # starting point, unchanged, when the very first loss is not finite)
            for i in range(P):
                p[i] = pprev[i]
            ctl[1] = k
            atomic_store(ctl, 0, nsteps)
            continue
        for i in range(P):
            pprev[i] = p[i]
        opt_update(okind, hyper, state, tcount, p, grad)
        atomic_store(ctl, 0, k + 1)
