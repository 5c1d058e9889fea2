"""The executors scichains runs work on: ``None`` (this process), a ``dask.distributed.Client``,
or any object with ``submit`` and ``map`` (``concurrent.futures`` executors included).

Nothing here imports Dask: a Client is recognised by the module its class comes from, so the
core package imports without it (``pip install scichains[dask]`` adds it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

import numpy as np

TARGET_TASK_SECONDS = 0.5
"""Work per Dask task aimed at when batches are sized automatically: well above Dask's
per-task overhead (~1 ms of scheduling, plus the transfer of the batch's data)."""

MIN_TASK_SECONDS = 0.02
"""The least work given a task of its own (20x Dask's ~1 ms per task): an ensemble too small
for tasks of :data:`TARGET_TASK_SECONDS` on every worker is still spread over the workers, one
equal batch each, as long as each keeps this much."""

WAIT_FOR_WORKERS = 60.0
"""Seconds to wait for a worker when a Dask cluster has none (all died and are restarting)."""

WAIT_FOR_DEPARTURE = 10.0
"""Seconds to wait for the scheduler to drop a worker that an actor call could not reach (its
nanny reports a dead process within about a second)."""


def require_dask():
    """Import ``dask.distributed`` or raise ``ImportError`` saying how to install it."""
    try:
        import distributed
    except ImportError as e:  # pragma: no cover - exercised in a subprocess test
        raise ImportError(
            "this needs Dask's distributed scheduler: pip install scichains[dask] "
            "(or pip install 'dask[distributed]')"
        ) from e
    return distributed


def is_dask(executor) -> bool:
    """Whether ``executor`` is a ``dask.distributed.Client`` (recognised without importing
    Dask)."""
    return type(executor).__module__.split(".")[0] == "distributed"


def check_executor(executor, what: str = "executor"):
    """``executor`` unchanged if it is None or has callable ``submit`` and ``map``; the string
    ``"dask"``: the current Dask client (``distributed.get_client()``; ``ImportError`` naming
    ``pip install scichains[dask]`` without Dask, ``ValueError`` when no client runs); else
    ``TypeError``."""
    if executor is None:
        return None
    if isinstance(executor, str) and executor == "dask":
        distributed = require_dask()
        try:
            return distributed.get_client()
        except ValueError:
            raise ValueError(
                f'{what}="dask" uses the running Dask client, and there is none: start one '
                "(dask.distributed.Client(...)) or pass it"
            ) from None
    if isinstance(executor, type):
        raise TypeError(
            f"{what} must be an executor instance (e.g. dask.distributed.Client(...)), "
            f"got the class {executor.__name__}"
        )
    if not (
        callable(getattr(executor, "submit", None)) and callable(getattr(executor, "map", None))
    ):
        raise TypeError(
            f"{what} must be None (this process), a dask.distributed.Client or an object with "
            f"submit() and map() methods; got {type(executor).__name__}"
        )
    return executor


def dask_threads(client) -> dict[str, int]:
    """``{address: threads}`` of a Dask client's workers (one round trip to the scheduler)."""
    workers = client.scheduler_info()["workers"]
    return {a: max(1, int(w.get("nthreads", 1))) for a, w in workers.items()}


def n_workers(executor, threads: dict[str, int] | None = None) -> int:
    """How many tasks the executor runs at once (Dask: its workers' threads, from
    ``threads`` (:func:`dask_threads`) when given)."""
    if executor is None:
        return 1
    if is_dask(executor):
        threads = dask_threads(executor) if threads is None else threads
        return max(1, sum(threads.values()))
    return max(1, int(getattr(executor, "_max_workers", os.cpu_count() or 1)))


def submit(executor, fn: Callable, *args, **kwargs):
    """``executor.submit(fn, *args)``; with Dask ``pure=False`` (every call is run: results
    of identical-looking calls are not shared)."""
    if is_dask(executor):
        return executor.submit(fn, *args, pure=False, **kwargs)
    return executor.submit(fn, *args)


def batch_bounds(m: int, batch_size: int, align: int = 1) -> list[tuple[int, int]]:
    """Contiguous ``(lo, hi)`` batches of ``range(m)``, each ``batch_size`` long (the last
    shorter); ``batch_size`` is rounded up to a multiple of ``align``."""
    size = max(1, int(batch_size))
    size = -(-size // align) * align
    return [(lo, min(m, lo + size)) for lo in range(0, m, size)]


def check_batch_size(batch_size) -> int | None:
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return int(batch_size)


def auto_batch_size(m: int, seconds_per_item: float, workers: int, align: int = 1) -> int:
    """A batch size for ``m`` items of ``seconds_per_item`` each on ``workers`` workers.

    Tasks of about :data:`TARGET_TASK_SECONDS`, their number rounded up to a multiple of
    ``workers`` so that every worker gets the same share (a 0.75 s ensemble on two workers: two
    tasks of 0.375 s, not one of 0.5 s and one of 0.25 s). An ensemble with less than
    ``TARGET_TASK_SECONDS`` per worker: one task per worker while each keeps
    :data:`MIN_TASK_SECONDS`, else as many tasks as keep that much (at least one)."""
    per = max(float(seconds_per_item), 1e-12)
    total = m * per
    workers = max(1, int(workers))
    if total >= workers * MIN_TASK_SECONDS:
        tasks = max(1, math.ceil(total / TARGET_TASK_SECONDS - 1e-9))
        tasks = -(-tasks // workers) * workers
    else:
        tasks = max(1, math.floor(total / MIN_TASK_SECONDS + 1e-9))
    size = max(1, min(m, math.ceil(m / tasks)))
    return -(-size // align) * align


def _lost_data(exc: BaseException) -> bool:
    """Whether ``exc`` says a worker holding scattered data went away (not an error of the
    task's own: those are raised to the caller)."""
    chain = [e for e in (exc, exc.__cause__, exc.__context__) if e is not None]
    if {type(e).__name__ for e in chain} & {
        "CancelledError",
        "FutureCancelledError",
        "KilledWorker",
    }:
        return True
    # an actor call whose worker died: Dask raises this OSError, possibly before the scheduler
    # has removed the worker
    return any(
        isinstance(e, OSError) and "Unable to contact Actor's worker" in str(e) for e in chain
    )


class ChunkHolder:
    """One chunk's home on a Dask worker: a Dask actor, so that each call goes from the client
    straight to the worker holding the chunk and back, without the scheduler's hops.

    Measured on two loaded cores (objective + gradient of 1,000 subjects, two workers): the
    client process spent 14-19 ms of CPU per evaluation and each worker 66-79 ms, against
    25-28 ms and 73-89 ms with tasks on scattered data (in one process: 116 ms in all). On two
    cores that CPU is taken from the workers' computing. Dask's statistical profiler, which
    samples task threads every 10 ms, does not sample these calls.

    A call runs in a thread pool of the worker sized to the worker's threads
    (:func:`_holder_pool`), so the chunks held by one worker run at once, as tasks would."""

    def __init__(self, payload):
        self.payload = payload

    async def call(self, fn: Callable, *args):
        import asyncio
        import functools

        job = functools.partial(fn, self.payload, *args)
        return await asyncio.get_running_loop().run_in_executor(_holder_pool(), job)


_POOLS: dict = {}


def _holder_pool():
    """The thread pool of :class:`ChunkHolder` calls on this worker: as many threads as the
    worker runs tasks at once (one pool per worker, shut down with it)."""
    import weakref
    from concurrent.futures import ThreadPoolExecutor

    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # not on a worker (called directly): one thread
        worker = None
    key = id(worker)
    pool = _POOLS.get(key)
    if pool is None:
        threads = int(getattr(getattr(worker, "state", None), "nthreads", 1) or 1)
        pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="scichains-chunk")
        _POOLS[key] = pool
        if worker is not None:
            weakref.finalize(worker, _drop_pool, key)
    return pool


def _drop_pool(key) -> None:
    pool = _POOLS.pop(key, None)
    if pool is not None:
        pool.shutdown(wait=False)


class ScatteredChunks:
    """Data sent to the workers once, one chunk per worker slot, for calls repeated many times
    with new small arguments (parameters): ``run(fn, *args)`` runs ``fn(chunk, *args)`` for
    every chunk and returns the results in chunk order.

    With Dask each chunk lives in a :class:`ChunkHolder` actor on one worker (chunk ``j`` on
    worker ``j mod W``, the workers in address order): a call sends the function (by
    reference) and the arguments straight to that worker. If a worker dies, its chunks are
    placed again on the workers there are, from the copies kept here, and the call is repeated
    once (the results are the same: every call is a pure function of its chunk and
    arguments). Other executors: ``executor.submit(fn, chunk, *args)`` (threads share the
    chunk; a process pool pickles it with each call)."""

    def __init__(self, executor, payloads: list):
        self.executor = executor
        self.payloads = list(payloads)
        self.dask = is_dask(executor)
        self.holders = self._place() if self.dask else None

    def _place(self) -> list:
        client = self.executor
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:  # e.g. the only worker died and its nanny is starting it again
            try:
                client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS)
            except TimeoutError:
                raise RuntimeError(
                    f"the Dask cluster has had no workers for {WAIT_FOR_WORKERS} s: nowhere to "
                    "place the data"
                ) from None
            workers = sorted(client.scheduler_info()["workers"])
        where = [workers[j % len(workers)] for j in range(len(self.payloads))]
        # the data go from here to their worker directly; the actor takes them there
        data = [
            client.scatter(payload, workers=[w], hash=False)
            for payload, w in zip(self.payloads, where)
        ]
        futures = [
            client.submit(
                ChunkHolder, d, actor=True, workers=[w], allow_other_workers=False, pure=False
            )
            for d, w in zip(data, where)
        ]
        holders = [f.result() for f in futures]
        self._keep = futures  # the actors live while their futures do
        return holders

    def _await_departure(self) -> None:
        """Wait (up to :data:`WAIT_FOR_DEPARTURE` s) until the scheduler has dropped a worker
        that held a chunk, so that the chunks are not placed on it again."""
        import time

        deadline = time.monotonic() + WAIT_FOR_DEPARTURE
        while not self._holders_lost() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _holders_lost(self) -> bool:
        alive = set(self.executor.scheduler_info()["workers"])
        return any(getattr(h, "_address", None) not in alive for h in self.holders)

    def run(self, fn: Callable, *args) -> list:
        """``[fn(chunk, *args) for chunk in chunks]``, run where the chunks are."""
        return self.run_each(fn, [args] * len(self.payloads))

    def run_each(
        self, fn: Callable, args_list: Sequence, fresh: Callable[[], Sequence] | None = None
    ) -> list:
        """``fn(chunk_j, *args_list[k])`` for every ``k``, on chunk ``j = k mod len(chunks)``,
        results in the order of ``args_list``: arguments of each chunk's own (e.g. its rows of
        a larger array; one per chunk), or batches of work dealt out in turn to chunks that
        all hold the same data (several per chunk queue on its worker). ``fresh()``, when
        given, makes the arguments for the repeat after a lost worker (calls that share
        state beyond their arguments, such as claims on shared work, start again clean)."""
        n = len(self.payloads)
        if not self.dask:
            futures = [
                self.executor.submit(fn, self.payloads[k % n], *args)
                for k, args in enumerate(args_list)
            ]
            return [f.result() for f in futures]
        for attempt in (0, 1):
            calls = [self.holders[k % n].call(fn, *args) for k, args in enumerate(args_list)]
            try:
                return [c.result() for c in calls]
            except Exception as e:  # noqa: BLE001 - only lost workers are retried
                if attempt == 1 or not (_lost_data(e) or self._holders_lost()):
                    raise
                self._await_departure()
                self.holders = self._place()
                if fresh is not None:
                    args_list = fresh()
        raise AssertionError("unreachable")  # pragma: no cover
