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

from ..._jit import FLAGS
from .._abi import F64, call_rhs, record_failure
from .._codes import NEWTON_FAILURE, NONFINITE, RHS_ERROR, SINGULAR, SUCCESS
from .._loop import PROCEED, RETRY, register_family, run_loop
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
"""The counts at the head of ``carry`` of an ESDIRK solve: ``[h, e_old, last step non-finite,
Jacobians, LU factorisations, Newton iterations, failed Newton iterations]``; then the Newton
state, the Jacobian and its LU factorisation (:func:`carry_size`), for a resume after GROW."""


def carry_size(n: int) -> int:
    """Length of ``carry`` of an ESDIRK solve of ``n`` states."""
    return CARRY_SIZE + 6 + 2 * n * n + n


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


# the family's step, as the hooks of the one loop (scichains.ode._loop). The state between
# steps, st: [0] a new Jacobian before the next try, [1] J was made at the current point,
# [2] the signed step of the factorisation in M (0: none), [3] the last converged iteration's
# eta (the first iteration's stopping test), [4] failed Newton iterations in a row at this
# point, [5] the largest contraction of the last step, [6] Jacobians, [7] LU factorisations,
# [8] Newton iterations, [9] failed Newton iterations


def _workspace(method, u0, p, store, control):
    n = u0.shape[0]
    s = method.c.shape[0]
    J = np.empty((n, n))
    M = np.empty((n, n))
    MT = np.empty((n, n))
    piv = np.empty(n, dtype=np.int64)
    K = np.empty((s, n))  # stage derivatives; K[0] = f(t, u)
    du = np.empty(n)
    fu = np.empty(n)
    tmp = np.empty(n)
    psi = np.empty(n)
    z = np.empty(n)
    dz = np.empty(n)
    scale = np.empty(n)
    evec = np.empty(n)
    pb = np.empty(p.shape[0])
    st = np.zeros(10)
    st[0] = 1.0
    st[3] = 1.0
    return J, M, MT, piv, K, du, fu, tmp, psi, z, dz, scale, evec, pb, st


def _current_f(method, ws):
    return ws[4][0]


def _evaluate(method, ws, f, u, p, t, k):
    return call_rhs(f, ws[4][0], u, p, t, k)


def _has_room(method, ws, store, nstore):
    return True


def _attempt(method, ws, f, vjp, k, u, p, t, hs, h_try, control, store, nstore, unew, err, fail):
    a, alpha, c, btilde, gamma, ctrl_order, jac_mode = method
    J, M, MT, piv, K, du, fu, tmp, psi, z, dz, scale, evec, pb, st = ws
    rtol = control.rtol
    atol = control.atol
    dtmin = control.dtmin
    n = u.shape[0]
    s = c.shape[0]
    calls = 0
    if st[0] != 0.0:
        st[6] += 1.0
        if jac_mode == JAC_FD:
            # the differences need f(t, u) itself: K[0] carried over from the last step
            # is z / (h gamma), off by the Newton error, which the differences divide by
            # an increment of ~1e-8
            calls += 1
            if call_rhs(f, fu, u, p, t, k) != 0:
                record_failure(fail, t, u)
                return RHS_ERROR, 0.0, calls, False, False, -1
        else:
            fu[:] = K[0]
        code, jcalls = jacobian_into(f, vjp, jac_mode, u, fu, p, t, k, J, evec, tmp, du, pb, fail)
        calls += jcalls
        if code != SUCCESS:
            return code, 0.0, calls, False, False, -1
        st[0] = 0.0
        st[1] = 1.0
        st[2] = 0.0
    hg = hs * gamma
    if hs != st[2]:
        # M = I - h gamma J, factored in place
        for i in range(n):
            for j in range(n):
                M[i, j] = -hg * J[i, j]
            M[i, i] += 1.0
        st[7] += 1.0
        if lu_factor(M, piv) >= 0:
            st[2] = 0.0
            h = 0.25 * h_try
            return (SINGULAR if h < dtmin else RETRY), h, calls, False, True, -1
        transpose_into(M, MT)
        st[2] = hs
    for i in range(n):
        scale[i] = 1.0 / (atol + abs(u[i]) * rtol)
    failed = False
    nonfinite = False
    theta_max = 0.0
    eta = st[3]
    for stage in range(1, s):
        ts_ = t + c[stage] * hs
        for i in range(n):
            acc = 0.0
            pred = 0.0
            for j in range(stage):
                acc += a[stage, j] * K[j, i]
                pred += alpha[stage, j] * K[j, i]
            psi[i] = u[i] + hs * acc
            z[i] = hg * pred
        converged = False
        ndz_old = 1.0
        for it in range(MAX_ITER):
            for i in range(n):
                tmp[i] = psi[i] + z[i]
            calls += 1
            if call_rhs(f, du, tmp, p, ts_, k) != 0:
                record_failure(fail, ts_, tmp)
                st[3] = eta
                return RHS_ERROR, 0.0, calls, True, False, -1
            for i in range(n):
                dz[i] = hg * du[i] - z[i]
            lu_solve_columns(MT, piv, dz)
            ndz = 0.0
            for i in range(n):
                z[i] += dz[i]
                ndz += (dz[i] * scale[i]) ** 2
            ndz = math.sqrt(ndz / n)
            st[8] += 1.0
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
        if not converged:
            failed = True
            break
        inv = 1.0 / hg
        for i in range(n):
            K[stage, i] = z[i] * inv
    st[3] = eta
    st[5] = theta_max
    if failed:
        st[9] += 1.0
        st[3] = 1.0
        if st[1] == 0.0:
            st[0] = 1.0  # J is from an earlier point: a new one, the same step
            return RETRY, 0.0, calls, True, False, -1
        st[4] += 1.0
        h = 0.25 * h_try
        nf_flag = 1 if nonfinite else 0
        if st[4] >= MAX_NEWTON_FAILURES or h < dtmin:
            return (NONFINITE if nonfinite else NEWTON_FAILURE), h, calls, True, False, nf_flag
        return RETRY, h, calls, True, False, nf_flag
    st[4] = 0.0
    # stiffly accurate: u_new is the last stage's point
    for i in range(n):
        unew[i] = psi[i] + z[i]
    if ctrl_order > 0:
        for i in range(n):
            acc = 0.0
            for j in range(s):
                acc += btilde[j] * K[j, i]
            err[i] = hs * acc
    return PROCEED, 0.0, calls, True, False, -1


def _keep_step(method, ws, store, nstore, hs):
    K = ws[4]
    kstore = store.kstore
    if kstore.shape[0] > 0:
        for stage in range(K.shape[0]):
            for i in range(K.shape[1]):
                kstore[nstore, stage, i] = K[stage, i]


def _advance(method, ws, f, k, u, p, t, store, accepted_at):
    K = ws[4]
    st = ws[14]
    s = K.shape[0]
    for i in range(K.shape[1]):
        K[0, i] = K[s - 1, i]  # FSAL: f(t, u_new) to the Newton tolerance
    st[1] = 0.0
    st[0] = 1.0 if st[5] > THETA_NEW_JACOBIAN else 0.0
    return 0, 0


def _jumped(method, ws):
    ws[14][0] = 1.0


def _propose(method, ws, h_next, h_try, adaptive):
    if adaptive and ws[14][0] == 0.0 and 1.0 <= h_next / h_try <= H_KEEP:
        return h_try  # keep the factorisation
    return h_next


def _save_carry(method, ws, carry):
    J, M, MT, piv, K, du, fu, tmp, psi, z, dz, scale, evec, pb, st = ws
    n = J.shape[0]
    for i in range(4):
        carry[3 + i] = st[6 + i]
    # the Jacobian, its factorisation and the Newton state, so that a resume after GROW takes
    # the steps an uninterrupted solve takes
    for i in range(6):
        carry[7 + i] = st[i]
    o = 13
    for i in range(n):
        for j in range(n):
            carry[o + i * n + j] = J[i, j]
            carry[o + n * n + i * n + j] = M[i, j]
        carry[o + 2 * n * n + i] = piv[i]


def _resume(method, ws, carry):
    J, M, MT, piv, K, du, fu, tmp, psi, z, dz, scale, evec, pb, st = ws
    n = J.shape[0]
    for i in range(4):
        st[6 + i] = carry[3 + i]
    for i in range(6):
        st[i] = carry[7 + i]
    o = 13
    for i in range(n):
        for j in range(n):
            J[i, j] = carry[o + i * n + j]
            M[i, j] = carry[o + n * n + i * n + j]
        piv[i] = int(carry[o + 2 * n * n + i])
    transpose_into(M, MT)


def _handover(method, ws):
    return False


register_family(
    ESDIRKTableau,
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


@numba.njit(**FLAGS)  # compiled on first use (cached), not at import
def esdirk_integrate(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store):
    """Integrate from ``t0`` to ``t1`` (either direction) with the stiffly accurate ESDIRK
    method ``method`` (:class:`ESDIRKTableau`): the one loop
    (:func:`scichains.ode._loop.run_loop`) with the ESDIRK step, storing every step in
    ``store`` (:class:`~scichains.ode._abi.StepStore`); the stages kept in ``store.kstore``
    are the stage derivatives ``k_i``.

    Returns SUCCESS, MAX_STEPS, DT_UNDERFLOW, NONFINITE, RHS_ERROR (``fail = [t, u]`` of the
    call that raised), SINGULAR (``I - h gamma J`` stayed singular while the step shrank
    below ``dtmin``), JACOBIAN_NONFINITE (``fail = [t, u, i, j]``), NEWTON_FAILURE (see the
    module's docstring) or GROW (buffers full: see ``run_loop``). ``carry`` (length
    :func:`carry_size`) keeps the controller's state, the counts, the Jacobian, its LU and the
    Newton state: a resumed solve takes the steps of an uninterrupted one.
    """
    return run_loop(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store)
