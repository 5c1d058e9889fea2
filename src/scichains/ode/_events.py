"""State-dependent events: :class:`Event`, and the table the compiled loop takes.

The loop locates an event on the method's own step (see ``scichains.ode._event_search``);
this module validates the user's functions, compiles one C-callable for all the conditions of
a solve and one for all the affects (cached per set of functions), and turns the loop's
records into ``sol.t_events`` / ``sol.u_events``.
"""

from __future__ import annotations

import math
import threading

import numba
import numpy as np
from numba import types
from numba.core.registry import CPUDispatcher

from .._status import call_status3, call_status4, call_status5
from ._abi import LEAN_RHS_SIGNATURE, RHS_SIGNATURE, EventTable, float64_pointer
from ._problem import compile_reason

_F64 = types.float64[::1]


class Event:
    """A state-dependent event: where ``condition(u, t, p)`` crosses zero.

    Parameters
    ----------
    condition : a function ``g(u, t, p) -> float`` (``u``: the state, shape ``(n,)``; ``t``:
        the time; ``p``: the parameters), compiled with ``@numba.njit`` (a plain Python
        function is compiled here). The event happens where ``g`` changes sign along the
        solution. It must stay finite: NaN or inf where it is evaluated fails the solve
        (``RHS_ERROR``, a ``ValueError`` naming the event, time and state), as a raise
        does, since a sign change could otherwise be missed in silence.
    affect : optional ``a(u, t, p)`` changing the state ``u`` in place at the event (a bounce,
        a dose), compiled like ``condition``; None: the event is only recorded (or ends the
        solve).
    direction : +1: only crossings where ``g`` goes from negative to positive (in the
        direction of integration); -1: only positive to negative; 0 (default): both.
    terminal : True ends the solve at the event (status ``SUCCESS``; ``sol.t`` and
        ``sol.t_reached`` end there).
    interp_points : the points inside each step where the condition is also checked for a
        sign change (DifferentialEquations.jl's ``interp_points``). 0 (default, as diffrax
        and scipy's ``solve_ivp``): the steps' ends only, so a condition that crosses zero
        and back within one step is not seen (after an event, its own condition is also
        checked just after it, so a bounce that falls back within one step is seen). With
        ``k > 0`` such a double crossing is seen when a checked point falls between the two
        roots; each point costs a condition call per step (on a 2-state Lotka-Volterra solve
        with Tsit5, whole ``solve`` calls: ends only 0-2%, 4 points about 8% over no events,
        measured on an idle AMD EPYC Zen 4; see ``benchmarks/events.py``). The solve uses the
        largest value among its events.

    How events are located and handled (every compiled method: explicit Runge-Kutta,
    Rosenbrock, ESDIRK, Radau, the automatic method; and per trajectory in
    :func:`solve_ensemble`):

    - After each accepted step the solver evaluates every condition at the step's end (and at
      ``interp_points`` points inside it, on a quadratic through the step's ends and initial
      slope). An event whose condition changed sign (or reached zero) in its direction is
      confirmed by the method's own steps and located by root finding (regula falsi with the
      Anderson-Bjorck modification, started at the root on the quadratic) on the method's
      own step: each trial time ``tau`` is a step of the method from the step's start to
      ``tau``. The event time is the point of the numerical solution where the condition has
      just changed sign, to a few units of rounding of ``t``; the solver then takes exactly
      that step, so the saved solution, the stored steps and ``sol(t)`` agree with the
      event. Each event costs a few extra steps (about 4-5 on the bouncing ball).
    - Several events in one step: the earliest happens; those whose roots coincide with it to
      that tolerance happen together, recorded and affected in the order of the ``events``
      list. A condition that changes sign twice between two checked points is not seen (as
      in every sign-based locator): raise ``interp_points`` or shorten the steps.
    - At the event the state before the affect is recorded (``sol.u_events``), the left
      limit is stored, the affects act, and the solve restarts from the right limit. An
      affect does not itself trigger events (a condition that the affect moves across zero
      does not fire). A dose (``jumps``) and an event at the same time: the event's affect
      acts first, then the dose.
    - A condition that is zero at ``t0`` is not an event at ``t0``. After an event, a
      crossing of the same condition within 16 units of rounding of ``t`` is its own repeat
      (a bounce leaves ``g = 0`` again) and does not fire.
    - ``max_events`` (an argument of :func:`solve`) bounds the events of one solve: past it
      the solve stops with status ``MAX_EVENTS`` (a chattering event).

    With the CVODE solvers the events go to CVODE's own root finding (``CVodeRootInit``, with
    the directions above): CVODE locates each root on its interpolating polynomial (to about
    100 units of rounding of ``t``), so the event time is as accurate as that polynomial; the
    records, affects, terminal events, ``max_events`` and the order of simultaneous events are
    as above, and after an affect CVODE restarts from the right limit.

    Gradients pass through events with ``adjoint.Objective(..., events=...)`` (the discrete
    adjoint of the explicit and Rosenbrock methods, the continuous adjoints of the explicit
    and stiff methods, forward sensitivities of the explicit ones; see the ODE guide).
    """

    def __init__(
        self,
        condition,
        affect=None,
        direction: int = 0,
        terminal: bool = False,
        interp_points: int = 0,
    ):
        self.condition = _compiled(condition, "condition")
        self.affect = None if affect is None else _compiled(affect, "affect")
        if isinstance(direction, bool) or direction not in (-1, 0, 1):
            raise ValueError(f"direction must be -1, 0 or +1, got {direction!r}")
        if not isinstance(terminal, (bool, np.bool_)):
            raise TypeError(f"terminal must be True or False, got {terminal!r}")
        if isinstance(interp_points, bool) or not (
            isinstance(interp_points, (int, np.integer)) and 0 <= interp_points <= 1000
        ):
            raise ValueError(f"interp_points must be an integer in 0..1000, got {interp_points!r}")
        self.direction = int(direction)  # (set once: see __setattr__)
        self.terminal = bool(terminal)
        self.interp_points = int(interp_points)
        self._compiled = False  # checked and compiled for float64 (by the first solve)
        self._probed: set = set()  # the (len(u), len(p)) its condition was run with in Python

    _FIXED = ("condition", "affect", "direction", "terminal", "interp_points")

    def __setattr__(self, name, value):
        # an Event is fixed once made (as diffrax's are): solves keep tables made for it
        if name in self._FIXED and name in self.__dict__:
            raise AttributeError(f"an Event cannot be changed ({name}): make a new one")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        name = getattr(self.condition, "__name__", "?")
        extra = f", affect={getattr(self.affect, '__name__', '?')}" if self.affect else ""
        return f"Event({name}{extra}, direction={self.direction}, terminal={self.terminal})"


def _compiled(fn, what):
    if isinstance(fn, CPUDispatcher):
        return fn
    if not callable(fn):
        raise TypeError(f"the event's {what} must be a function, got {type(fn).__name__}")
    return numba.njit(fn)


def check_events(events) -> list[Event]:
    if events is None:
        return []
    if isinstance(events, Event):
        events = [events]
    events = list(events)
    for i, e in enumerate(events):
        if not isinstance(e, Event):
            raise TypeError(f"events[{i}] must be an ode.Event, got {type(e).__name__}")
    return events


def _compile_user(fn, what, i, returns_number):
    try:
        fn.compile((_F64, types.float64, _F64))
    except Exception as e:  # noqa: BLE001 - reported in words
        raise TypeError(
            f"the {what} of events[{i}] could not be compiled as {what[:1]}(u, t, p) with u and "
            f"p float64 vectors and t a float: {compile_reason(e)}"
        ) from e
    ret = fn.nopython_signatures[-1].return_type if fn.nopython_signatures else None
    for sig in fn.nopython_signatures:
        if tuple(sig.args) == (_F64, types.float64, _F64):
            ret = sig.return_type
    if returns_number and not isinstance(ret, (types.Float, types.Integer, types.Boolean)):
        raise TypeError(
            f"the condition of events[{i}] must return a real number (g(u, t, p) -> float); "
            f"it returns {ret}"
        )


_CACHE: dict[tuple, tuple] = {}
_LOCK = threading.Lock()


def _adapters(events):
    """The C-callables (RHS_SIGNATURE) of the conditions and of the affects of ``events``,
    compiled once per set of functions (~0.3 s), and the events' constant arrays
    (directions, terminal flags, which have affects: the loop only reads them)."""
    # an internal affect may take the network kernel too: a(u, t, p, k) (``_takes_kernel``:
    # forward sensitivities through events of a problem with a network)
    key = tuple(
        (id(e.condition), id(e.affect), e.direction, e.terminal, _takes_kernel(e)) for e in events
    )
    with _LOCK:
        known = _CACHE.get(key)
        if known is not None and all(
            a is e.condition and b is e.affect for (a, b), e in zip(known[0], events)
        ):
            return known[1]
        scope = {
            "call_status5": call_status5,
            "call_status3": call_status3,
            "call_status4": call_status4,
            "numba": numba,
            "pointer": float64_pointer,
            "math": math,
        }
        lines = []
        for i, e in enumerate(events):
            scope[f"g{i}"] = e.condition
            lines.append(f"def w{i}(out, i, u, t, p):\n    out[i] = g{i}(u, t, p)\n")
            if e.affect is not None:
                scope[f"a{i}"] = e.affect
        src = "".join(lines)
        # the conditions in the lean form (addresses and lengths: the loop calls them at
        # every step, and the arrays' and the network kernel's structs cost ~12 ns a call)
        src += "def conditions(out_a, u_a, p_a, t, n, m):\n"
        src += f"    out = numba.carray(pointer(out_a), ({len(events)},))\n"
        src += "    u = numba.carray(pointer(u_a), (n,))\n"
        src += "    p = numba.carray(pointer(p_a), (m,))\n"
        for i in range(len(events)):
            # a condition that raised, or gave NaN or inf (no sign to test: an event could be
            # missed in silence), fails the solve, named by call_again
            src += f"    if call_status5(w{i}, out, {i}, u, t, p) != 0:\n        return 1\n"
            src += f"    if not math.isfinite(out[{i}]):\n        return 1\n"
        src += "    return 0\n"
        src += "def affects(flags, u, p, t, k):\n"
        for i, e in enumerate(events):
            if e.affect is not None:
                call = (
                    f"call_status4(a{i}, u, t, p, k)"
                    if _takes_kernel(e)
                    else f"call_status3(a{i}, u, t, p)"
                )
                src += f"    if flags[{i}] != 0.0 and {call} != 0:\n        return 1\n"
        src += "    return 0\n"
        exec(compile(src, "<scichains events>", "exec"), scope)
        for i in range(len(events)):
            scope[f"w{i}"] = numba.njit(scope[f"w{i}"])
        cond = numba.cfunc(LEAN_RHS_SIGNATURE, cache=False)(scope["conditions"])
        act = None
        if any(e.affect is not None for e in events):
            act = numba.cfunc(RHS_SIGNATURE, cache=False)(scope["affects"])
        made = (
            cond,
            act,
            np.array([e.direction for e in events], dtype=np.int64),
            np.array([int(e.terminal) for e in events], dtype=np.int64),
            np.array([int(e.affect is not None) for e in events], dtype=np.int64),
        )
        _CACHE[key] = (tuple((e.condition, e.affect) for e in events), made)
        return made


_PLANS = threading.local()
"""Each thread's recent :class:`EventPlan` objects, by their events and sizes: a solve
repeated with the same events (a fit's loop) reuses its plan, reset, instead of building one
(~12 us of Python, measured on an AMD EPYC Zen 4: more than a small solve's events cost in
compiled code). Per thread, so that two threads never share a table's arrays."""


def event_plan(events, prob, max_events) -> EventPlan:
    """An :class:`EventPlan` for one solve of ``prob`` with ``events``: this thread's plan of
    the last solve with the same events (the same objects: an Event cannot change), sizes and
    ``max_events``, reset, or a new one."""
    if isinstance(max_events, bool) or not isinstance(max_events, int):
        return EventPlan(events, prob, max_events)
    key = (*map(id, events), prob.u0.size, prob.p.size, max_events)
    plans = getattr(_PLANS, "plans", None)
    if plans is None:
        plans = _PLANS.plans = {}
    plan = plans.get(key)
    if plan is not None and all(a is b for a, b in zip(plan.events, events)):
        plan.table.state.fill(0)
        return plan
    plan = EventPlan(events, prob, max_events)
    plans[key] = plan
    while len(plans) > 8:
        plans.pop(next(iter(plans)))
    return plan


class EventPlan:
    """The events of one solve: the table the loop takes, its records, and the results."""

    def __init__(self, events, prob, max_events):
        n = prob.u0.size
        self.events = events
        if isinstance(max_events, bool) or not float(max_events).is_integer() or max_events < 1:
            raise ValueError(f"max_events must be a positive integer, got {max_events!r}")
        self.max_events = int(max_events)
        t0 = float(prob.tspan[0])
        for i, e in enumerate(events):
            if not e._compiled:
                _compile_user(e.condition, "condition", i, True)
                if e.affect is not None:
                    _compile_user(e.affect, "affect", i, False)
                e._compiled = True
            sizes = (n, prob.p.size)
            if sizes not in e._probed:
                _probe(e, i, prob.u0, t0, prob.p)
                e._probed.add(sizes)
        self._cond, self._act, self._direction, self._terminal, self._has_affect = _adapters(events)
        self.n = n
        self.table = self.new_table()
        self.wrapped = None
        """``(events, n)`` when these events wrap ``events`` of the user on the first ``n``
        entries of a larger state (forward sensitivities): a failure is reproduced by
        calling those, at the state's first ``n`` entries and the user's ``p``."""

    def new_table(self) -> EventTable:
        """A table for one solve (or one block of an ensemble's solves): the events' compiled
        functions and constants, with new arrays for the loop's state and records."""
        m, n = self._direction.size, self.n
        cap = min(16, self.max_events)
        # the loop's state and records: views of one float and one integer buffer
        fb = np.zeros(8 * m + 8 + cap * (1 + n))
        ib = np.zeros(m + 6 + cap, dtype=np.int64)
        return EventTable(
            np.uint64(self._cond.address),
            0 if self._act is None else self._act.address,
            self.max_events,
            max(e.interp_points for e in self.events),
            self._direction,
            self._terminal,
            self._has_affect,
            ib[:m],
            ib[m : m + 6],
            fb[: 8 * m].reshape(8, m),
            fb[8 * m : 8 * m + 8],
            fb[8 * m + 8 : 8 * m + 8 + cap],
            ib[m + 6 :],
            fb[8 * m + 8 + cap :].reshape(cap, n),
        )

    def grow(self) -> None:
        """Room for more records (the loop returned GROW with its records full)."""
        tb = self.table
        c = int(tb.state[0])
        m = tb.direction.size
        if c + m <= tb.times.size or tb.times.size >= self.max_events:
            return
        new = min(max(2 * tb.times.size, c + m), self.max_events)
        times = np.zeros(new)
        which = np.zeros(new, dtype=np.int64)
        states = np.zeros((new, tb.states.shape[1]))
        times[:c], which[:c], states[:c] = tb.times[:c], tb.which[:c], tb.states[:c]
        self.table = tb._replace(times=times, which=which, states=states)

    def results(self):
        """``(t_events, u_events)``: per event, its times ``(k,)`` and states ``(k, n)``
        (copies)."""
        tb = self.table
        c = int(tb.state[0])
        m, n = tb.direction.size, tb.states.shape[1]
        if c == 0:  # the common case of many solves: nothing happened
            return [np.empty(0) for _ in range(m)], [np.empty((0, n)) for _ in range(m)]
        which = tb.which[:c]
        t_events, u_events = [], []
        for i in range(m):
            hit = which == i
            t_events.append(tb.times[:c][hit].copy())
            u_events.append(tb.states[:c][hit].copy())
        return t_events, u_events

    def failure(self, fail, p):
        """After RHS_ERROR raised by an event function (``table.state[1]``: 1 a condition, 2
        an affect): ``(message, exception)`` from calling the functions again from Python at
        the recorded point, or None if the right-hand side failed instead."""
        kind = int(self.table.state[1])
        if kind == 0:
            return None
        events, n = self.wrapped or (self.events, self.table.states.shape[1])
        t, u = float(fail[0]), np.array(fail[1 : 1 + n])
        if kind == 1:
            return self.call_again("condition", t, u, p, events=events)
        return self.call_again("affect", t, u, p, self.table.g[4] != 0.0, events)

    def call_again(self, what, t, u, p, fired=None, events=None):
        """``(message, exception)`` from calling the events' ``what`` (``"condition"`` or
        ``"affect"``; only those ``fired``, when given) from Python at ``(t, u, p)``: the one
        that raised in compiled code raises here too (exception None if none does).
        ``events``: the events to call (default: this plan's)."""
        p = np.ascontiguousarray(p, dtype=np.float64)
        for i, e in enumerate(self.events if events is None else events):
            fn = e.condition if what == "condition" else e.affect
            if fn is None or (fired is not None and not fired[i]):
                continue
            try:
                value = fn(u.copy(), t, p.copy())
            except Exception as exc:  # noqa: BLE001 - handed to the caller to raise
                return self.raised_message(what, i, t, exc), exc
            if what == "condition" and not np.isfinite(float(value)):
                exc = ValueError(
                    f"the condition of events[{i}] returned {float(value)} at t = {t!r}, "
                    f"u = {u.tolist()!r}: a condition must stay finite along the solution "
                    "(its sign locates the events)"
                )
                return str(exc), exc
        return (
            f"an event {what} raised an exception in compiled code at t = {t!r}, but not when "
            "called again from Python at the same point",
            None,
        )

    @staticmethod
    def raised_message(what, i, t, exc) -> str:
        """The error message naming ``events[i]``'s ``what`` that raised ``exc`` at ``t``."""
        return (
            f"the {what} of events[{i}] raised {type(exc).__name__}: {exc} when called at t = {t!r}"
        )


def _takes_kernel(e) -> bool:
    return bool(getattr(e, "_takes_kernel", False))


def _probe(e, i, u0, t0, p):
    """Run the condition once as plain Python at ``(u0, t0, p)``: an index past ``u`` or
    ``p`` raises here (compiled code has no bounds checks), and it must give a real number."""
    py = e.condition.py_func
    try:
        g = py(np.array(u0, dtype=np.float64), t0, np.array(p, dtype=np.float64))
    except Exception as exc:
        exc.add_note(f"(in the condition of events[{i}], called at t0 = {t0!r} with u0 and p)")
        raise
    if not np.isscalar(g) or not np.isfinite(float(g)):
        raise ValueError(
            f"the condition of events[{i}] must return a finite real number; at t0 it "
            f"returned {g!r}"
        )
