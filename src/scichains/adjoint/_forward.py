"""Forward sensitivities: du/d(p, u0) integrated alongside u.

The augmented state is ``y = [u, S]`` with ``S = du/d(p, u0)`` (``n x P``, ``P = len(p) + n``,
row-major), ``dS/dt = (df/du) S + [df/dp, 0]`` and ``S(t0) = [0, I]``. The Jacobian rows come
from ``n`` vjps with unit vectors, so any problem with a vjp (generated or hand-written, with
or without a network) has forward sensitivities. The augmented right-hand side is one cached
C-callable handed to the ordinary compiled stepper, so saving, doses (``S`` is continuous
across an additive dose) and step-size control (over ``u`` and ``S``) are the solver's own.

The augmented parameter vector carries what that right-hand side needs: the problem's ``p``
first (so that an event's condition reads it where it expects it), scratch for the Jacobian
(so the right-hand side allocates nothing), and a header at the end ``[f address, vjp
address, n, len(p)]`` (the addresses stored bit-for-bit).

Events (:func:`augmented_event`): the condition reads ``u = y[:n]``; the affect applies the
user's affect to ``u`` and the sensitivities' jump to ``S`` (the forward form of the
event-time correction in ``adjoint/_events.py``): with ``dtau = -(grad_u g . S- + [g_p, 0]) /
D``, ``D = grad_u g . f- + g_t``, ``w = a_u f- + a_t - f+``,

    S+ = a_u S- + [a_p, 0] + w dtau

(the derivatives of ``g`` and ``a`` by the complex step, as the discrete adjoint takes them).
An event without an affect leaves ``u`` and ``S`` as they are. A loss on the events' times
adds ``dL/dtau`` times the row ``dtau/d(p, u0)`` of each recorded event
(:func:`event_time_rows`, from the state and sensitivities recorded there).

:class:`ForwardMethod` is the sensitivity method (``adjoint._methods``) built on these.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numba
import numpy as np

from ..nn._chain import ChainKernel
from ..ode._abi import NO_NETWORK, RHS_SIGNATURE, LazyCfunc, rhs_from_address, vjp_from_address
from ..ode._events import EventPlan
from ..ode._plan import check_run, run_plan
from ..ode._steppers import STATS_SIZE
from ._discrete import find_save_positions
from ._events import (
    affect_jacobian,
    check_event_options,
    condition_derivatives,
    event_time_loss,
)
from ._method_base import _RK

HEADER = 4


def _augmented(dy, y, pa, t, k):
    L = pa.shape[0]
    head = pa[L - HEADER : L - HEADER + 2].view(np.int64)
    f = rhs_from_address(head[0])
    vjp = vjp_from_address(head[1])
    n = np.int64(pa[L - 2])
    npar = np.int64(pa[L - 1])
    P = npar + n
    p = pa[:npar]
    s0 = npar
    J = pa[s0 : s0 + n * (n + npar)]  # row i: [df_i/du, df_i/dp]
    e = pa[s0 + n * (n + npar) : s0 + n * (n + npar) + n]
    u = y[:n]
    if f(dy[:n], u, p, t, k) != 0:
        return 1
    for i in range(n):
        for j in range(n):
            e[j] = 0.0
        e[i] = 1.0
        r = i * (n + npar)
        if vjp(e, u, p, t, k, J[r : r + n], J[r + n : r + n + npar]) != 0:
            return 1
    for i in range(n):
        r = i * (n + npar)
        out = dy[n + i * P : n + (i + 1) * P]
        for j in range(npar):
            out[j] = J[r + n + j]
        for j in range(npar, P):
            out[j] = 0.0
        for m in range(n):
            jim = J[r + m]
            if jim != 0.0:
                srow = y[n + m * P : n + (m + 1) * P]
                for j in range(P):
                    out[j] += jim * srow[j]
    return 0


augmented_rhs = LazyCfunc(RHS_SIGNATURE, _augmented)
"""The augmented right-hand side (``augmented_rhs.get()``: a C-callable of RHS_SIGNATURE,
compiled, or loaded from numba's cache, the first time forward sensitivities run rather than
whenever ``scichains.adjoint`` is imported)."""


def augmented_params(f_address: int, vjp_address: int, n: int, p: np.ndarray) -> np.ndarray:
    """The augmented parameter vector: ``p``, scratch, header."""
    npar = p.size
    pa = np.zeros(npar + n * (n + npar) + n + HEADER)
    pa[-HEADER:-2].view(np.int64)[:] = (f_address, vjp_address)
    pa[-2] = n
    pa[-1] = npar
    pa[:npar] = p
    return pa


def augmented_u0(u0: np.ndarray, npar: int) -> np.ndarray:
    """``[u0, S0]`` with ``S0 = [0, I]``."""
    n = u0.size
    P = npar + n
    y0 = np.zeros(n + n * P)
    y0[:n] = u0
    S = y0[n:].reshape(n, P)
    S[:, npar:] = np.eye(n)
    return y0


def augmented_event(event, network: bool = False):
    """The :class:`~scichains.ode.Event` of the augmented system ``[u, S]`` for ``event``
    (made once per event and kind; compiling its affect takes a few seconds). ``network``:
    the problem's right-hand side reads a network kernel, which the affect (``a(y, t, pa,
    k)``) hands it."""
    made = getattr(event, "_forward_event_k" if network else "_forward_event", None)
    if made is not None:
        return made
    from ..ode import Event
    from ._events import _complex_versions

    g = event.condition

    @numba.njit(cache=False)
    def condition(y, t, pa):
        L = pa.shape[0]
        return g(y[: np.int64(pa[L - 2])], t, pa[: np.int64(pa[L - 1])])

    affect = None
    if event.affect is not None:
        gc, ac = _complex_versions(event)
        a = event.affect

        if network:

            @numba.njit(cache=False)
            def affect(y, t, pa, k):
                _jump_sensitivities(gc, ac, a, y, t, pa, k)

        else:

            @numba.njit(cache=False)
            def affect(y, t, pa):
                _jump_sensitivities(gc, ac, a, y, t, pa, _no_network())

    made = Event(condition, affect, event.direction, event.terminal, event.interp_points)
    if network:
        made._takes_kernel = True  # (ode._events passes the kernel to such an affect)
        made._compiled = True  # an internal affect, not of the user's a(u, t, p) form
        event._forward_event_k = made
    else:
        event._forward_event = made
    return made


@numba.njit(cache=False)
def _header(pa):
    """``(right-hand side address, n, len(p))`` from the augmented parameters' header."""
    L = pa.shape[0]
    address = pa[L - HEADER : L - HEADER + 2].view(np.int64)[0]
    return address, np.int64(pa[L - 2]), np.int64(pa[L - 1])


@numba.njit(cache=False)
def _no_network():
    """The kernel a right-hand side without a network is handed (it does not read it)."""
    return ChainKernel(
        np.zeros((1, 32), np.int64), np.zeros((1, 2)), np.zeros(8, np.int64), np.zeros(5),
        np.zeros(1, np.int64),
    )  # fmt: skip


@numba.njit(cache=False)
def _jump_sensitivities(gc, ac, a, y, t, pa, kern):
    address, n, m = _header(pa)
    f = rhs_from_address(address)
    P = m + n
    p = pa[:m]
    u = y[:n]
    f_minus = np.empty(n)
    f_plus = np.empty(n)
    if f(f_minus, u, p, t, kern) != 0:
        f_minus[:] = np.nan
    gu, gt, gp = condition_derivatives(gc, u, t, p)
    cols = affect_jacobian(ac, u, t, p)
    D = gt
    for i in range(n):
        D += gu[i] * f_minus[i]
    a(u, t, p)  # the state jumps
    if f(f_plus, u, p, t, kern) != 0:
        f_plus[:] = np.nan
    w = np.empty(n)
    for i in range(n):
        wi = cols[i, n] - f_plus[i]
        for k in range(n):
            wi += cols[i, k] * f_minus[k]
        w[i] = wi
    S = y[n : n + n * P]
    col = np.empty(n)
    for j in range(P):
        dtau = gp[j] if j < m else 0.0
        for i in range(n):
            col[i] = S[i * P + j]
            dtau += gu[i] * col[i]
        dtau = -dtau / D  # D = 0 (a tangential event): not finite, refused by the caller
        for i in range(n):
            acc = w[i] * dtau
            if j < m:
                acc += cols[i, n + 1 + j]
            for k in range(n):
                acc += cols[i, k] * col[k]
            S[i * P + j] = acc


def event_time_rows(event, times, states, pa, n, kernel=None):
    """``dtau/d(p, u0)`` (one row of ``len(p) + n`` per event) of the events of ``event``
    recorded at ``times`` with the augmented states ``states`` (before the affect);
    ``kernel``: the network kernel the right-hand side reads (None: none)."""
    rows_of = getattr(event, "_forward_time_rows", None)
    if rows_of is None:
        from ._events import _complex_versions

        gc = _complex_versions(event)[0]

        @numba.njit(cache=False)
        def rows_of(times, states, pa, out, kern):
            for r in range(times.shape[0]):
                _time_row(gc, states[r], times[r], pa, out[r], kern)

        event._forward_time_rows = rows_of
    out = np.empty((len(times), int(pa[-1]) + n))
    kern = _no_network() if kernel is None else kernel
    rows_of(np.ascontiguousarray(times), np.ascontiguousarray(states), pa, out, kern)
    return out


@numba.njit(cache=False)
def _time_row(gc, y, t, pa, out, kern):
    address, n, m = _header(pa)
    f = rhs_from_address(address)
    P = m + n
    p = pa[:m]
    u = y[:n].copy()
    f_minus = np.empty(n)
    if f(f_minus, u, p, t, kern) != 0:
        f_minus[:] = np.nan
    gu, D, gp = condition_derivatives(gc, u, t, p)
    for j in range(n):
        D += gu[j] * f_minus[j]
    S = y[n : n + n * P]
    for j in range(P):
        acc = gp[j] if j < m else 0.0
        for i in range(n):
            acc += gu[i] * S[i * P + j]
        out[j] = -acc / D


class ForwardMethod(_RK):
    """:class:`ForwardSensitivity`: the state and its sensitivities ``du/dp``, ``du/du0``
    integrated together (an augmented system of ``n (1 + len(p) + n)`` components)."""

    event_loss = None  # an EventTimeLoss (with events: use_events)

    def __init__(self, prob, loss, saveat, solver, *args):
        super().__init__(prob, loss, saveat, solver, *args)
        n = prob.u0.size
        width = n * (1 + prob.p.size + n)
        cap = self.plan.ts.size
        self._aug = replace(
            self.plan,
            ts=np.empty(cap),
            us=np.empty((cap, width)),
            fs=np.empty((cap, width)),
            stats=np.zeros(STATS_SIZE, dtype=np.int64),
            kstore=np.zeros((0, solver.stages, width)),
        )
        self._pa = augmented_params(prob.f_address, prob.vjp_address, n, prob.p)
        self._pos = np.zeros(self.saveat.size, dtype=np.int64)

    def use_events(self, events, max_events, event_loss=None) -> None:
        """Solve with state-dependent events; the sensitivities jump at each (see
        ``adjoint/_forward.py``)."""
        check_event_options(self.prob, events, event_loss)
        self.event_loss = event_loss
        network = self.prob.kernel is not NO_NETWORK
        self.plan.events = EventPlan(events, self.prob, max_events)
        y0 = augmented_u0(self.prob.u0, self.prob.p.size)
        shape = SimpleNamespace(u0=y0, tspan=self.prob.tspan, p=self._pa)
        made = [augmented_event(e, network) for e in events]
        self._aug.events = EventPlan(made, shape, max_events)
        # a condition or an affect that raises is reported as the user's own (the augmented
        # ones read a layout of p the user's p does not have)
        self._aug.events.wrapped = (events, self.prob.u0.size)

    def value_and_grad(self, loss, p, u0):
        aug = self._aug
        n, npar = u0.size, p.size
        self._pa[:npar] = p
        code = run_plan(aug, augmented_u0(u0, npar), self._pa, augmented_rhs.get().address)
        check_run(aug, code, p)  # reproduces a user error from the state part of [u, S]
        m = int(aug.stats[0])
        if not find_save_positions(aug.ts, m, self.saveat, self._pos):
            if aug.events is not None and any(e.terminal for e in aug.events.events):
                from ._loss import UndefinedLoss

                raise UndefinedLoss(
                    f"a terminal event ended the solve at t = {float(aug.ts[m - 1])!r}, before "
                    "save times the loss reads"
                )
            raise RuntimeError("a save time is not among the stored steps")
        y = aug.us[self._pos]
        if aug.events is not None and not np.all(np.isfinite(y[:, n:])):
            raise ValueError(
                "the sensitivities are not finite after an event: an event whose condition "
                "crosses zero tangentially (its rate of change 0 there) has no time derivative"
            )
        value = loss.value_and_grad(self.saveat, y[:, :n], self._dl_du)
        S = y[:, n:].reshape(-1, n, npar + n)
        g = np.einsum("mi,mij->j", self._dl_du, S)
        if self.event_loss is not None:
            extra, dl_dtau = event_time_loss(aug, self.event_loss)
            value += extra
            tb = aug.events.table
            mine = np.flatnonzero(dl_dtau != 0.0)
            if mine.size:
                event = self.plan.events.events[self.event_loss.event]  # the user's
                kernel = None if self.prob.kernel is NO_NETWORK else self.prob.kernel
                rows = event_time_rows(event, tb.times[mine], tb.states[mine], self._pa, n, kernel)
                if not np.all(np.isfinite(rows)):
                    raise ValueError(
                        f"events[{self.event_loss.event}] is tangential where it happens (its "
                        "condition's rate of change 0): its time has no derivative"
                    )
                g += dl_dtau[mine] @ rows
        return value, g[:npar].copy(), g[npar:].copy()

    def value(self, loss, p, u0):
        value = super().value(loss, p, u0)
        if self.event_loss is not None:
            value += event_time_loss(self.plan, self.event_loss)[0]
        return value

    def stats(self) -> dict:
        s = self._aug.stats
        return {"steps": int(s[2]), "rejected": int(s[3]), "f_calls": int(s[1])}
