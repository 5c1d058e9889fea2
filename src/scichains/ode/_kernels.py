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

from .._jit import FLAGS
from ..nn._chain import ChainKernel
from ._abi import (
    CONTROL_TYPE,
    F64,
    KERNEL_TYPE,
    STOPS_TYPE,
    STORE_TYPE,
    call_rhs,
    record_failure,
    rhs_function,
    store_point,
)
from ._codes import DT_UNDERFLOW, GROW, MAX_STEPS, NONFINITE, RHS_ERROR, SUCCESS
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


class Tableau(NamedTuple):
    """An explicit Runge-Kutta method as the kernels take it."""

    A: np.ndarray  # (s, s) float64, strictly lower triangular
    b: np.ndarray  # (s,) weights
    c: np.ndarray  # (s,) nodes
    btilde: np.ndarray  # (s,) error weights (b - b of the embedded method); zeros if fixed
    ctrl_order: int  # error order + 1 (the controller's); 0 for a fixed step
    fsal: bool  # the last stage is f at the step's end


_F2 = types.float64[:, ::1]
TABLEAU_TYPE = types.NamedTuple((_F2, F64, F64, F64, types.int64, types.boolean), Tableau)

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

LEAN_STEP_SIG = types.int64(types.uint64, *_STEP_SIG.args[1:])
"""``integrate`` with a :data:`LEAN_RHS_SIGNATURE` right-hand side (``faddr`` unsigned):
compiled on first use by :func:`ensure_lean_integrate` (the ensembles' form)."""


@numba.njit(_STEP_SIG, **FLAGS)
def integrate(faddr, k, u0, p, t0, t1, method, control, stops, store):
    """Integrate from ``t0`` to ``t1`` (either direction) with the explicit method ``method``
    (:class:`Tableau`), storing every step in ``store`` (:class:`StepStore`).

    Returns a code (SUCCESS, MAX_STEPS, DT_UNDERFLOW, NONFINITE, RHS_ERROR, GROW). Jumps at a
    stop are applied when the stepper lands on it; the stored state there is the value after
    the jumps. RHS_ERROR: the right-hand side returned nonzero (raised); ``store.fail`` holds
    the time and state of that call. GROW: the step buffers are full; the stepper's state is
    in ``stats`` and ``carry``: copy the stored entries into larger buffers and call again
    with ``stats[6] = 1`` to go on exactly where it stopped.
    """
    A, b, c, btilde, ctrl_order, fsal = method
    rtol, atol, dt0, dtmin, max_steps, group = control
    stops, jump_index, jump_count, jump_state, jump_amount = stops
    ts, us, fs, stats, kstore, astore, carry, fail = store
    f = rhs_function(faddr)
    n = u0.shape[0]
    s = b.shape[0]
    R = astore.shape[2]
    acap = astore.shape[0]
    cap = ts.shape[0]
    acur0 = np.empty(R)  # k.work[:R] after the evaluation of stage 0 of the next step
    work = k.work
    direction = 1.0 if t1 >= t0 else -1.0
    K = np.empty((s, n))
    u = u0.copy()
    unew = np.empty(n)
    tmp = np.empty(n)
    err = np.empty(n)
    adaptive = ctrl_order > 0
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
            K[0, i] = fs[nstore - 1, i]
        h = carry[0]
        qold = carry[1]
        last_nonfinite = carry[2] != 0.0
        for i in range(R):
            acur0[i] = carry[3 + i]
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
        while stop_i < stops.shape[0] and stops[stop_i] == t0:
            j0 = jump_index[stop_i]
            if j0 >= 0:
                for j in range(j0, j0 + jump_count[stop_i]):
                    u[jump_state[j]] += jump_amount[j]
            stop_i += 1
        nf += 1
        if call_rhs(f, K[0], u, p, t, k) != 0:
            record_failure(fail, t, u)
            code = RHS_ERROR
        for i in range(R):
            acur0[i] = work[i]
        store_point(ts, us, fs, 0, t, u, K[0])
        nstore = 1
        # step size: given, or Hairer & Wanner's initial guess (Solving ODEs I, II.4)
        if dt0 > 0.0:
            h = dt0
        elif code == SUCCESS:
            h0, d1 = initial_probe(u, K[0], abs(t1 - t0), direction, rtol, atol, tmp)
            failed = call_rhs(f, err, tmp, p, t + direction * h0, k) != 0
            h = initial_finish(u, K[0], err, h0, d1, rtol, atol, ctrl_order)
            nf += 1
            if failed:
                record_failure(fail, t + direction * h0, tmp)
                code = RHS_ERROR
        h = abs(h)
    beta1, beta2 = pi_gains(ctrl_order)
    while code == SUCCESS and direction * (t1 - t) > 0.0:
        if steps >= max_steps:
            code = MAX_STEPS
            break
        if nstore + 3 > cap or (kstore.shape[0] > 0 and nstore + 3 > kstore.shape[0]):
            # room for a step, a jump's two entries and the proposal after them: grow
            code = GROW
            break
        # the next time we must land on (the last stop is t1)
        target = stops[stop_i]
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
        hs = direction * h_try
        for st in range(1, s):
            for i in range(n):
                acc = 0.0
                for j in range(st):
                    acc += A[st, j] * K[j, i]
                tmp[i] = u[i] + hs * acc
            nf += 1
            if nstore < acap:
                # the network works straight in the store's slot for this step and stage
                # (R is the whole work buffer), where the adjoint sweep will read it
                slot = ChainKernel(k.spec, k.fspec, k.meta, astore[nstore, st], k.samples)
                failed = call_rhs(f, K[st], tmp, p, t + c[st] * hs, slot) != 0
            else:
                failed = call_rhs(f, K[st], tmp, p, t + c[st] * hs, k) != 0
            if failed:
                record_failure(fail, t + c[st] * hs, tmp)
                code = RHS_ERROR
                break
        if code != SUCCESS:
            break
        for i in range(n):
            acc = 0.0
            for j in range(s):
                acc += b[j] * K[j, i]
            unew[i] = u[i] + hs * acc
        steps += 1
        if adaptive:
            for i in range(n):
                acc = 0.0
                for j in range(s):
                    acc += btilde[j] * K[j, i]
                err[i] = hs * acc
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
        naccept += 1
        if kstore.shape[0] > 0:
            for st in range(s):
                for i in range(n):
                    kstore[nstore, st, i] = K[st, i]
        if nstore < acap:
            for i in range(R):
                astore[nstore, 0, i] = acur0[i]
        accepted_at = nstore
        t = target if landing else t + hs
        for i in range(n):
            u[i] = unew[i]
        # the derivative at the new point, for the next step and the dense output
        if fsal:
            for i in range(n):
                K[0, i] = K[s - 1, i]
            if accepted_at < acap:
                for i in range(R):
                    acur0[i] = astore[accepted_at, s - 1, i]
        else:
            nf += 1
            if call_rhs(f, K[0], u, p, t, k) != 0:
                record_failure(fail, t, u)
                code = RHS_ERROR
            for i in range(R):
                acur0[i] = work[i]
        if landing and code == SUCCESS:
            j0 = jump_index[stop_i]
            if j0 >= 0:
                # keep the left limit too, so that dense output never interpolates across
                # the discontinuity; then jump and restart from the right limit
                store_point(ts, us, fs, nstore, t, u, K[0])
                nstore += 1
                for j in range(j0, j0 + jump_count[stop_i]):
                    u[jump_state[j]] += jump_amount[j]
                nf += 1
                if call_rhs(f, K[0], u, p, t, k) != 0:
                    record_failure(fail, t, u)
                    code = RHS_ERROR
                for i in range(R):
                    acur0[i] = work[i]
            stop_i += 1
        store_point(ts, us, fs, nstore, t, u, K[0])
        nstore += 1
        # a landing step is short: keep the controller's proposal for the next one
        h = h_next if not landing else max(h_next, h)
    stats[0] = nstore
    stats[1] = nf
    stats[2] = naccept
    stats[3] = nreject
    stats[4] = steps
    stats[5] = stop_i
    carry[0] = h
    carry[1] = qold
    carry[2] = 1.0 if last_nonfinite else 0.0
    for i in range(R):
        carry[3 + i] = acur0[i]
    ts[nstore] = h  # the step the controller would try next (a continuation's dt0)
    return code


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
    """
    s = P.shape[0]
    deg = P.shape[1]
    n = us.shape[1]
    keep = W.shape[0] > 0
    w = np.empty(s)
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
        for st in range(s):
            acc = 0.0
            tp = 1.0
            for d in range(deg):
                tp *= th
                acc += P[st, d] * tp
            w[st] = acc
        for c in range(n):
            acc = 0.0
            for st in range(s):
                acc += w[st] * kstore[j, st, c]
            out[i, c] = us[j - 1, c] + h * acc
        if keep:
            for st in range(s):
                W[i, st] = w[st]
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


def ensure_lean_integrate() -> None:
    """Compile (or load from the cache) :func:`integrate` for lean right-hand sides: the one
    signature added to the kernel's own after import (its decorator's signature is compiled
    at import and disables compilation for any other argument types)."""
    with _LEAN_LOCK:
        if tuple(LEAN_STEP_SIG.args) in integrate.overloads:
            return
        integrate.disable_compile(False)
        try:
            integrate.compile(LEAN_STEP_SIG)
        finally:
            integrate.disable_compile(True)
