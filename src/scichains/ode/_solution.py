"""The solution object: saved values, the return code, statistics and dense output."""

from __future__ import annotations

import enum

import numpy as np


class ReturnCode(enum.IntEnum):
    """Why a solve ended. Failures are data: ``sol.status``, with ``sol.message``.

    An integer enumeration: ``ReturnCode(5)`` is ``RHS_ERROR`` (an unknown integer raises
    ``ValueError``), and each member's ``message`` property says what it means in words.

    Attributes
    ----------
    SUCCESS : int
        0: the integration reached the end of the time span.
    MAX_STEPS : int
        1: ``max_steps`` steps were taken before the end of the time span.
    DT_UNDERFLOW : int
        2: the step size fell below ``dtmin`` (a stiff or singular problem).
    NONFINITE : int
        3: the solution or the right-hand side became NaN or infinite.
    SOLVER_FAILURE : int
        4: the SUNDIALS solver failed.
    RHS_ERROR : int
        5: the right-hand side (or a function it calls) raised an exception.
    SINGULAR : int
        6: the stiff solver's iteration matrix stayed singular as the step shrank to
        ``dtmin``.
    JACOBIAN_NONFINITE : int
        7: the Jacobian ``df/du`` held a NaN or infinite entry.
    NEWTON_FAILURE : int
        8: the ESDIRK solver's Newton iteration failed to converge 10 times in a row.
    NOT_RUN : int
        9: the trajectory was never solved. Status arrays start with this code, so that a
        trajectory no path reached can never read as a success (seeing it is a bug of
        scichains: please report it).
    MAX_EVENTS : int
        10: more events happened than ``max_events`` allows (a chattering event, e.g. a ball
        whose bounces accumulate; the solve stops at the event past the limit).
    EVENT_FAILURE : int
        11: the step to a located event's time could not be made (the stiff solver's
        iteration failed at exactly that step length).
    """

    SUCCESS = 0
    MAX_STEPS = 1
    DT_UNDERFLOW = 2
    NONFINITE = 3
    SOLVER_FAILURE = 4
    RHS_ERROR = 5
    SINGULAR = 6
    JACOBIAN_NONFINITE = 7
    NEWTON_FAILURE = 8
    NOT_RUN = 9
    MAX_EVENTS = 10
    EVENT_FAILURE = 11

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
    ReturnCode.RHS_ERROR: "the right-hand side (or a function it calls) raised an exception",
    ReturnCode.SINGULAR: "the iteration matrix I/(h gamma) - J of the stiff solver stayed "
    "singular as the step shrank to dtmin (check the model for a singular Jacobian)",
    ReturnCode.JACOBIAN_NONFINITE: "the Jacobian df/du held a NaN or infinite entry",
    ReturnCode.NEWTON_FAILURE: "the Newton iteration of the implicit (ESDIRK) solver failed to "
    "converge 10 times in a row, with a fresh Jacobian and the step shrinking 4x each time "
    "(check the model and its Jacobian, or try Rodas5P)",
    ReturnCode.NOT_RUN: "the trajectory was never solved (a bug of scichains: please report it)",
    ReturnCode.MAX_EVENTS: "more events happened than max_events allows (a chattering event? "
    "raise max_events, or make the affect move the state away from the condition's zero)",
    ReturnCode.EVENT_FAILURE: "the step to an event's time could not be made: the stiff "
    "solver's iteration failed at that step length",
}


class ODESolveError(RuntimeError):
    """Raised by ``solve(..., throw=True)`` (and by every gradient and fit) when a solve
    fails; ``.solution`` holds the partial result (or the parts of it that describe the
    failure: ``status``, ``message``, ``t_reached``). When a user function raised
    (``RHS_ERROR``), that exception is the ``__cause__``."""

    def __init__(self, solution):
        super().__init__(
            f"solve stopped at t = {float(solution.t_reached)!r}, the last point it reached "
            f"({solution.status.name}): {solution.message}"
        )
        self.solution = solution

    @property
    def numerical(self) -> bool:
        """Whether the solve failed numerically (too many steps, a step size underflow, a
        non-finite state, ...): a trial point a fit may reject. False when a user function
        raised (``RHS_ERROR``): an error in code, which must reach the user."""
        return self.solution.status != ReturnCode.RHS_ERROR

    def __reduce__(self):
        # rebuilt from the solution (not from the message), so that it survives pickling:
        # a failure on a Dask worker reaches the caller as the same exception
        return type(self), (self.solution,), {**self.__dict__, "__cause__": self.__cause__}


class FailedSolve:
    """The parts of a Solution that an :class:`ODESolveError` reports, for solves that keep no
    Solution (adjoints, objectives)."""

    def __init__(self, status, t, what="", message=None, exception=None):
        self.status = ReturnCode(status)
        self.message = what + (message or self.status.message)
        self.t_reached = float(t)
        self.exception = exception


def reproduce_user_error(prob, p, t, u, v=None):
    """Call the problem's own functions from Python at the point where the compiled solver saw
    one fail (numba cannot carry an exception across its C calls): the right-hand side at
    ``(u, t)``, then the vjp with ``v`` (or each unit vector). Returns ``(exception, which)``:
    what it raised and ``"right-hand side"`` or ``"vjp"``; ``(None, "")`` if nothing raised
    (a function that fails only sometimes)."""
    import numpy as np

    u = np.array(u, dtype=np.float64)
    p = np.ascontiguousarray(p, dtype=np.float64)
    n = prob.u0.size
    u = u[:n].copy()
    try:
        prob.rhs(np.empty(n), u, float(t), p)
    except Exception as exc:  # noqa: BLE001 - handed to the caller to raise
        return exc, "right-hand side"
    vjp = getattr(prob, "vjp", None)
    if vjp is None:
        return None, ""
    vs = [np.array(v, dtype=np.float64)] if v is not None else list(np.eye(n))
    for vi in vs:
        ub, pb = np.empty(n), np.empty(p.size)
        try:
            if prob.vjp_takes_kernel:
                vjp(vi, u.copy(), p, float(t), prob.kernel, ub, pb)
            else:
                vjp(vi, u.copy(), p, float(t), ub, pb)
        except Exception as exc:  # noqa: BLE001
            return exc, "vjp"
    return None, ""


def user_error_failure(prob, p, t, u, v=None, what=""):
    """A :class:`FailedSolve` (status RHS_ERROR) naming the exception a user function raised
    at ``(u, t)``; its ``exception`` is that exception (None if it could not be reproduced)."""
    exc, which = reproduce_user_error(prob, p, t, u, v)
    # the call's own time: in a solve, a stage of the step after the last point reached
    at = f"when called at t = {float(t)!r}"
    if exc is None:
        message = (
            f"a user function (right-hand side or vjp) raised an exception in compiled code {at}, "
            "but not when called again from Python at the same point"
        )
    else:
        message = f"the {which} raised {type(exc).__name__}: {exc} {at}"
    return FailedSolve(ReturnCode.RHS_ERROR, t, what, message, exc)


def vjp_failure(prob, p, fail, what=""):
    """:func:`user_error_failure` from an adjoint kernel's record ``fail = [t, v, u]`` (length
    ``1 + 2 n``) of the vjp (or right-hand side) call that failed."""
    n = prob.u0.size
    return user_error_failure(prob, p, fail[0], fail[1 + n : 1 + 2 * n], fail[1 : 1 + n], what)


def raise_sweep_failure(code: int, prob, p, fail, what: str) -> None:
    """Raise :class:`ODESolveError` for an adjoint sweep's return code (a
    :class:`ReturnCode` value; nothing for SUCCESS): RHS_ERROR names the exception the vjp or
    right-hand side raised at the point recorded in ``fail`` (see :func:`vjp_failure`)."""
    if code == ReturnCode.SUCCESS:
        return
    if code == ReturnCode.RHS_ERROR:
        raise_failure(vjp_failure(prob, p, fail, what))
    raise_failure(FailedSolve(code, float("nan"), what))


def raise_failure(failure):
    """Raise :class:`ODESolveError` for ``failure``, chained to the user's exception."""
    raise ODESolveError(failure) from getattr(failure, "exception", None)


class Solution:
    """Result of :func:`scichains.ode.solve`.

    Attributes
    ----------
    t : array of shape ``(m,)``
        The save times (``saveat``, or every step when ``saveat`` is None).
    u : array of shape ``(m, n)``
        The states at those times (right limits at jump times).
    status : ReturnCode
        Why the solve ended (``SUCCESS``, or the failure).
    message : str
        The status in words, or a more precise account of the failure (naming the
        exception a user function raised, or the Jacobian entry that was not finite).
    exception : the exception a user function raised (status ``RHS_ERROR``), else None
    stats : dict
        ``nf`` (right-hand-side calls), ``naccept`` and ``nreject`` (steps; None with CVODE
        run to the save times in its normal mode, whose step counts scikit-sundae does not
        report).
    t_reached : float
        The time the integration reached: ``t1`` on success, the time of the failure
        otherwise (with ``saveat``, ``sol.t`` then holds only the save times reached).
    success : bool
        ``status == ReturnCode.SUCCESS``.
    t_events : list of arrays, or None
        With ``solve(..., events=[...])``: for each event (in the order given), the times at
        which it happened, shape ``(k_i,)`` (None without events; scipy's ``solve_ivp`` names).
    u_events : list of arrays, or None
        The state at each of those times, shape ``(k_i, n)``: the value before the event's
        affect (the left limit).

    Calling ``sol(t)`` interpolates the stored steps: with the method's own continuous
    extension where it has one (Tsit5, DP5: fourth order; BS3: cubic Hermite), else (Vern7,
    RK4, Euler, CVODE) with cubic Hermite polynomials on the stored states and derivatives
    (third order). Exact at the steps. CVODE with ``saveat`` stores only the save times,
    ``tstops`` and doses (unless ``dense=True``): ``sol(t)`` interpolates between those.
    ``t`` outside the solved interval raises ``ValueError``.

    A solution is made by ``solve``, not by users. The constructor takes the attributes
    ``t``, ``u``, ``status`` (an int or :class:`ReturnCode`), ``stats``, ``t_reached``,
    ``message`` (None for the status's own message) and ``exception``, and the stored steps
    that ``sol(t)`` interpolates, listed under Parameters.

    Parameters
    ----------
    step_t : numpy.ndarray
        Shape ``(k,)``: the times of the ``k`` stored steps (with a repeated time at a jump:
        the left, then the right limit), in the direction of integration.
    step_u : numpy.ndarray
        Shape ``(k, n)``: the states at ``step_t``.
    step_f : numpy.ndarray
        Shape ``(k, n)``: the right-hand side at ``step_t`` (for the Hermite interpolation).
    dense : tuple, optional
        ``(stages, interp)``: each stored step's stages, shape ``(k, s, n)``, and the
        method's continuous extension ``interp`` (shape ``(s, 5)``), when it has one; None:
        cubic Hermite interpolation.
    """

    def __init__(
        self,
        t,
        u,
        status,
        stats,
        step_t,
        step_u,
        step_f,
        t_reached,
        message=None,
        dense=None,
        exception=None,
    ):
        # dense: (stages of the step ending at each stored entry, the method's ExplicitRK.interp)
        self._dense = dense
        self.exception = exception
        """With status RHS_ERROR: the exception the user's function raised (or None)."""
        self._message = message
        self.t = t
        self.u = u
        self.status = ReturnCode(status)
        self.stats = stats
        self._st = step_t
        self._su = step_u
        self._sf = step_f
        self.t_reached = t_reached
        self.t_events = None
        self.u_events = None

    @property
    def success(self) -> bool:
        return self.status == ReturnCode.SUCCESS

    @property
    def step_times(self) -> np.ndarray:
        """The times of every stored step, shape ``(k,)``, from ``t0`` to ``t_reached``: where
        the solver landed (the step sizes it chose, tstops and jumps; a jump's time appears
        twice, before and after it). A copy: what :meth:`__call__` interpolates between.
        (diffrax: ``SaveAt(steps=True)``; DifferentialEquations.jl: ``sol.t`` with
        ``dense=true``.)"""
        return self._st.copy()

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
