"""The gradient of a loss summed over an ensemble's trajectories, on any executor.

The trajectories are cut into fixed blocks of ``block`` consecutive trajectories. Each block's
loss and gradient are summed in trajectory order (by :class:`MultiObjective`, whose sums do
not depend on its thread count), and the block sums are added in block order on the caller.
Tasks hold whole blocks, so the result is the same bit for bit in this process, with any
``batch_size`` and on any number of Dask workers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._jit import resolve_threads
from ..ode.ensemble._problem import EnsembleProblem
from ..ode.ensemble._spec import ProblemSpec
from ..parallel import _executor as ex
from ..parallel._transport import new_token, worker_cached
from ._loss import SolutionLoss, SquaredError
from ._multi import MultiObjective


def block_sums(mobj: MultiObjective, p, U0, block: int, threads: int):
    """``(values (nb,), dps (nb, len(p)), du0 (b, n))``: the loss and ``dL/dp`` summed over
    each block of ``block`` consecutive rows of ``U0`` (shape ``(b, n)``), and ``dL/du0``."""
    b = U0.shape[0]
    starts = range(0, b, block)
    values = np.empty(len(starts))
    dps = np.empty((len(starts), p.size))
    du0 = np.empty_like(U0)
    for j, lo in enumerate(starts):
        hi = min(b, lo + block)
        v, dp, d0 = mobj.value_and_grad(p, U0, threads=threads, batch=np.arange(lo, hi))
        values[j] = v
        dps[j] = dp
        du0[lo:hi] = d0
    return values, dps, du0


class _Chunk:
    """What a worker needs for its trajectories ``lo..hi-1``."""

    def __init__(self, spec, losses, saveat, kwargs, U0, lo, hi):
        self.token = new_token()
        self.spec = spec
        self.losses = losses
        self.saveat = saveat
        self.kwargs = kwargs
        self.U0 = U0
        self.lo, self.hi = lo, hi

    def objective(self) -> MultiObjective:
        def make():
            return MultiObjective(self.spec.problem(), self.losses, self.saveat, **self.kwargs)

        return worker_cached(("ensemble-objective", self.token), make)


def _chunk_task(chunk: _Chunk, p, U0, block: int, threads: int):
    U0 = chunk.U0 if U0 is None else U0
    try:
        return block_sums(chunk.objective(), p, U0, block, threads)
    except Exception as e:
        e.add_note(
            f"(a task of trajectories {chunk.lo}..{chunk.hi - 1}: a trajectory number above "
            f"counts from {chunk.lo})"
        )
        raise


class EnsembleObjective:
    """``L(p) = sum_i L_i(u_i(saveat))`` over the trajectories of an ensemble with shared
    parameters, and its gradient, in this process or on an executor (Dask).

    Parameters
    ----------
    eprob : EnsembleProblem whose trajectories differ in their initial states only
        (``ps`` not given: ``p`` is shared; per-subject parameters are
        :class:`scichains.models.Population`'s business)
    loss : ``SquaredError(data)`` (or ``HuberLoss``, ``LogNormalLoss``) with ``data`` of shape
        ``(m, len(saveat), n)``, or a sequence of ``m`` per-trajectory losses
    saveat : the times where every trajectory is observed
    executor : None (this process, ``threads`` threads), a ``dask.distributed.Client`` or an
        object with ``submit``/``map``. With an executor the trajectories' data, losses and
        the problem are sent to the workers once (here); each call sends only ``p`` and
        gets back one loss and gradient per block, plus ``dL/du0``.
    batch_size : trajectories per task (rounded up to whole blocks); default: the ensemble
        split evenly over the executor's workers
    block : trajectories per partial sum (default 64): fixes the order of the sums, so the
        results do not depend on the executor, its workers or ``batch_size``
    threads : threads in this process (default: numba's); ``worker_threads``: per task
    solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin : as for
        :class:`Objective`

    ``value_and_grad(p=None, u0=None)`` returns ``(L, dL/dp, dL/du0)`` with ``dL/du0`` of
    shape ``(m, n)``; ``u0`` (shape ``(m, n)``) replaces the ensemble's initial states for
    the call (sent with it).
    """

    def __init__(
        self,
        eprob: EnsembleProblem,
        loss,
        saveat,
        executor=None,
        batch_size: int | None = None,
        block: int = 64,
        threads: int | None = None,
        worker_threads: int = 1,
        **kwargs,
    ):
        if not isinstance(eprob, EnsembleProblem):
            raise TypeError(
                f"EnsembleObjective needs an EnsembleProblem, got {type(eprob).__name__}"
            )
        if eprob.ps.shape[0] > 1:
            raise ValueError(
                "EnsembleObjective differentiates with respect to parameters shared by every "
                "trajectory: give the ensemble u0s only (per-trajectory parameters: "
                "models.Population)"
            )
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"block must be a positive integer, got {block!r}")
        self.executor = ex.check_executor(executor)
        batch_size = ex.check_batch_size(batch_size)
        self.threads = resolve_threads(threads)
        self.worker_threads = resolve_threads(worker_threads)
        m = eprob.m
        if isinstance(loss, SquaredError):
            if loss.data.ndim != 3 or loss.data.shape[0] != m:
                raise ValueError(
                    f"loss data must have shape ({m}, len(saveat), n) for {m} trajectories, "
                    f"got {loss.data.shape}"
                )
            losses = [loss.trajectory(i) for i in range(m)]
        elif isinstance(loss, Sequence) and not isinstance(loss, (str, bytes)):
            losses = list(loss)
            if len(losses) != m:
                raise ValueError(f"give one loss per trajectory: {m}, got {len(losses)}")
            for i, item in enumerate(losses):
                if not isinstance(item, SolutionLoss):
                    raise TypeError(f"loss[{i}] is not a scichains.adjoint loss: {item!r}")
        else:
            raise TypeError(
                "loss must be SquaredError(data of shape (m, len(saveat), n)) or a sequence of "
                f"m per-trajectory losses, got {loss!r}"
            )
        self.eprob = eprob
        self.m = m
        self.n = eprob.prob.u0.size
        self.block = int(block)
        U0 = np.array(np.broadcast_to(eprob.u0s, (m, self.n)), dtype=np.float64)
        self.u0 = U0
        # validated here, in full (a bad option raises now, not on a worker)
        self._local = MultiObjective(eprob.prob, losses, saveat, **kwargs)
        self.saveat = self._local.saveat
        self._chunks = None
        if self.executor is not None:
            workers = ex.n_workers(self.executor)
            size = batch_size or -(-m // workers)
            self.bounds = ex.batch_bounds(m, size, align=self.block)
            spec = ProblemSpec(eprob.prob)
            payloads = [
                _Chunk(spec, losses[lo:hi], self.saveat, kwargs, U0[lo:hi], lo, hi)
                for lo, hi in self.bounds
            ]
            self._chunks = ex.ScatteredChunks(self.executor, payloads)

    def _check_u0(self, u0):
        if u0 is None:
            return None
        return self._local._check_u0(u0)

    def value_and_grad(self, p=None, u0=None):
        """``(L, dL/dp, dL/du0)`` at ``p`` (default: the problem's); new arrays."""
        p, _ = self._local._base._args(p, None)
        p = np.array(p, dtype=np.float64)
        U0 = self._check_u0(u0)
        if self._chunks is None:
            parts = [
                block_sums(self._local, p, self.u0 if U0 is None else U0, self.block, self.threads)
            ]
        else:
            if U0 is None:
                parts = self._chunks.run(_chunk_task, p, None, self.block, self.worker_threads)
            else:  # new initial states: each chunk's rows travel with its call
                parts = self._chunks.run_each(
                    _chunk_task,
                    [(p, U0[lo:hi], self.block, self.worker_threads) for lo, hi in self.bounds],
                )
        values = np.concatenate([q[0] for q in parts])
        dps = np.concatenate([q[1] for q in parts])
        total = values[0]
        dp = dps[0].copy()
        for j in range(1, values.size):
            total += values[j]
            dp += dps[j]
        return float(total), dp, np.concatenate([q[2] for q in parts])

    def value(self, p=None, u0=None) -> float:
        return self.value_and_grad(p, u0)[0]

    def __call__(self, p=None, u0=None):
        return self.value_and_grad(p, u0)
