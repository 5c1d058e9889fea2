"""The interpolating continuous adjoint of a stiff problem, integrated backward by the compiled
Rosenbrock stepper's method.

The adjoint system of du/dt = f(u, p, t) (see :mod:`scichains.adjoint._continuous`),

    d lam / dt = -J(t)^T lam,     d g / dt = -f_p(t)^T lam,     J = df/du(u(t)), f_p = df/dp,

is as stiff as the forward problem, so it is integrated backward with the same Rosenbrock
method (Rodas5P, Rosenbrock23), ``u(t)`` read from the forward solve's stored steps (cubic
Hermite, never across a dose). Its Jacobian with respect to ``y = [lam, g]`` is
``[[-J^T, 0], [-f_p^T, 0]]``, so the iteration matrix is block lower triangular:

    W = [[I/(h gamma) + J^T, 0], [f_p^T, I/(h gamma)]],

solved with one LU of ``A = I/(h gamma) + J`` (a transposed solve per stage) and
``x_g = h gamma (r_g - f_p^T x_lam)``, whose ``f_p^T`` terms are gathered into two vjp calls
per step (``g`` never feeds back into the right-hand side). ``J`` comes from
``n`` vjp calls per step (exact), ``dF/dt`` from a one-sided second-order difference in ``t``.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import inline_kernel, kernel
from ..ode._abi import vjp_from_address
from ..ode._codes import MAX_STEPS, NONFINITE, RHS_ERROR, SINGULAR, SUCCESS
from ..ode._control import E_FLOOR, NONFINITE_FLOOR, pi_control, pi_gains
from ..ode.stiff._linalg import lu_factor, lu_solve_transposed
from ._continuous import _hermite, record_vjp_failure

CBRT_EPS = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)


@inline_kernel
def _adjoint_f(vjp, k, p, ts, us, fs, lo, hi, d, t, y, out, ui, ub, pb):
    """``out = [-J^T lam, -f_p^T lam]`` at ``t`` for ``y = [lam, g]``; 0, or 1 if the vjp
    raised."""
    n = ui.shape[0]
    npar = pb.shape[0]
    _hermite(ts, us, fs, lo, hi, t, d, ui)
    if vjp(y[:n], ui, p, t, k, ub, pb) != 0:
        return 1
    for i in range(n):
        out[i] = -ub[i]
    for j in range(npar):
        out[n + j] = -pb[j]
    return 0


@kernel
def rosenbrock_adjoint(
    vaddr,
    k,
    p,
    method,
    rtol,
    atol,
    max_steps,
    ts,
    us,
    fs,
    nstore,
    save_pos,
    dl_du,
    pbar,
    ubar,
    stats,
    fail,
):
    """Integrate the adjoint system backward over the stored forward solve with the Rosenbrock
    method ``method`` (a :class:`~scichains.ode.stiff._rosenbrock_kernel.RosenbrockTableau`).

    ``ts[:nstore]``, ``us``, ``fs``: the forward solve's entries (duplicate times: doses);
    ``save_pos[i]``/``dl_du[i]``: where save point ``i`` is stored and the loss gradient
    there. Writes dL/dp into ``pbar`` and dL/du0 into ``ubar``. ``stats`` (added to):
    ``[steps accepted, rejected, vjp calls]``. Returns a :class:`~scichains.ode.ReturnCode`
    value: SUCCESS, MAX_STEPS, RHS_ERROR (the vjp raised: ``fail = [t, lam, u]`` there,
    length ``1 + 2 n``), SINGULAR (the iteration matrix stayed singular while the step shrank
    to nothing) or NONFINITE (the adjoint state NaN or infinite at every step size tried).
    """
    a, C, c, dd, m, btilde, gamma, ctrl_order, _, _ = method
    vjp = vjp_from_address(vaddr)
    s = m.shape[0]
    n = us.shape[1]
    npar = pbar.shape[0]
    N = n + npar
    y = np.zeros(N)
    ynew = np.empty(N)
    ystage = np.empty(N)
    F0 = np.empty(N)
    Fs = np.empty(N)
    Ft = np.empty(N)
    F1 = np.empty(N)
    F2 = np.empty(N)
    U = np.empty((s, N))
    J = np.empty((n, n))
    A = np.empty((n, n))
    piv = np.empty(n, dtype=np.int64)
    ui = np.empty(n)
    u0 = np.empty(n)
    ub = np.empty(n)
    pb = np.empty(npar)
    evec = np.empty(n)
    xm = np.empty(n)
    xe = np.empty(n)
    pbm = np.empty(npar)
    pbe = np.empty(npar)
    # Tc = (I - gamma C)^-1 (unit lower triangular); mu = Tc^T m, nu = Tc^T btilde
    Tc = np.zeros((s, s))
    for i in range(s):
        Tc[i, i] = 1.0
        for j in range(i):
            acc = 0.0
            for q in range(j, i):
                acc += C[i, q] * Tc[q, j]
            Tc[i, j] = gamma * acc
    mu = np.zeros(s)
    nu = np.zeros(s)
    for j in range(s):
        for i in range(s):
            mu[j] += m[i] * Tc[i, j]
            nu[j] += btilde[i] * Tc[i, j]
    d = 1.0 if ts[nstore - 1] >= ts[0] else -1.0
    beta1, beta2 = pi_gains(ctrl_order)
    naccept = 0
    nreject = 0
    nvjp = 0
    code = SUCCESS
    h = 0.0
    for j in range(nstore - 1, 0, -1):  # the last forward step (skipping a dose at the end)
        h = abs(ts[j] - ts[j - 1])
        if h > 0.0:
            break
    sp = save_pos.shape[0] - 1
    hi = nstore - 1
    while True:
        while sp >= 0 and save_pos[sp] == hi:
            for i in range(n):
                y[i] += dl_du[sp, i]
            sp -= 1
        if hi == 0:
            break
        if ts[hi - 1] == ts[hi]:
            hi -= 1  # a dose: lam is continuous across an additive jump
            continue
        lo = hi - 1
        while lo > 0 and not (sp >= 0 and save_pos[sp] == lo) and ts[lo - 1] != ts[lo]:
            lo -= 1
        t = ts[hi]
        tend = ts[lo]
        qold = E_FLOOR
        fresh = False  # J, dF/dt and F0 at (t, y) are current
        while d * (t - tend) > 0.0:
            if naccept + nreject >= max_steps:
                code = MAX_STEPS
                break
            dist = d * (t - tend)
            landing = h >= dist * (1.0 - 1e-12)
            h_try = dist if landing else h
            hs = -d * h_try
            if not fresh:
                # J at (t, u(t)), row by row; F and dF/dt there
                _hermite(ts, us, fs, lo, hi, t, d, u0)
                for i in range(n):
                    for j in range(n):
                        evec[j] = 0.0
                    evec[i] = 1.0
                    if vjp(evec, u0, p, t, k, J[i], pb) != 0:
                        record_vjp_failure(fail, t, y, u0)
                        code = RHS_ERROR
                        break
                if code != SUCCESS:
                    break
                if _adjoint_f(vjp, k, p, ts, us, fs, lo, hi, d, t, y, F0, ui, ub, pb) != 0:
                    record_vjp_failure(fail, t, y, ui)
                    code = RHS_ERROR
                    break
                sgn = 1.0 if hs > 0.0 else -1.0
                dt_ = CBRT_EPS * max(abs(t), abs(hs), 1e-300)
                t1_ = t + sgn * dt_
                t2_ = t + 2.0 * sgn * dt_
                if _adjoint_f(vjp, k, p, ts, us, fs, lo, hi, d, t1_, y, F1, ui, ub, pb) != 0:
                    record_vjp_failure(fail, t1_, y, ui)
                    code = RHS_ERROR
                    break
                if _adjoint_f(vjp, k, p, ts, us, fs, lo, hi, d, t2_, y, F2, ui, ub, pb) != 0:
                    record_vjp_failure(fail, t2_, y, ui)
                    code = RHS_ERROR
                    break
                for i in range(N):
                    Ft[i] = (4.0 * F1[i] - 3.0 * F0[i] - F2[i]) / (2.0 * sgn * dt_)
                nvjp += n + 3
                fresh = True
            inv = 1.0 / (hs * gamma)
            for i in range(n):
                for j in range(n):
                    A[i, j] = J[i, j]
                A[i, i] += inv
            if lu_factor(A, piv) >= 0:
                nreject += 1
                h = 0.25 * h_try
                if h < 1e-14 * max(1.0, abs(t)):
                    code = SINGULAR
                    break
                continue
            for st in range(s):
                if st == 0:
                    for i in range(N):
                        Fs[i] = F0[i]
                else:
                    for i in range(N):
                        acc = y[i]
                        for j in range(st):
                            acc += a[st, j] * U[j, i]
                        ystage[i] = acc
                    tst = t + c[st] * hs
                    if landing and c[st] == 1.0:
                        tst = tend
                    if _adjoint_f(vjp, k, p, ts, us, fs, lo, hi, d, tst, ystage, Fs, ui, ub, pb):
                        record_vjp_failure(fail, tst, ystage, ui)
                        code = RHS_ERROR
                        break
                    nvjp += 1
                for i in range(N):
                    acc = Fs[i] + hs * dd[st] * Ft[i]
                    for j in range(st):
                        acc += (C[st, j] / hs) * U[j, i]
                    U[st, i] = acc
                # x_lam = A^-T r_lam; the g part without its f_p^T x_lam terms (added below)
                lu_solve_transposed(A, piv, U[st, :n])
                for j in range(npar):
                    U[st, n + j] *= hs * gamma
            if code != SUCCESS:
                break
            # x_g,i = h gamma (r_g,i - f_p^T x_lam,i): f_p at (t, u(t)) for every stage and g
            # never feeds back into F, so the f_p^T terms reach u_new and the error estimate
            # only through two combinations of the x_lam,i (mu = Tc^T m, nu = Tc^T btilde,
            # Tc = (I - gamma C)^-1): two vjp calls per step instead of one per stage
            for i in range(n):
                acc = 0.0
                acc2 = 0.0
                for j in range(s):
                    acc += mu[j] * U[j, i]
                    acc2 += nu[j] * U[j, i]
                xm[i] = acc
                xe[i] = acc2
            if vjp(xm, u0, p, t, k, ub, pbm) != 0 or vjp(xe, u0, p, t, k, ub, pbe) != 0:
                record_vjp_failure(fail, t, xm, u0)
                code = RHS_ERROR
                break
            nvjp += 2
            if code != SUCCESS:
                break
            e = 0.0
            finite = True
            for i in range(N):
                acc = y[i]
                acc2 = 0.0
                for j in range(s):
                    acc += m[j] * U[j, i]
                    acc2 += btilde[j] * U[j, i]
                if i >= n:
                    acc -= hs * gamma * pbm[i - n]
                    acc2 -= hs * gamma * pbe[i - n]
                ynew[i] = acc
                if not math.isfinite(acc):
                    finite = False
                sc = atol + max(abs(y[i]), abs(acc)) * rtol
                e += (acc2 / sc) ** 2
            e = math.sqrt(e / N) if finite else math.nan
            accepted, h_next, qold = pi_control(e, h_try, qold, beta1, beta2)
            if not accepted:
                if not math.isfinite(e) and h_try < NONFINITE_FLOOR * max(1.0, abs(t)):
                    code = NONFINITE  # NaN or inf at every step size down to rounding: give up
                    break
                h = h_next
                nreject += 1
                continue
            naccept += 1
            for i in range(N):
                y[i] = ynew[i]
            t = tend if landing else t + hs
            fresh = False
            h = h_next if not landing else max(h_next, h)
        if code != SUCCESS:
            break
        hi = lo
    for i in range(n):
        ubar[i] = y[i]
    for j in range(npar):
        pbar[j] = y[n + j]
    stats[0] += naccept
    stats[1] += nreject
    stats[2] += nvjp
    return code
