"""Population (mixed-effects) objectives: one model, many subjects, random effects, MAP.

Each subject ``i`` has its own parameter vector ``p_i = theta + S eta_i``: the typical
parameters ``theta`` (physical parameters, usually on a log scale, and any network weights,
shared) plus random effects ``eta_i`` on the entries ``eta_index`` of ``theta``. The joint
objective, minimised over ``z = [theta, eta_1, ..., eta_N]`` (maximum a posteriori, with
Gaussian residuals and random effects),

    J(z) = sum_i L_i(p_i) + sum_i sum_k eta_ik^2 / omega_k^2,

has ``L_i`` the weighted sum of squares of subject ``i`` (weights ``1 / sigma^2``: then ``J``
is minus twice the log posterior, up to a constant). Its gradient comes from one adjoint
solve per subject.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..adjoint._gradient import ScipyFun
from ..nn._validate import as_real
from ..parallel import _executor as ex
from ._subjects import (
    ModelSpec,
    SubjectChunk,
    chunk_task,
    subject_objective,
    subject_sums,
    subject_u0,
)


@dataclass
class SubjectData:
    """One subject: observation times ``t``, observations ``y`` (shape ``(len(t), n)``) with
    ``weights`` (0 where a state is not observed), doses ``jumps`` and the initial state
    ``u0``: an array, or a callable ``u0(p) -> (u0, du0/dp)`` when it depends on the
    parameters (``du0/dp`` of shape ``(n, len(p))``); ``tspan``: the time span to solve over
    (default ``(0, t[-1])``)."""

    t: np.ndarray
    y: np.ndarray
    weights: np.ndarray
    u0: object
    jumps: list = field(default_factory=list)
    tspan: tuple | None = None


class Population:
    """The joint MAP objective of a population model (see the module docstring).

    Parameters
    ----------
    model : a :class:`scichains.ode.SymbolicModel` (its parameters: ``theta``)
    subjects : list of :class:`SubjectData`
    eta_index : indices of ``theta`` that carry a random effect
    omega : standard deviations of the random effects (one per ``eta_index``)
    executor : None (this process), a ``dask.distributed.Client`` or any object with
        ``submit``/``map``: the subjects are split into chunks (``batch_size`` subjects each,
        rounded up to whole blocks; default: one chunk per worker) sent to the workers once,
        here; each evaluation sends ``theta`` and each chunk's own ``etas``, and gets back
        block sums of the objective and gradient. On a large cluster give ``batch_size`` so
        that a task computes for 100 ms or more (Dask spends ~1 ms per task on scheduling):
        e.g. 1,000 subjects at 100 us each (the projection in docs/guide/ensembles.md)
    block : subjects per partial sum (default 16): the block sums are added in block order,
        so the results are identical bit for bit for any executor, number of workers and
        ``batch_size``
    objective_kwargs : ``solver``, ``rtol``, ``atol``, ``sensealg``, as for
        :class:`scichains.adjoint.Objective` (shared by every subject)

    ``pop.value_and_grad(z)`` returns ``(J, dJ/dz)``; ``pop.fun`` is the same for
    ``scipy.optimize.minimize(jac=True)`` (a failed solve at a trial point gives ``inf``; see
    :class:`scichains.adjoint.ScipyFun`); ``pop.split(z)`` gives ``(theta, etas)``;
    ``pop.individual(z, i)`` the parameters of subject ``i``.

    Threading: ``value_and_grad``, ``fun`` and ``predict`` may be called from several threads
    at once, with results identical bit for bit to the same calls made one after another
    (each subject's :class:`~scichains.adjoint.Objective` is; ``fun.last_value`` is the
    latest of any thread).
    """

    def __init__(
        self,
        model,
        subjects,
        eta_index,
        omega,
        executor=None,
        batch_size: int | None = None,
        block: int = 16,
        **objective_kwargs,
    ):
        self.model = model
        self.subjects = list(subjects)
        self.eta_index = np.asarray(eta_index, dtype=np.int64)
        self.omega = np.asarray(omega, dtype=np.float64)
        if self.omega.shape != self.eta_index.shape:
            raise ValueError("give one omega per random effect")
        if np.any(self.omega <= 0):
            raise ValueError("omega must be positive")
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"block must be a positive integer, got {block!r}")
        self.block = int(block)
        self.executor = ex.check_executor(executor)
        batch_size = ex.check_batch_size(batch_size)
        self.n_theta = model.num_params
        self.n_eta = self.eta_index.size
        self.size = self.n_theta + len(self.subjects) * self.n_eta
        self.fun = ScipyFun(self.value_and_grad)
        self._objs = None
        self._chunks = None
        if self.executor is None:
            self._objs = [
                subject_objective(model, s, self.n_theta, objective_kwargs) for s in self.subjects
            ]
            return
        # the subjects are validated here (the first one's objective is built) so that bad
        # input raises now, not on a worker
        if self.subjects:
            subject_objective(model, self.subjects[0], self.n_theta, objective_kwargs)
        spec = ModelSpec(model)
        n = len(self.subjects)
        size = batch_size or -(-n // ex.n_workers(self.executor))
        self.bounds = ex.batch_bounds(n, size, align=self.block)
        payloads = [
            SubjectChunk(spec, self.subjects[lo:hi], self.n_theta, objective_kwargs, lo, hi)
            for lo, hi in self.bounds
        ]
        self._chunks = ex.ScatteredChunks(self.executor, payloads)

    def split(self, z):
        z = as_real(z, "z")
        if z.shape != (self.size,):
            raise ValueError(f"z must have shape ({self.size},), got {z.shape}")
        return z[: self.n_theta], z[self.n_theta :].reshape(len(self.subjects), self.n_eta)

    def pack(self, theta, etas=None):
        etas = np.zeros((len(self.subjects), self.n_eta)) if etas is None else etas
        return np.concatenate([np.asarray(theta, dtype=np.float64), np.ravel(etas)])

    def individual(self, z, i):
        theta, etas = self.split(z)
        p = theta.copy()
        p[self.eta_index] += etas[i]
        return p

    def _u0(self, s, p):
        return subject_u0(s, p)

    def value_and_grad(self, z):
        theta, etas = self.split(z)
        theta = np.array(theta)
        total = float(np.sum(etas**2 / self.omega**2))
        g_theta = np.zeros(self.n_theta)
        g_eta = 2.0 * etas / self.omega**2
        if self._chunks is None:
            parts = [
                subject_sums(self._objs, self.subjects, theta, etas, self.eta_index, self.block)
            ]
        else:  # each task gets theta and its own subjects' etas: the data are there already
            args = [(theta, etas[lo:hi], self.eta_index, self.block) for lo, hi in self.bounds]
            parts = self._chunks.run_each(chunk_task, args)
        # block sums added in block order: the same bits for any executor and batch size
        for values, g_blocks, _ in parts:
            for j in range(values.size):
                total += values[j]
                g_theta += g_blocks[j]
        g_eta += np.concatenate([q[2] for q in parts]) if parts else 0.0
        return float(total), np.concatenate([g_theta, g_eta.ravel()])

    def predict(self, z, i, t):
        """Subject ``i``'s states at times ``t`` (a new array)."""
        from ..ode._solve import solve

        s = self.subjects[i]
        p = self.individual(z, i)
        u0, _ = self._u0(s, p)
        t = np.asarray(t, dtype=np.float64)
        prob = self.model.problem(u0, (0.0, float(t[-1])), p)
        return solve(prob, saveat=t, jumps=s.jumps, rtol=1e-9, atol=1e-11, throw=True).u
