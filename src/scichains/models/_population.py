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

from ..adjoint._gradient import Objective, ScipyFun
from ..adjoint._loss import SquaredError
from ..nn._validate import as_real


@dataclass
class SubjectData:
    """One subject: observation times ``t``, observations ``y`` (shape ``(len(t), n)``) with
    ``weights`` (0 where a state is not observed), doses ``jumps`` and the initial state
    ``u0``: an array, or a callable ``u0(p) -> (u0, du0/dp)`` when it depends on the
    parameters (``du0/dp`` of shape ``(n, len(p))``)."""

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
    solver, rtol, atol, sensealg : as for :class:`scichains.adjoint.Objective`

    ``pop.value_and_grad(z)`` returns ``(J, dJ/dz)``; ``pop.fun`` is the same for
    ``scipy.optimize.minimize(jac=True)`` (a failed solve at a trial point gives ``inf``; see
    :class:`scichains.adjoint.ScipyFun`); ``pop.split(z)`` gives ``(theta, etas)``;
    ``pop.individual(z, i)`` the parameters of subject ``i``.

    Threading: ``value_and_grad``, ``fun`` and ``predict`` may be called from several threads
    at once, with results identical bit for bit to the same calls made one after another
    (each subject's :class:`~scichains.adjoint.Objective` is; ``fun.last_value`` is the
    latest of any thread).
    """

    def __init__(self, model, subjects, eta_index, omega, **objective_kwargs):
        self.model = model
        self.subjects = list(subjects)
        self.eta_index = np.asarray(eta_index, dtype=np.int64)
        self.omega = np.asarray(omega, dtype=np.float64)
        if self.omega.shape != self.eta_index.shape:
            raise ValueError("give one omega per random effect")
        if np.any(self.omega <= 0):
            raise ValueError("omega must be positive")
        self.n_theta = model.num_params
        self.n_eta = self.eta_index.size
        self.size = self.n_theta + len(self.subjects) * self.n_eta
        self.fun = ScipyFun(self.value_and_grad)
        self._objs = []
        for s in self.subjects:
            t = np.asarray(s.t, dtype=np.float64)
            tspan = s.tspan or (0.0, float(t[-1]))
            u0 = s.u0(np.zeros(self.n_theta))[0] if callable(s.u0) else np.asarray(s.u0)
            prob = model.problem(u0, tspan, np.zeros(self.n_theta))
            loss = SquaredError(s.y, s.weights)
            self._objs.append(Objective(prob, loss, t, jumps=s.jumps, **objective_kwargs))

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
        if callable(s.u0):
            u0, J = s.u0(p)
            return np.asarray(u0, dtype=np.float64), np.asarray(J, dtype=np.float64)
        return np.asarray(s.u0, dtype=np.float64), None

    def value_and_grad(self, z):
        theta, etas = self.split(z)
        total = float(np.sum(etas**2 / self.omega**2))
        g_theta = np.zeros(self.n_theta)
        g_eta = 2.0 * etas / self.omega**2
        for i, (s, obj) in enumerate(zip(self.subjects, self._objs)):
            p = theta.copy()
            p[self.eta_index] += etas[i]
            u0, J = self._u0(s, p)
            value, dp, du0 = obj.value_and_grad(p, u0)
            if J is not None:
                dp = dp + du0 @ J
            total += value
            g_theta += dp
            g_eta[i] += dp[self.eta_index]
        return total, np.concatenate([g_theta, g_eta.ravel()])

    def predict(self, z, i, t):
        """Subject ``i``'s states at times ``t`` (a new array)."""
        from ..ode._solve import solve

        s = self.subjects[i]
        p = self.individual(z, i)
        u0, _ = self._u0(s, p)
        t = np.asarray(t, dtype=np.float64)
        prob = self.model.problem(u0, (0.0, float(t[-1])), p)
        return solve(prob, saveat=t, jumps=s.jumps, rtol=1e-9, atol=1e-11, throw=True).u
