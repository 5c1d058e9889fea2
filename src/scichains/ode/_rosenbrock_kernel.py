"""The compiled stepping loop of the Rosenbrock (linearly implicit) solvers.

One kernel, compiled once per machine (numba's cache), runs every Rosenbrock method
(:mod:`scichains.ode._stiff`) on every problem: the right-hand side and its vjp arrive as
addresses of C-callables (as for the explicit stepper, :mod:`scichains.ode._kernels`), the
method as arrays. Each step: the Jacobian ``J = df/du`` at ``(t, u)`` (``n`` vjp calls, one
row each, or forward differences), ``df/dt`` by a one-sided difference in ``t``, the LU
factorisation of ``W = I / (h gamma) - J`` (in place, partial pivoting:
:mod:`scichains.ode._linalg`), then one solve per stage. A rejected step keeps ``J`` and
refactors ``W`` only. Stops, doses, the PI controller, the step store and its growth are
those of the explicit stepper.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
from numba import types

from .._jit import FLAGS
from ._abi import (
    CONTROL_TYPE,
    F64,
    KERNEL_TYPE,
    STOPS_TYPE,
    STORE_TYPE,
    record_failure,
    rhs_from_address,
    store_point,
    vjp_from_address,
)
from ._codes import DT_UNDERFLOW, GROW, MAX_STEPS, NONFINITE, RHS_ERROR, SINGULAR, SUCCESS
from ._control import ACCEPT, E_FLOOR, GIVE_UP, error_norm, initial_step, judge_step, pi_gains
from ._jacobian import jacobian_into
from ._linalg import lu_factor, lu_solve_columns, transpose_into

CBRT_EPS = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
CARRY_SIZE = 5
"""``carry`` of a Rosenbrock solve: ``[h, e_old, last step non-finite, Jacobians, LU
factorisations]``."""


class RosenbrockTableau(NamedTuple):
    """A Rosenbrock method as the kernel takes it (see ``_stiff.Rosenbrock``)."""

    a: np.ndarray  # (s, s) strictly lower
    C: np.ndarray  # (s, s) strictly lower
    c: np.ndarray  # (s,)
    d: np.ndarray  # (s,)
    m: np.ndarray  # (s,)
    btilde: np.ndarray  # (s,)
    gamma: float
    ctrl_order: int  # the power of h in the error estimate; 0: fixed steps
    fsal: bool  # the last stage's f is f(t + h, u_new)
    jacobian: int  # JAC_EXACT (from the vjp) or JAC_FD


_F2 = types.float64[:, ::1]
ROS_TABLEAU_TYPE = types.NamedTuple(
    (_F2, _F2, F64, F64, F64, F64, types.float64, types.int64, types.boolean, types.int64),
    RosenbrockTableau,
)

_SIG = types.int64(
    types.int64,  # address of the right-hand side (RHS_SIGNATURE)
    types.int64,  # address of its vjp (VJP_SIGNATURE); 0 with a finite-difference Jacobian
    KERNEL_TYPE,
    F64,  # u0
    F64,  # p
    types.float64,  # t0
    types.float64,  # t1
    ROS_TABLEAU_TYPE,
    CONTROL_TYPE,
    STOPS_TYPE,
    STORE_TYPE,
)


@numba.njit(**FLAGS)  # compiled on first use (cached), not at import: one signature, _SIG
def rosenbrock_integrate(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store):
    """Integrate from ``t0`` to ``t1`` (either direction) with the Rosenbrock method
    ``method`` (:class:`RosenbrockTableau`), storing every step in ``store``
    (:class:`~scichains.ode._abi.StepStore`) exactly as the explicit stepper does; the
    stages kept in ``store.kstore`` are ``U_i / h`` (the dense output's form). A non-empty
    ``store.astore`` (shape ``(cap, n + 1, max(n, 2))``) keeps, at the entry where each step
    ends, its Jacobian ``J`` (rows ``0..n-1``), whether its ``df/dt`` was zero (``[n, 0]``:
    1.0) and the shift in ``t`` of that difference (``[n, 1]``), for the discrete adjoint.

    Returns SUCCESS, MAX_STEPS, DT_UNDERFLOW, NONFINITE, RHS_ERROR (the right-hand side or the
    vjp raised: ``fail = [t, u]`` of that call), SINGULAR (``W`` stayed singular while the step
    shrank below ``dtmin``), JACOBIAN_NONFINITE (``fail = [t, u, i, j]``: entry ``df_i/du_j``
    at ``(t, u)`` is NaN or infinite) or GROW (buffers full: see ``integrate``). ``carry``
    (length :data:`CARRY_SIZE`) keeps the controller's state and the counts of Jacobians and
    factorisations.
    """
    a, C, c, d, m, btilde, gamma, ctrl_order, fsal, jac_mode = method
    rtol, atol, dt0, dtmin, max_steps, group = control
    stops, jump_index, jump_count, jump_state, jump_amount = stops
    ts, us, fs, stats, kstore, astore, carry, fail = store
    f = rhs_from_address(faddr)
    vjp = vjp_from_address(vaddr)
    n = u0.shape[0]
    s = m.shape[0]
    cap = ts.shape[0]
    keep = kstore.shape[0] > 0
    # (cap, n + 1, max(n, 2)): each step's J, its f_t flag and t-shift
    jkeep = astore.shape[0] > 0
    direction = 1.0 if t1 >= t0 else -1.0
    J = np.empty((n, n))
    W = np.empty((n, n))
    WT = np.empty((n, n))
    piv = np.empty(n, dtype=np.int64)
    U = np.empty((s, n))
    u = u0.copy()
    f0 = np.empty(n)  # f(t, u)
    du = np.empty(n)
    ft = np.zeros(n)
    tmp = np.empty(n)
    unew = np.empty(n)
    err = np.empty(n)
    evec = np.empty(n)
    pb = np.empty(p.shape[0])
    adaptive = ctrl_order > 0
    code = SUCCESS
    if stats[6] != 0:
        nstore = stats[0]
        nf = stats[1]
        naccept = stats[2]
        nreject = stats[3]
        steps = stats[4]
        stop_i = stats[5]
        t = ts[nstore - 1]
        for i in range(n):
            u[i] = us[nstore - 1, i]
            f0[i] = fs[nstore - 1, i]
        h = carry[0]
        qold = carry[1]
        last_nonfinite = carry[2] != 0.0
        njac = int(carry[3])
        nlu = int(carry[4])
    else:
        nf = 0
        naccept = 0
        nreject = 0
        steps = 0
        njac = 0
        nlu = 0
        qold = E_FLOOR
        last_nonfinite = False
        t = t0
        stop_i = 0
        h = 0.0
        while stop_i < stops.shape[0] and stops[stop_i] == t0:
            j0 = jump_index[stop_i]
            if j0 >= 0:
                for j in range(j0, j0 + jump_count[stop_i]):
                    u[jump_state[j]] += jump_amount[j]
            stop_i += 1
        nf += 1
        if f(f0, u, p, t, k) != 0:
            record_failure(fail, t, u)
            code = RHS_ERROR
        store_point(ts, us, fs, 0, t, u, f0)
        nstore = 1
        if dt0 > 0.0:
            h = dt0
        elif code == SUCCESS:
            h, h0, failed = initial_step(
                f, k, u, f0, p, t, abs(t1 - t0), direction, rtol, atol, ctrl_order, tmp, du
            )
            nf += 1
            if failed:
                record_failure(fail, t + direction * h0, tmp)
                code = RHS_ERROR
        h = abs(h)
    beta1, beta2 = pi_gains(ctrl_order)
    need_jac = True
    same = True
    dt_ = 0.0
    while code == SUCCESS and direction * (t1 - t) > 0.0:
        if steps >= max_steps:
            code = MAX_STEPS
            break
        if (
            nstore + 3 > cap
            or (keep and nstore + 3 > kstore.shape[0])
            or (jkeep and nstore + 3 > astore.shape[0])
        ):
            code = GROW
            break
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
        if need_jac:
            njac += 1
            code, calls = jacobian_into(
                f, vjp, jac_mode, u, f0, p, t, k, J, evec, tmp, du, pb, fail
            )
            nf += calls
            if code != SUCCESS:
                break
            # df/dt by a one-sided second-order difference in the direction of integration
            # (f never evaluated before t): (-3 f(t) + 4 f(t + e) - f(t + 2 e)) / (2 e); an
            # autonomous problem (f(t + e) == f(t) bit for bit) skips the second call
            dt_ = CBRT_EPS * max(abs(t), abs(hs), 1e-300)
            nf += 1
            if f(du, u, p, t + direction * dt_, k) != 0:
                record_failure(fail, t + direction * dt_, u)
                code = RHS_ERROR
                break
            same = True
            for i in range(n):
                if du[i] != f0[i]:
                    same = False
            if same:
                for i in range(n):
                    ft[i] = 0.0
            else:
                nf += 1
                if f(unew, u, p, t + 2.0 * direction * dt_, k) != 0:
                    record_failure(fail, t + 2.0 * direction * dt_, u)
                    code = RHS_ERROR
                    break
                for i in range(n):
                    ft[i] = (4.0 * du[i] - 3.0 * f0[i] - unew[i]) / (2.0 * direction * dt_)
            need_jac = False
        # W = I / (h gamma) - J, factored in place
        inv = 1.0 / (hs * gamma)
        for i in range(n):
            for j in range(n):
                W[i, j] = -J[i, j]
            W[i, i] += inv
        nlu += 1
        if lu_factor(W, piv) >= 0:
            # singular for this step: shrink it (W changes with h) until dtmin
            nreject += 1
            h = 0.25 * h_try
            if h < dtmin:
                code = SINGULAR
                break
            continue
        steps += 1
        transpose_into(W, WT)
        for st in range(s):
            if st == 0:
                for i in range(n):
                    du[i] = f0[i]
            else:
                for i in range(n):
                    acc = u[i]
                    for j in range(st):
                        acc += a[st, j] * U[j, i]
                    tmp[i] = acc
                ts_ = t + c[st] * hs
                nf += 1
                if f(du, tmp, p, ts_, k) != 0:
                    record_failure(fail, ts_, tmp)
                    code = RHS_ERROR
                    break
            dts = hs * d[st]
            for i in range(n):
                acc = du[i] + dts * ft[i]
                for j in range(st):
                    acc += (C[st, j] / hs) * U[j, i]
                U[st, i] = acc
            lu_solve_columns(WT, piv, U[st])
        if code != SUCCESS:
            break
        for i in range(n):
            acc = u[i]
            for j in range(s):
                acc += m[j] * U[j, i]
            unew[i] = acc
        if adaptive:
            for i in range(n):
                acc = 0.0
                for j in range(s):
                    acc += btilde[j] * U[j, i]
                err[i] = acc
            e = error_norm(err, u, unew, rtol, atol, group)
            verdict, h_next, qold, nonfinite = judge_step(
                e, h_try, qold, beta1, beta2, landing, dtmin
            )
            if verdict != ACCEPT:
                h = h_next
                nreject += 1
                if nonfinite:
                    last_nonfinite = True
                if verdict == GIVE_UP:
                    code = NONFINITE
                    break
                continue
            last_nonfinite = False
        else:
            h_next = h
            for i in range(n):
                if not math.isfinite(unew[i]):
                    code = NONFINITE
            if code != SUCCESS:
                break
        naccept += 1
        if keep:
            for st in range(s):
                for i in range(n):
                    kstore[nstore, st, i] = U[st, i] / hs
        if jkeep:
            for i in range(n):
                for j in range(n):
                    astore[nstore, i, j] = J[i, j]
            astore[nstore, n, 0] = 1.0 if same else 0.0
            astore[nstore, n, 1] = dt_
        t = target if landing else t + hs
        for i in range(n):
            u[i] = unew[i]
        need_jac = True
        if fsal:
            for i in range(n):
                f0[i] = du[i]
        else:
            nf += 1
            if f(f0, u, p, t, k) != 0:
                record_failure(fail, t, u)
                code = RHS_ERROR
        if landing and code == SUCCESS:
            j0 = jump_index[stop_i]
            if j0 >= 0:
                store_point(ts, us, fs, nstore, t, u, f0)
                nstore += 1
                for j in range(j0, j0 + jump_count[stop_i]):
                    u[jump_state[j]] += jump_amount[j]
                nf += 1
                if f(f0, u, p, t, k) != 0:
                    record_failure(fail, t, u)
                    code = RHS_ERROR
            stop_i += 1
        store_point(ts, us, fs, nstore, t, u, f0)
        nstore += 1
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
    carry[3] = njac
    carry[4] = nlu
    ts[nstore] = h
    return code
