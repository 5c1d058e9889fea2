"""The compiled stepping loop of the explicit Runge-Kutta solvers.

One kernel, compiled once per machine (numba's cache), serves every problem: the right-hand
side arrives as a first-class function value of the fixed type :data:`~scichains.ode._abi.RHS_TYPE`,
called indirectly (~1-3 ns per call), and the method as tableau arrays. The network kernels
(``scichains.nn.ChainKernel``) travel with it, so a right-hand side can call
``nn.chain_forward`` on them without Python in between.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numba
import numpy as np
from numba import types

from ..._jit import FLAGS
from ...nn._chain import ChainKernel
from .._abi import (
    CONTROL_TYPE,
    EVENT_STOPS_TYPE,
    F64,
    KERNEL_TYPE,
    STOPS_TYPE,
    STORE_TYPE,
    call_rhs,
    record_failure,
)
from .._codes import RHS_ERROR
from .._loop import PROCEED, register_family, run_loop


class Tableau(NamedTuple):
    """An explicit Runge-Kutta method as the kernels take it."""

    A: np.ndarray  # (s, s) float64, strictly lower triangular
    b: np.ndarray  # (s,) weights
    c: np.ndarray  # (s,) nodes
    btilde: np.ndarray  # (s,) error weights (b - b of the embedded method); zeros if fixed
    ctrl_order: int  # error order + 1 (the controller's); 0 for a fixed step
    fsal: bool  # the last stage is f at the step's end


class WatchedTableau(NamedTuple):
    """:class:`Tableau` for the automatic method (``ode._auto``): the same method, compiled with
    the switch watch and the shared stage store. A type of its own so that a plain explicit
    solve does not carry them: with them in the one kernel, Tsit5 on Lotka-Volterra took ~14%
    more time per step (1.24 against 1.09 us, AMD EPYC Zen 3), although the watch was off."""

    A: np.ndarray
    b: np.ndarray
    c: np.ndarray
    btilde: np.ndarray
    ctrl_order: int
    fsal: bool


_F2 = types.float64[:, ::1]
_TABLEAU_FIELDS = (_F2, F64, F64, F64, types.int64, types.boolean)
TABLEAU_TYPE = types.NamedTuple(_TABLEAU_FIELDS, Tableau)
WATCHED_TABLEAU_TYPE = types.NamedTuple(_TABLEAU_FIELDS, WatchedTableau)

_STEP_SIG = types.int64(
    types.int64,  # address of the right-hand side (a numba.cfunc of RHS_SIGNATURE)
    KERNEL_TYPE,  # k: network kernels for f
    F64,  # u0
    F64,  # p
    types.float64,  # t0
    types.float64,  # t1
    TABLEAU_TYPE,
    CONTROL_TYPE,
    STOPS_TYPE,
    STORE_TYPE,
)

# the family's step, as the hooks of the one loop (scichains.ode._loop). ws: the stages K,
# the activations acur0, and the switch watch (ode._auto) wst: [0] steps in a row above the
# watch, [1] the last |lambda| estimate, [2] fired, [3] the watch (0: off), [4] the steps it
# needs, [5] the first row of kstore for the stages


def _workspace(method, u0, p, store, control):
    s = method.b.shape[0]
    R = store.astore.shape[2]
    K = np.empty((s, u0.shape[0]))  # the stages; K[0] = f(t, u)
    acur0 = np.empty(R)  # k.work[:R] after the evaluation of stage 0 of the next step
    wst = np.zeros(6)
    wst[3] = control.watch
    wst[4] = control.watch_steps
    wst[5] = control.row0
    return K, acur0, wst


def _current_f(method, ws):
    return ws[0][0]


def _evaluate(method, ws, f, u, p, t, k):
    K, acur0, _ = ws
    failed = call_rhs(f, K[0], u, p, t, k)
    work = k.work
    for i in range(acur0.shape[0]):
        acur0[i] = work[i]
    return failed


def _has_room(method, ws, store, nstore):
    return True


def _attempt(method, ws, f, vjp, k, u, p, t, hs, h_try, control, store, nstore, unew, err, fail):
    A, b, c, btilde, ctrl_order, fsal = method
    K, acur0, _ = ws
    astore = store.astore
    acap = astore.shape[0]
    n = u.shape[0]
    s = b.shape[0]
    calls = 0
    # err holds each stage's state (the error estimate is written after the stages)
    for st in range(1, s):
        for i in range(n):
            acc = 0.0
            for j in range(st):
                acc += A[st, j] * K[j, i]
            err[i] = u[i] + hs * acc
        calls += 1
        if nstore < acap:
            # the network works straight in the store's slot for this step and stage
            # (R is the whole work buffer), where the adjoint sweep will read it
            slot = ChainKernel(k.spec, k.fspec, k.meta, astore[nstore, st], k.samples)
            failed = call_rhs(f, K[st], err, p, t + c[st] * hs, slot) != 0
        else:
            failed = call_rhs(f, K[st], err, p, t + c[st] * hs, k) != 0
        if failed:
            record_failure(fail, t + c[st] * hs, err)
            return RHS_ERROR, 0.0, calls, False, False, -1
    for i in range(n):
        acc = 0.0
        for j in range(s):
            acc += b[j] * K[j, i]
        unew[i] = u[i] + hs * acc
    if ctrl_order > 0:
        for i in range(n):
            acc = 0.0
            for j in range(s):
                acc += btilde[j] * K[j, i]
            err[i] = hs * acc
    return PROCEED, 0.0, calls, True, False, -1


def _keep_step(method, ws, store, nstore, hs):
    K, acur0, _ = ws
    kstore = store.kstore
    astore = store.astore
    if kstore.shape[0] > 0:
        for st in range(K.shape[0]):
            for i in range(K.shape[1]):
                kstore[nstore, st, i] = K[st, i]
    if nstore < astore.shape[0]:
        for i in range(acur0.shape[0]):
            astore[nstore, 0, i] = acur0[i]


def _keep_step_watched(method, ws, store, nstore, hs):
    K, acur0, wst = ws
    kstore = store.kstore
    astore = store.astore
    s = K.shape[0]
    if kstore.shape[0] > 0:
        row0 = int(wst[5])
        for st in range(s):
            for i in range(K.shape[1]):
                kstore[nstore, row0 + st, i] = K[st, i]
        if kstore.shape[1] > s:  # a shared store (ode._auto): the other rows are zero
            for st in range(kstore.shape[1]):
                if st < row0 or st >= row0 + s:
                    for i in range(K.shape[1]):
                        kstore[nstore, st, i] = 0.0
    if nstore < astore.shape[0]:
        for i in range(acur0.shape[0]):
            astore[nstore, 0, i] = acur0[i]
    if wst[3] > 0.0:
        # the switch watch: |lambda| by Shampine's estimate from the two stages at the step's
        # end (FSAL, c[s-2] = 1): K[s-1] = f(u_new), K[s-2] = f(Y) with Y - u_new = h sum_j
        # (a_{s-2, j} - b_j) K_j; no extra calls of f
        A = method.A
        b = method.b
        h = abs(hs)
        num = 0.0
        den = 0.0
        for i in range(K.shape[1]):
            d = K[s - 1, i] - K[s - 2, i]
            num += d * d
            acc = 0.0
            for j in range(s):
                acc += (A[s - 2, j] - b[j]) * K[j, i]
            den += (h * acc) ** 2
        lam = math.sqrt(num / den) if den > 0.0 else 0.0
        wst[1] = lam
        if h * lam > wst[3]:
            wst[0] += 1.0
            if wst[0] >= wst[4]:
                wst[2] = 1.0
        else:
            wst[0] = 0.0


def _advance(method, ws, f, k, u, p, t, store, accepted_at):
    K, acur0, _ = ws
    astore = store.astore
    s = K.shape[0]
    R = acur0.shape[0]
    if method.fsal:
        for i in range(K.shape[1]):
            K[0, i] = K[s - 1, i]
        if accepted_at < astore.shape[0]:
            for i in range(R):
                acur0[i] = astore[accepted_at, s - 1, i]
        return 0, 0
    failed = call_rhs(f, K[0], u, p, t, k)
    work = k.work
    for i in range(R):
        acur0[i] = work[i]
    return 1, failed


def _jumped(method, ws):
    pass


def _propose(method, ws, h_next, h_try, adaptive):
    return h_next


def _save_carry(method, ws, carry):
    acur0 = ws[1]
    R = acur0.shape[0]
    for i in range(R):
        carry[3 + i] = acur0[i]
    carry[3 + R] = ws[2][0]
    carry[4 + R] = ws[2][1]


def _resume(method, ws, carry):
    acur0 = ws[1]
    R = acur0.shape[0]
    for i in range(R):
        acur0[i] = carry[3 + i]
    ws[2][0] = carry[3 + R]
    ws[2][1] = carry[4 + R]


def _handover(method, ws):
    return False


def _handover_watched(method, ws):
    return ws[2][2] != 0.0


register_family(
    Tableau,
    workspace=_workspace,
    current_f=_current_f,
    evaluate=_evaluate,
    has_room=_has_room,
    attempt=_attempt,
    keep_step=_keep_step,
    advance=_advance,
    jumped=_jumped,
    propose=_propose,
    save_carry=_save_carry,
    resume=_resume,
    handover=_handover,
)

register_family(
    WatchedTableau,
    workspace=_workspace,
    current_f=_current_f,
    evaluate=_evaluate,
    has_room=_has_room,
    attempt=_attempt,
    keep_step=_keep_step_watched,
    advance=_advance,
    jumped=_jumped,
    propose=_propose,
    save_carry=_save_carry,
    resume=_resume,
    handover=_handover_watched,
)


@numba.njit(_STEP_SIG, **FLAGS)
def integrate(faddr, k, u0, p, t0, t1, method, control, stops, store):
    """Integrate from ``t0`` to ``t1`` (either direction) with the explicit method ``method``
    (:class:`Tableau`), storing every step in ``store`` (:class:`~scichains.ode._abi.StepStore`):
    the one loop (:func:`scichains.ode._loop.run_loop`) with the explicit step.

    Returns a code (SUCCESS, MAX_STEPS, DT_UNDERFLOW, NONFINITE, RHS_ERROR, GROW): see
    ``run_loop``. ``store.kstore`` keeps the stages ``k_i`` of each step; ``store.astore``
    (``(acap, s, R)``, ``R = k.work.size``) each stage's network work buffer for the steps
    that fit, and ``carry`` (length ``3 + R``) the next step's first one.
    """
    return run_loop(faddr, 0, k, u0, p, t0, t1, method, control, stops, store)


_WATCHED_STEP_SIG = types.int64(*_STEP_SIG.args[:6], WATCHED_TABLEAU_TYPE, *_STEP_SIG.args[7:])


@numba.njit(**FLAGS)
def integrate_watched(faddr, k, u0, p, t0, t1, method, control, stops, store):
    """:func:`integrate` for the automatic method (``method``: :class:`WatchedTableau`): the
    switch watch of ``control`` (``watch``, ``watch_steps``: stop with SWITCH after the last
    stored step) and the stages stored at row ``control.row0`` of a store shared with the
    Rosenbrock method (the other rows zeroed). Compiled on first use
    (:func:`ensure_watched_integrate`), not at import: its cold compile (~9.5 s on an AMD EPYC
    Zen 4) was half of a cold ``import scichains.ode``, for a kernel only the automatic method
    runs."""
    return run_loop(faddr, 0, k, u0, p, t0, t1, method, control, stops, store)


@numba.njit(**FLAGS)
def interpolate_saves(ts, us, kstore, m, P, saveat, out, pos, inner, W):
    """The solution at ``saveat`` from the stored steps ``ts[:m]``, ``us[:m]`` and their
    stages ``kstore`` (the step ending at entry ``j`` has stages ``kstore[j]``), with the
    method's continuous extension ``P`` (see ``ExplicitRK.interp``).

    A save time that is a stored time takes the stored state (the right limit at a jump):
    ``pos[i]`` is that entry, ``inner[i] = False``. Otherwise it falls strictly inside the step
    ending at entry ``j``: ``pos[i] = j``, ``inner[i] = True``, ``W[i]`` the stage weights
    ``b_i(theta)`` and ``out[i] = us[j-1] + h sum_st W[i, st] kstore[j, st]``. Both are ordered
    in the direction of integration. Returns False if a save time lies beyond ``ts[m-1]``.
    ``pos``, ``inner`` and ``W`` may have length 0: only ``out`` is wanted (``solve``).
    Allocates nothing.
    """
    s = P.shape[0]
    deg = P.shape[1]
    n = us.shape[1]
    keep = W.shape[0] > 0
    direction = 1.0 if ts[m - 1] >= ts[0] else -1.0
    j = 0
    for i in range(saveat.shape[0]):
        t = saveat[i]
        while j < m and direction * (ts[j] - t) < 0.0:
            j += 1
        if j == m:
            return False
        if ts[j] == t:
            while j + 1 < m and ts[j + 1] == t:
                j += 1
            if keep:
                pos[i] = j
                inner[i] = False
                for st in range(s):
                    W[i, st] = 0.0
            for c in range(n):
                out[i, c] = us[j, c]
            continue
        h = ts[j] - ts[j - 1]
        th = (t - ts[j - 1]) / h
        for c in range(n):
            out[i, c] = 0.0
        for st in range(s):  # out[i] = sum_st b_st(th) k_st, accumulated stage by stage
            acc = 0.0
            tp = 1.0
            for d in range(deg):
                tp *= th
                acc += P[st, d] * tp
            if keep:
                W[i, st] = acc
            for c in range(n):
                out[i, c] += acc * kstore[j, st, c]
        for c in range(n):
            out[i, c] = us[j - 1, c] + h * out[i, c]
        if keep:
            pos[i] = j
            inner[i] = True
    return True


@numba.njit(**FLAGS)
def find_save_positions(ts, m, saveat, pos):
    """``pos[i]``: the last stored entry (of ``ts[:m]``) at time ``saveat[i]`` (the right limit at
    a jump). Both are ordered in the direction of integration. Returns False if one is
    missing."""
    j = 0
    for i in range(saveat.shape[0]):
        t = saveat[i]
        while j < m and ts[j] != t:
            j += 1
        if j == m:
            return False
        while j + 1 < m and ts[j + 1] == t:
            j += 1
        pos[i] = j
    return True


_LEAN_LOCK = threading.Lock()
_READY: set[str] = set()
"""The forms compiled after import so far (``"watched"``, ``"events"``, ``"watched events"``):
each solve asks for its
form, and the check against the dispatcher's overloads hashes the signature's tuple types
(~0.1 ms for the event form, measured: more than a small solve), so it is made once."""


def _ensure(form, *pairs) -> None:
    """Compile (or load from the cache) each ``(dispatcher, sig)`` of ``pairs``: signatures
    added to the kernels' own after import (their decorator's signature is compiled at import
    and disables compilation for any other argument types). ``form`` names the set, so that
    the next call returns at once."""
    if form in _READY:
        return
    with _LEAN_LOCK:
        for dispatcher, sig in pairs:
            if tuple(sig.args) in dispatcher.overloads:
                continue
            dispatcher.disable_compile(False)
            try:
                dispatcher.compile(sig)
            finally:
                dispatcher.disable_compile(True)
        _READY.add(form)


def ensure_watched_integrate() -> None:
    """:func:`integrate_watched` (the automatic method's explicit phase), compiled on first
    use."""
    _ensure("watched", (integrate_watched, _WATCHED_STEP_SIG))


EVENT_STEP_SIG = types.int64(*_STEP_SIG.args[:8], EVENT_STOPS_TYPE, *_STEP_SIG.args[9:])
EVENT_WATCHED_STEP_SIG = types.int64(
    *_WATCHED_STEP_SIG.args[:8], EVENT_STOPS_TYPE, *_WATCHED_STEP_SIG.args[9:]
)


def ensure_event_integrate() -> None:
    """:func:`integrate` for solves with events (stops with an event table), compiled on
    first use: a solve without events never compiles it."""
    _ensure("events", (integrate, EVENT_STEP_SIG))


def ensure_event_integrate_watched() -> None:
    """:func:`integrate_watched` for the automatic method's solves with events, compiled on
    first use."""
    _ensure("watched events", (integrate_watched, EVENT_WATCHED_STEP_SIG))
