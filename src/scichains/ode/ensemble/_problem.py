"""The ensemble problem (one problem from many initial states and/or parameter vectors) and its
solution (saved states of every trajectory, status and counts per trajectory)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...parallel import _executor as ex
from ...parallel._transport import as_rows
from .._problem import ODEProblem
from .._solution import ReturnCode, user_error_failure
from ._spec import ProblemSpec


class EnsembleProblem:
    """``m`` trajectories of one :class:`ODEProblem`: trajectory ``i`` starts from ``u0s[i]``
    with parameters ``ps[i]`` (the problem's own ``u0``/``p`` where not given).

    Parameters
    ----------
    prob : ODEProblem with a compiled right-hand side (its ``tspan`` is every trajectory's)
    u0s : array of shape ``(m, n)``, optional: one initial state a row
    ps : array of shape ``(m, len(prob.p))``, optional: one parameter vector a row
    prob_func : callable ``prob_func(prob, i) -> (u0, p)``, optional: trajectory ``i``'s
        initial state and parameters (``None`` for the problem's), called once per trajectory
        here, in Python, to build ``u0s`` and ``ps`` (the solves themselves run no Python;
        for large ensembles give the arrays directly). Needs ``trajectories``.
    output_func : callable ``output_func(u, status, index) -> object``, optional: applied to
        each batch of solved trajectories where it was solved (on the worker with Dask):
        ``u`` of shape ``(b, len(saveat), n)``, ``status`` ``(b,)`` int64 return codes,
        ``index`` ``(b,)`` the trajectories' numbers. Use it to reduce what travels back
        (a summary statistic instead of the whole trajectory).
    reduction : callable ``reduction(outputs) -> result``, optional: combines the list of
        ``output_func``'s results, in batch order (default: ``np.concatenate`` along the
        first axis when they are arrays, else the list itself)
    trajectories : number of trajectories ``m`` (needed with ``prob_func`` alone; otherwise
        taken from ``u0s``/``ps``, which must agree)

    Raises ``ValueError`` for wrong shapes, NaN or infinite values (naming the first bad
    row), ``TypeError`` for a problem that is not an :class:`ODEProblem` or functions that
    are not callable.
    """

    def __init__(
        self,
        prob: ODEProblem,
        u0s=None,
        ps=None,
        prob_func: Callable | None = None,
        output_func: Callable | None = None,
        reduction: Callable | None = None,
        trajectories: int | None = None,
    ):
        if not isinstance(prob, ODEProblem):
            raise TypeError(f"EnsembleProblem needs an ODEProblem, got {type(prob).__name__}")
        for name, fn in (
            ("prob_func", prob_func),
            ("output_func", output_func),
            ("reduction", reduction),
        ):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        n, k = prob.u0.size, prob.p.size
        U0 = None if u0s is None else as_rows(u0s, "u0s", n)
        P = None if ps is None else as_rows(ps, "ps", k)
        counts = {a.shape[0] for a in (U0, P) if a is not None}
        if trajectories is not None:
            if isinstance(trajectories, bool) or not isinstance(trajectories, (int, np.integer)):
                raise TypeError(f"trajectories must be an integer, got {trajectories!r}")
            if trajectories < 1:
                raise ValueError(f"trajectories must be positive, got {trajectories}")
            counts.add(int(trajectories))
        if len(counts) > 1:
            raise ValueError(
                f"u0s, ps and trajectories disagree on the number of trajectories: {sorted(counts)}"
            )
        if not counts:
            raise ValueError("give u0s, ps or trajectories (with prob_func): how many to solve")
        m = counts.pop()
        if prob_func is not None:
            U0 = np.repeat(prob.u0[None], m, axis=0) if U0 is None else U0.copy()
            P = np.repeat(prob.p[None], m, axis=0) if P is None else P.copy()
            for i in range(m):
                got = prob_func(prob, i)
                if not (isinstance(got, tuple) and len(got) == 2):
                    raise TypeError(f"prob_func(prob, {i}) must return (u0, p), got {got!r}")
                for name, value, rows in (("u0", got[0], U0), ("p", got[1], P)):
                    if value is not None:
                        row = as_rows(np.reshape(value, (1, -1)), f"prob_func's {name}", None)
                        if row.shape[1] != rows.shape[1]:
                            raise ValueError(
                                f"prob_func(prob, {i}) returned {name} of length "
                                f"{row.shape[1]}, expected {rows.shape[1]}"
                            )
                        rows[i] = row[0]
        self.prob = prob
        self.m = m
        # one row: shared by every trajectory (no copy per trajectory)
        self.u0s = prob.u0[None].copy() if U0 is None else U0
        self.ps = prob.p[None].copy() if P is None else P
        self.output_func = output_func
        self.reduction = reduction
        self._spec = None  # (what it was made from, ProblemSpec): see spec()
        self._held = {}  # key -> ScatteredChunks: see _holders()

    def spec(self) -> ProblemSpec:
        """The problem as workers rebuild it, made once and kept while the problem's
        functions and kernels stay the same (so workers rebuild it once per process, not once
        per call)."""
        prob = self.prob
        made_from = (prob.f, prob.vjp, prob.kernel, prob.error_group)
        if self._spec is None or any(a is not b for a, b in zip(self._spec[0], made_from)):
            self._spec = (made_from, ProblemSpec(prob))
        return self._spec[1]

    def _holders(self, client, threads: dict[str, int] | None = None) -> ex.ScatteredChunks:
        """The problem placed on a Dask ``client``'s workers, one chunk holder (an actor) per
        worker thread: made on the first call and kept while the problem, the client and its
        workers (``threads``: :func:`~scichains.parallel._executor.dask_threads`, read
        here when not given) stay the same (for the four clients used last). A call then goes
        from here to the workers and back without the scheduler's hops (measured loaded:
        2.4-4 ms against 11-20 ms for two no-op tasks)."""
        spec = self.spec()
        threads = ex.dask_threads(client) if threads is None else threads
        key = (id(client), spec.token, tuple(sorted(threads)))
        held = self._held.pop(key, None)
        if held is None or held.executor is not client:
            held = ex.ScatteredChunks(client, [spec] * ex.n_workers(client, threads))
        self._held[key] = held  # the most recent last; a few clients' kept
        while len(self._held) > 4:
            self._held.pop(next(iter(self._held)))
        return held

    def u0(self, i: int) -> np.ndarray:
        """Trajectory ``i``'s initial state (a new array)."""
        return self.u0s[i if self.u0s.shape[0] > 1 else 0].copy()

    def p(self, i: int) -> np.ndarray:
        """Trajectory ``i``'s parameters (a new array)."""
        return self.ps[i if self.ps.shape[0] > 1 else 0].copy()

    def rows(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """``(u0s, ps)`` for trajectories ``lo..hi-1`` (one row where shared)."""
        U0 = self.u0s[lo:hi] if self.u0s.shape[0] > 1 else self.u0s
        P = self.ps[lo:hi] if self.ps.shape[0] > 1 else self.ps
        return U0, P

    def __len__(self) -> int:
        return self.m

    def __repr__(self) -> str:
        return f"EnsembleProblem(m={self.m}, n={self.prob.u0.size}, tspan={self.prob.tspan})"


class EnsembleSolution:
    """The saved states of an ensemble and how each trajectory ended.

    Attributes
    ----------
    t : ``(len(saveat),)`` the save times
    u : ``(m, len(saveat), n)`` float64: trajectory ``i``'s state at ``t[j]`` is ``u[i, j]``;
        NaN at the save times a failed trajectory did not reach
    status : ``(m,)`` int64 :class:`ReturnCode` values (0 = SUCCESS); one failed trajectory
        does not fail the others
    t_reached : ``(m,)`` the last time each trajectory reached
    nf, naccept, nreject : ``(m,)`` int64 counts of right-hand-side calls and steps
    t_events, u_events : with ``events=``, per trajectory a list over the events of their
        times ``(k,)`` and states ``(k, n)`` (before the affect), as ``solve``'s
        ``sol.t_events`` / ``sol.u_events``: ``sol.t_events[i][j]`` are the times of event
        ``j`` in trajectory ``i``; None without events. A sequence over the trajectories
        (``len``, indexing, slicing, iteration) whose items are built on access; an event
        that did not happen in a trajectory is a read-only empty array
    """

    def __init__(self, ensemble, t, u, status, t_reached, fail, counts):
        self._ensemble = ensemble
        self.t = t
        self.u = u
        self.status = status
        self.t_reached = t_reached
        self._fail = fail
        self.nf, self.naccept, self.nreject = (counts[:, j].copy() for j in range(3))
        self.t_events = self.u_events = None
        # with events: (their EventPlan, what raised per trajectory, the events that fired)
        self._events_raised = None

    @property
    def success(self) -> np.ndarray:
        """``(m,)`` bool: which trajectories succeeded: reached the end of the time span, or
        ended at a terminal event."""
        return self.status == ReturnCode.SUCCESS

    @property
    def failed(self) -> np.ndarray:
        """The indices of the failed trajectories."""
        return np.flatnonzero(self.status != ReturnCode.SUCCESS)

    def message(self, i: int) -> str:
        """Why trajectory ``i`` ended, in words."""
        code = ReturnCode(int(self.status[i]))
        if code == ReturnCode.SUCCESS:
            return code.message
        t = float(self.t_reached[i])
        return f"trajectory {i} stopped at t = {t!r} ({code.name}): {code.message}"

    def exception(self, i: int):
        """For a trajectory whose right-hand side raised (``RHS_ERROR``): that exception,
        obtained by calling the function again from Python where the compiled solver saw it
        fail; else ``None``."""
        if int(self.status[i]) != ReturnCode.RHS_ERROR:
            return None
        e = self._ensemble
        t, u = self._fail[i, 0], self._fail[i, 1:]
        if self._events_raised is not None:
            plan, raised, fired = self._events_raised
            if raised[i] == 1:  # a condition
                return plan.call_again("condition", float(t), u.copy(), e.p(i))[1]
            if raised[i] == 2:  # one of the affects of the events that fired there
                return plan.call_again("affect", float(t), u.copy(), e.p(i), fired[i] != 0)[1]
        return user_error_failure(e.prob, e.p(i), t, u).exception

    def __len__(self) -> int:
        return self.u.shape[0]

    def __repr__(self) -> str:
        bad = self.failed.size
        return f"EnsembleSolution(m={self.u.shape[0]}, saves={self.t.size}, failed={bad})"
