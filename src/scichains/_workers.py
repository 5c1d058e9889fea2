"""Helper threads that join a compiled computation which the calling thread runs itself.

A computation split into pieces that any thread may take (see ``nn/_chunked.py``) is run by
the calling thread, as worker 0, and by up to ``n - 1`` helpers. Helper ``w`` is one
persistent daemon thread with its own queue, so worker slot ``w`` (and the scratch buffers
indexed by it) is only ever used by one thread at a time. The caller never waits for a
helper: it returns once the computation is complete, which it can finish alone. A helper
that was descheduled mid-piece (another process took its core) finishes or drops its piece
later and then serves its next job; meanwhile the caller's next computation runs without it.
Jobs hold references to their arrays, so nothing a helper still reads is freed under it.

Placement (Linux): for the length of a call the caller is pinned to the CPU it is on, and
the helpers may run anywhere else it may run. Left alone, the scheduler often put both
threads on one CPU beside a busy process on the other (they then shared one core: measured
with a process spinning on one of two CPUs, the neighbour kept 92-98% of its CPU); pinned
apart, the two threads get one CPU and half of the other. The caller's affinity is restored
when the call returns. ``SCICHAINS_PIN_THREADS=0`` turns this off.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from contextlib import contextmanager

_LOCK = threading.Lock()
_HELPERS: dict[int, _Helper] = {}
_ACTIVE = [0]  # calls of run_shared under way (pinning is for a lone call)
PIN = os.environ.get("SCICHAINS_PIN_THREADS", "1") not in ("0", "false", "no")


def _no_cpu() -> int:
    return -1


try:
    import ctypes

    _getcpu = ctypes.CDLL(None).sched_getcpu
    _getcpu.restype = ctypes.c_int
    _getcpu.argtypes = []
except (OSError, AttributeError):  # not Linux
    _getcpu = _no_cpu
if not hasattr(os, "sched_setaffinity"):
    _getcpu = _no_cpu


class _Helper:
    """One helper thread: runs ``fn(slot, *args)`` for each job, in order."""

    def __init__(self, slot: int):
        self.slot = slot
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.pending = 0  # jobs posted and not yet finished
        self.thread = threading.Thread(
            target=self._loop, name=f"scichains-helper-{slot}", daemon=True
        )
        self.thread.start()

    def _loop(self) -> None:
        while True:
            fn, args, errors, cpus = self.jobs.get()
            keep_on(cpus)
            try:
                fn(self.slot, *args)
            except BaseException as e:  # reported to the caller (see run_shared)
                errors.append(e)
            finally:
                with _LOCK:
                    self.pending -= 1


def _forget_helpers() -> None:
    """In a forked child: the parent's helper threads do not exist there."""
    global _LOCK
    _LOCK = threading.Lock()
    _HELPERS.clear()
    _ACTIVE[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def _helper(slot: int) -> _Helper:
    h = _HELPERS.get(slot)
    if h is None:
        with _LOCK:
            h = _HELPERS.get(slot)
            if h is None:
                h = _HELPERS[slot] = _Helper(slot)
    return h


def pinned(workers: int) -> bool:
    """Whether :func:`run_shared` may keep the caller and its helpers on different CPUs (so
    that a waiting thread need not give its CPU away): Linux, more than one CPU allowed,
    ``SCICHAINS_PIN_THREADS`` not 0. A call that starts while another runs is not pinned."""
    return PIN and workers > 1 and _getcpu is not _no_cpu and len(os.sched_getaffinity(0)) > 1


def wait_idle(timeout: float = 10.0) -> bool:
    """Wait until every helper has finished its jobs (for tests that count allocations or
    compare thread states); False if ``timeout`` seconds passed first."""
    end = time.monotonic() + timeout
    while any(h.pending for h in list(_HELPERS.values())):
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


@contextmanager
def placed(workers: int):
    """For the length of the block, pin this thread to the CPU it is on; yields ``(cpus,
    apart)``: the CPUs its ``workers - 1`` helpers should run on (pass them to
    :func:`keep_on` in each helper: the others this thread may use, or all of them when it is
    not pinned; None where affinity is not used at all) and whether the threads are on
    different CPUs. Nothing is pinned where :func:`pinned` says no, nor in a block entered
    while another is under way."""
    pin = pinned(workers)
    allowed = os.sched_getaffinity(0) if pin else None
    here = -1
    with _LOCK:
        _ACTIVE[0] += 1
        alone = _ACTIVE[0] == 1
    try:
        cpus = allowed
        if pin and alone:
            here = int(_getcpu())
            if here in allowed:
                os.sched_setaffinity(0, {here})
                cpus = allowed - {here}
            else:
                here = -1
        yield cpus, here >= 0
    finally:
        if here >= 0:
            os.sched_setaffinity(0, allowed)
        with _LOCK:
            _ACTIVE[0] -= 1


_PLACE = threading.local()


def keep_on(cpus) -> None:
    """Restrict the calling (helper) thread to ``cpus`` (None: leave it), with a system call
    only when they change."""
    if cpus is None or getattr(_PLACE, "cpus", None) == cpus:
        return
    _PLACE.cpus = cpus
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        pass


def run_shared(fn, workers: int, args: tuple, shared_cpu=None, per_slot=None):
    """Run ``fn(0, *args)`` on this thread and ``fn(w, *args)`` on helper ``w`` for ``w`` in
    ``1..workers-1``; return what this thread's call returns.

    ``fn`` must be a compiled function that releases the GIL and completes the whole
    computation even if no helper ever runs (helpers only speed it up). An exception raised
    in a helper's call before this thread's call returns is raised here. ``shared_cpu``: an
    optional one-element ``int64`` array, set to 1 when the threads may share a CPU (this
    call is not pinned) and 0 otherwise, before any thread starts. ``per_slot``: optional
    tuples of arguments of each worker's own (its buffers), appended to ``args`` in worker
    ``w``'s call: ``fn(w, *args, *per_slot[w])``."""
    errors: list = []
    helpers = [_helper(w) for w in range(1, workers)]
    with placed(workers) as (cpus, apart):
        if shared_cpu is not None:
            shared_cpu[0] = not apart
        for h in helpers:
            with _LOCK:
                h.pending += 1
            mine = args if per_slot is None else args + tuple(per_slot[h.slot])
            h.jobs.put((fn, mine, errors, cpus))
        result = fn(0, *(args if per_slot is None else args + tuple(per_slot[0])))
    if errors:
        raise errors[0]
    return result
