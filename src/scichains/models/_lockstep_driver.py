"""Lockstep blocks of a batch as one compiled computation: no Python per block.

The loss and gradient of a batch of trajectories in lockstep blocks (``_lockstep.py``) is,
per block: the forward solve (the explicit stepper, keeping each stage's network
activations), the saved states by the method's continuous extension, the weighted squared
error on them, and the discrete adjoint back through the stored steps. :func:`block_kernel`
is that sequence compiled; :func:`blocks_worker` runs it over the blocks on any number of
threads (the caller and the helpers of :mod:`scichains._workers`), each block taken from an
atomic counter, so a call costs the Python of one call, not of one call per block (about
65 us per block on an AMD EPYC Zen 4, 12-17% of a 16-64 trajectory gradient).

Each block's results are written to its own row by the thread that publishes it (a
compare-and-swap on ``cstat[j]``), and the caller adds the rows in block order: the bits do
not depend on which thread computed which block, nor on the thread count. A thread with
nothing left to take waits for the others; a block taken ``speed[1]`` block-times ago and
still not published (its thread lost its core to another process) is computed again by the
waiting thread, in its own buffers, and the first to finish publishes it (as the training
steps do, ``nn/_chunked.py``).

A block that the compiled path cannot finish (its step buffers or activation store are full,
or its solve or loss failed) is reported by a code; the caller then grows the buffers and
runs that block again in Python (:class:`BlockRunner`), or raises the error the objective
raises for it (the same messages as the per-block path).
"""

from __future__ import annotations

import math

import numpy as np

from .._atomics import (
    atomic_add,
    atomic_cas,
    atomic_load,
    atomic_store,
    backoff,
    cycles,
    stalled,
)
from .._jit import kernel
from .._workers import run_shared
from ..adjoint._discrete import discrete_adjoint
from ..adjoint._methods import DiscreteMethod
from ..ode._abi import StepControl, Stops
from ..ode._codes import GROW, SUCCESS
from ..ode.explicit._kernels import integrate, interpolate_saves

STORE_FULL = -1
"""Code: more steps than the activation store holds (grow it and run the block again)."""
NO_SAVE = -2
"""Code: a save time was not reached."""
NOT_FINITE = -3
"""Code: the loss or a gradient entry is not finite."""

_NEVER = 2**62  # cstart of a block not taken yet (never "held too long")


@kernel
def block_kernel(u0, data, weights, shared, own):
    """One lockstep block: ``(code, L)`` with ``L = sum w (u(t_i) - data_i)^2`` over the save
    times (``data``/``weights`` of shape ``(T, N)``), dL/dp written into ``own``'s ``pbar``
    and dL/du0 into its ``ubar``.

    ``shared`` (:func:`_shared_args`): ``(f address, vjp address, p, t0, t1, tableau,
    control, stops, A, b, c, interp, save)``; ``own`` (:meth:`_Slot.args`): ``(k, store,
    save_u, save_pos, save_inner, save_w, dl_du, pbar, ubar, ws, pb, fail)``, a thread's
    buffers: the stepper's with a stage store and an activation store, the ``save_*`` ones
    as ``SolvePlan.save_buffers`` makes them, ``ws``, ``pb``, ``fail`` as
    :func:`~scichains.adjoint.discrete_adjoint` takes them. Code SUCCESS, a stepper code
    (GROW when its buffers are full), or STORE_FULL, NO_SAVE, NOT_FINITE."""
    faddr, vaddr, p, t0, t1, tableau, control, stops, A, b, c, interp, save = shared
    k, store, save_u, save_pos, save_inner, save_w, dl_du, pbar, ubar, ws, pb, fail = own
    store.stats[6] = 0
    code = integrate(faddr, k, u0, p, t0, t1, tableau, control, stops, store)
    if code != SUCCESS:
        return code, 0.0
    m = store.stats[0]
    if m > store.astore.shape[0]:
        return STORE_FULL, 0.0
    ts = store.ts
    us = store.us
    ks = store.kstore
    if not interpolate_saves(ts, us, ks, m, interp, save, save_u, save_pos, save_inner, save_w):
        return NO_SAVE, 0.0
    total = 0.0
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            r = save_u[i, j] - data[i, j]
            wr = weights[i, j] * r
            dl_du[i, j] = wr * 2.0
            total += wr * r
    if not math.isfinite(total):
        return NOT_FINITE, total
    code = discrete_adjoint(
        vaddr, k, p, A, b, c, ts[:m], us[:m], ks[:m], store.astore[:m], m,
        save_pos, save_inner, save_w, dl_du, pbar, ubar, ws, pb, fail,
    )  # fmt: skip
    if code != SUCCESS:
        return code, total
    for j in range(pbar.shape[0]):
        if not math.isfinite(pbar[j]):
            return NOT_FINITE, total
    for j in range(ubar.shape[0]):
        if not math.isfinite(ubar[j]):
            return NOT_FINITE, total
    return SUCCESS, total


@kernel
def _await_blocks(ctl, cstat, cstart, speed, nblocks):
    """Wait until every block is published (returns -1), or return an open block taken
    ``speed[1]`` block-times ago to compute as well."""
    patience = speed[1] * atomic_load(speed, 0)
    spins = 0
    while atomic_load(ctl, 1) < nblocks:
        j = stalled(cstat, cstart, 0, nblocks, patience)
        if j >= 0:
            atomic_store(cstart, j, cycles())  # one more thread on it, not all of them
            return j
        spins = backoff(spins, speed[2])
    return -1


@kernel
def blocks_worker(slot, ctl, cstat, cstart, speed, codes, values, dps, du0s, U0, D, W, shared, own):
    """Thread ``slot``'s part of the blocks ``j < B`` (``U0[j]`` their initial states,
    ``D[j]``/``W[j]`` their data and weights; ``shared`` and ``own``, the thread's buffers,
    as :func:`block_kernel` takes them). Block ``j``'s code, loss, dL/dp and dL/du0 go to
    ``codes[j]``, ``values[j]``, ``dps[j]``, ``du0s[j]``. ``ctl``: ``[taken, published, taken
    over]``, zero at the start; ``cstat`` zero; ``cstart`` ``_NEVER``; ``speed``: ``[fewest
    cycles a block took, patience in block times, yield while waiting]``, kept between calls.
    Returns when every block is published: the caller's call alone completes the
    computation."""
    pbar, ubar = own[7], own[8]
    nblocks = U0.shape[0]
    while True:
        j = atomic_add(ctl, 0, 1)
        if j < nblocks:
            atomic_store(cstart, j, cycles())
        else:
            j = _await_blocks(ctl, cstat, cstart, speed, nblocks)
            if j < 0:
                return atomic_load(ctl, 2)
            atomic_add(ctl, 2, 1)
        start = cycles()
        code, value = block_kernel(U0[j], D[j], W[j], shared, own)
        if atomic_cas(cstat, j, 0, 1) != 0:
            continue  # another thread published this block first
        took = cycles() - start
        if code == SUCCESS and 0 < took < atomic_load(speed, 0):
            atomic_store(speed, 0, took)
        codes[j] = code
        values[j] = value
        row = dps[j]
        for i in range(row.shape[0]):
            row[i] = pbar[i]
        row = du0s[j]
        for i in range(row.shape[0]):
            row[i] = ubar[i]
        atomic_add(ctl, 1, 1)


def compiled_blocks(obj) -> bool:
    """Whether the lockstep block objective ``obj`` runs on the compiled driver: the discrete
    adjoint of an explicit method with a continuous extension, over a network right-hand
    side whose activations it stores; no events and no doses."""
    method = obj.method
    if type(method) is not DiscreteMethod or not method.stored:
        return False
    plan = method.plan
    return (
        plan.interpolate
        and plan.solver.interp is not None
        and plan.events is None
        and not np.any(plan.jump_count)
    )


class _Slot:
    """One thread's buffers for the driver: an objective's plan and method buffers, and its
    own gradient rows."""

    __slots__ = ("obj", "pbar", "ubar")

    def __init__(self, obj):
        self.obj = obj
        self.pbar = np.zeros(obj.prob.p.size)
        self.ubar = np.zeros(obj.prob.u0.size)

    @classmethod
    def of(cls, obj) -> _Slot:
        """The slot of objective ``obj`` (made on first use, kept on it)."""
        slot = getattr(obj, "_driver_slot", None)
        if slot is None:
            slot = obj._driver_slot = cls(obj)
        return slot

    def match(self, other: _Slot) -> None:
        """Give this slot's step buffers and activation store at least ``other``'s capacity
        (after ``other`` grew): new arrays, so a helper still reading the old ones (a late
        one, of an earlier call) is not disturbed."""
        mine, theirs = self.obj.method, other.obj.method
        plan, cap = mine.plan, theirs.plan.us.shape[0]
        if plan.us.shape[0] < cap:
            plan.grow(cap)
        if plan.astore.shape[0] < theirs.plan.astore.shape[0]:
            mine._grow_activation_store(theirs.plan.astore.shape[0])

    def args(self) -> tuple:
        method = self.obj.method
        plan = method.plan
        plan.save_buffers()
        return (
            self.obj.prob.kernel,
            plan.store(),
            plan.save_u,
            plan.save_pos,
            plan.save_inner,
            plan.save_w,
            method._dl_du,
            self.pbar,
            self.ubar,
            method._ws,
            method._pb,
            method._fail,
        )


def _shared_args(obj, p) -> tuple:
    """The arguments every thread shares (after ``p``): the problem, method and options."""
    prob = obj.prob
    plan = obj.method.plan
    t0, t1 = prob.tspan
    control = StepControl(
        plan.rtol, plan.atol, plan.dt0, plan.dtmin, plan.max_steps, prob.error_group, plan.mass
    )
    stops = Stops(plan.stops, plan.jump_index, plan.jump_count, plan.jump_state, plan.jump_amount)
    return (
        prob.f_address,
        prob.vjp_address,
        p,
        float(t0),
        float(t1),
        plan.tableau,
        control,
        stops,
        plan.A,
        plan.b,
        plan.c,
        plan.solver.interp,
        plan.save,
    )


class BlockRunner:
    """Runs many lockstep blocks of one size on the compiled driver; one per model and block
    size (it keeps the measured speed of a block between calls)."""

    def __init__(self):
        self.speed = np.array([_NEVER // 4, 2, 0], dtype=np.int64)
        self.takeovers = 0  # blocks computed again by a waiting thread (diagnostics)
        self.again = 0  # blocks run again on the caller after the compiled path stopped

    def run(self, objs: list, p, U0, D, W, note=None):
        """``(values (B,), dL/dp rows (B, P), dL/du0 rows (B, N))`` of the blocks ``U0``
        (``(B, N)``), data ``D`` and weights ``W`` (``(B, T, N)``) on ``len(objs)`` threads,
        ``objs[w]`` holding thread ``w``'s buffers (objectives of one lockstep problem). A block
        that fails raises the objective's error, with ``note(j)`` added when given."""
        nblocks, N = U0.shape
        P = p.size
        workers = max(1, min(len(objs), nblocks))
        # the fewest cycles a block took, allowed to grow back by a quarter per call (blocks
        # get costlier as a fit moves on): a waiting thread's patience follows the blocks
        self.speed[0] = min(self.speed[0] + self.speed[0] // 4, _NEVER // 4)
        slots = [_Slot.of(objs[w]) for w in range(workers)]
        ctl = np.zeros(3, dtype=np.int64)
        cstat = np.zeros(nblocks, dtype=np.int64)
        cstart = np.full(nblocks, _NEVER, dtype=np.int64)
        codes = np.zeros(nblocks, dtype=np.int64)
        values = np.zeros(nblocks)
        dps = np.zeros((nblocks, P))
        du0s = np.zeros((nblocks, N))
        head = (ctl, cstat, cstart, self.speed, codes, values, dps, du0s, U0, D, W)
        head += (_shared_args(objs[0], p),)
        own = [(s.args(),) for s in slots]
        self.takeovers += int(run_shared(blocks_worker, workers, head, self.speed[2:], own))
        failed = np.flatnonzero(codes != SUCCESS)
        self.again += failed.size
        for j in failed:
            try:
                values[j] = self._again(slots[0], p, U0[j], D[j], W[j], dps[j], du0s[j])
            except Exception as e:
                if note is not None:
                    e.add_note(note(int(j)))
                raise
        if failed.size:  # the others' buffers as large as those the caller grew
            for s in slots[1:]:
                s.match(slots[0])
        return values, dps, du0s

    @staticmethod
    def _again(slot: _Slot, p, u0, data, weights, dp, du0) -> float:
        """Block ``(u0, data, weights)`` on the calling thread with ``slot``'s buffers, grown
        as it needs; its loss (``dp``/``du0`` written), or the objective's error."""
        obj = slot.obj
        method = obj.method
        for _ in range(64):
            code, value = block_kernel(u0, data, weights, _shared_args(obj, p), slot.args())
            if code == SUCCESS:
                dp[:] = slot.pbar
                du0[:] = slot.ubar
                return float(value)
            if code == STORE_FULL:
                method._grow_activation_store(2 * int(method.plan.stats[0]))
            elif code == GROW:
                method.plan.grow()
            else:
                break
        # a failure: the objective's own call raises its error (its loss on this block's
        # data); should it succeed (a sum that overflowed in one order only), its result
        obj.loss.data[...] = data
        if obj.loss.weights.flags.writeable:  # else ones (a NeuralODE batch), as W is
            obj.loss.weights[...] = weights
        value, dp[:], du0[:] = obj.value_and_grad(p, u0)
        return float(value)


def _blocked(x: np.ndarray, idx: np.ndarray, nblocks: int, size: int) -> np.ndarray:
    """``x[idx]`` (shape ``(nblocks size, T, n)``) as blocks, shape ``(nblocks, T, size n)``:
    block ``j``'s save point ``i`` holds its trajectories' states one after another."""
    _, T, n = x.shape
    y = x[idx].reshape(nblocks, size, T, n).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(y).reshape(nblocks, T, size * n)


def lockstep_value_and_grad(claim, pair_of, runners: dict, p, u0, data, weights, order, size, k):
    """``(L, dL/dp, dL/du0)`` of the trajectories ``order`` (of ``u0``, shape ``(m, n)``, data
    and weights ``(m, T, n)``; weights None: ones) in consecutive lockstep blocks of ``size``
    (the last maybe fewer) on ``k`` threads, on the compiled driver; ``dL/du0`` in the order
    of ``order``. ``claim(k)``: the threads' caches (``WorkerSets.claim``); ``pair_of(cache,
    size)``: a cache's ``(objective, loss)`` for blocks of ``size``; ``runners``: the
    :class:`BlockRunner` of each size (made here). None when the blocks' objective does not
    run on the driver (:func:`compiled_blocks`). Sums are taken in block order: the same bits
    for any ``k``."""
    n = u0.shape[1]
    nblocks = -(-order.size // size)
    pad = nblocks * size - order.size
    # the last block, when short, is filled with copies of its last trajectory weighted 0:
    # they have its error norms (the block's steps are those of the short block) and add
    # nothing to the loss; every block then has one size and the threads share all of them
    idx = np.concatenate([order, np.repeat(order[-1:], pad)])
    k = max(1, min(k, nblocks))
    with claim(k) as caches:
        objs = [pair_of(c, size)[0] for c in caches]
        if not compiled_blocks(objs[0]):
            return None
        U0 = u0[idx].reshape(nblocks, size * n)
        D = _blocked(data, idx, nblocks, size)
        W = np.ones_like(D) if weights is None else _blocked(weights, idx, nblocks, size)
        if pad:
            W[-1].reshape(-1, size, n)[:, size - pad :] = 0.0

        def note(j):
            names = ", ".join(str(int(i)) for i in order[j * size : (j + 1) * size])
            return f"(in the lockstep block of trajectories {names})"

        runner = runners.get(size)
        if runner is None:
            runner = runners[size] = BlockRunner()
        values, dps, du0s = runner.run(objs, p, U0, D, W, note)
    blocks = [(values[j], dps[j], du0s[j].reshape(size, n)) for j in range(nblocks)]
    loss, dp, du0 = sum_blocks(blocks)
    return loss, dp, du0[: order.size]


def sum_blocks(results: list) -> tuple[float, np.ndarray, np.ndarray]:
    """``(L, dL/dp, dL/du0)`` from per-block ``(L_j, dL_j/dp, dL_j/du0)`` (the last of shape
    ``(block size, n)``), summed in block order (the same bits for any thread count); ``dL/du0``
    stacks the blocks' rows."""
    loss, dp = float(results[0][0]), np.array(results[0][1], dtype=np.float64)
    for r in results[1:]:
        loss += float(r[0])
        dp += r[1]
    return loss, dp, np.concatenate([r[2] for r in results])
