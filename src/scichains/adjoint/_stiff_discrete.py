"""The discrete adjoint of the Rosenbrock solvers: back-propagation through their accepted steps.

One step of a Rosenbrock method (:mod:`scichains.ode.stiff._rosenbrock`, the form the compiled
stepper runs) from ``(t, u)`` with step ``h``:

    J = df/du(t, u),  f_t = df/dt(t, u),  W = M / (h gamma) - J,
    y_i = u + sum_{j<i} a_ij U_j,
    r_i = f(t + c_i h, y_i) + h d_i f_t + M sum_{j<i} (C_ij / h) U_j,
    U_i = W^-1 r_i,   u_new = u + sum_i m_i U_i.

Its adjoint, given ``lam = dL/du_new`` (step sizes held fixed, as for the explicit methods'
discrete adjoint; ``M = I`` without a mass matrix, a constant ``M`` of ``M du/dt = f`` with
one): ``Ubar_i = m_i lam`` plus what later stages pass back, then for
``i = s-1 .. 0``

    rbar_i = W^-T Ubar_i,   ftbar += h d_i rbar_i,   Ubar_j += (C_ij / h) M^T rbar_i,
    [ybar_i, pbar_i] = vjp(rbar_i at (t + c_i h, y_i)),   Ubar_j += a_ij ybar_i,

``ubar = lam + sum_i ybar_i``, ``pbar += sum_i pbar_i``, and the terms through ``J`` and ``f_t``:
``W`` depends on ``(u, p)`` through ``J``, contributing ``grad_(u,p) sum_i rbar_i^T J U_i``.
That sum is ``sum_k w_k^T J v_k`` over ``min(s, n)`` pairs (the stages' ``(rbar_i, U_i)``, or
the columns of ``M = sum_i rbar_i U_i^T`` against unit vectors when ``n < s``), and each pair's
gradient is the directional derivative of the vjp ``grad (w^T J v) = d/d eps vjp(w at u + eps
v)`` (a Hessian-vector product): a forward difference of vjp calls, one per pair plus one at
``u`` for all of them. These terms are O(h^2) per step; the difference's relative error (about
``1e-8``) enters only them. ``f_t`` (non-autonomous problems) is the forward solve's one-sided
difference in ``t``, differentiated as such (three vjp calls).

Per step: one LU of ``W``, ``s`` transposed solves, ``s`` stage vjps and ``min(s, n) + 1`` for
the ``J`` terms, with ``J`` as the forward solve kept it (``n`` more vjp calls where it was not
kept); one step backward per accepted step forward, no error control. The result is the
gradient of the discretised solution (to the rounding and the ``1e-8`` of the ``J`` terms),
checked against float64 central differences in ``tests/adjoint/test_stiff_gradient.py``.
"""

from __future__ import annotations

import numpy as np

from .._jit import kernel
from ..ode._abi import rhs_from_address, vjp_from_address
from ..ode._codes import RHS_ERROR, SINGULAR, SUCCESS
from ..ode.stiff._linalg import lu_factor, lu_solve_transposed, shifted_into
from ._continuous import record_vjp_failure

CBRT_EPS = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
SQRT_EPS = float(np.finfo(np.float64).eps) ** 0.5


@kernel
def rosenbrock_discrete_adjoint(
    faddr,
    vaddr,
    k,
    p,
    method,
    ts,
    us,
    fs,
    kstore,
    jstore,
    nstore,
    save_pos,
    dl_du,
    pbar,
    ubar,
    stats,
    fail,
    mass,
):
    """Back-propagate ``dl_du`` (the loss gradient at the save points, stored at entries
    ``save_pos``) through the accepted steps of a Rosenbrock solve (``ts[:nstore]``, ``us``,
    ``fs``; ``kstore[j]``: the stages ``U_i / h`` of the step ending at entry ``j``; duplicate
    times: doses, through which ``lam`` passes unchanged). ``jstore[j]``: that step's
    Jacobian, ``df/dt`` flag and ``t``-shift as the stepper keeps them (see
    ``rosenbrock_integrate``), or an empty array: then they are recomputed (``n`` vjp calls
    and one call of ``f`` per step). ``method``: the
    :class:`~scichains.ode.stiff._rosenbrock_kernel.RosenbrockTableau`.

    ``mass``: the problem's mass matrix (``M du/dt = f``; ``(0, 0)``: the identity), in ``W =
    M / (h gamma) - J`` and the stages' ``M sum_j (C_ij / h) U_j`` as the stepper has them.

    Writes dL/dp into ``pbar`` and dL/du0 into ``ubar``; ``stats`` (added to): ``[steps, vjp
    calls]``. Returns a :class:`~scichains.ode.ReturnCode` value: SUCCESS, RHS_ERROR (the vjp
    or the right-hand side raised: ``fail = [t, v, u]`` there) or SINGULAR (an iteration
    matrix the forward solve factored is singular here).
    """
    a, C, c, dd, m, _, gamma, _, _, _ = method
    has_mass = mass.shape[0] > 0
    f = rhs_from_address(faddr)
    vjp = vjp_from_address(vaddr)
    s = m.shape[0]
    n = us.shape[1]
    npar = pbar.shape[0]
    lam = np.zeros(n)
    unew = np.empty(n)
    u = np.empty(n)
    f0 = np.empty(n)
    J = np.empty((n, n))
    W = np.empty((n, n))
    piv = np.empty(n, dtype=np.int64)
    U = np.empty((s, n))
    Y = np.empty((s, n))
    Ub = np.empty((s, n))
    Rb = np.empty((s, n))
    M = np.empty((n, n))
    ftb = np.empty(n)
    ub = np.empty(n)
    pb = np.empty(npar)
    evec = np.empty(n)
    tmp = np.empty(n)
    wsum = np.empty(n)
    for j in range(npar):
        pbar[j] = 0.0
    nvjp = 0
    steps = 0
    code = SUCCESS
    sp = save_pos.shape[0] - 1
    for e in range(nstore - 1, 0, -1):
        while sp >= 0 and save_pos[sp] == e:
            for i in range(n):
                lam[i] += dl_du[sp, i]
            sp -= 1
        if ts[e - 1] == ts[e]:
            continue  # a dose: lam is continuous across an additive jump
        t = ts[e - 1]
        hs = ts[e] - ts[e - 1]
        direction = 1.0 if hs > 0.0 else -1.0
        for i in range(n):
            u[i] = us[e - 1, i]
            f0[i] = fs[e - 1, i]
        for st in range(s):
            for i in range(n):
                U[st, i] = kstore[e, st, i] * hs
        if jstore.shape[0] > 0:  # the forward solve's J, and whether its df/dt was zero
            for i in range(n):
                for j in range(n):
                    J[i, j] = jstore[e, i, j]
            autonomous = jstore[e, n, 0] != 0.0
            dt_ = jstore[e, n, 1]
        else:
            # J at (t, u), row by row, and whether f depends on t (as the forward step saw it;
            # its shift in t came from the step first tried there, here the accepted one)
            for i in range(n):
                for j in range(n):
                    evec[j] = 0.0
                evec[i] = 1.0
                if vjp(evec, u, p, t, k, J[i], pb) != 0:
                    record_vjp_failure(fail, t, evec, u)
                    code = RHS_ERROR
                    break
            if code != SUCCESS:
                break
            nvjp += n
            dt_ = CBRT_EPS * max(abs(t), abs(hs), 1e-300)
            if f(tmp, u, p, t + direction * dt_, k) != 0:
                record_vjp_failure(fail, t + direction * dt_, lam, u)
                code = RHS_ERROR
                break
            autonomous = True
            for i in range(n):
                if tmp[i] != f0[i]:
                    autonomous = False
        shifted_into(W, J, mass, 1.0 / (hs * gamma))
        if lu_factor(W, piv) >= 0:
            code = SINGULAR
            break
        # the stage points
        for st in range(s):
            for i in range(n):
                acc = u[i]
                for j in range(st):
                    acc += a[st, j] * U[j, i]
                Y[st, i] = acc
        # backward through the stages
        for st in range(s):
            for i in range(n):
                Ub[st, i] = m[st] * lam[i]
        for i in range(n):
            unew[i] = lam[i]
            ftb[i] = 0.0
        for st in range(s - 1, -1, -1):
            for i in range(n):
                Rb[st, i] = Ub[st, i]
            lu_solve_transposed(W, piv, Rb[st])
            hd = hs * dd[st]
            for i in range(n):
                ftb[i] += hd * Rb[st, i]
            if has_mass:  # the stages' M sum_j (C_ij / h) U_j: M^T rbar_i
                for i in range(n):
                    acc = 0.0
                    for q in range(n):
                        acc += mass[q, i] * Rb[st, q]
                    tmp[i] = acc
            else:
                for i in range(n):
                    tmp[i] = Rb[st, i]
            for j in range(st):
                cj = C[st, j] / hs
                for i in range(n):
                    Ub[j, i] += cj * tmp[i]
            if vjp(Rb[st], Y[st], p, t + c[st] * hs, k, ub, pb) != 0:
                record_vjp_failure(fail, t + c[st] * hs, Rb[st], Y[st])
                code = RHS_ERROR
                break
            nvjp += 1
            for i in range(n):
                unew[i] += ub[i]
            for j in range(npar):
                pbar[j] += pb[j]
            for j in range(st):
                aj = a[st, j]
                if aj != 0.0:
                    for i in range(n):
                        Ub[j, i] += aj * ub[i]
        if code != SUCCESS:
            break
        # grad_(u, p) sum_i Rb_i^T J(u, p) U_i: pairs (w, v), forward differences of the vjp
        unorm = 0.0
        for i in range(n):
            unorm = max(unorm, abs(u[i]))
        pairs = s if s <= n else n
        if s > n:
            for i in range(n):
                for j in range(n):
                    acc = 0.0
                    for st in range(s):
                        acc += Rb[st, i] * U[st, j]
                    M[i, j] = acc
        for i in range(n):
            wsum[i] = 0.0
        for q in range(pairs):
            # w = Rb[q], v = U[q]; or w = M[:, q], v = e_q
            vmax = 0.0
            wmax = 0.0
            for i in range(n):
                if s <= n:
                    vmax = max(vmax, abs(U[q, i]))
                    evec[i] = Rb[q, i]
                else:
                    evec[i] = M[i, q]
                wmax = max(wmax, abs(evec[i]))
            if s > n:
                vmax = 1.0
            if vmax == 0.0 or wmax == 0.0:
                continue
            eps = SQRT_EPS * (1.0 + unorm) / vmax
            for i in range(n):
                if s <= n:
                    tmp[i] = u[i] + eps * U[q, i]
                else:
                    tmp[i] = u[i]
            if s > n:
                tmp[q] += eps
            if vjp(evec, tmp, p, t, k, ub, pb) != 0:
                record_vjp_failure(fail, t, evec, tmp)
                code = RHS_ERROR
                break
            nvjp += 1
            ie = 1.0 / eps
            for i in range(n):
                unew[i] += ub[i] * ie
                wsum[i] += evec[i] * ie
            for j in range(npar):
                pbar[j] += pb[j] * ie
        if code != SUCCESS:
            break
        if vjp(wsum, u, p, t, k, ub, pb) != 0:
            record_vjp_failure(fail, t, wsum, u)
            code = RHS_ERROR
            break
        nvjp += 1
        for i in range(n):
            unew[i] -= ub[i]
        for j in range(npar):
            pbar[j] -= pb[j]
        # f_t = (4 f(t + e) - 3 f(t) - f(t + 2 e)) / (2 e), e = direction dt_ (non-autonomous)
        if not autonomous:
            for r in range(3):
                if r == 0:
                    tr, wr = t + direction * dt_, 4.0
                elif r == 1:
                    tr, wr = t, -3.0
                else:
                    tr, wr = t + 2.0 * direction * dt_, -1.0
                if vjp(ftb, u, p, tr, k, ub, pb) != 0:
                    record_vjp_failure(fail, tr, ftb, u)
                    code = RHS_ERROR
                    break
                nvjp += 1
                sc = wr / (2.0 * direction * dt_)
                for i in range(n):
                    unew[i] += sc * ub[i]
                for j in range(npar):
                    pbar[j] += sc * pb[j]
            if code != SUCCESS:
                break
        for i in range(n):
            lam[i] = unew[i]
        steps += 1
    while code == SUCCESS and sp >= 0 and save_pos[sp] == 0:
        for i in range(n):
            lam[i] += dl_du[sp, i]
        sp -= 1
    for i in range(n):
        ubar[i] = lam[i]
    stats[0] += steps
    stats[1] += nvjp
    return code
