"""The one stepping loop of the compiled solvers; a method family supplies its step.

:func:`run_loop` holds everything a solve does around a step: the start (jumps at ``t0``,
``f(t0, u0)``, the first step size) or the resume after GROW, the stops it must land on and the
jumps (doses) there, the state-dependent events (``stops.events``: checked after each accepted
step, located by trial steps of the family's own ``attempt``, landed on, recorded, their
affects applied; see ``scichains.ode._event_search``), the limits (``max_steps``, ``dtmin``),
the error norm and the PI controller's verdict, the step store (every accepted step, the left
limit at a jump) and its growth, and the statistics. A family (explicit Runge-Kutta,
Rosenbrock, ESDIRK, ...) supplies the step itself, as the hooks below, each an ``overload(...,
inline="always")`` selected by the type of the family's tableau (a ``NamedTuple``: ``Tableau``,
``RosenbrockTableau``, ...): the shape of diffrax's ``AbstractSolver.step`` or OrdinaryDiffEq's
``perform_step!``. numba inlines the hooks into one kernel per family (:func:`run_loop`
compiled for that tableau type and cached like any kernel), so the family's arithmetic is what
it was when each family had its own loop.

The hooks (all take the tableau ``method`` first; ``ws`` is the family's workspace tuple):

``workspace(method, u0, p, store, control) -> ws``
    scratch and the family's state between steps (Jacobian reuse, Newton history, counts),
    and what it keeps of ``control`` (:class:`~scichains.ode._abi.StepControl`: the mass
    matrix, for the families that take one).
``current_f(method, ws) -> (n,) array``
    where the family keeps ``f(t, u)`` at the current point.
``evaluate(method, ws, f, u, p, t, k) -> status``
    ``f(t, u)`` into ``current_f`` (and what the family keeps with it); nonzero: ``f`` raised.
``has_room(method, ws, store, nstore) -> bool``
    whether the family's own buffers in ``store`` hold another step (else GROW).
``attempt(method, ws, f, vjp, k, u, p, t, hs, h_try, control, store, nstore, unew, err, fail)``
    one try of the step ``hs`` (signed) from ``(t, u)``: fills ``unew`` and, if adaptive, the
    error estimate ``err``. Returns ``(status, h_new, calls, counted, rejected, nonfinite)``:
    ``status`` PROCEED (``unew``/``err`` ready), RETRY (try again: e.g. a singular matrix or
    a Newton failure) or a :class:`~scichains.ode.ReturnCode` value that ends the solve;
    ``h_new > 0`` replaces the step size; ``calls`` of ``f``; ``counted``: the try counts as a
    step (``max_steps``); ``rejected``: it counts as a rejected step; ``nonfinite`` (-1: no
    change, 0/1) sets whether the last failure was a non-finite value (NONFINITE rather than
    DT_UNDERFLOW if the step then underflows).
``keep_step(method, ws, store, nstore, hs)``
    an accepted step ending at store entry ``nstore``: keep what dense output and the
    adjoints need (stages into ``store.kstore``, ...).
``advance(method, ws, f, k, u, p, t, store, accepted_at) -> (calls, status)``
    after the move to the step's end ``(t, u)``: ``f`` there into ``current_f`` (FSAL or a
    call), and the family's bookkeeping (e.g. whether the next step needs a new Jacobian).
``jumped(method, ws)``
    a jump (dose) changed ``u`` at a stop (``current_f`` already re-evaluated).
``propose(method, ws, h_next, h_try, adaptive) -> h``
    the family's last word on the next step (e.g. keep ``h`` so that an LU is reused).
``save_carry(method, ws, carry)`` / ``resume(method, ws, carry)``
    the family's part of ``store.carry`` (from index 3; 0-2 are the loop's own) for a GROW.
``handover(method, ws) -> bool``
    after an accepted step is stored: True stops the solve there with SWITCH (the automatic
    method's switch watch, ``StepControl.watch``; families without one return False).
"""

from __future__ import annotations

import inspect
import math

import numba

from .._jit import FLAGS
from ._abi import call_rhs, record_failure, rhs_function, store_point, vjp_from_address
from ._codes import (
    DT_UNDERFLOW,
    EVENT_FAILURE,
    GROW,
    MAX_EVENTS,
    MAX_STEPS,
    NONFINITE,
    RHS_ERROR,
    SUCCESS,
    SWITCH,
)
from ._control import (
    ACCEPT,
    E_FLOOR,
    GIVE_UP,
    error_norm,
    initial_finish,
    initial_probe,
    judge_step,
    pi_gains,
)
from ._event_search import (
    COUNT,
    EPS,
    ERROR,
    EST,
    FIRED,
    G_BRACKET,
    G_LAST,
    G_TRIAL,
    HI,
    LAST,
    LO,
    S_BEST,
    S_FULL,
    TOL,
    WINDOW,
    any_fired,
    crosses,
    keep_best,
    record_events,
    search_begin,
    search_trial,
    settle,
)

PROCEED = -1
"""``attempt``: the step is made; ``unew`` and ``err`` are ready for the error test."""
RETRY = -2
"""``attempt``: try again from the same point (with ``h_new`` if given)."""


def _hook(name):
    def stub(*args):
        raise NotImplementedError(f"{name} is a hook of the compiled loop (overloaded per family)")

    stub.__name__ = stub.__qualname__ = name
    return stub


workspace = _hook("workspace")
current_f = _hook("current_f")
evaluate = _hook("evaluate")
has_room = _hook("has_room")
attempt = _hook("attempt")
keep_step = _hook("keep_step")
advance = _hook("advance")
jumped = _hook("jumped")
propose = _hook("propose")
save_carry = _hook("save_carry")
resume = _hook("resume")
handover = _hook("handover")

HOOKS = (
    "workspace",
    "current_f",
    "evaluate",
    "has_room",
    "attempt",
    "keep_step",
    "advance",
    "jumped",
    "propose",
    "save_carry",
    "resume",
    "handover",
)
"""The names of the hooks a family implements (see the module's docstring)."""


def register_family(tableau_class, **impls) -> None:
    """Register the hooks of the family whose tableau is ``tableau_class`` (a ``NamedTuple``):
    ``impls`` maps every name of :data:`HOOKS` to a plain Python function with the hook's
    arguments, compiled inline into :func:`run_loop` for that family."""
    from numba import types
    from numba.extending import overload

    missing = set(HOOKS) - set(impls)
    extra = set(impls) - set(HOOKS)
    if missing or extra:
        raise TypeError(f"family hooks: missing {sorted(missing)}, unknown {sorted(extra)}")
    for name, impl in impls.items():
        # the typing function must take the implementation's arguments by name (numba checks)
        params = list(inspect.signature(impl).parameters)
        source = (
            f"def typer({', '.join(params)}):\n"
            f"    if isinstance({params[0]}, NamedTuple) and {params[0]}.instance_class is cls:\n"
            f"        return impl\n"
            f"    return None\n"
        )
        scope = {"NamedTuple": types.NamedTuple, "cls": tableau_class, "impl": impl}
        exec(source, scope)
        overload(globals()[name], inline="always")(scope["typer"])


@numba.njit(inline="always", **FLAGS)  # inlined into each family's kernel (see below)
def run_loop(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store):
    """:func:`_loop` with the event table as an argument of its own (``stops.events``: an
    :class:`~scichains.ode._abi.EventTable`, or None for a solve without events), so that
    numba compiles the loop without any of the event code when it is None (every ``if ev is
    not None`` branch is pruned before typing): events cost a solve without them no compile
    time and no run time. Inlined (numba IR) into the family's kernel that calls it: as a
    function of its own it cost every kernel's cold compile ~1.1 s more (its module linked and
    optimised once more, measured on an AMD EPYC Zen 4), for a call that does nothing else."""
    return _loop(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store, stops.events)


@numba.njit(**FLAGS)  # compiled per family and per kind of event table, cached
def _loop(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store, ev):
    """Integrate from ``t0`` to ``t1`` (either direction) with ``method`` (a family's tableau),
    storing every step in ``store`` (:class:`~scichains.ode._abi.StepStore`).

    ``faddr``: the right-hand side's address (``int64``: :data:`~scichains.ode._abi.RHS_SIGNATURE`;
    ``uint64``: the lean form); ``vaddr``: its vjp's (0 where the family needs none).

    Returns a code (SUCCESS, MAX_STEPS, DT_UNDERFLOW, NONFINITE, RHS_ERROR, GROW, SWITCH,
    MAX_EVENTS, EVENT_FAILURE, or the family's own: SINGULAR, JACOBIAN_NONFINITE,
    NEWTON_FAILURE). A terminal event ends the solve with SUCCESS at the event. The event
    search runs as modes of the one loop (1: a trial step; 2: the step to the located event),
    so that ``attempt`` is inlined at one call site only (the family's step is the largest
    part of the kernel's compile time). Jumps at a stop are applied
    when the stepper lands on it; the stored state there is the value after the jumps, the
    entry before it the left limit. RHS_ERROR: a user function returned nonzero (raised);
    ``store.fail`` holds the time and state of that call. GROW: the buffers are full; the
    stepper's state is in ``stats`` and ``carry``: copy the stored entries into larger buffers
    and call again with ``stats[6] = 1`` to go on exactly where it stopped.
    """
    rtol, atol, dt0, dtmin, max_steps, group = control[:6]
    times = stops.times
    jump_index = stops.jump_index
    jump_count = stops.jump_count
    jump_state = stops.jump_state
    jump_amount = stops.jump_amount
    nev = 0
    if ev is not None:
        nev = ev.direction.shape[0]
        cond = rhs_function(ev.cond)
        act = rhs_function(ev.affect)
        # the rows the check after each step uses, unpacked once (see _event_search)
        ev_g, ev_s, ev_mark, ev_dir = ev.g, ev.s, ev.mark, ev.direction
        g_last, g_trial, g_work = ev_g[G_LAST], ev_g[G_TRIAL], ev_g[FIRED]
        npoints = ev.points
    ts, us, fs, stats, kstore, astore, carry, fail = store
    f = rhs_function(faddr)
    vjp = vjp_from_address(vaddr)
    n = u0.shape[0]
    cap = ts.shape[0]
    keep = kstore.shape[0] > 0
    direction = 1.0 if t1 >= t0 else -1.0
    ctrl_order = method.ctrl_order
    adaptive = ctrl_order > 0
    ws = workspace(method, u0, p, store, control)
    fcur = current_f(method, ws)
    u = u0.copy()
    unew = u0.copy()
    tmp = u0.copy()
    err = u0.copy()
    code = SUCCESS
    if stats[6] != 0:
        # resume after GROW: the last stored entry is the current point
        nstore = stats[0]
        nf = stats[1]
        naccept = stats[2]
        nreject = stats[3]
        steps = stats[4]
        stop_i = stats[5]
        t = ts[nstore - 1]
        for i in range(n):
            u[i] = us[nstore - 1, i]
            fcur[i] = fs[nstore - 1, i]
        h = carry[0]
        qold = carry[1]
        last_nonfinite = carry[2] != 0.0
        resume(method, ws, carry)
    else:
        nf = 0
        naccept = 0
        nreject = 0
        steps = 0
        qold = E_FLOOR
        last_nonfinite = False
        t = t0
        stop_i = 0
        h = 0.0
        # jumps at t0 act on the initial state
        while stop_i < times.shape[0] and times[stop_i] == t0:
            j0 = jump_index[stop_i]
            if j0 >= 0:
                for j in range(j0, j0 + jump_count[stop_i]):
                    u[jump_state[j]] += jump_amount[j]
            stop_i += 1
        nf += 1
        if evaluate(method, ws, f, u, p, t, k) != 0:
            record_failure(fail, t, u)
            code = RHS_ERROR
        store_point(ts, us, fs, 0, t, u, fcur)
        nstore = 1
        if ev is not None and nev > 0 and code == SUCCESS:
            ev.state[COUNT] = 0
            if call_rhs(cond, g_last, u, p, t, k) != 0:
                record_failure(fail, t, u)
                ev.state[ERROR] = 1
                code = RHS_ERROR
            settle(ev_g, ev_mark, False)  # zero at t0: no event there (_event_search)
        # step size: given, or Hairer & Wanner's initial guess (Solving ODEs I, II.4)
        if dt0 > 0.0:
            h = dt0
        elif code == SUCCESS:
            h0, d1 = initial_probe(u, fcur, abs(t1 - t0), direction, rtol, atol, tmp)
            failed = call_rhs(f, err, tmp, p, t + direction * h0, k) != 0
            h = initial_finish(u, fcur, err, h0, d1, rtol, atol, ctrl_order)
            nf += 1
            if failed:
                record_failure(fail, t + direction * h0, tmp)
                code = RHS_ERROR
        h = abs(h)
    beta1, beta2 = pi_gains(ctrl_order)
    # mode 0: a step; 1: a trial step of the event search; 2: the step to the located event
    mode = 0
    s_trial = 0.0
    retries = 0
    target = t1
    landing = False
    searched = False
    h_try = 0.0
    h_next = h
    while code == SUCCESS and (mode != 0 or direction * (t1 - t) > 0.0):
        if mode == 0:
            if steps >= max_steps:
                code = MAX_STEPS
                break
            records_full = False
            if ev is not None and nev > 0:
                records_full = (
                    ev.state[COUNT] + nev > ev.times.shape[0] and ev.times.shape[0] < ev.max_events
                )
            if (
                nstore + 3 > cap
                or (keep and nstore + 3 > kstore.shape[0])
                or not has_room(method, ws, store, nstore)
                or records_full
            ):
                # room for a step, its left limit (a jump or an affect), the proposal after
                # them, and the events of one step: grow
                code = GROW
                break
            # the next time we must land on (the last stop is t1)
            target = times[stop_i]
            dist = direction * (target - t)
            landing = False
            if h >= dist * (1.0 - 1e-12):
                h_try = dist
                landing = True
            else:
                h_try = h
            if not landing and h_try < dtmin:
                code = NONFINITE if last_nonfinite else DT_UNDERFLOW
                break
            h_att = h_try
        else:
            h_att = s_trial
        hs = direction * h_att
        status, h_new, calls, counted, rejected, nonfin = attempt(
            method, ws, f, vjp, k, u, p, t, hs, h_att, control, store, nstore, unew, err, fail
        )
        nf += calls
        if ev is not None and mode == 1:
            # a trial of the event search: the conditions at its end, then the next trial
            ok = status == PROCEED
            if ok:
                if call_rhs(cond, g_trial, unew, p, t + hs, k) != 0:
                    record_failure(fail, t + hs, unew)
                    ev.state[ERROR] = 1
                    code = RHS_ERROR
                    break
            elif status != RETRY:
                code = status
                break
            s_next = search_trial(ev_g, ev_s, ev.state, ev_dir, s_trial, ok)
            if s_next >= 0.0:
                s_trial = s_next
                continue
            mode = 0
            if ev_s[LAST] != ev_s[S_BEST]:
                # the step to the event (or the whole step again) is made once more, so that
                # the family's state and the stored stages are those of the step taken
                mode = 2
                retries = 0
                s_trial = ev_s[S_BEST]
                continue
        elif ev is not None and mode == 2:
            if status == RETRY and retries < 3:
                retries += 1  # e.g. a fresh Jacobian at the same step length
                continue
            mode = 0
            if status != PROCEED:
                code = EVENT_FAILURE if status == RETRY else status
                break
        else:
            if counted:
                steps += 1
            if status != PROCEED:
                if h_new > 0.0:
                    h = h_new
                if rejected:
                    nreject += 1
                if nonfin >= 0:
                    last_nonfinite = nonfin == 1
                if status == RETRY:
                    continue
                code = status
                break
            if adaptive:
                e = error_norm(err, u, unew, rtol, atol, group)
                verdict, h_next, qold, nonfinite = judge_step(
                    e, h_try, qold, beta1, beta2, landing, dtmin
                )
                if verdict != ACCEPT:
                    h = h_next
                    nreject += 1
                    if nonfinite:
                        # a non-finite stage: retried smaller (a too-large step can overflow)
                        last_nonfinite = True
                    if verdict == GIVE_UP:
                        code = NONFINITE
                        break
                    continue
                last_nonfinite = False
            else:
                h_next = h
                finite = True
                for i in range(n):
                    if not math.isfinite(unew[i]):
                        finite = False
                if not finite:
                    code = NONFINITE
                    break
            searched = False
            if ev is not None and nev > 0:
                # the events: the conditions at the step's end and inside it; a sign change
                # is located (_event_search)
                t_end = target if landing else t + hs
                found = 0
                scan = False
                if call_rhs(cond, g_trial, unew, p, t_end, k) != 0:
                    record_failure(fail, t_end, unew)
                    found = -1
                else:
                    # the common case first: no interior points, no event at the step's
                    # start and no sign change at its end: nothing to bracket
                    scan = npoints > 0
                    for i in range(nev):
                        if ev_mark[i] != 0 or crosses(g_last[i], g_trial[i], ev_dir[i]):
                            scan = True
                if found == 0 and scan:
                    # the check for sign changes (_event_search.scan, written out here: a call
                    # or an IR-inlined function taking these arrays costs their reference
                    # counts on every step, ~0.2-0.4 us measured, more than the check itself)
                    S = h_try
                    ev_s[S_FULL] = S
                    ev_s[S_BEST] = S
                    ev_s[LAST] = S
                    ev_s[TOL] = 4.0 * EPS * max(abs(t), abs(t_end), S)
                    marked = False
                    for i in range(nev):
                        ev_g[HI, i] = -1.0
                        ev_g[LO, i] = 0.0
                        ev_g[G_BRACKET, i] = g_last[i]  # the value at the last point checked
                        if ev_mark[i] != 0:
                            marked = True
                    if marked:
                        # from a window after an event at the step's start (its own repeat)
                        sw = min(WINDOW * ev_s[TOL], 0.5 * S)
                        th = sw / S
                        for j in range(n):
                            a = hs * fcur[j]
                            tmp[j] = u[j] + th * (a + th * (unew[j] - u[j] - a))
                        if call_rhs(cond, g_work, tmp, p, t + direction * sw, k) != 0:
                            record_failure(fail, t + direction * sw, tmp)
                            found = -1
                        for i in range(nev):
                            if ev_mark[i] != 0:
                                ev_g[G_BRACKET, i] = g_work[i]
                                ev_g[LO, i] = sw
                    for jp in range(1, npoints + 2):
                        if found < 0:
                            break
                        if jp <= npoints:
                            # on the quadratic through the ends and the initial slope
                            sj = S * jp / (npoints + 1.0)
                            th = jp / (npoints + 1.0)
                            for j in range(n):
                                a = hs * fcur[j]
                                tmp[j] = u[j] + th * (a + th * (unew[j] - u[j] - a))
                            if call_rhs(cond, g_work, tmp, p, t + direction * sj, k) != 0:
                                record_failure(fail, t + direction * sj, tmp)
                                found = -1
                                break
                        else:
                            sj = S
                            for i in range(nev):
                                g_work[i] = g_trial[i]  # the end: exact
                        for i in range(nev):
                            if ev_g[HI, i] >= 0.0 or sj <= ev_g[LO, i]:
                                continue
                            gw = g_work[i]
                            if crosses(ev_g[G_BRACKET, i], gw, ev_dir[i]):
                                ev_g[HI, i] = sj
                                ev_g[EST, i] = gw  # the value there, for estimate_roots
                                found = 1
                            else:
                                ev_g[G_BRACKET, i] = gw
                                ev_g[LO, i] = sj
                if found < 0:
                    ev.state[ERROR] = 1
                    code = RHS_ERROR
                    break
                if found > 0:
                    searched = True
                    s_next = search_begin(ev, cond, u, unew, fcur, tmp, p, t, hs, k, fail)
                    if s_next == -2.0:
                        code = RHS_ERROR
                        break
                    if s_next >= 0.0:
                        mode = 1
                        s_trial = s_next
                        continue
        # the step is taken: the whole step, or the step to the earliest event
        short = False
        fired = False
        if ev is not None and searched:
            fired = any_fired(ev_g)
            if ev_s[S_BEST] < h_try:
                hs = direction * ev_s[S_BEST]
                landing = False
                short = True
        naccept += 1
        keep_step(method, ws, store, nstore, hs)
        accepted_at = nstore
        t = target if landing else t + hs
        for i in range(n):
            u[i] = unew[i]
        # the derivative at the new point, for the next step and the dense output
        calls, failed = advance(method, ws, f, k, u, p, t, store, accepted_at)
        nf += calls
        if failed != 0:
            record_failure(fail, t, u)
            code = RHS_ERROR
        terminal = False
        affects = False
        if ev is not None and nev > 0 and code == SUCCESS and not searched:
            # the common case: no condition changed sign in the step
            for i in range(nev):
                g_last[i] = g_trial[i]
                ev_mark[i] = 1 if g_last[i] == 0.0 else 0
        elif ev is not None and nev > 0 and code == SUCCESS:
            if fired:
                recorded, terminal, affects = record_events(ev, t, u)
                if not recorded:
                    code = MAX_EVENTS
                elif affects:
                    # the left limit, then the affects (in index order) act on u
                    store_point(ts, us, fs, nstore, t, u, fcur)
                    nstore += 1
                    if call_rhs(act, g_work, u, p, t, k) != 0:
                        record_failure(fail, t, u)
                        ev.state[ERROR] = 2
                        code = RHS_ERROR
                    else:
                        nf += 1
                        if evaluate(method, ws, f, u, p, t, k) != 0:
                            record_failure(fail, t, u)
                            code = RHS_ERROR
                        jumped(method, ws)
            if fired and affects and code == SUCCESS:
                if call_rhs(cond, g_last, u, p, t, k) != 0:
                    record_failure(fail, t, u)
                    ev.state[ERROR] = 1
                    code = RHS_ERROR
            else:
                keep_best(ev_g)
            settle(ev_g, ev_mark, fired)
        if landing and code == SUCCESS:
            j0 = jump_index[stop_i]
            if j0 >= 0:
                # keep the left limit too, so that dense output never interpolates across
                # the discontinuity; then jump and restart from the right limit
                store_point(ts, us, fs, nstore, t, u, fcur)
                nstore += 1
                for j in range(j0, j0 + jump_count[stop_i]):
                    u[jump_state[j]] += jump_amount[j]
                nf += 1
                if evaluate(method, ws, f, u, p, t, k) != 0:
                    record_failure(fail, t, u)
                    code = RHS_ERROR
                jumped(method, ws)
                if ev is not None and nev > 0 and code == SUCCESS:
                    # a dose is not a crossing: the conditions start again from after it
                    if call_rhs(cond, g_last, u, p, t, k) != 0:
                        record_failure(fail, t, u)
                        ev.state[ERROR] = 1
                        code = RHS_ERROR
                    settle(ev_g, ev_mark, fired)
            stop_i += 1
        store_point(ts, us, fs, nstore, t, u, fcur)
        nstore += 1
        h_next = propose(method, ws, h_next, h_try, adaptive)
        # a landing step is short: keep the controller's proposal for the next one
        h = h_next if not (landing or short) else max(h_next, h)
        if terminal and code == SUCCESS:
            break  # a terminal event: the solve ends here (SUCCESS)
        if code == SUCCESS and handover(method, ws):
            code = SWITCH  # resumable here, as after GROW (the point is stored)
            break
    stats[0] = nstore
    stats[1] = nf
    stats[2] = naccept
    stats[3] = nreject
    stats[4] = steps
    stats[5] = stop_i
    carry[0] = h
    carry[1] = qold
    carry[2] = 1.0 if last_nonfinite else 0.0
    ts[nstore] = h  # the step the controller would try next (a continuation's dt0)
    # (this store stays before the inlined hook: after it, as the function's last statement,
    # numba 0.68.1 dropped it; tests/ode/test_loop.py checks the proposal)
    save_carry(method, ws, carry)
    return code
