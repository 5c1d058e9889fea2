"""The solution object: saved values, the return code, statistics and dense output."""

from __future__ import annotations

import enum

import numpy as np


class ReturnCode(enum.IntEnum):
    """Why a solve ended. Failures are data: ``sol.status``, with ``sol.message``."""

    SUCCESS = 0
    MAX_STEPS = 1
    DT_UNDERFLOW = 2
    NONFINITE = 3
    SOLVER_FAILURE = 4

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES = {
    ReturnCode.SUCCESS: "the integration reached the end of the time span",
    ReturnCode.MAX_STEPS: "the maximum number of steps (max_steps) was reached before the end "
    "of the time span",
    ReturnCode.DT_UNDERFLOW: "the step size fell below dtmin: the problem may be stiff or "
    "singular (try a stiff solver, or loosen the tolerances)",
    ReturnCode.NONFINITE: "the solution or the right-hand side became NaN or infinite",
    ReturnCode.SOLVER_FAILURE: "the SUNDIALS solver failed",
}


class ODESolveError(RuntimeError):
    """Raised by ``solve(..., throw=True)`` when the solve fails; ``.solution`` holds the
    partial result."""

    def __init__(self, solution):
        super().__init__(
            f"solve failed at t = {solution.t_reached!r} ({solution.status.name}): "
            f"{solution.message}"
        )
        self.solution = solution


class Solution:
    """Result of :func:`scichains.ode.solve`.

    Attributes
    ----------
    t : array of shape ``(m,)``
        The save times (``saveat``, or every step when ``saveat`` is None).
    u : array of shape ``(m, n)``
        The states at those times (right limits at jump times).
    status : ReturnCode
    message : str
    stats : dict
        ``nf`` (right-hand-side calls), ``naccept`` and ``nreject`` (steps).

    Calling ``sol(t)`` interpolates the stored steps: with the method's own continuous
    extension where it has one (Tsit5, DP5: fourth order; BS3: cubic Hermite), else (Vern7,
    RK4, Euler, CVODE) with cubic Hermite polynomials on the stored states and derivatives
    (third order). Exact at the steps.
    """

    def __init__(
        self, t, u, status, stats, step_t, step_u, step_f, t_reached, message=None, dense=None
    ):
        # dense: (stages of the step ending at each stored entry, the method's ExplicitRK.interp)
        self._dense = dense
        self._message = message
        self.t = t
        self.u = u
        self.status = ReturnCode(status)
        self.stats = stats
        self._st = step_t
        self._su = step_u
        self._sf = step_f
        self.t_reached = t_reached

    @property
    def success(self) -> bool:
        return self.status == ReturnCode.SUCCESS

    @property
    def message(self) -> str:
        return self._message or self.status.message

    def __repr__(self) -> str:
        return (
            f"Solution(status={self.status.name}, {len(self.t)} saved points, "
            f"nf={self.stats['nf']}, naccept={self.stats['naccept']}, "
            f"nreject={self.stats['nreject']})"
        )

    def __call__(self, t):
        """The interpolated state at ``t`` (scalar: shape ``(n,)``; array: ``(len(t), n)``)."""
        tq = np.asarray(t, dtype=np.float64)
        scalar = tq.ndim == 0
        tq = np.atleast_1d(tq)
        st, su, sf = self._st, self._su, self._sf
        lo, hi = min(st[0], st[-1]), max(st[0], st[-1])
        if np.any((tq < lo - 1e-12 * max(1.0, abs(lo))) | (tq > hi + 1e-12 * max(1.0, abs(hi)))):
            raise ValueError(f"t must lie within the solved interval [{lo}, {hi}]")
        forward = st[-1] >= st[0]
        if forward:
            idx = np.searchsorted(st, tq, side="right") - 1
        else:
            idx = np.searchsorted(-st, -tq, side="right") - 1
        idx = np.clip(idx, 0, len(st) - 2) if len(st) > 1 else np.zeros_like(idx)
        if len(st) == 1:
            out = np.repeat(su[:1], len(tq), axis=0)
            return out[0] if scalar else out
        # exact hits (step points, jump times) return the stored right limit
        t0, t1 = st[idx], st[idx + 1]
        h = t1 - t0
        safe = np.where(h == 0, 1.0, h)
        th = ((tq - t0) / safe)[:, None]
        y0, y1, f0, f1 = su[idx], su[idx + 1], sf[idx], sf[idx + 1]
        hh = h[:, None]
        if self._dense is not None:
            stages, P = self._dense
            w = (th ** np.arange(1, P.shape[1] + 1)) @ P.T  # (q, s): b_i(theta)
            out = y0 + hh * np.einsum("qs,qsn->qn", w, stages[idx + 1])
        else:
            out = (
                (1 - th) * y0
                + th * y1
                + th * (th - 1) * ((1 - 2 * th) * (y1 - y0) + (th - 1) * hh * f0 + th * hh * f1)
            )
        exact = tq == t0
        out[exact] = y0[exact]
        return out[0] if scalar else out
