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

MIN_TASK_SECONDS = 0.1


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


def n_workers(executor) -> int:
    """How many tasks the executor runs at once (Dask: its workers' threads)."""
    if executor is None:
        return 1
    if is_dask(executor):
        info = executor.scheduler_info()
        workers = info.get("workers", {})
        return max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))
    return max(1, int(getattr(executor, "_max_workers", os.cpu_count() or 1)))


def submit(executor, fn: Callable, *args, **kwargs):
    """``executor.submit(fn, *args)``; with Dask ``pure=False`` (every call is run: results
    of identical-looking calls are not shared)."""
    if is_dask(executor):
        return executor.submit(fn, *args, pure=False, **kwargs)
    return executor.submit(fn, *args)


def gather(executor, futures: Sequence) -> list:
    """The results of ``futures``, in their order (the first exception is raised)."""
    if is_dask(executor):
        return list(executor.gather(list(futures)))
    return [f.result() for f in futures]


def scatter(executor, obj, broadcast: bool = False):
    """Send ``obj`` to the workers once; tasks then take the returned handle in its place.

    Dask: ``client.scatter`` (``hash=False``: every call sends its own copy, never one of
    another call's); other executors get ``obj`` itself (threads share it; a process pool
    pickles it with each task)."""
    if is_dask(executor):
        return executor.scatter(obj, broadcast=broadcast, hash=False)
    return obj


def scatter_many(executor, objs: list) -> list:
    """Send each of ``objs`` to one worker (Dask spreads them over the workers); a list of
    handles in the same order."""
    if is_dask(executor):
        return list(executor.scatter(list(objs), hash=False))
    return list(objs)


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
    """A batch size for ``m`` items of ``seconds_per_item`` each on ``workers`` workers: about
    :data:`TARGET_TASK_SECONDS` of work per task, but no fewer tasks than workers when that
    leaves each task at least :data:`MIN_TASK_SECONDS` (else as many as leave it that
    much), and never more than ``m`` items."""
    per = max(float(seconds_per_item), 1e-9)
    size = math.ceil(TARGET_TASK_SECONDS / per)
    even = math.ceil(m / max(1, workers))  # one task per worker
    if size > even:
        size = max(even, math.ceil(MIN_TASK_SECONDS / per))
    size = max(1, min(m, size))
    return -(-size // align) * align


def _lost_data(exc: BaseException) -> bool:
    """Whether ``exc`` says a worker holding scattered data went away (not an error of the
    task's own: those are raised to the caller)."""
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    return bool(names & {"CancelledError", "FutureCancelledError", "KilledWorker"})


class ScatteredChunks:
    """Data sent to the workers once, one chunk per handle, for tasks called many times with
    new small arguments (parameters): ``run(fn, args)`` submits ``fn(chunk, *args)`` for
    every chunk and returns the results in chunk order.

    With Dask each chunk lives on one worker, and its tasks run there (data locality). If
    a worker dies, scattered data cannot be recomputed: the chunks are scattered again from
    the copies kept here and the call is repeated once (the results are the same: every
    task is a pure function of its chunk and arguments)."""

    def __init__(self, executor, payloads: list):
        self.executor = executor
        self.payloads = list(payloads)
        self.handles = scatter_many(executor, self.payloads)

    def run(self, fn: Callable, *args) -> list:
        """``[fn(chunk, *args) for chunk in chunks]``, run where the chunks are."""
        return self.run_each(fn, [args] * len(self.handles))

    def run_each(self, fn: Callable, args_list: Sequence) -> list:
        """``[fn(chunk, *args) for chunk, args in zip(chunks, args_list)]``: arguments of
        each chunk's own (e.g. its rows of a larger array)."""
        for attempt in (0, 1):
            futures = [
                submit(self.executor, fn, h, *args) for h, args in zip(self.handles, args_list)
            ]
            try:
                return gather(self.executor, futures)
            except Exception as e:  # noqa: BLE001 - only lost workers are retried
                if attempt == 1 or not _lost_data(e):
                    raise
                self.handles = scatter_many(self.executor, self.payloads)
        raise AssertionError("unreachable")  # pragma: no cover
