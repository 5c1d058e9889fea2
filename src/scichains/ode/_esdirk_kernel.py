"""The compiled stepper of the ESDIRK methods (Kvaerno5): simplified Newton iterations with one
LU factorisation per step size.

Each implicit stage ``i`` solves ``z = h gamma f(t + c_i h, psi_i + z)`` for ``z = h gamma
k_i`` (``psi_i = u + h sum_{j<i} a_ij k_j``) by the simplified Newton iteration of Hairer &
Wanner (Solving ODEs II, IV.8):

    (I - h gamma J) dz = h gamma f(psi_i + z) - z,     z += dz,

from the predictor ``z = h gamma sum_{j<i} alpha_ij k_j``, with ``J`` the Jacobian at the
start of a step where it was last made. With ``||.||`` the RMS norm scaled by ``atol + rtol
|u|``, ``theta = ||dz_m|| / ||dz_(m-1)||`` estimates the contraction and ``eta ||dz_m||``
(``eta = theta / (1 - theta)``; on the first iteration the last stage's ``eta``, as
``max(eta, eps)^0.8``) the remaining error: converged when that is below ``KAPPA``. The
iteration has failed when ``theta >= 1`` (divergence), when the predicted error after the
remaining iterations ``theta^(MAX_ITER - m) / (1 - theta) ||dz_m||`` still exceeds ``KAPPA``
(too slow), after ``MAX_ITER`` iterations, or on a non-finite value. Then:

- with a Jacobian made at an earlier point: a new one here, the same step again;
- with the current one: the step shrinks 4x; after ``MAX_NEWTON_FAILURES`` such failures in a
  row (or below ``dtmin``) the solve stops with NEWTON_FAILURE (or NONFINITE when the last
  failure was a NaN or inf).

Reuse: after an accepted step the Jacobian is kept unless the iteration converged slowly
(largest ``theta`` of the step above ``THETA_NEW_JACOBIAN``) or a dose changed the state; the
factorisation is kept while ``h`` and ``J`` are, and a proposed ``h`` within ``[1, 1.2]``
times the last is not taken (Hairer & Wanner's RADAU5 rule) so that the LU serves the next
step too. The stage derivatives are ``k_i = z_i / (h gamma)`` (no call of ``f``), so the last
one is ``f`` at ``u_new = Y_s`` to the Newton tolerance: the next step's first stage (FSAL) and
the dense output's end slope.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
from numba import types

from .._jit import FLAGS
from ._abi import (
    F64,
    record_failure,
    rhs_from_address,
    store_point,
    vjp_from_address,
)
from ._codes import (
    DT_UNDERFLOW,
    GROW,
    MAX_STEPS,
    NEWTON_FAILURE,
    NONFINITE,
    RHS_ERROR,
    SINGULAR,
    SUCCESS,
)
from ._control import ACCEPT, E_FLOOR, GIVE_UP, error_norm, initial_step, judge_step, pi_gains
from ._jacobian import JAC_FD, jacobian_into
from ._linalg import lu_factor, lu_solve_columns, transpose_into

KAPPA = 0.01
"""Newton stops when its estimated error is below ``KAPPA`` in the scaled norm (1 = the
tolerance): Hairer & Wanner suggest 0.01-0.1."""
MAX_ITER = 10
"""Newton iterations per stage before the iteration counts as failed."""
THETA_NEW_JACOBIAN = 0.02
"""A step whose iteration contracted more slowly than this makes a new Jacobian for the next."""
MAX_NEWTON_FAILURES = 10
"""Failed iterations in a row at one point (each shrinking ``h`` 4x) before NEWTON_FAILURE."""
H_KEEP = 1.2
"""A proposed step within ``[1, H_KEEP]`` times the last is not taken: the LU is reused."""

CARRY_SIZE = 7
"""``carry`` of an ESDIRK solve: ``[h, e_old, last step non-finite, Jacobians, LU
factorisations, Newton iterations, failed Newton iterations]``."""

EPS = 2.220446049250313e-16


class ESDIRKTableau(NamedTuple):
    """An ESDIRK method as the kernel takes it (see ``_esdirk.ESDIRK``)."""

    a: np.ndarray  # (s, s) strictly lower
    alpha: np.ndarray  # (s, s) strictly lower: the stage predictor
    c: np.ndarray  # (s,)
    btilde: np.ndarray  # (s,)
    gamma: float
    ctrl_order: int  # the power of h in the error estimate; 0: fixed steps
    jacobian: int  # JAC_EXACT (from the vjp) or JAC_FD


_F2 = types.float64[:, ::1]
ESDIRK_TABLEAU_TYPE = types.NamedTuple(
    (_F2, _F2, F64, F64, types.float64, types.int64, types.int64), ESDIRKTableau
)


@numba.njit(**FLAGS)  # compiled on first use (cached), not at import
def esdirk_integrate(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store):
    """Integrate from ``t0`` to ``t1`` (either direction) with the stiffly accurate ESDIRK
    method ``method`` (:class:`ESDIRKTableau`), storing every step in ``store``
    (:class:`~scichains.ode._abi.StepStore`) as the explicit stepper does: the stages kept
    in ``store.kstore`` are the stage derivatives ``k_i``.

    Returns SUCCESS, MAX_STEPS, DT_UNDERFLOW, NONFINITE, RHS_ERROR (``fail = [t, u]`` of the
    call that raised), SINGULAR (``I - h gamma J`` stayed singular while the step shrank
    below ``dtmin``), JACOBIAN_NONFINITE (``fail = [t, u, i, j]``), NEWTON_FAILURE (see the
    module's docstring) or GROW (buffers full: see ``_kernels.integrate``; the resumed solve
    makes a new Jacobian). ``carry`` (length :data:`CARRY_SIZE`) keeps the controller's state
    and the counts.
    """
    a, alpha, c, btilde, gamma, ctrl_order, jac_mode = method
    rtol, atol, dt0, dtmin, max_steps, group = control
    stops, jump_index, jump_count, jump_state, jump_amount = stops
    ts, us, fs, stats, kstore, astore, carry, fail = store
    f = rhs_from_address(faddr)
    vjp = vjp_from_address(vaddr)
    n = u0.shape[0]
    s = c.shape[0]
    cap = ts.shape[0]
    keep = kstore.shape[0] > 0
    direction = 1.0 if t1 >= t0 else -1.0
    J = np.empty((n, n))
    M = np.empty((n, n))
    MT = np.empty((n, n))
    piv = np.empty(n, dtype=np.int64)
    K = np.empty((s, n))  # stage derivatives; K[0] = f(t, u)
    u = u0.copy()
    du = np.empty(n)
    fu = np.empty(n)
    tmp = np.empty(n)
    psi = np.empty(n)
    z = np.empty(n)
    dz = np.empty(n)
    unew = np.empty(n)
    err = np.empty(n)
    scale = np.empty(n)
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
            K[0, i] = fs[nstore - 1, i]
        h = carry[0]
        qold = carry[1]
        last_nonfinite = carry[2] != 0.0
        njac = int(carry[3])
        nlu = int(carry[4])
        nnewton = int(carry[5])
        nnfail = int(carry[6])
    else:
        nf = 0
        naccept = 0
        nreject = 0
        steps = 0
        njac = 0
        nlu = 0
        nnewton = 0
        nnfail = 0
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
        if f(K[0], u, p, t, k) != 0:
            record_failure(fail, t, u)
            code = RHS_ERROR
        store_point(ts, us, fs, 0, t, u, K[0])
        nstore = 1
        if dt0 > 0.0:
            h = dt0
        elif code == SUCCESS:
            h, h0, failed = initial_step(
                f, k, u, K[0], p, t, abs(t1 - t0), direction, rtol, atol, ctrl_order, tmp, du
            )
            nf += 1
            if failed:
                record_failure(fail, t + direction * h0, tmp)
                code = RHS_ERROR
        h = abs(h)
    beta1, beta2 = pi_gains(ctrl_order)
    need_jac = True  # make J at the current point before the next attempt
    jac_here = False  # J was made at the current point
    lu_hs = 0.0  # the signed step of the factorisation in M (0: none)
    eta = 1.0  # the last converged iteration's eta (the first iteration's stopping test)
    failures = 0  # failed Newton iterations in a row at this point
    while code == SUCCESS and direction * (t1 - t) > 0.0:
        if steps >= max_steps:
            code = MAX_STEPS
            break
        if nstore + 3 > cap or (keep and nstore + 3 > kstore.shape[0]):
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
            if jac_mode == JAC_FD:
                # the differences need f(t, u) itself: K[0] carried over from the last step
                # is z / (h gamma), off by the Newton error, which the differences divide by
                # an increment of ~1e-8
                nf += 1
                if f(fu, u, p, t, k) != 0:
                    record_failure(fail, t, u)
                    code = RHS_ERROR
                    break
            else:
                fu[:] = K[0]
            code, calls = jacobian_into(
                f, vjp, jac_mode, u, fu, p, t, k, J, evec, tmp, du, pb, fail
            )
            nf += calls
            if code != SUCCESS:
                break
            need_jac = False
            jac_here = True
            lu_hs = 0.0
        hg = hs * gamma
        if hs != lu_hs:
            # M = I - h gamma J, factored in place
            for i in range(n):
                for j in range(n):
                    M[i, j] = -hg * J[i, j]
                M[i, i] += 1.0
            nlu += 1
            if lu_factor(M, piv) >= 0:
                lu_hs = 0.0
                nreject += 1
                h = 0.25 * h_try
                if h < dtmin:
                    code = SINGULAR
                    break
                continue
            transpose_into(M, MT)
            lu_hs = hs
        steps += 1
        for i in range(n):
            scale[i] = 1.0 / (atol + abs(u[i]) * rtol)
        failed = False
        nonfinite = False
        theta_max = 0.0
        for st in range(1, s):
            ts_ = t + c[st] * hs
            for i in range(n):
                acc = 0.0
                pred = 0.0
                for j in range(st):
                    acc += a[st, j] * K[j, i]
                    pred += alpha[st, j] * K[j, i]
                psi[i] = u[i] + hs * acc
                z[i] = hg * pred
            converged = False
            ndz_old = 1.0
            for it in range(MAX_ITER):
                for i in range(n):
                    tmp[i] = psi[i] + z[i]
                nf += 1
                if f(du, tmp, p, ts_, k) != 0:
                    record_failure(fail, ts_, tmp)
                    code = RHS_ERROR
                    break
                for i in range(n):
                    dz[i] = hg * du[i] - z[i]
                lu_solve_columns(MT, piv, dz)
                ndz = 0.0
                for i in range(n):
                    z[i] += dz[i]
                    ndz += (dz[i] * scale[i]) ** 2
                ndz = math.sqrt(ndz / n)
                nnewton += 1
                if not math.isfinite(ndz):
                    nonfinite = True
                    break
                if it == 0:
                    eta_it = max(eta, EPS) ** 0.8
                else:
                    theta = ndz / ndz_old
                    theta_max = max(theta_max, theta)
                    if theta >= 1.0:
                        break  # diverging
                    if theta ** (MAX_ITER - 1 - it) / (1.0 - theta) * ndz > KAPPA:
                        break  # too slow to converge within MAX_ITER
                    eta_it = theta / (1.0 - theta)
                if eta_it * ndz <= KAPPA or ndz == 0.0:
                    converged = True
                    eta = eta_it
                    break
                ndz_old = ndz
            if code != SUCCESS:
                break
            if not converged:
                failed = True
                break
            inv = 1.0 / hg
            for i in range(n):
                K[st, i] = z[i] * inv
        if code != SUCCESS:
            break
        if failed:
            nnfail += 1
            eta = 1.0
            if not jac_here:
                need_jac = True  # J is from an earlier point: a new one, the same step
                continue
            failures += 1
            last_nonfinite = nonfinite
            h = 0.25 * h_try
            if failures >= MAX_NEWTON_FAILURES or h < dtmin:
                code = NONFINITE if nonfinite else NEWTON_FAILURE
                break
            continue
        failures = 0
        # stiffly accurate: u_new is the last stage's point
        for i in range(n):
            unew[i] = psi[i] + z[i]
        if adaptive:
            for i in range(n):
                acc = 0.0
                for j in range(s):
                    acc += btilde[j] * K[j, i]
                err[i] = hs * acc
            e = error_norm(err, u, unew, rtol, atol, group)
            verdict, h_next, qold, nonfin = judge_step(e, h_try, qold, beta1, beta2, landing, dtmin)
            if verdict != ACCEPT:
                h = h_next
                nreject += 1
                if nonfin:
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
                    kstore[nstore, st, i] = K[st, i]
        t = target if landing else t + hs
        for i in range(n):
            u[i] = unew[i]
            K[0, i] = K[s - 1, i]  # FSAL: f(t, u_new) to the Newton tolerance
        jac_here = False
        need_jac = theta_max > THETA_NEW_JACOBIAN
        if landing:
            j0 = jump_index[stop_i]
            if j0 >= 0:
                store_point(ts, us, fs, nstore, t, u, K[0])
                nstore += 1
                for j in range(j0, j0 + jump_count[stop_i]):
                    u[jump_state[j]] += jump_amount[j]
                nf += 1
                if f(K[0], u, p, t, k) != 0:
                    record_failure(fail, t, u)
                    code = RHS_ERROR
                need_jac = True
            stop_i += 1
        store_point(ts, us, fs, nstore, t, u, K[0])
        nstore += 1
        if adaptive and not need_jac and 1.0 <= h_next / h_try <= H_KEEP:
            h_next = h_try  # keep the factorisation
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
    carry[5] = nnewton
    carry[6] = nnfail
    ts[nstore] = h
    return code
