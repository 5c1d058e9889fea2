"""The per-subject work of :class:`~scichains.models.Population`, in this process or on the
workers of an executor.

Subjects are taken in fixed blocks of ``block`` consecutive subjects: a block's objective and
``theta`` gradient are summed in subject order, and the caller adds the block sums in block
order. A task holds whole blocks, so the sums are the same bit for bit for any number of
workers, any ``batch_size`` and in this process.
"""

from __future__ import annotations

import numpy as np

from ..adjoint._gradient import Objective
from ..adjoint._loss import SquaredError
from ..ode.ensemble._spec import FunctionRef
from ..parallel._transport import new_token, worker_cached


class ModelSpec:
    """A :class:`~scichains.ode.SymbolicModel` as a worker rebuilds it: its generated
    right-hand side and vjp by reference (:class:`FunctionRef`: the worker imports the same
    generated module), and its network kernels. Any other model object travels as it is
    (pickled) and must have ``problem(u0, tspan, p)`` and ``num_params``."""

    def __init__(self, model):
        rhs, vjp = getattr(model, "rhs", None), getattr(model, "vjp", None)
        self.model = None
        if rhs is None or vjp is None or not hasattr(model, "kernel"):
            self.model = model
            return
        self.f = FunctionRef(rhs)
        self.vjp = FunctionRef(vjp)
        self.kernel = model.kernel()
        self.num_params = model.num_params
        self.n = model.n

    def problem(self, u0, tspan, p):
        if self.model is not None:
            return self.model.problem(u0, tspan, p)
        from ..ode._problem import ODEProblem

        k = self.kernel._replace(work=np.zeros_like(self.kernel.work))
        return ODEProblem(self.f.resolve(), u0, tspan, p, kernel=k, vjp=self.vjp.resolve())


def subject_u0(s, p):
    """``(u0, du0/dp or None)`` of subject ``s`` at parameters ``p``."""
    if callable(s.u0):
        u0, J = s.u0(p)
        return np.asarray(u0, dtype=np.float64), np.asarray(J, dtype=np.float64)
    return np.asarray(s.u0, dtype=np.float64), None


def subject_objective(model, s, n_theta: int, kwargs: dict) -> Objective:
    """The :class:`Objective` of one subject (its data, weights and doses)."""
    t = np.asarray(s.t, dtype=np.float64)
    tspan = s.tspan or (0.0, float(t[-1]))
    u0 = s.u0(np.zeros(n_theta))[0] if callable(s.u0) else np.asarray(s.u0)
    prob = model.problem(u0, tspan, np.zeros(n_theta))
    loss = SquaredError(s.y, s.weights)
    return Objective(prob, loss, t, jumps=s.jumps, **kwargs)


def subject_sums(objs, subjects, theta, etas, eta_index, block: int, first: int = 0):
    """``(values (nb,), g_theta (nb, len(theta)), g_eta (b, n_eta))`` for ``b`` subjects:
    the data terms and their ``theta`` gradients summed over each block of ``block``
    consecutive subjects, and each subject's gradient with respect to its random effects
    (``etas`` of shape ``(b, n_eta)``). An exception gets a note naming the subject (numbered
    from ``first``)."""
    b = len(subjects)
    starts = range(0, b, block)
    values = np.zeros(len(starts))
    g_theta = np.zeros((len(starts), theta.size))
    g_eta = np.empty((b, eta_index.size))
    for j, lo in enumerate(starts):
        for i in range(lo, min(b, lo + block)):
            p = theta.copy()
            p[eta_index] += etas[i]
            try:
                u0, J = subject_u0(subjects[i], p)
                value, dp, du0 = objs[i].value_and_grad(p, u0)
            except Exception as e:
                e.add_note(f"(in subject {first + i})")
                raise
            if J is not None:
                dp = dp + du0 @ J
            values[j] += value
            g_theta[j] += dp
            g_eta[i] = dp[eta_index]
    return values, g_theta, g_eta


class SubjectChunk:
    """Subjects ``lo..hi-1`` as sent to a worker once; their objectives are built there on
    the first call and kept (:func:`worker_cached`)."""

    def __init__(self, model_spec, subjects, n_theta, kwargs, lo, hi):
        self.token = new_token()
        self.model = model_spec
        self.subjects = subjects
        self.n_theta = n_theta
        self.kwargs = kwargs
        self.lo, self.hi = lo, hi

    def objectives(self) -> list:
        def make():
            objs = []
            for i, s in enumerate(self.subjects):
                try:
                    objs.append(subject_objective(self.model, s, self.n_theta, self.kwargs))
                except Exception as e:
                    e.add_note(f"(in subject {self.lo + i})")
                    raise
            return objs

        return worker_cached(("subjects", self.token), make)


def chunk_task(chunk: SubjectChunk, theta, etas, eta_index, block: int):
    """One task: the chunk's block sums at ``theta`` and its subjects' ``etas`` (the chunk's
    rows only)."""
    objs = chunk.objectives()
    return subject_sums(objs, chunk.subjects, theta, etas, eta_index, block, chunk.lo)
