"""Discrete adjoint through the explicit Runge-Kutta steps of a forward solve.

The gradient of the *discretised* solution (what an optimiser actually sees): the forward
solve keeps its accepted steps; the reverse sweep recomputes each step's stages and
back-propagates through them with the problem's in-place vjp (for a network: the chain's
compiled vjp; step sizes are treated as constants, as in diffrax's default adjoint). Jumps
(doses) add constants, through which the adjoint passes unchanged. Save points inside a step
were interpolated by the method's continuous extension (linear in the stages); their loss
gradients enter that step's stage adjoints with the interpolation weights.
"""

from __future__ import annotations

from .._jit import kernel
from ..nn._compiled import grad_row, network_backward, work_rows_of
from ..ode._abi import vjp_from_address
from ..ode._codes import RHS_ERROR, SUCCESS
from ..ode.explicit._kernels import find_save_positions  # noqa: F401 (re-export)
from ._continuous import record_vjp_failure


@kernel
def discrete_adjoint(
    vaddr,
    k,
    p,
    A,
    b,
    c,
    ts,
    us,
    kstore,
    astore,
    nstore,
    save_pos,
    save_inner,
    save_w,
    dl_du,
    pbar,
    ubar,
    ws,
    pb,
    fail,
):
    """Reverse sweep through the stored steps of du/dt = f(u, p, t).

    ``vaddr``: the address of the problem's vjp (a ``numba.cfunc`` of ``VJP_SIGNATURE``),
    ``k`` the network kernels it receives.

    ``ts[:nstore]``, ``us[:nstore]``: the stored steps of the forward solve (duplicate times
    mark jumps: left limit, then right limit). ``kstore[m]``: the stages of the step ending at
    entry ``m``, kept by the forward solve so they are not recomputed. ``astore``: for
    du/dt = chain(u; p) only, the network's work rows (activations and their derivatives) the
    forward evaluation of each stage left in its work buffer (shape ``(capacity, s, R)``); each
    stage's vjp is then only the chain's backward pass, run in that stored buffer (``R`` must
    be ``k.work.size``; a multiple of the chain's rows: a tile of trajectories in lockstep,
    ``k.samples.shape[0]`` of them, see ``scichains.models._lockstep``). ``R = 0``: call the
    vjp instead.
    Save point ``i`` (``dl_du[i]``: the loss gradient there) is the stored entry
    ``save_pos[i]`` if ``save_inner[i]`` is False; else it lies inside the step ending at entry
    ``save_pos[i]`` and was interpolated, ``u_prev + h sum_st save_w[i, st] K_st``, and the
    sweep differentiates through that continuous extension. Writes dL/dp into ``pbar`` and
    dL/du0 into ``ubar``. ``ws``: scratch of shape ``(2 s + 3, n)``; ``pb``: scratch like
    ``p``. Returns SUCCESS (0), or RHS_ERROR (5: :class:`~scichains.ode.ReturnCode`) if the
    vjp raised (``fail = [t, v, u]`` of that call, length ``1 + 2 n``). Allocates nothing.
    """
    vjp = vjp_from_address(vaddr)
    s = b.shape[0]
    n = us.shape[1]
    R = astore.shape[2]
    ga = grad_row(k)
    T = R // work_rows_of(k) if R > 0 else 1  # > 1: a tile of trajectories in lockstep
    mt = k.samples.shape[0]
    nt = n // mt
    Kbar = ws[s : 2 * s]
    y = ws[2 * s]
    ybar = ws[2 * s + 1]
    for j in range(pbar.shape[0]):
        pbar[j] = 0.0
    for i in range(n):
        ubar[i] = 0.0
    sp = save_pos.shape[0] - 1
    for m in range(nstore - 1, 0, -1):
        while sp >= 0 and save_pos[sp] == m and not save_inner[sp]:
            for i in range(n):
                ubar[i] += dl_du[sp, i]
            sp -= 1
        if ts[m - 1] == ts[m]:
            continue  # a jump: u_right = u_left + constant
        h = ts[m] - ts[m - 1]
        u = us[m - 1]
        K = kstore[m]
        for st in range(s):
            for i in range(n):
                Kbar[st, i] = h * b[st] * ubar[i]
        # save points interpolated inside this step: u_prev + h sum_st w_st K_st
        while sp >= 0 and save_pos[sp] == m and save_inner[sp]:
            for st in range(s):
                a = h * save_w[sp, st]
                for i in range(n):
                    Kbar[st, i] += a * dl_du[sp, i]
            for i in range(n):
                ubar[i] += dl_du[sp, i]
            sp -= 1
        for st in range(s - 1, -1, -1):
            nz = False
            for i in range(n):
                if Kbar[st, i] != 0.0:
                    nz = True
                    break
            if not nz:
                continue
            if R > 0 and T == 1:
                # back-propagate in the stage's stored work buffer itself (only its gradient
                # rows are written, so a second sweep reads the same activations)
                ws_ = astore[m, st]
                for i in range(n):
                    ws_[ga + i] = Kbar[st, i]
                r = network_backward(k, p, pb, ws_, 1, 1)
                for i in range(n):
                    ybar[i] = ws_[r + i]
            elif R > 0:
                # trajectories in lockstep: the stored buffer is a tile of T columns, one
                # trajectory of nt states per column
                ws_ = astore[m, st]
                for f in range(nt):
                    for col in range(T):
                        ws_[(ga + f) * T + col] = Kbar[st, col * nt + f] if col < mt else 0.0
                r = network_backward(k, p, pb, ws_, T, mt)
                for col in range(mt):
                    for f in range(nt):
                        ybar[col * nt + f] = ws_[(r + f) * T + col]
            else:
                for i in range(n):
                    acc = 0.0
                    for j in range(st):
                        acc += A[st, j] * K[j, i]
                    y[i] = u[i] + h * acc
                if vjp(Kbar[st], y, p, ts[m - 1] + c[st] * h, k, ybar, pb) != 0:
                    record_vjp_failure(fail, ts[m - 1] + c[st] * h, Kbar[st], y)
                    return RHS_ERROR
            for j in range(pbar.shape[0]):
                pbar[j] += pb[j]
            for i in range(n):
                ubar[i] += ybar[i]
            for j in range(st):
                a = h * A[st, j]
                if a != 0.0:
                    for i in range(n):
                        Kbar[j, i] += a * ybar[i]
    while sp >= 0 and save_pos[sp] == 0:
        for i in range(n):
            ubar[i] += dl_du[sp, i]
        sp -= 1
    return SUCCESS


@kernel
def squared_error(us, pos, data, dl_du):
    """``sum_i |us[pos[i]] - data[i]|^2``; writes its gradient with respect to the saved states
    into ``dl_du``."""
    total = 0.0
    for i in range(pos.shape[0]):
        for k in range(data.shape[1]):
            r = us[pos[i], k] - data[i, k]
            total += r * r
            dl_du[i, k] = 2.0 * r
    return total
