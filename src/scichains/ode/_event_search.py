"""Locating state-dependent events inside an accepted step (compiled; the loop's helpers).

An event ``i`` happens where its condition ``g_i(u(t), t)`` crosses zero. After an accepted
step of length ``S`` from ``(t, u)``, the loop evaluates every ``g_i`` at the step's end.

**Detection.** A condition may cross zero and back within one step: the end alone does not show
it. With ``points > 0`` each ``g_i`` is also evaluated at that many interior points of the step
on the quadratic ``u + theta h f0 + theta^2 (u_new - u - h f0)`` through the step's ends and
its initial slope (no right-hand-side call), as DifferentialEquations.jl's ``interp_points``
checks its interpolant. After an event, its condition is checked from a window just after it
(below), so a ball that bounces and falls back within one long step of an exact method is seen
even with ``points = 0``. The first interval between consecutive checked points where ``g_i``
changes sign in its allowed direction is the event's candidate interval.

**Location.** The candidate's ends are made exact (a trial step of the method to each end that
is not the step's start or end), and a sign change confirmed there is located by root finding
on the **step map** ``s -> g_i(Phi(t, u; s))``, where ``Phi`` is the method's own step of
length ``s`` from the same point (each trial point is one attempt of the family's step). The
event time is then a point of the numerical solution itself, not of an interpolant, and it is
where the solve lands: the step to it is the last trial, so the solution, the stored steps and
the adjoints see exactly that step. A candidate that the exact values do not confirm is dropped
(the quadratic was wrong there).

The root finder is regula falsi with the Anderson-Bjorck modification (Anderson and Bjorck, BIT
13 (1973) 253-264; the Illinois halving of Dowell and Jarratt, BIT 11 (1971) 168-174, where its
factor is not positive): it keeps a bracket ``[a, b]`` whose end ``b`` is on the crossed side,
scales down the value of the end it keeps, and stops when ``b - a`` is a few units of rounding
of ``t``. The event time is ``b``, so that the condition there has already changed sign and the
event does not fire again at the start of the next step.

Several events in one step: each candidate is located in index order, within the bracket of the
earliest found so far; an event whose root lies within the tolerance of the earliest is
simultaneous with it (all fire, in index order). An event that happened at the step's start
(``mark``) is checked only from a window of 16 tolerances after it: a crossing inside the
window is its own repeat (a bounce leaves ``g = 0`` again) and not an event.

The functions drive the search as a state machine (the loop owns the step attempts and the
check that finds the candidates): :func:`search_begin` after the check, :func:`search_trial`
after each trial step; both return the next trial step length, ``-1.0`` when the search is
over, or ``-2.0`` when a condition raised (recorded in ``fail``). Then ``s[S_BEST]`` is the
step to take and ``g[FIRED]`` flags the events that happen at its end.
"""

from __future__ import annotations

import numba

from .._jit import FLAGS
from ._abi import call_rhs, record_failure

# The check after every step (the candidate intervals: rows LO, HI, G_BRACKET, EST of g) is
# written out in the loop itself (scichains.ode._loop.run_loop): a call passing the event table
# (a tuple of 13 arrays) cost ~0.2 us on its own (the arrays' reference counts, measured on an
# AMD EPYC Zen 3), as much as a step of a small problem. The search below runs only when a
# condition changed sign.

# rows of EventTable.g
G_LAST, G_BEST, G_TRIAL, G_BRACKET, FIRED, LO, HI, EST = 0, 1, 2, 3, 4, 5, 6, 7
# entries of EventTable.s
S_FULL, S_BEST, A, FA, B, FB, LAST, TOL = 0, 1, 2, 3, 4, 5, 6, 7
# entries of EventTable.state
COUNT, ERROR, PHASE, CAND, ITER, SIDE = 0, 1, 2, 3, 4, 5
# search phases
NEXT, CHECK_A, CHECK_B, BRACKET = 0, 1, 2, 3

MAX_ITER = 200
"""Trial steps per event located (the method converges superlinearly: a handful are usual)."""
EPS = 2.220446049250313e-16
WINDOW = 16.0
"""After an event, its own crossings within this many tolerances are its repeat."""


@numba.njit(inline="always", **FLAGS)
def crosses(ga, gb, d):
    """``g`` goes from ``ga`` (nonzero) to ``gb`` across zero or onto it, in direction ``d``
    (+1 upward only, -1 downward only, 0 either)."""
    if ga < 0.0 and gb >= 0.0:
        return d >= 0
    if ga > 0.0 and gb <= 0.0:
        return d <= 0
    return False


@numba.njit(inline="always", **FLAGS)
def _quadratic(u, unew, f0, hs, theta, out):
    for j in range(u.shape[0]):
        a = hs * f0[j]
        out[j] = u[j] + theta * (a + theta * (unew[j] - u[j] - a))


@numba.njit(**FLAGS)
def estimate_roots(ev, cond, u, unew, f0, tmp, p, t, hs, k, fail):
    """Each candidate's root on the quadratic (no right-hand-side call), ``g[EST]``: the
    first trial step of its search. False if a condition raised."""
    g, s = ev.g, ev.s
    g_work = g[FIRED]
    m = g.shape[1]
    S = abs(hs)
    direction_t = 1.0 if hs >= 0.0 else -1.0
    for i in range(m):
        if g[HI, i] < 0.0:
            continue
        a, fa, b, fb = g[LO, i], g[G_BRACKET, i], g[HI, i], g[EST, i]
        for _ in range(60):
            if b - a <= s[TOL] or fb == 0.0:
                break
            x = (a * fb - b * fa) / (fb - fa)
            x = min(max(x, a + 0.5 * s[TOL]), b - 0.5 * s[TOL])
            _quadratic(u, unew, f0, hs, x / S, tmp)
            if call_rhs(cond, g_work, tmp, p, t + direction_t * x, k) != 0:
                record_failure(fail, t + direction_t * x, tmp)
                return False
            fx = g_work[i]
            if fx == 0.0 or (fx < 0.0) != (fa < 0.0):
                scale = 1.0 - fx / fb
                fa *= scale if scale > 0.0 else 0.5
                b, fb = x, fx
            else:
                scale = 1.0 - fx / fa
                fb *= scale if scale > 0.0 else 0.5
                a, fa = x, fx
        g[EST, i] = b
    return True


@numba.njit(**FLAGS)
def _next_trial(g, s, st, direction):
    """The next trial step of the search (or -1.0 when it is over). The table's arrays come
    one by one: passing the whole table (14 fields) to each of these small calls cost the
    arrays' reference counts, ~0.2 us a call, several times the arithmetic."""
    m = g.shape[1]
    while True:
        if st[PHASE] == BRACKET:
            a, b = s[A], s[B]
            if b - a > s[TOL] and st[ITER] < MAX_ITER:
                fa, fb = s[FA], s[FB]
                x = (a * fb - b * fa) / (fb - fa)
                est = g[EST, st[CAND]]
                if st[ITER] == 0 and a < est and est < b:
                    x = est  # the root on the quadratic: usually within the method's error
                lo = a + 0.5 * s[TOL]
                hi = b - 0.5 * s[TOL]
                if not x >= lo:
                    x = lo
                if not x <= hi:
                    x = hi
                return x
            i = st[CAND]
            if s[S_BEST] - b <= s[TOL]:
                g[FIRED, i] = 1.0  # at the earliest point found so far (simultaneous)
            else:
                s[S_BEST] = b
                for j in range(m):
                    g[G_BEST, j] = g[G_BRACKET, j]
                    g[FIRED, j] = 0.0
                g[FIRED, i] = 1.0
            st[PHASE] = NEXT
        # the next event whose candidate interval starts before the earliest point so far
        i = st[CAND] + 1
        while i < m:
            if g[HI, i] >= 0.0 and g[LO, i] < s[S_BEST]:
                break
            i += 1
        st[CAND] = i
        if i >= m:
            st[PHASE] = NEXT
            return -1.0
        s[A] = g[LO, i]
        s[B] = min(g[HI, i], s[S_BEST])
        s[FB] = g[G_BEST, i]
        if s[B] == s[S_BEST] and s[FB] == 0.0:
            g[FIRED, i] = 1.0  # exactly zero at the earliest point so far (e.g. at a stop)
            continue
        st[SIDE] = 0
        st[ITER] = 0
        if s[A] > 0.0:
            st[PHASE] = CHECK_A
            return s[A]
        s[FA] = g[G_LAST, i]
        if s[B] < s[S_BEST]:
            st[PHASE] = CHECK_B
            return s[B]
        if crosses(s[FA], s[FB], direction[i]):
            st[PHASE] = BRACKET


@numba.njit(**FLAGS)
def search_begin(ev, cond, u, unew, f0, tmp, p, t, hs, k, fail):
    """After :func:`scan` found a candidate: the first trial step length, -1.0 (nothing to
    locate; ``g[FIRED]`` may still flag events at the step's end), or -2.0 (a condition
    raised: ``fail`` holds where)."""
    g, st = ev.g, ev.state
    for j in range(g.shape[1]):
        g[G_BEST, j] = g[G_TRIAL, j]
    if not estimate_roots(ev, cond, u, unew, f0, tmp, p, t, hs, k, fail):
        st[ERROR] = 1
        return -2.0
    for j in range(g.shape[1]):
        g[FIRED, j] = 0.0
    st[CAND] = -1
    st[PHASE] = NEXT
    return _next_trial(g, ev.s, st, ev.direction)


@numba.njit(**FLAGS)
def search_trial(g, s, st, direction, s_trial, ok):
    """After the trial step of length ``s_trial`` (``ok``: made, with the conditions at its
    end in ``g[G_TRIAL]``; else the step failed there): the next trial length, or -1.0.
    ``g``, ``s``, ``st``, ``direction``: the event table's arrays of those names (``st``:
    ``state``)."""
    s[LAST] = s_trial
    i = st[CAND]
    phase = st[PHASE]
    if phase == CHECK_A or phase == CHECK_B:
        if not ok:
            st[PHASE] = NEXT  # no step there: the candidate is dropped
            return _next_trial(g, s, st, direction)
        if phase == CHECK_A:
            s[FA] = g[G_TRIAL, i]
            if s[B] < s[S_BEST]:
                st[PHASE] = CHECK_B
                return s[B]
        else:
            s[FB] = g[G_TRIAL, i]
            for j in range(g.shape[1]):
                g[G_BRACKET, j] = g[G_TRIAL, j]
        # confirmed by the exact values at both ends, or dropped
        st[PHASE] = BRACKET if crosses(s[FA], s[FB], direction[i]) else NEXT
        return _next_trial(g, s, st, direction)
    st[ITER] += 1
    if not ok:
        # no step of that length (a stiff method's iteration failed): try nearer to a
        if st[ITER] >= MAX_ITER:
            return _next_trial(g, s, st, direction)
        return 0.5 * (s[A] + s_trial)
    gi = g[G_TRIAL, i]
    # Anderson-Bjorck: the end kept has its value scaled by 1 - f(new)/f(replaced) (by 1/2,
    # Illinois, where that is not positive)
    if gi == 0.0 or (gi < 0.0) != (s[FA] < 0.0):
        scale = 1.0 - gi / s[FB] if s[FB] != 0.0 else 0.5
        s[FA] *= scale if scale > 0.0 else 0.5
        s[B] = s_trial
        s[FB] = gi
        for j in range(g.shape[1]):
            g[G_BRACKET, j] = g[G_TRIAL, j]
    else:
        scale = 1.0 - gi / s[FA]
        s[FB] *= scale if scale > 0.0 else 0.5
        s[A] = s_trial
        s[FA] = gi
    return _next_trial(g, s, st, direction)


@numba.njit(**FLAGS)
def any_fired(g):
    """Whether an event happens at the end of the step just searched (``g``: the table's)."""
    for i in range(g.shape[1]):
        if g[FIRED, i] != 0.0:
            return True
    return False


@numba.njit(**FLAGS)
def record_events(ev, t, u):
    """Record the events flagged in ``g[FIRED]`` at ``(t, u)``, in index order. Returns
    ``(recorded, terminal, affects)``; ``recorded`` False: ``max_events`` would be passed
    (those past it are not recorded)."""
    g, st = ev.g, ev.state
    n = u.shape[0]
    cap = min(ev.times.shape[0], ev.max_events)
    terminal = False
    affects = False
    for i in range(g.shape[1]):
        if g[FIRED, i] == 0.0:
            continue
        c = st[COUNT]
        if c >= cap:
            return False, terminal, affects
        ev.times[c] = t
        ev.which[c] = i
        for j in range(n):
            ev.states[c, j] = u[j]
        st[COUNT] = c + 1
        if ev.terminal[i] != 0:
            terminal = True
        if ev.has_affect[i] != 0:
            affects = True
    return True, terminal, affects


@numba.njit(**FLAGS)
def settle(g, mark, fired):
    """After the step (and any affects): the conditions at its end become the last ones
    (``g[G_LAST]`` already holds them if an affect or a jump re-evaluated them); an event that
    fired there, or whose condition is zero there, is marked (``g``, ``mark``: the table's)."""
    for i in range(g.shape[1]):
        mark[i] = 1 if ((fired and g[FIRED, i] != 0.0) or g[G_LAST, i] == 0.0) else 0


@numba.njit(**FLAGS)
def keep_best(g):
    """``g[G_LAST] = g[G_BEST]``: the conditions at the step's end, none re-evaluated (``g``:
    the table's)."""
    for i in range(g.shape[1]):
        g[G_LAST, i] = g[G_BEST, i]
