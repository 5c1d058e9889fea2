"""Discrete adjoint through the explicit Runge-Kutta steps of a forward solve.

The gradient of the *discretised* solution (what an optimiser actually sees): the forward
solve keeps its accepted steps; the reverse sweep recomputes each step's stages and
back-propagates through them with the problem's in-place vjp (for a network: the chain's
compiled vjp; step sizes are treated as constants, as in diffrax's default adjoint). Jumps
(doses) add constants, through which the adjoint passes unchanged.
"""

from __future__ import annotations

from .._jit import kernel
from ..nn._kernels import M_GA, vec_backward
from ..ode._kernels import vjp_from_address


@kernel
def discrete_adjoint(
    vaddr, k, p, A, b, c, ts, us, kstore, astore, nstore, save_pos, dl_du, pbar, ubar, ws, pb
):
    """Reverse sweep through the stored steps of du/dt = f(u, p, t).

    ``vaddr``: the address of the problem's vjp (a ``numba.cfunc`` of ``VJP_SIGNATURE``),
    ``k`` the network kernels it receives.

    ``ts[:nstore]``, ``us[:nstore]``: the stored steps of the forward solve (duplicate times
    mark jumps: left limit, then right limit). ``kstore[m]``: the stages of the step ending at
    entry ``m``, kept by the forward solve so they are not recomputed. ``astore``: for
    du/dt = chain(u; p) only, the network's work rows (activations and their derivatives) the
    forward evaluation of each stage left in ``k.work`` (shape ``(capacity, s, R)``); each
    stage's vjp is then only the chain's backward pass. ``R = 0``: call the vjp instead.
    ``save_pos[i]``: the stored index of save point ``i`` and ``dl_du[i]`` the loss gradient
    there. Writes dL/dp into ``pbar`` and dL/du0 into ``ubar``. ``ws``: scratch of shape
    ``(2 s + 3, n)``; ``pb``: scratch like ``p``. Allocates nothing.
    """
    vjp = vjp_from_address(vaddr)
    s = b.shape[0]
    n = us.shape[1]
    R = astore.shape[2]
    w = k.work
    ga = k.meta[M_GA]
    Kbar = ws[s : 2 * s]
    y = ws[2 * s]
    ybar = ws[2 * s + 1]
    for j in range(pbar.shape[0]):
        pbar[j] = 0.0
    for i in range(n):
        ubar[i] = 0.0
    sp = save_pos.shape[0] - 1
    for m in range(nstore - 1, 0, -1):
        while sp >= 0 and save_pos[sp] == m:
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
        for st in range(s - 1, -1, -1):
            nz = False
            for i in range(n):
                if Kbar[st, i] != 0.0:
                    nz = True
                    break
            if not nz:
                continue
            if R > 0:
                for i in range(R):
                    w[i] = astore[m, st, i]
                for i in range(n):
                    w[ga + i] = Kbar[st, i]
                r = vec_backward(k.spec, k.meta, p, pb, w)
                for i in range(n):
                    ybar[i] = w[r + i]
            else:
                for i in range(n):
                    acc = 0.0
                    for j in range(st):
                        acc += A[st, j] * K[j, i]
                    y[i] = u[i] + h * acc
                vjp(Kbar[st], y, p, ts[m - 1] + c[st] * h, k, ybar, pb)
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
    return 0


@kernel
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
