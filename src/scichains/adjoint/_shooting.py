"""Multiple shooting (as DiffEqFlux's ``multiple_shoot``): a long series fitted in segments,
each from a free initial state, tied together by a continuity penalty."""

from __future__ import annotations

import threading

import numpy as np

from ..nn._validate import as_real
from ..ode._problem import ODEProblem
from ._loss import SquaredError
from ._multi import MultiObjective, Trajectory


class _SegmentLoss(SquaredError):
    """Squared error of one segment, plus ``continuity * |u(t_end) - target|^2`` when the
    segment has a successor (``target``: that segment's initial state, set before each call);
    keeps ``u(t_end) - target`` in ``gap`` for the successor's gradient."""

    def __init__(self, data, weights, continuity: float, n: int, last: bool):
        super().__init__(data, weights)
        self.continuity = continuity
        self.last = last
        self.target = np.zeros(n)
        self.gap = np.zeros(n)

    def trajectory(self, i):  # pragma: no cover - one segment holds one trajectory
        raise ValueError("a segment loss holds one trajectory")

    def value_and_grad(self, t, u, dl_du):
        value = super().value_and_grad(t, u, dl_du)
        if self.last:
            return value
        np.subtract(u[-1], self.target, out=self.gap)
        dl_du[-1] += 2.0 * self.continuity * self.gap
        return value + self.continuity * float(self.gap @ self.gap)


class MultipleShooting:
    """Multiple shooting: the series ``data`` at ``saveat`` split into ``K`` segments of
    ``group_size`` save points, consecutive segments sharing their boundary point; segment
    ``k`` is solved from its own initial state ``U_k`` (a free parameter, initialised from the
    data) at its first save time to its last, and

        ``L = sum_k sum_{i in segment k} w_i |u_k(t_i) - data_i|^2
        + continuity * sum_{k < K-1} |u_k(t_end,k) - U_{k+1}|^2``

    (a boundary point is fitted by both segments that share it, as in DiffEqFlux). The
    segments run on threads as the trajectories of a :class:`MultiObjective` do (bit-identical
    results for any ``threads``); gradients come from the adjoints of ``sensealg``.

    Parameters
    ----------
    prob : ODEProblem (its ``u0`` gives ``n``; its ``tspan`` is not used)
    data : shape ``(T, n)``; NaN allowed where ``weights`` is 0
    saveat : shape ``(T,)``, strictly increasing
    group_size : save points per segment (``>= 2``); ``K = ceil((T - 1) / (group_size - 1))``
    continuity : the penalty's weight ``lambda > 0``
    weights : broadcastable to ``(T, n)``, optional (0: missing)
    solver, sensealg, rtol, atol, max_steps, dtmin : as for :class:`Objective`

    The optimisation variable is one flat vector ``theta = [p, U_0, ..., U_{K-1}]`` (length
    ``len(p) + K n``): :meth:`join` / :meth:`split` convert, :meth:`initial` makes one from
    ``p`` and the data. ``value_and_grad(theta)`` returns ``(L, dL/dtheta)``; ``value(theta)``
    only ``L``. Segment ``k`` covers ``saveat[segments[k][0] : segments[k][1] + 1]``.
    Calls on one object are serialised (a lock): the segment losses hold the targets.
    """

    def __init__(
        self,
        prob: ODEProblem,
        data,
        saveat,
        group_size: int,
        continuity: float = 100.0,
        weights=None,
        **kwargs,
    ):
        if not isinstance(prob, ODEProblem):
            raise TypeError("MultipleShooting needs an ODEProblem")
        n = prob.u0.size
        saveat = as_real(saveat, "saveat")
        if saveat.ndim != 1 or saveat.size < 2:
            raise ValueError(f"saveat must be a vector of at least 2 times, got {saveat.shape}")
        if not np.all(np.isfinite(saveat)) or np.any(np.diff(saveat) <= 0):
            raise ValueError("saveat must be finite and strictly increasing")
        data = as_real(data, "data")
        if data.shape != (saveat.size, n):
            raise ValueError(
                f"data must have shape {(saveat.size, n)} (save points, states), got {data.shape}"
            )
        full = SquaredError(data, weights)  # validates weights and NaN
        if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
            raise TypeError(f"group_size must be an integer, got {group_size!r}")
        if group_size < 2:
            raise ValueError(
                f"group_size must be at least 2 (save points a segment), got {group_size}"
            )
        continuity = float(continuity)
        if not (np.isfinite(continuity) and continuity > 0):
            raise ValueError(f"continuity must be a positive number, got {continuity!r}")
        for key in ("jumps", "tstops"):
            if kwargs.get(key) is not None:
                raise ValueError(f"MultipleShooting does not take {key}=")
        T = saveat.size
        starts = list(range(0, T - 1, group_size - 1))
        self.segments = [(s, min(s + group_size - 1, T - 1)) for s in starts]
        K = len(self.segments)
        self.K, self.n, self.continuity = K, n, continuity
        self.saveat, self.data, self.weights = saveat, full.data, full.weights
        self._losses = []
        specs = []
        for k, (s, e) in enumerate(self.segments):
            loss = _SegmentLoss(
                full.data[s : e + 1], full.weights[s : e + 1], continuity, n, k == K - 1
            )
            self._losses.append(loss)
            specs.append(Trajectory(np.zeros(n), saveat[s : e + 1], loss, t0=saveat[s]))
        self.objective = MultiObjective(prob, specs, None, **kwargs)
        self.prob = prob
        self.num_params = prob.p.size
        self._lock = threading.Lock()

    def initial_states(self) -> np.ndarray:
        """``U`` of shape ``(K, n)`` from the data at each segment's first save time
        (observed values; a missing one is interpolated linearly over the observed points of
        its state, or is 0 for a state never observed)."""
        U = np.zeros((self.K, self.n))
        starts = np.array([s for s, _ in self.segments])
        for j in range(self.n):
            seen = self.weights[:, j] != 0
            if seen.any():
                U[:, j] = np.interp(self.saveat[starts], self.saveat[seen], self.data[seen, j])
        return U

    def join(self, p, U) -> np.ndarray:
        """``theta = [p, U.ravel()]``; ``U`` of shape ``(K, n)``."""
        p = as_real(p, "p")
        U = as_real(U, "U")
        if p.shape != (self.num_params,):
            raise ValueError(f"p must have shape ({self.num_params},), got {p.shape}")
        if U.shape != (self.K, self.n):
            raise ValueError(
                f"U must have shape {(self.K, self.n)} (segments, states), got {U.shape}"
            )
        return np.concatenate([p, U.ravel()])

    def split(self, theta) -> tuple[np.ndarray, np.ndarray]:
        """``(p, U)`` of ``theta`` (copies); ``U`` of shape ``(K, n)``."""
        theta = as_real(theta, "theta")
        size = self.num_params + self.K * self.n
        if theta.shape != (size,):
            raise ValueError(
                f"theta must have shape ({size},) = len(p) + segments * states, got {theta.shape}"
            )
        p = theta[: self.num_params].copy()
        return p, theta[self.num_params :].reshape(self.K, self.n).copy()

    def initial(self, p) -> np.ndarray:
        """``theta`` from parameters ``p`` and :meth:`initial_states`."""
        return self.join(p, self.initial_states())

    def value_and_grad(self, theta, threads: int | None = None):
        """``(L, dL/dtheta)``; the gradient a new array of theta's shape."""
        p, U = self.split(theta)
        with self._lock:
            for k in range(self.K - 1):
                self._losses[k].target[:] = U[k + 1]
            value, dp, dU = self.objective.value_and_grad(p, U, threads)
            for k in range(self.K - 1):  # the penalty's part in U_{k+1}, in segment order
                dU[k + 1] -= 2.0 * self.continuity * self._losses[k].gap
        return value, np.concatenate([dp, dU.ravel()])

    def value(self, theta, threads: int | None = None) -> float:
        """``L`` at ``theta``."""
        p, U = self.split(theta)
        with self._lock:
            for k in range(self.K - 1):
                self._losses[k].target[:] = U[k + 1]
            return self.objective.value(p, U, threads)

    def __call__(self, theta, threads: int | None = None):
        return self.value_and_grad(theta, threads)
