"""Trajectories with save times of their own, solved in lockstep blocks.

A block steps its ``k`` trajectories together (:mod:`scichains.models._lockstep`) and saves at
the union of all the trajectories' save times; each trajectory's data sit at its own times,
with weight 0 at the others, so its loss is the one it has alone (on the block's
discretisation). The block runs to the last save time of all: a shorter trajectory is carried
along past its end, where nothing is observed. Every block size shares one union of times, so
a worker's block objective (buffers, problem) is made once per size and its data and weights
are rewritten for each block.
"""

from __future__ import annotations

import numpy as np

from ..adjoint._gradient import Objective
from ..adjoint._loss import SolutionLoss, SquaredError
from ..adjoint._multi import (
    MultiObjective,
    WorkerSets,
    _as_trajectory,
    check_batch,
    resolve_trajectory_threads,
    run_trajectories,
)
from ._lockstep import lockstep_problem
from ._lockstep_driver import lockstep_value_and_grad, sum_blocks


def blockable(node, specs) -> bool:
    """Whether the Trajectory list ``specs`` can step in lockstep on ``node``: squared-error
    data (weights allowed), no doses, no inputs of their own, the model's start time, forward
    in time."""
    t0, t1 = node.tspan
    if not t1 > t0:
        return False
    for i, item in enumerate(specs):
        s = _as_trajectory(item, i)
        if isinstance(s.data, SolutionLoss) or s.jumps is not None and len(s.jumps) > 0:
            return False
        if s.inputs is not None:
            return False
        if s.t0 is not None and float(s.t0) != float(t0):
            return False
    return True


class LockstepTrajectories:
    """A :class:`~scichains.adjoint.MultiObjective`-like objective on Trajectory specs whose
    trajectories step in lockstep blocks (``NeuralODE(lockstep="auto")``'s choice for them):
    ``value_and_grad(p, u0=None, threads=None, batch=None) -> (L, dL/dp, dL/du0)``, ``value``,
    ``m``, ``n``, ``u0`` (the specs' initial states, ``(m, n)``). Blocks are consecutive
    trajectories of the batch's order, of ``node.lockstep_size(len(batch))``; sums are taken in
    block order, so the results do not depend on the thread count."""

    def __init__(self, node, multi: MultiObjective):
        self._node = node
        self._multi = multi  # the validated per-trajectory objectives (and their messages)
        self.m, self.n, self.u0 = multi.m, multi.n, multi.u0
        self.prob = multi.prob
        self.sensealg = node.sensealg
        times = [np.asarray(o.saveat, dtype=np.float64) for o in multi._objectives]
        self.saveat = np.unique(np.concatenate(times))  # the union, sorted
        T = self.saveat.size
        self._data = np.zeros((self.m, T, self.n))
        self._weights = np.zeros((self.m, T, self.n))
        for i, o in enumerate(multi._objectives):
            at = np.searchsorted(self.saveat, times[i])
            self._data[i, at] = o.loss.data
            self._weights[i, at] = o.loss.weights
        self._tspan = (float(node.tspan[0]), float(self.saveat[-1]))
        self._blocks = WorkerSets(dict)  # per thread: {block size: (objective, loss)}
        self._runners: dict = {}  # block size: its BlockRunner (the compiled driver)

    def _pair(self, cache: dict, k: int):
        pair = cache.get(k)
        if pair is None:
            _, _, solver, sensealg, rtol, atol, max_steps = self._node._settings
            T = self.saveat.size
            loss = SquaredError(np.zeros((T, k * self.n)))
            loss.weights = np.ones((T, k * self.n))  # rewritten for each block (writable)
            prob = lockstep_problem(self._node.chain, k, self._tspan)
            obj = Objective(
                prob,
                loss,
                self.saveat,
                solver=solver,
                sensealg=sensealg,
                rtol=rtol,
                atol=atol,
                max_steps=max_steps,
            )
            pair = cache[k] = (obj, loss)
        return pair

    def value_and_grad(self, p=None, u0=None, threads: int | None = None, batch=None):
        """``(L, dL/dp, dL/du0)`` summed over the trajectories (of ``batch``, in its order);
        ``dL/du0`` of shape ``(m, n)`` (``(len(batch), n)``); new arrays."""
        u0 = self._multi._check_u0(u0)
        order = np.arange(self.m) if batch is None else check_batch(batch, self.m)
        size = self._node.lockstep_size(order.size) or 1
        blocks = [order[j : j + size] for j in range(0, order.size, size)]
        p, _ = self._multi._base._args(p, None)  # checked once, with a clear message
        T, n = self.saveat.size, self.n
        k = resolve_trajectory_threads(threads)
        done = lockstep_value_and_grad(
            self._blocks.claim, self._pair, self._runners, p, u0, self._data, self._weights,
            order, size, k,
        )  # fmt: skip
        if done is not None:
            return done

        def run(cache, j):
            b = blocks[j]
            obj, loss = self._pair(cache, b.size)
            loss.data[...] = self._data[b].transpose(1, 0, 2).reshape(T, b.size * n)
            loss.weights[...] = self._weights[b].transpose(1, 0, 2).reshape(T, b.size * n)
            value, dp, du0 = obj.value_and_grad(p, u0[b].ravel())
            return value, dp, du0.reshape(b.size, n)

        k = min(k, len(blocks))
        with self._blocks.claim(k) as caches:
            results = run_trajectories(caches, len(blocks), run)
        return sum_blocks(results)

    def value(self, p=None, u0=None, threads: int | None = None, batch=None) -> float:
        """The loss, summed over the trajectories (of ``batch``) in block order."""
        return float(self.value_and_grad(p, u0, threads, batch)[0])

    def __call__(self, p=None, u0=None, threads: int | None = None, batch=None):
        return self.value_and_grad(p, u0, threads, batch)

    def __repr__(self) -> str:
        return (
            f"LockstepTrajectories(m={self.m}, blocks of {self._node.lockstep_size(self.m)}, "
            f"{self.saveat.size} save times in the union)"
        )
