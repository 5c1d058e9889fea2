"""The compiled stepper of the Radau IIA method (RadauIIA5): Hairer & Wanner's RADAU5 step as
hooks of the one loop (:mod:`scichains.ode._loop`).

A step solves ``Z = h (A (x) I) F(u + Z)`` for the stage increments by the simplified Newton
iteration on ``W = (T^-1 (x) I) Z`` (Solving ODEs II, IV.8): with ``J`` the Jacobian where it
was last made, ``E1 = gamma / h I - J`` (real) and ``E2 = (alpha + i beta) / h I - J``
(complex), both factored once per step size,

    E1 dW_1 = (T^-1 F)_1 - gamma / h W_1,
    E2 (dW_2 + i dW_3) = (T^-1 F)_2 + i (T^-1 F)_3 - (alpha + i beta) / h (W_2 + i W_3),

``W += dW``, ``Z = (T (x) I) W``: three calls of ``f`` and two solves per iteration. The
iteration starts from the previous step's collocation polynomial extrapolated to the new
nodes (zero at the first step and after a dose). With ``||.||`` the RMS norm of ``dW`` over
the ``3n`` entries scaled by ``atol + rtol |u|``, ``theta`` the contraction (the geometric
mean of the last two ratios) and ``faccon = theta / (1 - theta)``, it has converged when
``faccon ||dW|| <= fnewt`` (``fnewt = max(10 eps / rtol, min(0.03, sqrt(rtol)))``, RADAU5's).
It fails on ``theta >= 0.99``, a non-finite value or ``MAX_ITER`` iterations (``MAX_ITER_FIXED``
with fixed steps, where no step-size test cuts a slow iteration short): the step halves
(a new Jacobian first when ``J`` was made at an earlier point), and after
``MAX_NEWTON_FAILURES`` failures in a row, or below ``dtmin``, the solve stops with
NEWTON_FAILURE (NONFINITE after a NaN). When the iteration converges but too slowly to finish
in the iterations left, the step shrinks by RADAU5's factor before it is tried again.

With a mass matrix (``M du/dt = f``, ``StepControl.mass``; index-1 DAEs when ``M`` is
singular) ``I`` becomes ``M`` in ``E1``, ``E2`` and the iteration's ``W`` terms, and the error
estimate's ``sum dd_i Z_i / h`` is multiplied by ``M`` (RADAU5's IJOB 5).

Error estimate (RADAU5's ESTRAD): ``err = E1^-1 (f(t, u) + sum dd_i Z_i / h)``; at the first
step and after a rejected one, when ``||err|| >= 1``, once more with ``f(t, u + err)``
(one more call of ``f``): the filter that keeps the estimate of a stiff component bounded.
The loop's PI controller takes it with exponent ``1 / 4``.

Reuse: after an accepted step the Jacobian is kept when the iteration contracted fast
(``theta <= THETA_KEEP_JACOBIAN``; RADAU5's default 0.001), else made anew at the new point;
the factorisations are kept while ``h`` and ``J`` are, and a proposed ``h`` within
``[1, H_KEEP]`` times the last is not taken. ``f`` at the new point is called after each
accepted step (exact, not the last stage's derivative): the next error estimate, the
Jacobian's differences and the stored ``fs`` use it.

Stored stages (``store.kstore``): the stage derivatives ``k = (A^-1 (x) I) Z / h``, on which
the dense output (``RadauIIA.interp``: the collocation polynomial) is linear.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from ..._jit import FLAGS, kernel
from .._abi import call_rhs, record_failure
from .._codes import NEWTON_FAILURE, NONFINITE, RHS_ERROR, SINGULAR, SUCCESS
from .._control import error_norm
from .._loop import PROCEED, RETRY, register_family, run_loop
from ._jacobian import JAC_EXACT, JAC_FD, jacobian_into
from ._linalg import lu_factor, lu_solve_columns, shifted_into, transpose_into

MAX_ITER = 7
"""Newton iterations per step before the iteration counts as failed (RADAU5's default)."""
MAX_ITER_FIXED = 30
"""The same with fixed steps (``adaptive=False``: the order measurements), where the step is
the caller's: the iteration goes on while it contracts instead of shrinking the step."""
THETA_KEEP_JACOBIAN = 0.001
"""After an accepted step whose iteration contracted faster than this, the Jacobian is kept."""
MAX_NEWTON_FAILURES = 10
"""Failed iterations in a row at one point (each halving ``h``) before NEWTON_FAILURE."""
H_KEEP = 1.2
"""A proposed step within ``[1, H_KEEP]`` times the last is not taken: the LUs are reused."""
EPS = 2.220446049250313e-16

NST = 14
"""Entries of the family's state ``st`` (see the hooks below)."""
CARRY_SIZE = 3 + 4 + NST
"""The head of ``carry`` of a Radau solve: the loop's three entries, ``[Jacobians, LU
factorisations, Newton iterations, failed Newton iterations]``, the state ``st``; then the
Jacobian and the last step's stage derivatives (:func:`carry_size`), for a resume after GROW."""


def carry_size(n: int) -> int:
    """Length of ``carry`` of a Radau solve of ``n`` states."""
    return CARRY_SIZE + n * n + 3 * n


class RadauTableau(NamedTuple):
    """The Radau IIA method as the kernel takes it (see ``_radau.RadauIIA``)."""

    Ainv: np.ndarray  # (3, 3)
    T: np.ndarray  # (3, 3)
    TI: np.ndarray  # (3, 3)
    c: np.ndarray  # (3,)
    b: np.ndarray  # (3,) the last row of A
    dd: np.ndarray  # (3,) the error estimate's weights on Z / h
    interp: np.ndarray  # (3, 5) the dense output's weights on the stage derivatives
    gamma: float
    alpha: float
    beta: float
    ctrl_order: int  # the power of h in the error estimate; 0: fixed steps
    jacobian: int  # JAC_EXACT (from the vjp) or JAC_FD


def radau_tableau(solver, ctrl: int) -> RadauTableau:
    """``solver`` (a :class:`~scichains.ode.stiff._radau.RadauIIA`) as the stepper takes it."""

    def arr(x):
        return np.ascontiguousarray(x, dtype=np.float64)

    return RadauTableau(
        arr(solver.Ainv),
        arr(solver.T),
        arr(solver.TI),
        arr(solver.c),
        arr(solver.A[-1]),
        arr(solver.dd),
        arr(solver.interp),
        float(solver.gamma),
        float(solver.alpha),
        float(solver.beta),
        int(ctrl),
        JAC_EXACT if solver.jacobian == "exact" else JAC_FD,
    )


# The state between steps, st: [0] a new Jacobian before the next try, [1] J was made at the
# current point, [2] the signed step of the factorisations (0: none), [3] faccon of the last
# converged iteration, [4] failed iterations in a row at this point, [5] theta of the last
# step, [6] Jacobians, [7] LU factorisations (pairs), [8] Newton iterations, [9] failed
# iterations, [10] the last accepted (signed) step, 0: no extrapolation, [11] no step
# accepted since the start or a dose, [12] a try was made from the current point (the next
# is after a rejection), [13] unused


def _workspace(method, u0, p, store, control):
    n = u0.shape[0]
    J = np.empty((n, n))
    E1 = np.empty((n, n))
    E1T = np.empty((n, n))
    E2 = np.empty((n, n), dtype=np.complex128)
    E2T = np.empty((n, n), dtype=np.complex128)
    piv1 = np.empty(n, dtype=np.int64)
    piv2 = np.empty(n, dtype=np.int64)
    Z = np.empty((3, n))
    W = np.empty((3, n))
    F = np.empty((3, n))
    Kprev = np.zeros((3, n))  # the last accepted step's stage derivatives
    f0 = np.empty(n)
    tmp = np.empty(n)
    du = np.empty(n)
    evec = np.empty(n)
    scale = np.empty(n)
    r1 = np.empty(n)
    r2 = np.empty(n, dtype=np.complex128)
    pb = np.empty(p.shape[0])
    st = np.zeros(NST)
    st[0] = 1.0
    st[3] = 1.0
    st[11] = 1.0
    mass = control.mass
    return (
        J, E1, E1T, E2, E2T, piv1, piv2, Z, W, F, Kprev, f0, tmp, du, evec, scale, r1, r2, pb, st,
        mass,
    )  # fmt: skip


def _current_f(method, ws):
    return ws[11]


def _evaluate(method, ws, f, u, p, t, k):
    return call_rhs(f, ws[11], u, p, t, k)


def _has_room(method, ws, store, nstore):
    return True


@kernel  # a call, not inlined: the two factorisations inlined twice doubled the compile time
def _factor(J, mass, E1, E1T, E2, E2T, piv1, piv2, gamma, alpha, beta, hs):
    """``E1 = gamma / h M - J`` and ``E2 = (alpha + i beta) / h M - J`` (``M = I`` when
    ``mass`` is empty), factored (with their transposes for the column solves); False if one
    is singular."""
    shifted_into(E1, J, mass, gamma / hs)
    shifted_into(E2, J, mass, complex(alpha / hs, beta / hs))
    if lu_factor(E1, piv1) >= 0 or lu_factor(E2, piv2) >= 0:
        return False
    transpose_into(E1, E1T)
    transpose_into(E2, E2T)
    return True


@kernel
def _solve_real(E1T, piv1, r1):
    """``r1 = E1^-1 r1``."""
    lu_solve_columns(E1T, piv1, r1)


@kernel
def _solve_pair(E1T, piv1, r1, E2T, piv2, r2):
    """``r1 = E1^-1 r1`` and ``r2 = E2^-1 r2`` (see :func:`_factor`)."""
    lu_solve_columns(E1T, piv1, r1)
    lu_solve_columns(E2T, piv2, r2)


def _attempt(method, ws, f, vjp, k, u, p, t, hs, h_try, control, store, nstore, unew, err, fail):
    Ainv, T, TI, c, b, dd, P, gam, alp, bet, ctrl_order, jac_mode = method
    (J, E1, E1T, E2, E2T, piv1, piv2, Z, W, F, Kprev, f0, tmp, du, evec, scale, r1, r2, pb, st,
     mass) = ws  # fmt: skip
    has_mass = mass.shape[0] > 0
    rtol = control.rtol
    atol = control.atol
    dtmin = control.dtmin
    n = u.shape[0]
    calls = 0
    after_reject = st[12] != 0.0
    st[12] = 1.0
    if after_reject and st[1] == 0.0:
        st[0] = 1.0  # a rejected step with a Jacobian from an earlier point: a new one
    if st[0] != 0.0:
        st[6] += 1.0
        code, jcalls = jacobian_into(f, vjp, jac_mode, u, f0, p, t, k, J, evec, tmp, du, pb, fail)
        calls += jcalls
        if code != SUCCESS:
            return code, 0.0, calls, False, False, -1
        st[0] = 0.0
        st[1] = 1.0
        st[2] = 0.0
    if hs != st[2]:
        st[7] += 1.0
        if not _factor(J, mass, E1, E1T, E2, E2T, piv1, piv2, gam, alp, bet, hs):
            st[2] = 0.0
            h = 0.5 * h_try
            return (SINGULAR if h < dtmin else RETRY), h, calls, False, True, -1
        st[2] = hs
    fac1 = gam / hs
    alphn = alp / hs
    betan = bet / hs
    for i in range(n):
        scale[i] = 1.0 / (atol + abs(u[i]) * rtol)
    # starting values: the last step's collocation polynomial at the new nodes
    hold = st[10]
    if hold != 0.0:
        for m in range(3):
            th = 1.0 + c[m] * hs / hold
            w0 = 0.0
            w1 = 0.0
            w2 = 0.0
            tp = 1.0
            for d in range(P.shape[1]):
                tp *= th
                w0 += P[0, d] * tp
                w1 += P[1, d] * tp
                w2 += P[2, d] * tp
            w0 -= b[0]
            w1 -= b[1]
            w2 -= b[2]
            for i in range(n):
                Z[m, i] = hold * (w0 * Kprev[0, i] + w1 * Kprev[1, i] + w2 * Kprev[2, i])
    else:
        for m in range(3):
            for i in range(n):
                Z[m, i] = 0.0
    for r in range(3):
        for i in range(n):
            W[r, i] = TI[r, 0] * Z[0, i] + TI[r, 1] * Z[1, i] + TI[r, 2] * Z[2, i]
    fnewt = max(10.0 * EPS / rtol, min(0.03, math.sqrt(rtol)))
    faccon = max(st[3], EPS) ** 0.8
    theta = abs(st[5])
    dynold = 1.0
    thqold = 1.0
    converged = False
    nonfinite = False
    slow = False
    h_slow = 0.0
    max_iter = MAX_ITER if ctrl_order > 0 else MAX_ITER_FIXED
    for newt in range(max_iter):
        for m in range(3):
            for i in range(n):
                tmp[i] = u[i] + Z[m, i]
            calls += 1
            tm = t + c[m] * hs
            if call_rhs(f, F[m], tmp, p, tm, k) != 0:
                record_failure(fail, tm, tmp)
                st[3] = faccon
                return RHS_ERROR, 0.0, calls, True, False, -1
        for i in range(n):
            g0 = TI[0, 0] * F[0, i] + TI[0, 1] * F[1, i] + TI[0, 2] * F[2, i]
            g1 = TI[1, 0] * F[0, i] + TI[1, 1] * F[1, i] + TI[1, 2] * F[2, i]
            g2 = TI[2, 0] * F[0, i] + TI[2, 1] * F[1, i] + TI[2, 2] * F[2, i]
            if has_mass:  # (M W_r)_i
                w0 = 0.0
                w1 = 0.0
                w2 = 0.0
                for j in range(n):
                    w0 += mass[i, j] * W[0, j]
                    w1 += mass[i, j] * W[1, j]
                    w2 += mass[i, j] * W[2, j]
            else:
                w0 = W[0, i]
                w1 = W[1, i]
                w2 = W[2, i]
            r1[i] = g0 - fac1 * w0
            r2[i] = complex(g1 - alphn * w1 + betan * w2, g2 - alphn * w2 - betan * w1)
        _solve_pair(E1T, piv1, r1, E2T, piv2, r2)
        dyno = 0.0
        for i in range(n):
            s = scale[i]
            dyno += (r1[i] * s) ** 2 + (r2[i].real * s) ** 2 + (r2[i].imag * s) ** 2
        dyno = math.sqrt(dyno / (3 * n))
        st[8] += 1.0
        if not math.isfinite(dyno):
            nonfinite = True
            break
        if newt >= 1:
            thq = dyno / dynold
            theta = thq if newt == 1 else math.sqrt(thq * thqold)
            thqold = thq
            if theta >= 0.99:
                break  # diverging
            faccon = theta / (1.0 - theta)
            left = max_iter - 2 - newt  # iterations after this one
            dyth = faccon * dyno * theta**left / fnewt
            if dyth >= 1.0 and ctrl_order > 0:
                # converging, but too slowly to finish in time: a smaller step (RADAU5)
                qnewt = max(1e-4, min(20.0, dyth))
                h_slow = 0.8 * qnewt ** (-1.0 / (4.0 + left)) * h_try
                slow = True
                break
        dynold = max(dyno, EPS)
        for i in range(n):
            W[0, i] += r1[i]
            W[1, i] += r2[i].real
            W[2, i] += r2[i].imag
        for m in range(3):
            for i in range(n):
                Z[m, i] = T[m, 0] * W[0, i] + T[m, 1] * W[1, i] + T[m, 2] * W[2, i]
        if faccon * dyno <= fnewt:
            converged = True
            break
    st[5] = theta
    if slow:
        st[9] += 1.0
        if st[1] == 0.0:
            st[0] = 1.0
        if h_slow < dtmin:
            return NEWTON_FAILURE, h_slow, calls, True, False, 0
        return RETRY, h_slow, calls, True, False, 0
    if not converged:
        st[9] += 1.0
        st[3] = 1.0
        if st[1] == 0.0:
            st[0] = 1.0  # J is from an earlier point: a new one
        st[4] += 1.0
        h = 0.5 * h_try
        nf_flag = 1 if nonfinite else 0
        if st[4] >= MAX_NEWTON_FAILURES or h < dtmin:
            return (NONFINITE if nonfinite else NEWTON_FAILURE), h, calls, True, False, nf_flag
        return RETRY, h, calls, True, False, nf_flag
    st[3] = faccon
    st[4] = 0.0
    for i in range(n):
        unew[i] = u[i] + Z[2, i]
    if ctrl_order > 0:
        inv = 1.0 / hs
        # evec = M sum_i dd_i Z_i / h, the same in both estimates
        for i in range(n):
            tmp[i] = (dd[0] * Z[0, i] + dd[1] * Z[1, i] + dd[2] * Z[2, i]) * inv
        if has_mass:
            for i in range(n):
                acc = 0.0
                for j in range(n):
                    acc += mass[i, j] * tmp[j]
                evec[i] = acc
        else:
            for i in range(n):
                evec[i] = tmp[i]
        for i in range(n):
            r1[i] = f0[i] + evec[i]
        _solve_real(E1T, piv1, r1)
        for i in range(n):
            err[i] = r1[i]
        if st[11] != 0.0 or after_reject:
            if error_norm(err, u, unew, rtol, atol, control.group) >= 1.0:
                # the estimate once more from f(t, u + err): bounded for stiff components
                for i in range(n):
                    tmp[i] = u[i] + err[i]
                calls += 1
                if call_rhs(f, du, tmp, p, t, k) != 0:
                    record_failure(fail, t, tmp)
                    return RHS_ERROR, 0.0, calls, True, False, -1
                for i in range(n):
                    r1[i] = du[i] + evec[i]
                _solve_real(E1T, piv1, r1)
                for i in range(n):
                    err[i] = r1[i]
    return PROCEED, 0.0, calls, True, False, -1


def _keep_step(method, ws, store, nstore, hs):
    Ainv = method.Ainv
    Z = ws[7]
    Kprev = ws[10]
    st = ws[19]
    n = Z.shape[1]
    inv = 1.0 / hs
    for m in range(3):
        for i in range(n):
            Kprev[m, i] = (Ainv[m, 0] * Z[0, i] + Ainv[m, 1] * Z[1, i] + Ainv[m, 2] * Z[2, i]) * inv
    kstore = store.kstore
    if kstore.shape[0] > 0:
        for m in range(3):
            for i in range(n):
                kstore[nstore, m, i] = Kprev[m, i]
    st[10] = hs


def _advance(method, ws, f, k, u, p, t, store, accepted_at):
    st = ws[19]
    st[1] = 0.0
    st[11] = 0.0
    st[12] = 0.0
    st[0] = 1.0 if st[5] > THETA_KEEP_JACOBIAN else 0.0
    return 1, call_rhs(f, ws[11], u, p, t, k)


def _jumped(method, ws):
    st = ws[19]
    st[0] = 1.0
    st[10] = 0.0
    st[11] = 1.0


def _propose(method, ws, h_next, h_try, adaptive):
    if adaptive and ws[19][0] == 0.0 and 1.0 <= h_next / h_try <= H_KEEP:
        return h_try  # keep the factorisations
    return h_next


def _save_carry(method, ws, carry):
    J = ws[0]
    Kprev = ws[10]
    st = ws[19]
    n = J.shape[0]
    for i in range(4):
        carry[3 + i] = st[6 + i]
    for i in range(NST):
        carry[7 + i] = st[i]
    o = CARRY_SIZE
    for i in range(n):
        for j in range(n):
            carry[o + i * n + j] = J[i, j]
    o += n * n
    for m in range(3):
        for i in range(n):
            carry[o + m * n + i] = Kprev[m, i]


def _resume(method, ws, carry):
    J = ws[0]
    Kprev = ws[10]
    st = ws[19]
    n = J.shape[0]
    for i in range(NST):
        st[i] = carry[7 + i]
    o = CARRY_SIZE
    for i in range(n):
        for j in range(n):
            J[i, j] = carry[o + i * n + j]
    o += n * n
    for m in range(3):
        for i in range(n):
            Kprev[m, i] = carry[o + m * n + i]
    if st[2] != 0.0:
        # the factorisations again, from the same J and h: the same bits
        _factor(
            J,
            ws[20],
            ws[1],
            ws[2],
            ws[3],
            ws[4],
            ws[5],
            ws[6],
            method.gamma,
            method.alpha,
            method.beta,
            st[2],
        )


def _handover(method, ws):
    return False


register_family(
    RadauTableau,
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
def radau_integrate(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store):
    """Integrate from ``t0`` to ``t1`` (either direction) with the Radau IIA method
    ``method`` (:class:`RadauTableau`): the one loop (:func:`scichains.ode._loop.run_loop`)
    with the RADAU5 step, storing every step in ``store``; the stages kept in
    ``store.kstore`` are the stage derivatives.

    Returns SUCCESS, MAX_STEPS, DT_UNDERFLOW, NONFINITE, RHS_ERROR (``fail = [t, u]`` of the
    call that raised), SINGULAR (an iteration matrix stayed singular while the step shrank
    below ``dtmin``), JACOBIAN_NONFINITE (``fail = [t, u, i, j]``), NEWTON_FAILURE (see the
    module's docstring) or GROW (see ``run_loop``): ``carry`` (:func:`carry_size`) keeps the
    counts, the Newton state, the Jacobian and the last stages, so a resumed solve takes the
    steps of an uninterrupted one.
    """
    return run_loop(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store)
