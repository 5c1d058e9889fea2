"""Many trajectories: one model, ``m`` initial conditions, a loss summed over trajectories.

:class:`MultiObjective` runs the trajectories on Python threads (the compiled solver and
adjoint kernels release the GIL), each thread on an :class:`Objective` of its own, and sums the
per-trajectory losses and gradients in trajectory order: the result does not depend on the
number of threads, bit for bit.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from .._jit import max_threads
from ..nn._validate import as_real
from ..ode._problem import ODEProblem
from ._gradient import Objective
from ._loss import SolutionLoss, SquaredError

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The module's thread pool (made on first use); callers run one chunk themselves."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(
                max_workers=max(32, os.cpu_count() or 1), thread_name_prefix="scichains-traj"
            )
        return _POOL


def resolve_trajectory_threads(threads: int | None) -> int:
    """``threads=`` of a many-trajectory call: a positive integer, ``None`` for numba's
    thread count."""
    if threads is None:
        return max_threads()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    return int(threads)


class WorkerSets:
    """Lists of workers (e.g. objectives with buffers of their own) for many-trajectory calls:
    the object's own list when no other call holds it, else a list kept for the calling
    thread. Workers are made by ``make()`` on first need."""

    def __init__(self, make: Callable[[], object], first=None):
        self._make = make
        self._busy = threading.Lock()
        self._own = [] if first is None else [first]
        self._local = threading.local()

    @contextmanager
    def claim(self, k: int):
        owned = self._busy.acquire(blocking=False)
        try:
            if owned:
                workers = self._own
            else:
                workers = getattr(self._local, "workers", None)
                if workers is None:
                    workers = self._local.workers = []
            while len(workers) < k:
                workers.append(self._make())
            yield workers[:k]
        finally:
            if owned:
                self._busy.release()


def run_trajectories(workers: list, m: int, one: Callable[[object, int], object]) -> list:
    """``[one(worker, i) for i in range(m)]``, trajectory ``i`` run by the worker of its
    contiguous chunk (one chunk per worker; chunk 0 on the calling thread, the others on the
    module's pool). An exception is raised for the lowest failing trajectory, with a note
    naming it."""
    k = min(len(workers), m)
    bounds = [m * j // k for j in range(k + 1)]
    results: list = [None] * m

    def chunk(j):
        for i in range(bounds[j], bounds[j + 1]):
            try:
                results[i] = one(workers[j], i)
            except Exception as e:  # noqa: BLE001 - re-raised below, in trajectory order
                return i, e
        return None

    if k <= 1:
        failures = [chunk(0)]
    else:
        futures = [_pool().submit(chunk, j) for j in range(1, k)]
        failures = [chunk(0)]
        failures += [f.result() for f in futures]
    for failure in failures:
        if failure is not None:
            i, e = failure
            if m > 1:
                e.add_note(f"(in trajectory {i} of {m})")
            raise e
    return results


def sum_in_order(results: list) -> tuple[float, np.ndarray, np.ndarray]:
    """``(sum of L_i, sum of dL_i/dp, stacked dL_i/du0)`` from per-trajectory
    ``(L_i, dp_i, du0_i)``, summed in trajectory order (a fixed order: the same bits for any
    thread count)."""
    value = results[0][0]
    dp = np.array(results[0][1], dtype=np.float64)
    for r in results[1:]:
        value += r[0]
        dp += r[1]
    du0 = np.stack([r[2] for r in results])
    return float(value), dp, du0


class MultiObjective:
    """A loss summed over ``m`` trajectories of one problem from different initial states,
    with its gradient: ``L = sum_i L_i(u_i(saveat))``, ``u_i(t0) = u0[i]``.

    Parameters
    ----------
    prob : ODEProblem with a ``vjp`` (its ``u0`` gives the state's size ``n``)
    loss : ``SquaredError(data)`` with ``data`` of shape ``(m, len(saveat), n)`` (weights
        broadcastable to it), or a sequence of ``m`` per-trajectory losses
        (:class:`SolutionLoss`, each on ``(len(saveat), n)``)
    saveat : times where every trajectory is observed
    solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin : as for
        :class:`Objective` (the same for every trajectory)

    ``obj.value_and_grad(p, u0, threads=None)`` with ``u0`` of shape ``(m, n)`` returns
    ``(L, dL/dp, dL/du0)``: ``dL/dp`` the sum of the per-trajectory gradients (shape
    ``(len(p),)``), ``dL/du0`` of shape ``(m, n)``; ``obj.value(p, u0, threads=None)`` only
    ``L``. ``p=None`` means the problem's parameters.

    Threads: the trajectories are split into ``threads`` contiguous chunks (default: numba's
    thread count, at most ``m``), each run on its own thread with an :class:`Objective` of its
    own; the sums are taken in trajectory order afterwards, so the results are identical bit
    for bit for any ``threads`` (and to summing single-trajectory :class:`Objective` calls in
    order). Calls from several threads at once are safe (a call that finds the objectives in
    use runs on a set kept for its thread).
    """

    def __init__(self, prob: ODEProblem, loss, saveat, **kwargs):
        if isinstance(loss, SquaredError):
            if loss.data.ndim != 3:
                raise ValueError(
                    f"MultiObjective needs data of shape (trajectories, save points, states), "
                    f"got {loss.data.shape}; for one trajectory use Objective"
                )
            losses = [loss.trajectory(i) for i in range(loss.data.shape[0])]
        elif isinstance(loss, Sequence) and not isinstance(loss, (str, bytes)):
            losses = list(loss)
            for i, item in enumerate(losses):
                if not isinstance(item, SolutionLoss):
                    raise TypeError(f"loss[{i}] is not a scichains.adjoint loss: {item!r}")
        else:
            raise TypeError(
                "loss must be SquaredError(data of shape (m, len(saveat), n)) or a sequence "
                f"of m per-trajectory losses, got {loss!r}"
            )
        if not losses:
            raise ValueError("no trajectories: the loss has m = 0")
        base = Objective(prob, losses[0], saveat, **kwargs)
        for item in losses[1:]:
            item.check(base.saveat.size, prob.u0.size)
        self.losses = losses
        self.m = len(losses)
        self.n = prob.u0.size
        self.prob = base.prob
        self.saveat = base.saveat
        self.sensealg = base.sensealg
        self._base = base
        self._workers = WorkerSets(base._new_copy, first=base)

    def _check_u0(self, u0) -> np.ndarray:
        if u0 is None:
            raise ValueError(f"give u0 of shape {(self.m, self.n)}: one initial state a row")
        u0 = as_real(u0, "u0")
        if u0.shape != (self.m, self.n):
            raise ValueError(
                f"u0 must have shape {(self.m, self.n)} (trajectories, states), got {u0.shape}"
            )
        if not np.all(np.isfinite(u0)):
            i = int(np.argwhere(~np.isfinite(u0))[0][0])
            raise ValueError(f"u0 contains NaN or infinite values (first in trajectory {i})")
        return u0

    def _run(self, p, u0, threads, method):
        u0 = self._check_u0(u0)
        p, _ = self._base._args(p, None)  # p checked once, with a clear message
        k = min(resolve_trajectory_threads(threads), self.m)
        losses = self.losses

        def one(obj, i):
            obj.loss = losses[i]
            return getattr(obj, method)(p, u0[i])

        with self._workers.claim(k) as workers:
            return run_trajectories(workers, self.m, one)

    def value_and_grad(self, p, u0, threads: int | None = None):
        """``(L, dL/dp, dL/du0)`` at ``(p, u0)``, ``u0`` of shape ``(m, n)``; new arrays,
        ``dL/du0`` of shape ``(m, n)``."""
        return sum_in_order(self._run(p, u0, threads, "value_and_grad"))

    def value(self, p, u0, threads: int | None = None) -> float:
        """The loss at ``(p, u0)``, summed over the trajectories in order."""
        values = self._run(p, u0, threads, "value")
        total = values[0]
        for v in values[1:]:
            total += v
        return float(total)

    def __call__(self, p, u0, threads: int | None = None):
        return self.value_and_grad(p, u0, threads)
