"""Ensembles: one problem solved from many initial states and/or parameter vectors.

``solve_ensemble(EnsembleProblem(prob, u0s=..., ps=...), Tsit5(), saveat=ts)`` runs the
trajectories on numba's threads in this process (one compiled loop calling the stepper, no
Python per trajectory), or in batches on a Dask cluster (``executor=client``).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..._jit import resolve_threads
from ...parallel import _executor as ex
from ...parallel import _shm as shm
from .._abi import NO_MASS, StepControl, Stops
from .._events import EventPlan, check_events
from .._plan import plan_solve
from ..explicit._tableaus import ExplicitRK, Tsit5
from ._kernels import solve_events_block
from ._lane_ops import LANES, lane_conditions_address
from ._problem import EnsembleProblem, EnsembleSolution
from ._rows import (
    _fresh_results,
    _result_parts,
    _run_rows,
    _Settings,
    lanes_apply,
)


def _run_rows_events(prob, settings, found, U0, P, m, threads):
    """:func:`_run_rows` for an ensemble with events (``found``: their
    :class:`~scichains.ode._events.EventPlan`). Where the lane loop applies (and the events
    check no interior points), it runs every trajectory with the conditions checked after
    each step, and the trajectories where an event may have happened are solved again by
    :func:`_scalar_events`; otherwise all are. Returns the five result arrays, the event
    records (in trajectory order) and ``(raised, fired)`` (see :func:`_scalar_events`)."""
    if not (lanes_apply(prob, settings) and found.table.points == 0):
        return _scalar_events(prob, settings, found, U0, P, m, threads)
    redo = np.zeros(m, dtype=np.int64)
    edir = np.ascontiguousarray(found.table.direction)
    caddr = lane_conditions_address([e.condition for e in found.events], prob.u0.size, P.shape[1])
    outs = _run_rows(prob, settings, U0, P, m, threads, events=(caddr, edir, redo))
    idx = np.flatnonzero(redo)
    raised = np.zeros(m, dtype=np.int64)
    fired = np.zeros((m, len(found.events)))
    if idx.size == 0:
        return (*outs, [], (raised, fired))
    rows = [A if A.shape[0] == 1 else np.ascontiguousarray(A[idx]) for A in (U0, P)]
    *sub, records, (sub_raised, sub_fired) = _scalar_events(
        prob, settings, found, *rows, idx.size, threads
    )
    for full, part in zip(outs, sub):
        full[idx] = part
    raised[idx] = sub_raised
    fired[idx] = sub_fired
    records = [
        (c, idx[traj[:c]], which[:c], times[:c], states[:c])
        for c, traj, which, times, states in records
    ]
    return (*outs, records, (raised, fired))


def _scalar_events(prob, settings, found, U0, P, m, threads):
    """The trajectories of an ensemble with events in blocks of the compiled
    :func:`solve_events_block` (the scalar stepper), each block with its own event table, on
    ``threads`` Python threads (the kernel holds no GIL). Returns the five result arrays, the
    event records of all blocks, in trajectory order, and ``(raised, fired)``: for each
    trajectory that failed, what raised and the events whose affects acted (see
    :func:`solve_events_block`)."""
    outs = _fresh_results(m, settings.save.size, prob.u0.size)
    out, status, t_reached, fail, counts = outs
    control = StepControl(*settings.control, prob.error_group, NO_MASS)
    stops = Stops(*settings.stops)
    nblocks = max(1, min(m, 16 * threads))
    edges = [m * b // nblocks for b in range(nblocks + 1)]
    raised = np.zeros(m, dtype=np.int64)
    fired = np.zeros((m, len(found.events)))

    def block(b):
        return solve_events_block(
            prob.f_address,
            prob.kernel,
            U0,
            P,
            settings.t0,
            settings.t1,
            settings.tableau,
            control,
            stops,
            found.new_table(),
            settings.save,
            settings.interp,
            settings.cap0,
            edges[b],
            edges[b + 1],
            out,
            status,
            t_reached,
            fail,
            counts,
            raised,
            fired,
        )

    if threads == 1 or nblocks == 1:
        records = [block(b) for b in range(nblocks)]
    else:
        with ThreadPoolExecutor(threads) as pool:
            records = list(pool.map(block, range(nblocks)))
    return (*outs, records, (raised, fired))


def _event_batch(prob, settings, found, U0, P, lo, hi, threads):
    """:func:`_run_rows_events` on trajectories ``lo..hi-1`` (rows ``U0``/``P``), the
    records' trajectory numbers counted from the ensemble's first trajectory."""
    *outs, records, raised = _run_rows_events(prob, settings, found, U0, P, hi - lo, threads)
    records = [(c, traj + lo, which, times, states) for c, traj, which, times, states in records]
    return (*outs, records, raised)


def _event_task(shared, U0, P, lo, hi, threads):
    """One batch of an ensemble with events on a worker: the problem rebuilt from its spec and
    the events' plan made there, then :func:`_event_batch`."""
    spec, settings, events, max_events = shared
    prob = spec.problem()
    found = EventPlan(events, prob, max_events)
    return _event_batch(prob, settings, found, U0, P, lo, hi, threads)


def _events_in_batches(eprob, settings, found, executor, batch_size, worker_threads, threads):
    """An ensemble with events (their plan ``found``) in contiguous batches: on ``executor``
    (a task per batch, on ``worker_threads`` threads each), or one after the other here
    (``executor=None``, on ``threads``, with this process's problem and plan). Default
    batches: four per worker. Returns what :func:`_run_rows_events` returns for the whole
    ensemble, the batches in order."""
    m = eprob.m
    if batch_size is None:
        batch_size = -(-m // (4 * ex.n_workers(executor)))
    bounds = ex.batch_bounds(m, batch_size)
    if executor is None:
        parts = [
            _event_batch(eprob.prob, settings, found, *eprob.rows(lo, hi), lo, hi, threads)
            for lo, hi in bounds
        ]
    else:
        shared = (eprob.spec(), settings, found.events, found.max_events)
        futures = [
            ex.submit(executor, _event_task, shared, *eprob.rows(lo, hi), lo, hi, worker_threads)
            for lo, hi in bounds
        ]
        parts = [f.result() for f in futures]
    outs = [np.concatenate([part[j] for part in parts]) for j in range(5)]
    records = [r for part in parts for r in part[5]]
    raised = tuple(np.concatenate([part[6][j] for part in parts]) for j in range(2))
    return (*outs, records, raised)


def _per_trajectory(records, m, nev, n):
    """``(t_events, u_events)``: per trajectory, per event, its times ``(k,)`` and states
    ``(k, n)`` (new arrays), from the blocks' records (see :func:`solve_events_block`: in
    trajectory order, each trajectory's in time order), as :class:`EventsPerTrajectory`."""
    no_t, no_u = np.zeros(0), np.zeros((0, n))
    no_t.flags.writeable = no_u.flags.writeable = False
    t_found, u_found = {}, {}
    for count, traj, which, times, states in records:
        if count == 0:
            continue
        traj, which, times, states = traj[:count], which[:count], times[:count], states[:count]
        cuts = np.flatnonzero(np.diff(traj)) + 1
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [count]])):
            i = int(traj[lo])
            if nev == 1:
                t_found[i] = [times[lo:hi].copy()]
                u_found[i] = [states[lo:hi].copy()]
                continue
            ts, us = [no_t] * nev, [no_u] * nev
            for j in range(nev):
                hit = which[lo:hi] == j
                if hit.any():
                    ts[j], us[j] = times[lo:hi][hit], states[lo:hi][hit]
            t_found[i], u_found[i] = ts, us
    return EventsPerTrajectory(m, nev, t_found, no_t), EventsPerTrajectory(m, nev, u_found, no_u)


class EventsPerTrajectory(Sequence):
    """``sol.t_events`` / ``sol.u_events`` of an ensemble: item ``i`` is trajectory ``i``'s
    list over the events (a new list at each access) of their times or states. Built on
    access: a list of lists with a new empty array for every event that did not happen
    took 30-80 ms for 20,000 trajectories, and with them Python's collector another 200 ms
    now and then (a third of the ensemble's solve); an event that did not happen is a
    read-only empty array, shared."""

    def __init__(self, m: int, nev: int, found: dict, empty: np.ndarray):
        self._m, self._nev, self._found, self._empty = m, nev, found, empty

    def __len__(self) -> int:
        return self._m

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._m))]
        k = operator.index(i)
        if k < 0:
            k += self._m
        if not 0 <= k < self._m:
            raise IndexError(f"trajectory {i} of {self._m}")
        got = self._found.get(k)
        return list(got) if got is not None else [self._empty] * self._nev

    def __repr__(self) -> str:
        return f"EventsPerTrajectory({self._m} trajectories, {len(self._found)} with events)"


def _reduce(reduction, outputs):
    if reduction is not None:
        return reduction(outputs)
    if outputs and all(isinstance(o, np.ndarray) for o in outputs):
        return np.concatenate(outputs, axis=0)
    return outputs


def _ensemble_task(shared, U0, P, lo, hi, output_func, threads):
    """One batch on a worker: the problem rebuilt once per worker process (cached under the
    spec's token), then the compiled ensemble loop."""
    spec, settings = shared
    prob = spec.problem()
    res = _run_rows(prob, settings, U0, P, hi - lo, threads)
    if output_func is None:
        return res
    return output_func(res[0], res[1], np.arange(lo, hi))


def _ensemble_call(spec, settings, U0, P, lo, hi, output_func, threads, block=None, batch=0):
    """Batch ``batch`` (trajectories ``lo..hi-1``, rows ``U0``/``P``) on a worker's chunk
    holder (see ``EnsembleProblem._holders``).

    Without ``block``: the batch's results (or ``output_func``'s). With ``block``,
    ``(handle, offsets, parts, chunks, owner)`` of the caller's
    :class:`~scichains.parallel._shm.SharedBlock` (the whole ensemble's results, then its
    ``u0s`` and ``ps``), the ensemble cut into ``chunks`` (``(lo, hi)``, ``owner[k]`` the
    batch that chunk ``k`` belongs to): the worker claims and solves its own batch's chunks
    in order, then those of the other batches still unclaimed, from their ends (work
    stealing: a worker slowed by the machine does less), and writes their rows into the
    block. Returns the ``(lo, hi, results)`` it could not write there: none normally; its
    whole batch when it cannot see the block (another machine)."""
    if block is None:
        return _ensemble_task((spec, settings), U0, P, lo, hi, output_func, threads)
    handle, offsets, parts, chunks, owner = block
    if not shm.visible(handle):
        return [(lo, hi, _ensemble_task((spec, settings), U0, P, lo, hi, None, threads))]
    prob = spec.problem()
    nres = len(parts) - 2
    # one set of result arrays for every chunk: its pages are touched once, not per chunk
    # (measured: 8 chunks of 2,500 trajectories into new arrays cost ~10 ms more than one
    # of 20,000, mostly page faults)
    most = max(hi - lo for lo, hi in chunks)
    scratch = _result_parts(most, settings.save.size, prob.u0.size)
    scratch = [np.empty(shape, dt) for shape, dt in scratch]
    left = []
    for k in _claim_order(owner, batch):
        clo, chi = chunks[k]
        if owner[k] == batch:
            if shm.claim(handle, k) is False:
                continue  # another worker took it
            rows = [a[clo - lo : chi - lo] if a.shape[0] > 1 else a for a in (U0, P)]
        else:  # the inputs read first: a claimed chunk must be solved
            if shm.claimed(handle, k):
                continue  # taken already (a cheap look before reading its inputs)
            rows = [
                shm.read_rows(handle, o, shape, dt, *((clo, chi) if shape[0] > 1 else (0, 1)))
                for o, (shape, dt) in zip(offsets[nres:], parts[nres:])
            ]
            if any(r is None for r in rows) or not shm.claim(handle, k):
                continue
        outs = [a[: chi - clo] for a in scratch]
        res = _run_rows(prob, settings, rows[0], rows[1], chi - clo, threads, outs)
        pieces = [
            (shm.rows_offset(o, shape, dt, clo), r)
            for o, (shape, dt), r in zip(offsets[:nres], parts[:nres], res)
        ]
        if not shm.write(handle, pieces):
            left.append((clo, chi, tuple(r.copy() for r in res)))
    return left


def _claim_order(owner, batch) -> list[int]:
    """The chunks in the order batch ``batch``'s worker claims them: its own from the front,
    then each following batch's (in turn, wrapping round) from the back. ``owner`` lists the
    chunks' batches in order (each batch's chunks contiguous): linear in the chunks."""
    first = {}
    for k, b in enumerate(owner):
        first.setdefault(b, k)
    batches = len(first)
    ends = [first[b + 1] if b + 1 < batches else len(owner) for b in range(batches)]
    order = list(range(first[batch], ends[batch]))
    for step in range(1, batches):
        other = (batch + step) % batches
        order += range(ends[other] - 1, first[other] - 1, -1)
    return order


def _chunks(bounds, per_batch: int = 8, least: int = 32) -> tuple[list, list]:
    """Each batch of ``bounds`` cut into up to ``per_batch`` chunks of at least ``least``
    trajectories: ``(chunks, owner)``, the chunks' ``(lo, hi)`` and their batches."""
    chunks, owner = [], []
    for b, (lo, hi) in enumerate(bounds):
        count = max(1, min(per_batch, (hi - lo) // least))
        edges = np.linspace(lo, hi, count + 1).round().astype(np.int64)
        for c in range(count):
            chunks.append((int(edges[c]), int(edges[c + 1])))
            owner.append(b)
    return chunks, owner


def solve_ensemble(
    eprob: EnsembleProblem,
    solver: ExplicitRK = Tsit5,
    saveat=None,
    executor=None,
    batch_size: int | None = None,
    threads: int | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    dt0: float | None = None,
    max_steps: int = 100_000,
    tstops=None,
    jumps=None,
    dtmin: float | None = None,
    adaptive: bool | None = None,
    worker_threads: int = 1,
    events=None,
    max_events: int = 10_000,
):
    """Solve every trajectory of ``eprob``; returns an :class:`EnsembleSolution` (or, with an
    ``output_func``, the ``reduction`` of its results).

    Parameters
    ----------
    eprob : EnsembleProblem
    solver : an explicit method (Tsit5, DP5, BS3, Vern7, RK4, Euler); the CVODE solvers are
        not run in ensembles (``TypeError``: loop over :func:`solve`)
    saveat : times at which every trajectory is saved (required), sorted in the direction
        of integration
    executor : ``None`` (this process: the trajectories run on ``threads`` of numba's threads
        inside one compiled loop), a ``dask.distributed.Client``, or any object with
        ``submit``/``map`` (a ``concurrent.futures`` executor): the trajectories are split
        into contiguous batches. Dask: the problem is placed once on every worker (a chunk
        holder per worker thread, an actor kept with the ``EnsembleProblem`` for later
        calls), each batch is a call to one of them (in turn) carrying the options and its
        rows, straight to the worker and back; a worker that dies has the problem placed
        again and the batches repeated once (the same results). Without ``output_func``,
        workers on this machine write their rows into one block of shared memory made here
        (``/dev/shm``; the arrays returned are views on it, owned by the caller), and others
        send them back (then the arrays are new ones); workers on this machine also take
        over unclaimed chunks of each other's batches (work stealing: a slowed or late
        worker does less). Other executors: a task per batch.
        Results in batch order. Anything else: ``TypeError``.
    batch_size : trajectories per task (executor only). Default: sized from the measured
        cost of a short pilot solve in this process so that each task runs about 0.5 s
        (Dask's per-task overhead is ~1 ms), the number of tasks a multiple of the workers
        (equal shares); a smaller ensemble gets one task per worker while each keeps 20 ms.
    threads : numba threads in this process (default: all); workers use ``worker_threads``
        each (default 1: a Dask worker thread per core is the usual layout).
    rtol, atol, dt0, max_steps, tstops, jumps, dtmin, adaptive : as for :func:`solve`
        (shared by every trajectory)
    events, max_events : state-dependent events (:class:`scichains.ode.Event`) and the most
        one trajectory may have, as for :func:`solve`: each trajectory locates, records and
        acts on its own events (``sol.t_events[i]``, ``sol.u_events[i]``), a terminal event
        ends that trajectory only (its later save times stay NaN, its status ``SUCCESS``),
        and a trajectory past ``max_events`` stops with ``MAX_EVENTS``. Where the lane loop
        applies (below) and no event checks interior points, it checks the conditions after
        each step, and a trajectory where a condition moved to or across zero in its
        direction (or raised) is solved again from the start by the scalar stepper, which
        locates, records and applies its events; the others stay in the lanes (an event that
        never fires: one condition call per step). Otherwise every trajectory runs on the
        scalar stepper. In blocks on ``threads`` threads, or in batches on an ``executor`` (a
        task per batch, four per worker unless ``batch_size``; no shared memory or work
        stealing), without an ``output_func``. A trajectory solved again has
        :func:`solve`'s events, saved states and counts bit for bit; one that never left the
        lanes, the lane loop's (below: solve's bit for bit for two states; for more, step
        sizes that differ at ~1e-7, so a condition that crosses zero and back within one
        step may be seen by one and not the other); either way the same bits for any
        ``threads``, ``batch_size`` or executor. ``sol.t_events`` and ``sol.u_events`` are
        sequences over the trajectories, built on access.

    How: a compiled right-hand side ``f(du, u, p, t)`` (no network kernels) without
    ``jumps`` runs in the lane loop: ``LANES`` trajectories (8 with AVX2 or AVX-512)
    stepped together, one per SIMD lane, each with its own step size, controller memory,
    stops, saves and status; a lane whose trajectory ends takes the next one. Every
    trajectory takes :func:`solve`'s steps with solve's operations in order (the controller's
    powers included: both take them from the same log and exp code): the saved states,
    statuses and counts are solve's bit for bit for two-state problems (measured). For
    other sizes LLVM vectorises some of the scalar stepper's sums (fast-math reassociation)
    in another order; the error estimate, a sum that cancels to ~1e-9 of its terms, then
    differs at ~1e-7, and so do the step sizes: the saved states agree to a small fraction
    of the solver's own error (1e-12..1e-9 relative in the tests). Otherwise (doses, network
    right-hand sides) each trajectory runs through the scalar stepper.

    The saved states of trajectory ``i`` depend only on its ``u0`` and ``p``: they are
    identical bit for bit for any ``threads``, ``batch_size`` or executor (on machines that
    run the same compiled code). A failed trajectory (``MAX_STEPS``, ``DT_UNDERFLOW``,
    ``NONFINITE``, ``RHS_ERROR``) reports its status and keeps NaN where it did not reach;
    the others are unaffected.
    """
    if not isinstance(eprob, EnsembleProblem):
        raise TypeError(f"solve_ensemble needs an EnsembleProblem, got {type(eprob).__name__}")
    if getattr(type(solver), "family", None) != "explicit" and not isinstance(solver, type):
        raise TypeError(
            "solve_ensemble runs the explicit methods (Tsit5, DP5, BS3, Vern7, RK4, Euler); "
            f"for {getattr(solver, 'name', solver)} solve the trajectories one by one with "
            "scichains.ode.solve"
        )
    if saveat is None:
        raise ValueError("give saveat: the times at which every trajectory is saved")
    events = check_events(events)
    if events and eprob.output_func is not None:
        raise TypeError(
            "an ensemble with events returns an EnsembleSolution (with each trajectory's "
            "events) for now: give no output_func"
        )
    executor = ex.check_executor(executor)
    batch_size = ex.check_batch_size(batch_size)
    threads = resolve_threads(threads)
    worker_threads = resolve_threads(worker_threads)
    prob = eprob.prob
    plan = plan_solve(
        prob,
        solver,
        saveat,
        rtol,
        atol,
        dt0,
        max_steps,
        tstops,
        jumps,
        dtmin,
        adaptive,
        interpolate=True,
    )
    settings = _Settings(plan)
    del plan
    m = eprob.m
    if events:
        found = EventPlan(events, prob, max_events)  # checked here, before any batch is sent
        if executor is None and batch_size is None:
            res = _run_rows_events(prob, settings, found, eprob.u0s, eprob.ps, m, threads)
        else:
            res = _events_in_batches(
                eprob, settings, found, executor, batch_size, worker_threads, threads
            )
        sol = EnsembleSolution(eprob, settings.save.copy(), *res[:5])
        sol.t_events, sol.u_events = _per_trajectory(res[5], m, len(events), prob.u0.size)
        sol._events_raised = (found, *res[6])
        return sol
    if executor is None:
        if batch_size is None:
            res = _run_rows(prob, settings, eprob.u0s, eprob.ps, m, threads)
            outputs = [res]
            bounds = [(0, m)]
        else:
            bounds = ex.batch_bounds(m, batch_size)
            outputs = [
                _run_rows(prob, settings, *eprob.rows(lo, hi), hi - lo, threads)
                for lo, hi in bounds
            ]
        if eprob.output_func is not None:
            outputs = [
                eprob.output_func(r[0], r[1], np.arange(lo, hi))
                for r, (lo, hi) in zip(outputs, bounds)
            ]
    else:
        # a Dask cluster's workers, read once a call (a round trip to the scheduler)
        threads_of = ex.dask_threads(executor) if ex.is_dask(executor) else None
        if batch_size is None:
            batch_size = ex.auto_batch_size(
                m, _seconds_per_trajectory(eprob, settings), ex.n_workers(executor, threads_of)
            )
        bounds = ex.batch_bounds(m, batch_size)
        if ex.is_dask(executor):
            if eprob.output_func is None:
                outputs = _dask_into_block(
                    eprob, settings, executor, bounds, worker_threads, threads_of
                )
            else:  # batches dealt out in turn to the problem's holders, one per worker thread
                args = [
                    (settings, *eprob.rows(lo, hi), lo, hi, eprob.output_func, worker_threads)
                    for lo, hi in bounds
                ]
                outputs = eprob._holders(executor, threads_of).run_each(_ensemble_call, args)
        else:
            outputs = _submitted(executor, eprob, settings, bounds, worker_threads)
    if eprob.output_func is not None:
        return _reduce(eprob.reduction, outputs)
    if len(outputs) == 1:
        u, status, t_reached, fail, counts = outputs[0]
    else:
        u, status, t_reached, fail, counts = (
            np.concatenate([o[j] for o in outputs]) for j in range(5)
        )
    return EnsembleSolution(eprob, settings.save.copy(), u, status, t_reached, fail, counts)


def _dask_into_block(eprob, settings, client, bounds, worker_threads, threads_of) -> list:
    """The batches on the problem's chunk holders (dealt out in turn), writing the results
    into one block of shared memory made here (``parallel._shm``; the ensemble's ``u0s`` and
    ``ps`` put there too, so that a worker can take over another's unclaimed chunks: see
    :func:`_ensemble_call`): ``[results]``, the whole ensemble's. A worker that cannot see the
    block (another machine) returns its batch, copied in here. Without a block (no
    ``/dev/shm``, or no room in it) every batch returns its rows: the batches' results, in
    order."""
    m = eprob.m
    parts = _result_parts(m, settings.save.size, eprob.prob.u0.size)
    inputs = [eprob.u0s, eprob.ps]
    all_parts = parts + [(a.shape, a.dtype) for a in inputs]
    offsets, nbytes = shm.layout(all_parts)
    chunks, owner = _chunks(bounds, least=4 * LANES)
    blocks = []

    def arguments():  # a new block for every attempt: claims start again
        block = shm.SharedBlock.create(nbytes)
        if block is not None:
            put = [(o, a) for o, a in zip(offsets[len(parts) :], inputs)]
            if not shm.write(block.handle, put):
                block.unlink()
                block = None
        blocks.append(block)
        handle = None if block is None else (block.handle, offsets, all_parts, chunks, owner)
        return [
            (settings, *eprob.rows(lo, hi), lo, hi, None, worker_threads, handle, b)
            for b, (lo, hi) in enumerate(bounds)
        ]

    try:
        outputs = eprob._holders(client, threads_of).run_each(
            _ensemble_call, arguments(), fresh=arguments
        )
    finally:
        for block in blocks:
            if block is not None:
                block.unlink()
    block = blocks[-1]
    if block is None:
        return outputs
    pieces = [piece for returned in outputs for piece in returned]
    if not pieces:
        return [tuple(_block_rows(block, offsets, parts, 0, m))]
    # some rows came back (a worker elsewhere, or no room left): arrays of our own, the rows
    # of the block read only where a worker wrote them (chunks no piece covers)
    results = [np.empty(shape, dt) for shape, dt in parts]
    for clo, chi in chunks:
        if not any(plo <= clo and chi <= phi for plo, phi, _ in pieces):
            for a, r in zip(results, _block_rows(block, offsets, parts, clo, chi)):
                a[clo:chi] = r
    for plo, phi, got in pieces:
        for a, r in zip(results, got):
            a[plo:phi] = r
    return [tuple(results)]


def _block_rows(block, offsets, parts, lo, hi) -> list:
    """Rows ``lo..hi-1`` of each result array in ``block`` (views)."""
    return [block.array(o, shape, dt)[lo:hi] for o, (shape, dt) in zip(offsets, parts)]


def _submitted(executor, eprob, settings, bounds, worker_threads) -> list:
    """The batches as tasks of a ``concurrent.futures``-style ``executor``, the problem sent
    once per call; results in batch order."""
    shared = (eprob.spec(), settings)  # threads share it; a process pool pickles it
    futures = [
        ex.submit(
            executor,
            _ensemble_task,
            shared,
            *eprob.rows(lo, hi),
            lo,
            hi,
            eprob.output_func,
            worker_threads,
        )
        for lo, hi in bounds
    ]
    return [f.result() for f in futures]


def _seconds_per_trajectory(eprob, settings, pilot: int = 32) -> float:
    """Time per trajectory, measured on one thread here on up to ``pilot`` trajectories
    spread over the ensemble (after one warm-up solve that loads the compiled code)."""
    m = eprob.m
    idx = np.unique(np.linspace(0, m - 1, min(m, pilot)).astype(np.int64))
    U0 = eprob.u0s[idx] if eprob.u0s.shape[0] > 1 else eprob.u0s
    P = eprob.ps[idx] if eprob.ps.shape[0] > 1 else eprob.ps
    prob = eprob.prob
    _run_rows(prob, settings, U0[:1], P[:1], 1, 1)
    start = time.perf_counter()
    _run_rows(prob, settings, U0, P, idx.size, 1)
    return (time.perf_counter() - start) / idx.size
