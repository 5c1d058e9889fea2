"""The compiled stepping loop of the Rosenbrock (linearly implicit) solvers.

One kernel, compiled once per machine (numba's cache), runs every Rosenbrock method
(:mod:`scichains.ode.stiff._rosenbrock`) on every problem: the right-hand side and its vjp arrive as
addresses of C-callables (as for the explicit stepper, :mod:`scichains.ode.explicit._kernels`), the
method as arrays. Each step: the Jacobian ``J = df/du`` at ``(t, u)`` (``n`` vjp calls, one
row each, or forward differences), ``df/dt`` by a one-sided difference in ``t``, the LU
factorisation of ``W = I / (h gamma) - J`` (in place, partial pivoting:
:mod:`scichains.ode.stiff._linalg`), then one solve per stage. With a mass matrix (``M du/dt = f``,
``StepControl.mass``) ``W = M / (h gamma) - J`` and the stages' ``sum_j (C_ij / h) U_j``
terms are multiplied by ``M`` (Hairer & Wanner II, VI.4): Rodas5P is built for singular
``M`` (index-1 DAEs). A rejected step keeps ``J`` and
refactors ``W`` only. Stops, doses, the PI controller, the step store and its growth are
those of the explicit stepper.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from numba import types

from ..._jit import FLAGS
from .._abi import F64, call_rhs, record_failure
from .._codes import RHS_ERROR, SINGULAR, SUCCESS
from .._loop import PROCEED, RETRY, register_family, run_loop
from ._jacobian import jacobian_into
from ._linalg import (
    lu_factor,
    lu_solve_columns,
    shifted_into,
    spectral_radius,
    transpose_into,
)

CBRT_EPS = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
CARRY_SIZE = 7
"""``carry`` of a Rosenbrock solve: ``[h, e_old, last step non-finite, Jacobians, LU
factorisations, the switch watch's count and its last |lambda|]``."""


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

# the family's step, as the hooks of the one loop (scichains.ode._loop). The state between
# steps, st: [0] a new Jacobian before the next try, [1] df/dt of the last Jacobian was zero,
# [2] the t-shift of that difference, [3] Jacobians made, [4] LU factorisations; the switch
# watch (ode._auto): [5] steps in a row below the watch, [6] the last |lambda| (power
# iteration on the step's J), [7] fired, [8] the watch (0: off), [9] the steps it needs; [10]
# the first row of kstore for the stages


def _workspace(method, u0, p, store, control):
    n = u0.shape[0]
    s = method.m.shape[0]
    J = np.empty((n, n))
    W = np.empty((n, n))
    WT = np.empty((n, n))
    piv = np.empty(n, dtype=np.int64)
    U = np.empty((s, n))
    f0 = np.empty(n)  # f(t, u)
    du = np.empty(n)
    ft = np.zeros(n)
    tmp = np.empty(n)
    evec = np.empty(n)
    pb = np.empty(p.shape[0])
    st = np.zeros(11)
    st[0] = 1.0
    st[8] = control.watch
    st[9] = control.watch_steps
    st[10] = control.row0
    return J, W, WT, piv, U, f0, du, ft, tmp, evec, pb, st


def _current_f(method, ws):
    return ws[5]


def _evaluate(method, ws, f, u, p, t, k):
    return call_rhs(f, ws[5], u, p, t, k)


def _has_room(method, ws, store, nstore):
    astore = store.astore
    return astore.shape[0] == 0 or nstore + 3 <= astore.shape[0]


def _attempt(method, ws, f, vjp, k, u, p, t, hs, h_try, control, store, nstore, unew, err, fail):
    a, C, c, d, m, btilde, gamma, ctrl_order, fsal, jac_mode = method
    J, W, WT, piv, U, f0, du, ft, tmp, evec, pb, st = ws
    dtmin = control.dtmin
    n = u.shape[0]
    s = m.shape[0]
    direction = 1.0 if hs >= 0.0 else -1.0
    calls = 0
    if st[0] != 0.0:
        st[3] += 1.0
        code, jcalls = jacobian_into(f, vjp, jac_mode, u, f0, p, t, k, J, evec, tmp, du, pb, fail)
        calls += jcalls
        if code != SUCCESS:
            return code, 0.0, calls, False, False, -1
        # df/dt by a one-sided second-order difference in the direction of integration
        # (f never evaluated before t): (-3 f(t) + 4 f(t + e) - f(t + 2 e)) / (2 e); an
        # autonomous problem (f(t + e) == f(t) bit for bit) skips the second call
        dt_ = CBRT_EPS * max(abs(t), abs(hs), 1e-300)
        st[2] = dt_
        calls += 1
        if call_rhs(f, du, u, p, t + direction * dt_, k) != 0:
            record_failure(fail, t + direction * dt_, u)
            return RHS_ERROR, 0.0, calls, False, False, -1
        same = True
        for i in range(n):
            if du[i] != f0[i]:
                same = False
        st[1] = 1.0 if same else 0.0
        if same:
            for i in range(n):
                ft[i] = 0.0
        else:
            calls += 1
            if call_rhs(f, unew, u, p, t + 2.0 * direction * dt_, k) != 0:
                record_failure(fail, t + 2.0 * direction * dt_, u)
                return RHS_ERROR, 0.0, calls, False, False, -1
            for i in range(n):
                ft[i] = (4.0 * du[i] - 3.0 * f0[i] - unew[i]) / (2.0 * direction * dt_)
        st[0] = 0.0
    # W = M / (h gamma) - J (M = I without a mass matrix), factored in place
    mass = control.mass
    has_mass = mass.shape[0] > 0
    shifted_into(W, J, mass, 1.0 / (hs * gamma))
    st[4] += 1.0
    if lu_factor(W, piv) >= 0:
        # singular for this step: shrink it (W changes with h) until dtmin
        h = 0.25 * h_try
        return (SINGULAR if h < dtmin else RETRY), h, calls, False, True, -1
    transpose_into(W, WT)
    for stage in range(s):
        if stage == 0:
            for i in range(n):
                du[i] = f0[i]
        else:
            for i in range(n):
                acc = u[i]
                for j in range(stage):
                    acc += a[stage, j] * U[j, i]
                tmp[i] = acc
            ts_ = t + c[stage] * hs
            calls += 1
            if call_rhs(f, du, tmp, p, ts_, k) != 0:
                record_failure(fail, ts_, tmp)
                return RHS_ERROR, 0.0, calls, True, False, -1
        dts = hs * d[stage]
        if has_mass and stage > 0:
            # M sum_j (C_ij / h) U_j
            for i in range(n):
                acc = 0.0
                for j in range(stage):
                    acc += (C[stage, j] / hs) * U[j, i]
                evec[i] = acc
            for i in range(n):
                acc = du[i] + dts * ft[i]
                for j in range(n):
                    acc += mass[i, j] * evec[j]
                U[stage, i] = acc
        else:
            for i in range(n):
                acc = du[i] + dts * ft[i]
                for j in range(stage):
                    acc += (C[stage, j] / hs) * U[j, i]
                U[stage, i] = acc
        lu_solve_columns(WT, piv, U[stage])
    for i in range(n):
        acc = u[i]
        for j in range(s):
            acc += m[j] * U[j, i]
        unew[i] = acc
    if ctrl_order > 0:
        for i in range(n):
            acc = 0.0
            for j in range(s):
                acc += btilde[j] * U[j, i]
            err[i] = acc
    return PROCEED, 0.0, calls, True, False, -1


def _keep_step(method, ws, store, nstore, hs):
    J, W, WT, piv, U, f0, du, ft, tmp, evec, pb, st = ws
    kstore = store.kstore
    astore = store.astore
    n = J.shape[0]
    s = U.shape[0]
    if kstore.shape[0] > 0:
        row0 = int(st[10])
        for stage in range(s):
            for i in range(n):
                kstore[nstore, row0 + stage, i] = U[stage, i] / hs
        if kstore.shape[1] > s:  # a shared store (ode._auto): the other rows are zero
            for row in range(kstore.shape[1]):
                if row < row0 or row >= row0 + s:
                    for i in range(n):
                        kstore[nstore, row, i] = 0.0
    if st[8] > 0.0:
        # the switch watch: would the explicit method be stable at this step size?
        lam = spectral_radius(J, evec, tmp)
        st[6] = lam
        if abs(hs) * lam < st[8]:
            st[5] += 1.0
            if st[5] >= st[9]:
                st[7] = 1.0
        else:
            st[5] = 0.0
    if astore.shape[0] > 0:
        for i in range(n):
            for j in range(n):
                astore[nstore, i, j] = J[i, j]
        astore[nstore, n, 0] = st[1]
        astore[nstore, n, 1] = st[2]


def _advance(method, ws, f, k, u, p, t, store, accepted_at):
    f0 = ws[5]
    du = ws[6]
    ws[11][0] = 1.0  # a new Jacobian at every step
    if method.fsal:
        for i in range(f0.shape[0]):
            f0[i] = du[i]
        return 0, 0
    return 1, call_rhs(f, f0, u, p, t, k)


def _jumped(method, ws):
    pass


def _propose(method, ws, h_next, h_try, adaptive):
    return h_next


def _save_carry(method, ws, carry):
    st = ws[11]
    carry[3] = st[3]
    carry[4] = st[4]
    carry[5] = st[5]
    carry[6] = st[6]


def _resume(method, ws, carry):
    st = ws[11]
    st[3] = carry[3]
    st[4] = carry[4]
    st[5] = carry[5]
    st[6] = carry[6]


def _handover(method, ws):
    return ws[11][7] != 0.0


register_family(
    RosenbrockTableau,
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
def rosenbrock_integrate(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store):
    """Integrate from ``t0`` to ``t1`` (either direction) with the Rosenbrock method
    ``method`` (:class:`RosenbrockTableau`): the one loop
    (:func:`scichains.ode._loop.run_loop`) with the Rosenbrock step, storing every step in
    ``store`` (:class:`~scichains.ode._abi.StepStore`); the stages kept in ``store.kstore``
    are ``U_i / h`` (the dense output's form). A non-empty ``store.astore`` (shape ``(cap, n +
    1, max(n, 2))``) keeps, at the entry where each step ends, its Jacobian ``J`` (rows
    ``0..n-1``), whether its ``df/dt`` was zero (``[n, 0]``: 1.0) and the shift in ``t`` of
    that difference (``[n, 1]``), for the discrete adjoint.

    Returns SUCCESS, MAX_STEPS, DT_UNDERFLOW, NONFINITE, RHS_ERROR (the right-hand side or the
    vjp raised: ``fail = [t, u]`` of that call), SINGULAR (``W`` stayed singular while the step
    shrank below ``dtmin``), JACOBIAN_NONFINITE (``fail = [t, u, i, j]``: entry ``df_i/du_j``
    at ``(t, u)`` is NaN or infinite) or GROW (buffers full: see ``run_loop``). ``carry``
    (length :data:`CARRY_SIZE`) keeps the controller's state and the counts of Jacobians and
    factorisations.
    """
    return run_loop(faddr, vaddr, k, u0, p, t0, t1, method, control, stops, store)
