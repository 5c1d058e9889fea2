"""Gradients through state-dependent events (:class:`scichains.ode.Event`) in the discrete
adjoint.

At an event the solution jumps: ``u+ = a(u-, tau, p)`` (the affect), at a time ``tau`` that
depends on the parameters and the initial state through ``g(u(tau), tau, p) = 0``. A
perturbation ``du-`` of the state reaching the event (at fixed time) and ``dp`` move the event
by ``dtau = -(grad_u g . du- + g_p dp) / D`` with ``D = grad_u g . f- + g_t`` (the implicit
function theorem; ``f-`` is ``f(u-, tau)``), and the state just after it by

    du+ = a_u du- + a_p dp + (a_u f- + a_t - f+) dtau

(a later event moves everything after it by ``dtau``; ``f+`` is ``f(u+, tau)``). Its transpose
is the adjoint's jump: with ``w = a_u f- + a_t - f+`` and ``mu = (w . lambda+) / D``,

    lambda- = a_u^T lambda+ - mu grad_u g,    dL/dp += a_p^T lambda+ - mu g_p

(the event-time correction of hybrid-system sensitivity analysis: Rozenvasser 1967; Corner,
Sandu and Adjerid, "Adjoint sensitivity analysis of hybrid multibody dynamical systems",
2020). The discrete adjoint runs the method's steps backward between events (the step to the
event is a step of the method of length ``tau - t_n``, as the forward solve took it) and
applies this jump at each one; ``f-`` stands for the derivative of the step map with respect
to its length, which it equals to the method's accuracy. An event without an affect leaves
the solution unchanged (``w = 0``): nothing to add.

The derivatives of ``g`` and ``a`` are taken by the complex step on the user's functions
recompiled for complex arrays (``scichains.ode.derivatives``), exact to rounding, at each event
of the solve: ``n + 1 + len(p)`` calls of each (cheap for the small models this serves; a
network's thousands of parameters in a condition or an affect would make it slow).
"""

from __future__ import annotations

import numba
import numpy as np

from ..ode._events import EventPlan
from ..ode._solution import raise_sweep_failure
from ..ode.derivatives._autodiff import H, complex_step_version


def _complex_versions(event):
    """The event's condition and affect recompiled for complex arguments (made once per
    event: about a second each)."""
    made = getattr(event, "_complex", None)
    if made is None:
        try:
            g = complex_step_version(event.condition)
            a = None if event.affect is None else complex_step_version(event.affect)
        except Exception as exc:  # noqa: BLE001 - reported in words
            raise TypeError(
                f"gradients through events need the condition and the affect as real "
                f"arithmetic (they are differentiated by the complex step): {exc}"
            ) from exc
        made = event._complex = (g, a)
    return made


@numba.njit(cache=False)  # specialised on each event's condition
def condition_derivatives(gc, u, t, p):
    """``(g_u (n,), g_t, g_p (len(p),))`` of the condition at ``(u, t, p)`` by the complex
    step (``gc``: its complex version)."""
    n, m = u.shape[0], p.shape[0]
    uc = u.astype(np.complex128)
    pc = p.astype(np.complex128)
    gu = np.empty(n)
    gp = np.empty(m)
    for j in range(n):
        uc[j] = u[j] + 1j * H
        gu[j] = (gc(uc, t + 0j, pc) + 0j).imag / H
        uc[j] = u[j]
    gt = (gc(uc, t + 1j * H, pc) + 0j).imag / H
    for j in range(m):
        pc[j] = p[j] + 1j * H
        gp[j] = (gc(uc, t + 0j, pc) + 0j).imag / H
        pc[j] = p[j]
    return gu, gt, gp


@numba.njit(cache=False)  # specialised on each event's affect
def affect_jacobian(ac, u, t, p):
    """The affect's Jacobian ``(n, n + 1 + len(p))`` at ``(u, t, p)``, columns ``(a_u, a_t,
    a_p)``, by the complex step (``ac``: its complex version)."""
    n, m = u.shape[0], p.shape[0]
    uc = np.empty(n, np.complex128)
    pc = p.astype(np.complex128)
    cols = np.empty((n, n + 1 + m))
    for j in range(n + 1 + m):
        for i in range(n):
            uc[i] = u[i]
        tc = t + 0j
        if j < n:
            uc[j] = u[j] + 1j * H
        elif j == n:
            tc = t + 1j * H
        else:
            pc[j - n - 1] = p[j - n - 1] + 1j * H
        ac(uc, tc, pc)
        for i in range(n):
            cols[i, j] = uc[i].imag / H
        if j > n:
            pc[j - n - 1] = p[j - n - 1]
    return cols


@numba.njit(cache=False)  # specialised on each event's functions
def _jump(gc, ac, has_affect, u, t, p, f_minus, f_plus, lam, dl_dtau, lam_out, dp_out):
    """The jump of :func:`event_jump` with the complex-step derivatives of the condition
    ``gc`` and the affect ``ac`` (the complex versions); writes ``lambda-`` into ``lam_out``
    and the event's part of dL/dp into ``dp_out``. Returns ``(D, scale)``: the condition's
    rate of change at the event and the size of its terms (the caller refuses a tangential
    event before using the outputs)."""
    n, m = u.shape[0], p.shape[0]
    gu, gt, gp = condition_derivatives(gc, u, t, p)
    D = gt
    scale = abs(gt)
    for i in range(n):
        D += gu[i] * f_minus[i]
        scale += abs(gu[i] * f_minus[i])
    mu = dl_dtau / D
    if not has_affect:  # the solution is unchanged: only the time itself is in the loss
        for i in range(n):
            lam_out[i] = lam[i] - mu * gu[i]
        for j in range(m):
            dp_out[j] = -mu * gp[j]
        return D, scale
    cols = affect_jacobian(ac, u, t, p)
    # w = a_u f- + a_t - f+;  mu += w . lambda+ / D
    wl = 0.0
    for i in range(n):
        wi = cols[i, n] - f_plus[i]
        for k in range(n):
            wi += cols[i, k] * f_minus[k]
        wl += wi * lam[i]
    mu += wl / D
    for i in range(n):
        acc = -mu * gu[i]
        for k in range(n):
            acc += cols[k, i] * lam[k]
        lam_out[i] = acc
    for j in range(m):
        acc = -mu * gp[j]
        for k in range(n):
            acc += cols[k, n + 1 + j] * lam[k]
        dp_out[j] = acc
    return D, scale


def _jump_of(event):
    """:func:`_jump` bound to the event's complex functions (compiled once per event: passed
    as arguments, numba would type the two functions on every call, ~0.1 ms)."""
    made = getattr(event, "_jump", None)
    if made is None:
        gc, ac = _complex_versions(event)
        has_affect = ac is not None
        ac = ac if has_affect else gc

        @numba.njit(cache=False)
        def made(u, t, p, f_minus, f_plus, lam, dl_dtau, lam_out, dp_out):
            return _jump(
                gc, ac, has_affect, u, t, p, f_minus, f_plus, lam, dl_dtau, lam_out, dp_out
            )

        event._jump = made
    return made


def event_jump(event, which, t, u_minus, f_minus, f_plus, p, lam_plus, dl_dtau=0.0):
    """The adjoint's jump at an event (see the module's docstring): ``(lambda-, the event's
    part of dL/dp)`` from ``lambda+``, the adjoint just after it; ``dl_dtau``: the derivative
    of a loss on the event's time (:class:`~scichains.adjoint.EventTimeLoss`)."""
    jump = _jump_of(event)
    lam_minus = np.empty_like(lam_plus)
    dp = np.empty_like(p)
    try:
        D, scale = jump(
            u_minus, float(t), p, f_minus, f_plus, lam_plus, float(dl_dtau), lam_minus, dp
        )
    except Exception as exc:  # noqa: BLE001 - reported in words
        raise TypeError(
            f"the condition or the affect of events[{which}] could not be differentiated "
            f"(complex step) at t = {t!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if not np.isfinite(D) or abs(D) <= 1e-12 * scale or scale == 0.0:
        raise ValueError(
            f"events[{which}] at t = {t!r} is tangential (the condition's rate of change there is "
            f"{D!r}): its time has no derivative"
        )
    return lam_minus, dp


def event_cuts(plan, dl_dtau=None):
    """Where the discrete adjoint must apply an event's jump: a list of ``(L, R, event index,
    dL/dtau)`` in the order of the solve. ``L``: the stored entry of the state at the event
    (before the affect), ``R``: after it (``L + 1`` for an event with an affect; ``L`` for an
    event without one whose time is in the loss). ``dl_dtau``: per recorded event, the loss's
    derivative with respect to its time (None: none). Refuses what it cannot differentiate."""
    tb = plan.events.table
    count = int(tb.state[0])
    m = int(plan.stats[0])
    ts = plan.ts
    times, which = tb.times[:count], tb.which[:count]
    out = []
    start = 0
    for r in range(count):
        i = int(which[r])
        c = 0.0 if dl_dtau is None else float(dl_dtau[r])
        if tb.has_affect[i] == 0 and c == 0.0:
            continue  # nothing moves with it
        t = times[r]
        refuse_simultaneous(times, which, t)
        L = start
        if tb.has_affect[i]:
            while L + 1 < m and not (ts[L] == t and ts[L + 1] == t):
                L += 1
            R = L + 1
        else:
            while L < m and ts[L] != t:
                L += 1
            R = L
        if R >= m:
            raise RuntimeError(f"events[{i}] at t = {t!r} is not among the stored steps")
        out.append((L, R, i, c))
        start = R
    return out


def refuse_simultaneous(times, which, t) -> None:
    """``ValueError`` when several of the recorded events (``times``, ``which``) happen at
    ``t``: the gradient through simultaneous events is not defined."""
    if np.count_nonzero(times == t) > 1:
        raise ValueError(
            f"events at t = {t!r} happen together (events "
            f"{sorted(int(j) for j in which[times == t])}); the gradient through simultaneous "
            "events is not defined"
        )


def event_time_loss(plan, event_loss):
    """``(value, dL/dtau per recorded event)`` of ``event_loss`` (an
    :class:`~scichains.adjoint.EventTimeLoss`) after a solve of ``plan``."""
    tb = plan.events.table
    count = int(tb.state[0])
    return records_time_loss(tb.times[:count], tb.which[:count], event_loss)


def records_time_loss(times, which, event_loss):
    """``(value, dL/dtau per record)`` of ``event_loss`` on the recorded events ``times``
    (in the order they happened) of events ``which``."""
    mine = np.flatnonzero(which == event_loss.event)
    value, grad = event_loss.value_and_grad(times[mine])
    dl_dtau = np.zeros(times.size)
    dl_dtau[mine[: grad.size]] = grad
    return value, dl_dtau


def check_event_options(prob, events, event_loss) -> None:
    """``ValueError`` for an event-time loss naming an event that is not there;
    ``TypeError`` for events with a mass matrix (not supported)."""
    if event_loss is not None and not 0 <= event_loss.event < len(events):
        raise ValueError(
            f"{event_loss!r} names events[{event_loss.event}]; there are {len(events)} events"
        )
    if prob.mass_matrix is not None:
        raise TypeError("gradients through events with a mass matrix are not supported yet")


def cut_off(ended: float):
    """Raise :class:`~scichains.adjoint.UndefinedLoss`: a terminal event ended the solve at
    ``ended``, before save times the loss reads."""
    from ._loss import UndefinedLoss

    raise UndefinedLoss(
        f"a terminal event ended the solve at t = {ended!r}, before save times the loss reads "
        "(a terminal event's loss reads the solution up to the event: save times before it, "
        "or an EventTimeLoss)"
    )


def sweep_through_events(method, p, dp, du0, dl_dtau, run_piece):
    """The discrete adjoint of ``method`` (after its forward solve) in pieces between the
    events that move the loss, each event's jump (:func:`event_jump`) applied between them;
    writes dL/dp into ``dp`` and dL/du0 into ``du0``. ``run_piece(lo, hi, save_pos,
    save_inner, save_w, dl_du, pbar, ubar) -> code`` runs the family's compiled sweep over the
    stored entries ``lo..hi`` (the save arrays relative to ``lo``), writing ``pbar`` and the
    adjoint at entry ``lo`` into ``ubar``."""
    plan = method.plan
    events = plan.events.events
    cuts = event_cuts(plan, dl_dtau)
    pos, inner, w, dl = plan.save_pos, plan.save_inner, plan.save_w, method._dl_du
    # each piece's saves (a contiguous run of them: sorted by entry, inner before the entry's
    # own) with room for the adjoint entering at its last entry
    N = pos.size
    spos = np.empty(N + 1, dtype=np.int64)
    sin = np.zeros(N + 1, dtype=np.bool_)
    sw = np.zeros((N + 1, w.shape[1]))
    sdl = np.empty((N + 1, dl.shape[1]))
    dp[:] = 0.0
    pbar = np.empty_like(dp)
    lam = None  # the adjoint at the end of the piece being swept (after its event)
    hi = int(plan.stats[0]) - 1
    shared_hi = False  # the piece's last entry is also the next piece's first
    end = N
    for piece in range(len(cuts), -1, -1):
        lo = cuts[piece - 1][1] if piece > 0 else 0
        # a save inside the step ending at lo belongs to the piece before; a save at a
        # shared last entry to the piece after
        start = int(np.searchsorted(pos, lo, side="left"))
        while start < end and pos[start] == lo and inner[start]:
            start += 1
        stop = end
        if shared_hi:
            while stop > start and pos[stop - 1] == hi and not inner[stop - 1]:
                stop -= 1
        k = stop - start
        spos[:k] = pos[start:stop] - lo
        sin[:k] = inner[start:stop]
        sw[:k] = w[start:stop]
        sdl[:k] = dl[start:stop]
        if lam is not None:  # enters at the piece's last entry
            spos[k], sin[k], sdl[k] = hi - lo, False, lam
            sw[k] = 0.0
            k += 1
        code = run_piece(lo, hi, spos[:k], sin[:k], sw[:k], sdl[:k], pbar, du0)
        raise_sweep_failure(code, method.prob, p, method._fail, "adjoint sweep: ")
        dp += pbar
        if piece == 0:
            break
        L, R, i, dl_dt = cuts[piece - 1]
        t, u, f_minus, f_plus = plan.ts[L], plan.us[L], plan.fs[L], plan.fs[R]
        lam, dp_event = event_jump(events[i], i, t, u, f_minus, f_plus, p, du0, dl_dt)
        dp += dp_event
        hi, shared_hi, end = L, R == L, start


def rows(a, lo, hi):
    """``a[lo : hi + 1]``, or ``a`` itself when it is an empty store (none kept)."""
    return a[lo : hi + 1] if a.shape[0] > 0 else a


class EventGradients:
    """What a discrete-adjoint method adds for events: ``use_events``, the event-time loss in
    ``value``; the method calls :func:`sweep_through_events` when ``plan.events`` is set."""

    event_loss = None  # an EventTimeLoss (with events: use_events)

    def use_events(self, events, max_events, event_loss=None) -> None:
        """Solve with state-dependent events and differentiate through them; ``event_loss``:
        an :class:`~scichains.adjoint.EventTimeLoss` added to the loss."""
        self._check_event_loss(events, event_loss)
        self.plan.events = EventPlan(events, self.prob, max_events)
        self.event_loss = event_loss

    def _check_event_loss(self, events, event_loss) -> None:
        check_event_options(self.prob, events, event_loss)

    def value(self, loss, p, u0):
        value = super().value(loss, p, u0)
        if self.event_loss is not None:
            value += event_time_loss(self.plan, self.event_loss)[0]
        return value

    def event_sweep(self, value, p, dp, du0, run_piece):
        """The sweep through the events (after the forward solve and the solution loss):
        ``value`` plus the event-time loss."""
        dl_dtau = None
        if self.event_loss is not None:
            extra, dl_dtau = event_time_loss(self.plan, self.event_loss)
            value += extra
        sweep_through_events(self, p, dp, du0, dl_dtau, run_piece)
        return value
