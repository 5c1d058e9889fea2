"""Continuous adjoints: the adjoint ODE integrated backward with an adaptive RK method.

With ``lam(t) = dL/du(t)`` and ``g(t)`` the parameter gradient accumulated from ``t`` to the
end, in the direction of integration:

    d lam / dt = -(df/du)^T lam,     d g / dt = -(df/dp)^T lam,

integrated from the last time back to ``t0``, ``lam`` jumping by ``dL/du(t_i)`` at each save
point. Doses (additive jumps) leave ``lam`` continuous. ``u(t)`` is read from the forward
solve's stored steps (cubic Hermite interpolation, never across a dose): SciMLSensitivity's
``InterpolatingAdjoint`` without checkpoints. The integration restarts at every save point and
dose, so the interpolation is always within one smooth piece of the forward solution.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import inline_kernel, kernel
from ..ode._abi import rhs_from_address, vjp_from_address
from ..ode._codes import MAX_STEPS, NONFINITE, RHS_ERROR, SUCCESS
from ..ode._control import E_FLOOR, NONFINITE_FLOOR, pi_control, pi_gains
from ..ode._solution import raise_sweep_failure

INTERPOLATING, QUADRATURE, BACKSOLVE = 0, 1, 2


@inline_kernel
def _hermite(ts, us, fs, lo, hi, tq, d, out):
    """``u(tq)`` from the stored entries ``lo..hi`` (one smooth piece), times ordered in
    direction ``d`` (+1 or -1)."""
    a = lo
    b = hi
    # binary search for the interval [ts[a], ts[a + 1]] holding tq
    while b - a > 1:
        mid = (a + b) // 2
        if d * (ts[mid] - tq) <= 0.0:
            a = mid
        else:
            b = mid
    t0 = ts[a]
    h = ts[a + 1] - t0
    th = (tq - t0) / h
    for i in range(out.shape[0]):
        y0 = us[a, i]
        y1 = us[a + 1, i]
        out[i] = (
            (1.0 - th) * y0
            + th * y1
            + th
            * (th - 1.0)
            * ((1.0 - 2.0 * th) * (y1 - y0) + (th - 1.0) * h * fs[a, i] + th * h * fs[a + 1, i])
        )


@inline_kernel
def _adjoint_rhs(f, vjp, mode, k, p, ts, us, fs, lo, hi, d, t, y, dy, ui, ub, pb):
    """``dy = [-(df/du)^T lam, -(df/dp)^T lam (, f(u))]`` at time ``t`` for
    ``y = [lam, g (, u)]``; ``u`` interpolated, or (BACKSOLVE) part of ``y``."""
    n = ui.shape[0]
    npar = pb.shape[0]
    if mode == BACKSOLVE:
        u = y[n + npar : n + npar + n]
        for i in range(n):
            ui[i] = u[i]
        if f(dy[n + npar : n + npar + n], u, p, t, k) != 0:
            return 1
        if vjp(y[:n], u, p, t, k, ub, pb) != 0:
            return 1
    else:
        _hermite(ts, us, fs, lo, hi, t, d, ui)
        if vjp(y[:n], ui, p, t, k, ub, pb) != 0:
            return 1
    for i in range(n):
        dy[i] = -ub[i]
    for j in range(npar):
        dy[n + j] = -pb[j]
    return 0


@inline_kernel
def record_vjp_failure(fail, t, lam, u):
    """``fail = [t, lam, u]``: where the adjoint's user functions failed."""
    n = u.shape[0]
    fail[0] = t
    for i in range(n):
        fail[1 + i] = lam[i]
        fail[1 + n + i] = u[i]


@kernel
def continuous_adjoint(
    mode,
    faddr,
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
    ws,
    K,
    stats,
    carry,
    fail,
):
    """Integrate the adjoint system backward over the stored forward solve.

    ``method``: the explicit method (:class:`~scichains.ode.explicit._kernels.Tableau`) and its
    controller order. ``mode``: INTERPOLATING (``u`` from the stored steps; error control on
    ``[lam, g]``), QUADRATURE (the same, error control on ``lam`` only: ``g`` is a quadrature
    with the method's weights on the adjoint's steps), BACKSOLVE (``u`` integrated backward with
    ``lam``, restarted from the stored values at every save point and dose; needs ``faddr``, the
    address of the right-hand side).

    ``ts[:nstore]``, ``us``, ``fs``: the forward solve's entries (duplicate times: doses);
    ``save_pos[i]``/``dl_du[i]``: where save point ``i`` is stored and the loss gradient
    there. Writes dL/dp into ``pbar`` and dL/du0 into ``ubar``. ``ws``: scratch of shape
    ``(5, 2 n + len(p))``; ``K``: scratch of shape ``(stages, 2 n + len(p))``; ``stats``: out,
    ``[steps accepted, rejected, vjp calls]`` (added to). ``carry``: start from the adjoint
    state ``lam = ubar``, ``g = pbar`` given at the last entry (a checkpointed solve runs
    one segment at a time) instead of zero. Returns a :class:`~scichains.ode.ReturnCode`
    value: SUCCESS, MAX_STEPS, RHS_ERROR (the right-hand side or the vjp raised: ``fail =
    [t, lam, u]`` there, length ``1 + 2 n``) or NONFINITE (the adjoint state NaN or infinite
    at every step size tried).
    Allocates nothing.
    """
    A, b, c, btilde, ctrl_order, _ = method
    vjp = vjp_from_address(vaddr)
    f = rhs_from_address(faddr)
    s = b.shape[0]
    n = us.shape[1]
    npar = pbar.shape[0]
    N = n + npar + (n if mode == BACKSOLVE else 0)
    Ne = n if mode == QUADRATURE else N  # the components under error control
    y = ws[0]
    ynew = ws[1]
    tmp = ws[2]
    ui = ws[3, :n]
    ub = ws[4, :n]
    pb = ws[4, n : n + npar]
    for j in range(N):
        y[j] = 0.0
    if carry:
        for i in range(n):
            y[i] = ubar[i]
        for j in range(npar):
            y[n + j] = pbar[j]
    d = 1.0 if ts[nstore - 1] >= ts[0] else -1.0
    beta1, beta2 = pi_gains(ctrl_order)
    naccept = 0
    nreject = 0
    nvjp = 0
    code = SUCCESS
    # first step: as long as the last forward step
    h = 0.0
    if carry:
        # one segment of a checkpointed solve, whose last step may be a short landing one:
        # start with its longest step
        for j in range(1, nstore):
            h = max(h, abs(ts[j] - ts[j - 1]))
    else:
        for j in range(nstore - 1, 0, -1):  # skipping a dose at the end (equal times)
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
        if mode == BACKSOLVE:
            for i in range(n):
                y[n + npar + i] = us[hi, i]
        # integrate y from ts[hi] back to ts[lo] (steps of sign -d)
        t = ts[hi]
        tend = ts[lo]
        qold = E_FLOOR
        while d * (t - tend) > 0.0:
            if naccept + nreject >= max_steps:
                code = MAX_STEPS
                break
            dist = d * (t - tend)
            landing = h >= dist * (1.0 - 1e-12)
            h_try = dist if landing else h
            hs = -d * h_try
            if _adjoint_rhs(f, vjp, mode, k, p, ts, us, fs, lo, hi, d, t, y, K[0], ui, ub, pb):
                record_vjp_failure(fail, t, y, ui)
                code = RHS_ERROR
                break
            for st in range(1, s):
                for i in range(N):
                    acc = 0.0
                    for j in range(st):
                        acc += A[st, j] * K[j, i]
                    tmp[i] = y[i] + hs * acc
                ts_ = t + c[st] * hs
                if landing and c[st] == 1.0:
                    ts_ = tend
                if _adjoint_rhs(
                    f, vjp, mode, k, p, ts, us, fs, lo, hi, d, ts_, tmp, K[st], ui, ub, pb
                ):
                    record_vjp_failure(fail, ts_, tmp, ui)
                    code = RHS_ERROR
                    break
            if code != SUCCESS:
                break
            nvjp += s
            e = 0.0
            finite = True
            for i in range(N):
                acc = 0.0
                acc2 = 0.0
                for j in range(s):
                    acc += b[j] * K[j, i]
                    acc2 += btilde[j] * K[j, i]
                ynew[i] = y[i] + hs * acc
                if not math.isfinite(ynew[i]):
                    finite = False
                if i < Ne:
                    sc = atol + max(abs(y[i]), abs(ynew[i])) * rtol
                    e += (hs * acc2 / sc) ** 2
            e = math.sqrt(e / Ne) if finite else math.nan
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


@kernel
def adjoint_rhs_at(vaddr, k, p, ts, us, fs, lo, hi, t, y, dy, ui, ub, pb):
    """The interpolating adjoint's right-hand side at ``t`` (for an external integrator):
    ``dy = [-(df/du)^T lam, -(df/dp)^T lam]``, ``u(t)`` interpolated on entries ``lo..hi``."""
    vjp = vjp_from_address(vaddr)
    f = rhs_from_address(0)  # not called in this mode
    d = 1.0 if ts[hi] >= ts[lo] else -1.0
    return _adjoint_rhs(f, vjp, INTERPOLATING, k, p, ts, us, fs, lo, hi, d, t, y, dy, ui, ub, pb)


@kernel
def adjoint_jacobian_at(vaddr, k, p, ts, us, fs, lo, hi, t, JJ, ui, e, row, pb):
    """The Jacobian of :func:`adjoint_rhs_at` with respect to ``[lam, g]``: ``-(df/du)^T``
    and ``-(df/dp)^T`` in the first ``n`` columns, zeros elsewhere (from ``n`` vjps).
    Returns 0, or 1 if the vjp raised."""
    vjp = vjp_from_address(vaddr)
    n = ui.shape[0]
    d = 1.0 if ts[hi] >= ts[lo] else -1.0
    _hermite(ts, us, fs, lo, hi, t, d, ui)
    for a in range(JJ.shape[0]):
        for b in range(JJ.shape[1]):
            JJ[a, b] = 0.0
    for i in range(n):
        for j in range(n):
            e[j] = 0.0
        e[i] = 1.0
        if vjp(e, ui, p, t, k, row, pb) != 0:  # row i of df/du and of df/dp
            return 1
        for j in range(n):
            JJ[j, i] = -row[j]
        for j in range(pb.shape[0]):
            JJ[n + j, i] = -pb[j]
    return 0


def adjoint_over_plan(
    mode, plan, vaddr, p, rtol, atol, m, save_pos, dl_du, dp, du0, ws, K, stats, carry, lo=0
):
    """:func:`continuous_adjoint` over the ``m`` stored entries of ``plan`` from entry ``lo``
    on (its tableau, controller and step buffers; ``save_pos`` relative to ``lo``); raises
    :class:`ODESolveError` if it runs out of steps or a user function raised (chained to that
    exception)."""
    prob = plan.prob
    n = prob.u0.size
    fail = np.zeros(1 + 2 * n)
    code = continuous_adjoint(
        mode,
        prob.f_address,
        vaddr,
        prob.kernel,
        p,
        plan.tableau,
        rtol,
        atol,
        plan.max_steps,
        plan.ts[lo:],
        plan.us[lo:],
        plan.fs[lo:],
        m,
        save_pos,
        dl_du,
        dp,
        du0,
        ws,
        K,
        stats,
        carry,
        fail,
    )
    raise_sweep_failure(code, prob, p, fail, "adjoint solve: ")
