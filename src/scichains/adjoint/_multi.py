"""Many trajectories: one model, ``m`` initial conditions, a loss summed over trajectories.

:class:`MultiObjective` runs the trajectories on Python threads (the compiled solver and
adjoint kernels release the GIL), each thread on an :class:`Objective` of its own, and sums the
per-trajectory losses and gradients in trajectory order: the result does not depend on the
number of threads, bit for bit. Trajectories may share the save times (data of shape
``(m, T, n)``) or each have their own (:class:`Trajectory`); :func:`minibatches` draws subsets
for stochastic training (``batch=``).
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from .._jit import max_threads
from .._workers import keep_on, placed
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


def run_trajectories(
    workers: list,
    m: int,
    one: Callable[[object, int], object],
    names: Sequence[int] | None = None,
    total: int | None = None,
) -> list:
    """``[one(worker, i) for i in range(m)]`` on the workers' threads (worker 0 on the
    calling thread, the others on the module's pool): the trajectories are handed out in
    order, each to the next worker that is free, so a worker whose core is busy with other
    work runs fewer of them (what each computes does not depend on its worker, so the results
    do not depend on the assignment). An exception is raised for the lowest failing
    trajectory, with a note naming it (``names[i]`` of ``total`` when given: a batch of a
    larger set): every trajectory below it was run (they are handed out in order), so it is
    the same one for any thread count."""
    k = min(len(workers), m)
    results: list = [None] * m
    counter = itertools.count()  # next() is atomic: each index is handed out once
    lowest = [m]  # the lowest failing index so far: no worker starts one above it

    def work(j, cpus=None):
        keep_on(cpus)
        while True:
            i = next(counter)
            if i >= m or i > lowest[0]:
                return None
            try:
                results[i] = one(workers[j], i)
            except Exception as e:  # noqa: BLE001 - re-raised below, the lowest first
                lowest[0] = min(lowest[0], i)
                return i, e

    if k <= 1:
        failures = [work(0)]
    else:
        with placed(k) as (cpus, _):  # this thread on its CPU, the pool's on the others
            futures = [_pool().submit(work, j, cpus) for j in range(1, k)]
            failures = [work(0)]
            failures += [f.result() for f in futures]
    failures = [x for x in failures if x is not None]
    if failures:
        i, e = min(failures, key=lambda x: x[0])
        count = m if total is None else total
        if count > 1:
            name = i if names is None else int(names[i])
            e.add_note(f"(in trajectory {name} of {count})")
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


class Trajectory:
    """One experiment for :class:`MultiObjective`: its initial state, save times, data, and
    optionally weights (0 for a missing value: NaN data allowed there), doses and start time.

    Parameters
    ----------
    u0 : initial state, shape ``(n,)``
    saveat : its save times, shape ``(T,)`` (strictly monotone in the direction of
        integration; ``T`` may differ between trajectories). The trajectory is solved from
        ``t0`` to its last save time.
    data : shape ``(T, n)``: the loss is ``SquaredError(data, weights)``; or a loss object
        (:class:`HuberLoss`, :class:`LogNormalLoss`, :class:`PointwiseLoss`, ...) on the
        ``T`` saved states (then ``weights`` must be None: give them to the loss)
    weights : broadcastable to ``(T, n)``, optional
    jumps : doses ``[(t, state_index, amount), ...]`` within ``(t0, saveat[-1]]``, optional
        (as for :class:`Objective`)
    t0 : start time, optional (default: the problem's ``tspan[0]``)
    inputs : the measured inputs of this experiment (:class:`scichains.ode.Interpolation`),
        optional, for a problem made with ``inputs=``: the trajectory is solved with them in
        place of the problem's (:meth:`ODEProblem.with_inputs`; default: the problem's)

    A tuple ``(u0, saveat, data[, weights[, jumps]])`` stands for the same.
    """

    __slots__ = ("u0", "saveat", "data", "weights", "jumps", "t0", "inputs")

    def __init__(
        self,
        u0,
        saveat,
        data,
        weights=None,
        jumps=None,
        t0: float | None = None,
        inputs=None,
    ):
        self.u0 = u0
        self.saveat = saveat
        self.data = data
        self.weights = weights
        self.jumps = jumps
        self.t0 = t0
        self.inputs = inputs

    def __repr__(self) -> str:
        return f"Trajectory(saveat of length {np.size(self.saveat)}, t0={self.t0})"


def _as_trajectory(item, i: int) -> Trajectory:
    if isinstance(item, Trajectory):
        return item
    if isinstance(item, tuple) and 3 <= len(item) <= 5:
        return Trajectory(*item)
    raise TypeError(
        f"trajectory {i}: expected a Trajectory(u0, saveat, data, weights=None, jumps=None) "
        f"or a tuple (u0, saveat, data[, weights[, jumps]]), got {type(item).__name__}"
    )


def is_trajectory_list(x) -> bool:
    """Whether ``x`` is a non-empty list/tuple of :class:`Trajectory` objects and tuples
    ``(u0, saveat, data, ...)`` (a vector ``saveat`` as second entry), as opposed to an array
    of initial states or a list of losses."""
    if not isinstance(x, (list, tuple)) or not x:
        return False
    return all(
        isinstance(item, Trajectory)
        or (isinstance(item, tuple) and 3 <= len(item) <= 5 and np.ndim(item[1]) == 1)
        for item in x
    )


def _trajectory_objective(prob, spec: Trajectory, i: int, kwargs: dict):
    """``(Objective, u0)`` of trajectory ``i``: a copy of ``prob`` (network scratch of its
    own) on ``(t0, saveat[-1])`` with the trajectory's loss and doses. Errors name ``i``."""
    try:
        n = prob.u0.size
        u0 = as_real(spec.u0, "u0")
        if u0.shape != (n,):
            raise ValueError(f"u0 must have shape ({n},), got {u0.shape}")
        if not np.all(np.isfinite(u0)):
            raise ValueError("u0 contains NaN or infinite values")
        saveat = as_real(spec.saveat, "saveat")
        if saveat.ndim != 1 or saveat.size == 0:
            raise ValueError(f"saveat must be a non-empty vector of times, got {saveat.shape}")
        if not np.all(np.isfinite(saveat)):
            raise ValueError("saveat contains NaN or infinite values")
        direction = 1.0 if prob.tspan[1] > prob.tspan[0] else -1.0
        if np.any(direction * np.diff(saveat) <= 0):
            raise ValueError(
                "saveat must be strictly increasing in the direction of integration "
                f"(that of the problem's tspan {prob.tspan})"
            )
        t0 = prob.tspan[0] if spec.t0 is None else float(spec.t0)
        if not np.isfinite(t0):
            raise ValueError(f"t0 must be finite, got {spec.t0!r}")
        t1 = float(saveat[-1])
        if not direction * (t1 - t0) > 0:
            raise ValueError(
                f"the last save time {t1} must lie {'after' if direction > 0 else 'before'} "
                f"t0 = {t0} (the trajectory is solved from t0 to its last save time)"
            )
        if isinstance(spec.data, SolutionLoss):
            if spec.weights is not None:
                raise ValueError("weights go to the loss object given as data, not here")
            loss = spec.data
        else:
            loss = SquaredError(spec.data, spec.weights)
        if spec.inputs is not None:  # this experiment's inputs: the problem made for them
            one = prob.with_inputs(spec.inputs, tspan=(t0, t1))
        else:
            one = copy.copy(prob)
            k = one.kernel
            one.kernel = k._replace(work=np.zeros_like(k.work), samples=k.samples.copy())
            one.tspan = (t0, t1)
        tstops = kwargs.get("tstops")
        if tstops is not None:  # the shared stops that fall in this trajectory's span
            tstops = as_real(tstops, "tstops").ravel()
            lo, hi = min(t0, t1), max(t0, t1)
            tstops = tstops[(tstops >= lo) & (tstops <= hi)]
        args = dict(kwargs, tstops=tstops, jumps=spec.jumps)
        return Objective(one, loss, saveat, **args), u0
    except (ValueError, TypeError) as e:
        raise type(e)(f"trajectory {i}: {e}") from None


def check_batch(batch, m: int) -> np.ndarray:
    """``batch`` as an int64 vector of distinct trajectory indices in ``0..m-1``, else
    ``ValueError``."""
    idx = np.asarray(batch)
    if idx.ndim != 1 or idx.size == 0 or idx.dtype.kind not in "iu":
        raise ValueError(
            f"batch must be a non-empty vector of trajectory indices (integers), got {batch!r}"
        )
    if np.any((idx < 0) | (idx >= m)):
        raise ValueError(f"batch holds indices outside 0..{m - 1}: {idx}")
    if np.unique(idx).size != idx.size:
        raise ValueError(f"batch repeats trajectory indices: {idx}")
    return idx.astype(np.int64)


def minibatches(m: int, size: int, rng=None, drop_last: bool = False) -> Iterator[np.ndarray]:
    """One epoch of mini-batches of ``m`` trajectories: index arrays of ``size`` distinct
    trajectories (the last one smaller unless ``drop_last``), a random permutation of
    ``range(m)`` split in order. ``rng``: a ``numpy.random.Generator`` or seed (``None``:
    fresh entropy). Use with ``MultiObjective.value_and_grad(p, u0, batch=indices)``."""
    for what, v in (("m", m), ("size", size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{what} must be a positive integer, got {v!r}")
    order = np.random.default_rng(rng).permutation(int(m))
    stop = m - m % size if drop_last else m
    for start in range(0, stop, size):
        yield order[start : start + size]


class MultiObjective:
    """A loss summed over ``m`` trajectories of one problem from different initial states,
    with its gradient: ``L = sum_i L_i(u_i(saveat_i))``, ``u_i(t0_i) = u0[i]``.

    Parameters
    ----------
    prob : ODEProblem with a ``vjp`` (its ``u0`` gives the state's size ``n``)
    loss : one of

        - ``SquaredError(data)`` (or ``HuberLoss``, ``LogNormalLoss``) with ``data`` of shape
          ``(m, len(saveat), n)`` (weights broadcastable to it): every trajectory observed at
          ``saveat``;
        - a sequence of ``m`` per-trajectory losses (:class:`SolutionLoss`, each on
          ``(len(saveat), n)``), also at the shared ``saveat``;
        - a sequence of ``m`` :class:`Trajectory` objects (or tuples
          ``(u0, saveat_i, data_i[, weights_i[, jumps_i]])``), each with its own save times,
          data length, weights and doses; ``saveat`` is then not given (None). Trajectory
          ``i`` is solved from its ``t0`` (default: ``prob.tspan[0]``) to its last save time.

    saveat : times where every trajectory is observed (the shared forms)
    solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin : as for
        :class:`Objective` (the same for every trajectory; with :class:`Trajectory` specs the
        doses are given per trajectory and ``tstops`` apply where they fall in a span)

    ``obj.value_and_grad(p, u0, threads=None, batch=None)`` with ``u0`` of shape ``(m, n)``
    returns ``(L, dL/dp, dL/du0)``: ``dL/dp`` the sum of the per-trajectory gradients (shape
    ``(len(p),)``), ``dL/du0`` of shape ``(m, n)``; ``obj.value(p, u0, ...)`` only ``L``.
    ``p=None`` means the problem's parameters; with :class:`Trajectory` specs ``u0=None``
    means theirs (``obj.u0``, shape ``(m, n)``).

    Mini-batches: ``batch`` (distinct trajectory indices, e.g. from :func:`minibatches`)
    evaluates the listed trajectories only: ``L`` and ``dL/dp`` are the plain **sums over the
    batch** (not rescaled: multiply by ``m / len(batch)`` for an unbiased estimate of the
    full sum), ``dL/du0`` has shape ``(len(batch), n)``, row ``j`` for trajectory
    ``batch[j]``; ``u0`` is still the full ``(m, n)`` array (rows outside the batch unused).

    Threads: the trajectories run on ``threads`` threads (default: numba's thread count, at
    most ``m``), each thread with an :class:`Objective` of its own, taking the next trajectory
    whenever it is free (a thread slowed by other work on its core takes fewer); the sums are
    taken in trajectory (batch) order afterwards, so the results are identical bit for bit
    for any ``threads`` (and to summing single-trajectory :class:`Objective` calls in
    order). Calls from several threads at once are safe (a call
    that finds the objectives in use runs on a set kept for its thread). With
    :class:`Trajectory` specs each trajectory keeps an :class:`Objective` (buffers) of its own.
    """

    def __init__(self, prob: ODEProblem, loss, saveat=None, **kwargs):
        if is_trajectory_list(loss) or (
            isinstance(loss, (list, tuple)) and any(isinstance(i, Trajectory) for i in loss)
        ):  # (the second: a list with a bad entry, reported by index there)
            self._init_trajectories(prob, loss, saveat, kwargs)
            return
        if saveat is None:
            raise ValueError(
                "give saveat (the times where every trajectory is observed), or a list of "
                "Trajectory(u0, saveat, data, ...) with times of their own"
            )
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
                "loss must be SquaredError(data of shape (m, len(saveat), n)), a sequence "
                f"of m per-trajectory losses or of Trajectory specs, got {loss!r}"
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
        self.u0 = None
        self._objectives = None
        self._base = base
        self._workers = WorkerSets(base._new_copy, first=base)

    def _init_trajectories(self, prob, specs, saveat, kwargs):
        if saveat is not None:
            raise ValueError("saveat is given per trajectory (Trajectory.saveat): pass saveat=None")
        if kwargs.get("jumps") is not None:
            raise ValueError("with Trajectory specs give the doses per trajectory (jumps=)")
        if not isinstance(prob, ODEProblem):
            raise TypeError("MultiObjective needs an ODEProblem")
        prob.ensure_vjp()  # once, shared by the copies (an automatic vjp compiles)
        built = [
            _trajectory_objective(prob, _as_trajectory(item, i), i, kwargs)
            for i, item in enumerate(specs)
        ]
        self._objectives = [b[0] for b in built]
        self.u0 = np.stack([b[1] for b in built])
        self.losses = [o.loss for o in self._objectives]
        self.m = len(built)
        self.n = prob.u0.size
        self.prob = prob
        self.saveat = [o.saveat for o in self._objectives]
        self.sensealg = self._objectives[0].sensealg
        self._base = self._objectives[0]
        self._workers = None

    def _check_u0(self, u0) -> np.ndarray:
        if u0 is None:
            if self.u0 is not None:
                return self.u0
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

    def _run(self, p, u0, threads, method, batch):
        u0 = self._check_u0(u0)
        idx = None if batch is None else check_batch(batch, self.m)
        p, _ = self._base._args(p, None)  # p checked once, with a clear message
        count = self.m if idx is None else idx.size
        order = range(self.m) if idx is None else idx
        k = min(resolve_trajectory_threads(threads), count)
        names = None if idx is None else idx
        if self._objectives is not None:
            objectives = self._objectives

            def own(_, j):
                i = order[j]
                return getattr(objectives[i], method)(p, u0[i])

            return run_trajectories([None] * k, count, own, names, self.m)
        losses = self.losses

        def one(obj, j):
            i = order[j]
            obj.loss = losses[i]
            return getattr(obj, method)(p, u0[i])

        with self._workers.claim(k) as workers:
            return run_trajectories(workers, count, one, names, self.m)

    def value_and_grad(self, p=None, u0=None, threads: int | None = None, batch=None):
        """``(L, dL/dp, dL/du0)`` at ``(p, u0)``, ``u0`` of shape ``(m, n)``; new arrays,
        ``dL/du0`` of shape ``(m, n)`` (``(len(batch), n)`` for a ``batch``: see the
        class)."""
        return sum_in_order(self._run(p, u0, threads, "value_and_grad", batch))

    def value(self, p=None, u0=None, threads: int | None = None, batch=None) -> float:
        """The loss at ``(p, u0)``, summed over the trajectories (of ``batch``) in order."""
        values = self._run(p, u0, threads, "value", batch)
        total = values[0]
        for v in values[1:]:
            total += v
        return float(total)

    def __call__(self, p=None, u0=None, threads: int | None = None, batch=None):
        return self.value_and_grad(p, u0, threads, batch)
