"""Losses on the saved points of a solution: a sum over save points of a per-point term."""

from __future__ import annotations

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

from ..nn._validate import as_real


class SolutionLoss:
    """A loss ``L(u(t_1), ..., u(t_m))``; subclasses define :meth:`value_and_grad`."""

    def value_and_grad(self, t: np.ndarray, u: np.ndarray, dl_du: np.ndarray) -> float:
        """``L`` at the saved states ``u`` (shape ``(m, n)``) at times ``t`` (shape ``(m,)``);
        writes dL/du (shape ``(m, n)``) into ``dl_du``."""
        raise NotImplementedError

    def check(self, m: int, n: int) -> None:
        """Raise ``ValueError`` if the loss cannot apply to ``m`` saved states of size ``n``."""


class SquaredError(SolutionLoss):
    """``L = sum_i sum_k w_ik (u_k(t_i) - data_ik)^2``: the sum (not the mean) of squared
    differences over the save points.

    Parameters
    ----------
    data : array of shape ``(m, n)`` (``m`` save points, ``n`` states), or
        ``(trajectories, m, n)`` for :class:`MultiObjective` (the loss summed over
        trajectories; :meth:`trajectory` gives one trajectory's loss)
    weights : array broadcastable to the data's shape, optional (default 1). A weight of 0
        drops a component, e.g. an unobserved state (its data value is then ignored, and may
        be NaN).
    """

    def __init__(self, data, weights=None):
        data = as_real(data, "data")
        if data.ndim not in (2, 3):
            raise ValueError(
                f"data must have shape (save points, states) or (trajectories, save points, "
                f"states), got {data.shape}"
            )
        w = np.ones_like(data) if weights is None else as_real(weights, "weights")
        try:
            w = np.ascontiguousarray(np.broadcast_to(w, data.shape))
        except ValueError:
            raise ValueError(
                f"weights of shape {w.shape} do not broadcast to the data's {data.shape}"
            ) from None
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and non-negative")
        bad = ~np.isfinite(data) & (w != 0)
        if bad.any():
            where = ", ".join(str(int(j)) for j in np.argwhere(bad)[0])
            raise ValueError(
                f"data contains NaN or infinite values (first at [{where}]); give such "
                "entries weight 0 to leave them out"
            )
        self.data = np.where(w != 0, data, 0.0)
        self.weights = w

    def check(self, m: int, n: int) -> None:
        if self.data.shape != (m, n):
            hint = ""
            if self.data.ndim == 3:
                hint = " (data of several trajectories: use scichains.adjoint.MultiObjective)"
            raise ValueError(
                f"data has shape {self.data.shape}, but the solution has {m} save points of "
                f"{n} states{hint}"
            )

    def trajectory(self, i: int) -> SquaredError:
        """The loss of trajectory ``i`` of data of shape ``(trajectories, m, n)``: a
        ``SquaredError`` on ``data[i]`` (shape ``(m, n)``) with ``weights[i]``."""
        if self.data.ndim != 3:
            raise ValueError(f"data of shape {self.data.shape} holds one trajectory")
        one = object.__new__(type(self))
        one.__dict__.update(self.__dict__)
        for name, value in self.__dict__.items():  # data, weights and arrays made from them
            if isinstance(value, np.ndarray) and value.shape == self.data.shape:
                setattr(one, name, value[i])
        return one

    def value_and_grad(self, t, u, dl_du):
        r = u - self.data
        wr = self.weights * r
        np.multiply(wr, 2.0, out=dl_du)
        return float(np.sum(wr * r))

    def __repr__(self) -> str:
        return f"SquaredError(data of shape {self.data.shape})"


class HuberLoss(SquaredError):
    """``L = sum_i sum_k w_ik rho(u_k(t_i) - data_ik)`` with Huber's ``rho(r) = r^2`` for
    ``|r| <= delta`` and ``2 delta |r| - delta^2`` beyond: the squared error for small
    residuals, linear (robust) for outliers; continuous with its derivative at ``delta``.

    ``data``, ``weights`` as for :class:`SquaredError` (``delta`` in the data's units)."""

    def __init__(self, data, delta: float, weights=None):
        super().__init__(data, weights)
        delta = float(delta)
        if not (np.isfinite(delta) and delta > 0):
            raise ValueError(f"delta must be a positive number, got {delta!r}")
        self.delta = delta

    def value_and_grad(self, t, u, dl_du):
        d = self.delta
        r = u - self.data
        inside = np.abs(r) <= d
        rho = np.where(inside, r * r, 2.0 * d * np.abs(r) - d * d)
        np.multiply(self.weights, np.where(inside, 2.0 * r, 2.0 * d * np.sign(r)), out=dl_du)
        return float(np.sum(self.weights * rho))

    def __repr__(self) -> str:
        return f"HuberLoss(data of shape {self.data.shape}, delta={self.delta})"


class LogNormalLoss(SquaredError):
    """``L = sum_i sum_k w_ik (log(u_k(t_i) + eps) - log(data_ik + eps))^2``: squared
    residuals on the log scale (log-normal, i.e. multiplicative, noise; concentrations or
    counts spanning orders of magnitude). ``dL/du = 2 w r / (u + eps)``.

    ``data``, ``weights`` as for :class:`SquaredError` (weight 0: missing, NaN allowed);
    ``eps >= 0`` (default 0) shifts zeros away: ``data + eps`` must be positive wherever the
    weight is not 0 (checked here), and so must ``u + eps`` at the observed points when the
    loss is evaluated (``ValueError`` naming the save point and state otherwise)."""

    def __init__(self, data, eps: float = 0.0, weights=None):
        super().__init__(data, weights)
        eps = float(eps)
        if not (np.isfinite(eps) and eps >= 0):
            raise ValueError(f"eps must be a non-negative number, got {eps!r}")
        self.eps = eps
        observed = self.weights != 0
        shifted = self.data + eps
        bad = observed & (shifted <= 0)
        if bad.any():
            where = ", ".join(str(int(j)) for j in np.argwhere(bad)[0])
            raise ValueError(
                f"LogNormalLoss: data + eps must be positive where observed, got "
                f"{shifted[tuple(np.argwhere(bad)[0])]!r} at [{where}]; raise eps or give "
                "such entries weight 0"
            )
        self.observed = observed
        self.log_data = np.log(np.where(observed, shifted, 1.0))

    def value_and_grad(self, t, u, dl_du):
        s = u + self.eps
        bad = self.observed & ~(s > 0)
        if bad.any():
            i, k = (int(j) for j in np.argwhere(bad)[0])
            raise ValueError(
                f"LogNormalLoss: the solution + eps is {s[i, k]!r} at save point {i} (t = "
                f"{t[i]}), state {k}: the log-normal loss needs it positive"
            )
        s = np.where(self.observed, s, 1.0)  # unobserved entries: no log of a bad value
        r = np.where(self.observed, np.log(s) - self.log_data, 0.0)
        wr = self.weights * r
        np.multiply(wr, 2.0, out=dl_du)
        dl_du /= s
        return float(np.sum(wr * r))

    def __repr__(self) -> str:
        return f"LogNormalLoss(data of shape {self.data.shape}, eps={self.eps})"


class PointwiseLoss(SolutionLoss):
    """A user-defined compiled per-point term: ``L = sum_i term(i, t_i, u_i, g_i)``.

    ``term`` is an ``@numba.njit`` function ``term(i, t, u, g) -> float`` that returns the
    term of save point ``i`` (time ``t``, state ``u`` of shape ``(n,)``) and *writes* its
    gradient with respect to ``u`` into ``g`` (shape ``(n,)``). Data it needs can be read
    from global arrays or bound with a closure.
    """

    def __init__(self, term):
        if not isinstance(term, CPUDispatcher):
            raise TypeError("PointwiseLoss needs an @numba.njit function term(i, t, u, g)")
        self.term = term

    def value_and_grad(self, t, u, dl_du):
        return float(_sum_terms(self.term, t, u, dl_du))

    def __repr__(self) -> str:
        return f"PointwiseLoss({getattr(self.term, '__name__', self.term)!r})"


@numba.njit(cache=False)  # specialised on each user's term: nothing to cache
def _sum_terms(term, t, u, g):
    total = 0.0
    for i in range(t.shape[0]):
        total += term(i, t[i], u[i], g[i])
    return total


class NoLoss(SolutionLoss):
    """Zero on any solution: the solution part of an objective whose loss is on event times
    only (``Objective(prob, None, None, events=..., event_loss=...)``)."""

    def value_and_grad(self, t, u, dl_du):
        dl_du[...] = 0.0
        return 0.0

    def __repr__(self) -> str:
        return "NoLoss()"


class UndefinedLoss(ValueError):
    """The loss is not defined at these parameters: an event an :class:`EventTimeLoss` reads
    happened too few times (:class:`TooFewEvents`), or a terminal event ended the solve before
    a save time the loss reads. ``scichains.fit`` and :class:`ScipyFun` treat it as a failed
    trial point (the line search backs off), as a failed solve."""


class TooFewEvents(UndefinedLoss):
    """A solve in which the event an :class:`EventTimeLoss` reads happened fewer times than
    the loss compares (an :class:`UndefinedLoss`)."""


class EventTimeLoss:
    """A loss on the times of a state-dependent event: ``L = sum_r w_r (tau_r - times_r)^2``
    over its first ``len(times)`` occurrences ``tau_r`` (e.g. fit the time a ball first
    lands). Passed as ``Objective(..., events=[...], event_loss=EventTimeLoss(...))``; the
    objective's value is the solution loss plus this one.

    Parameters
    ----------
    times : array of shape ``(k,)``: the observed times of the event's first ``k``
        occurrences, in the order they happen
    event : the index of the event in the objective's ``events`` (default 0)
    weights : array of shape ``(k,)``, optional (default 1), non-negative

    A solve in which the event happens fewer than ``k`` times raises :class:`TooFewEvents` (a
    ``ValueError``: the loss has no time to compare); during a fit (``scichains.fit``,
    :class:`ScipyFun`) such a trial point is rejected like a failed solve.
    """

    def __init__(self, times, event: int = 0, weights=None):
        times = as_real(times, "times")
        if times.ndim != 1 or times.size == 0:
            raise ValueError(f"times must be a non-empty vector, got shape {times.shape}")
        if not np.all(np.isfinite(times)):
            raise ValueError("times contains NaN or infinite values")
        w = np.ones_like(times) if weights is None else as_real(weights, "weights")
        if w.shape != times.shape:
            raise ValueError(f"weights must have shape {times.shape}, got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and non-negative")
        if isinstance(event, bool) or not isinstance(event, (int, np.integer)) or event < 0:
            raise ValueError(f"event must be a non-negative index, got {event!r}")
        self.times, self.weights, self.event = times, w, int(event)

    def value_and_grad(self, tau: np.ndarray) -> tuple[float, np.ndarray]:
        """``(L, dL/dtau)`` at the event's times ``tau`` (its first ``len(times)``)."""
        k = self.times.size
        if tau.size < k:
            raise TooFewEvents(
                f"EventTimeLoss: events[{self.event}] happened {tau.size} times in the solve; "
                f"the loss compares {k}"
            )
        r = tau[:k] - self.times
        return float(np.sum(self.weights * r * r)), 2.0 * self.weights * r

    def __repr__(self) -> str:
        return f"EventTimeLoss({self.times.size} times, event={self.event})"
