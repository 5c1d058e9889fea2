"""Forward sensitivities: du/d(p, u0) integrated alongside u.

The augmented state is ``y = [u, S]`` with ``S = du/d(p, u0)`` (``n x P``, ``P = len(p) + n``,
row-major), ``dS/dt = (df/du) S + [df/dp, 0]`` and ``S(t0) = [0, I]``. The Jacobian rows come
from ``n`` vjps with unit vectors, so any problem with a vjp (generated or hand-written, with
or without a network) has forward sensitivities. The augmented right-hand side is one cached
C-callable handed to the ordinary compiled stepper, so saving, doses (``S`` is continuous
across an additive dose) and step-size control (over ``u`` and ``S``) are the solver's own.

The augmented parameter vector carries what that right-hand side needs: a header
``[f address, vjp address, n, len(p)]`` (the addresses stored bit-for-bit), the problem's
``p``, and scratch for the Jacobian (so the right-hand side allocates nothing).
"""

from __future__ import annotations

import numpy as np

from ..ode._abi import RHS_SIGNATURE, LazyCfunc, rhs_from_address, vjp_from_address

HEADER = 4


def _augmented(dy, y, pa, t, k):
    head = pa[:2].view(np.int64)
    f = rhs_from_address(head[0])
    vjp = vjp_from_address(head[1])
    n = np.int64(pa[2])
    npar = np.int64(pa[3])
    P = npar + n
    p = pa[HEADER : HEADER + npar]
    s0 = HEADER + npar
    J = pa[s0 : s0 + n * (n + npar)]  # row i: [df_i/du, df_i/dp]
    e = pa[s0 + n * (n + npar) : s0 + n * (n + npar) + n]
    u = y[:n]
    if f(dy[:n], u, p, t, k) != 0:
        return 1
    for i in range(n):
        for j in range(n):
            e[j] = 0.0
        e[i] = 1.0
        r = i * (n + npar)
        if vjp(e, u, p, t, k, J[r : r + n], J[r + n : r + n + npar]) != 0:
            return 1
    for i in range(n):
        r = i * (n + npar)
        out = dy[n + i * P : n + (i + 1) * P]
        for j in range(npar):
            out[j] = J[r + n + j]
        for j in range(npar, P):
            out[j] = 0.0
        for m in range(n):
            jim = J[r + m]
            if jim != 0.0:
                srow = y[n + m * P : n + (m + 1) * P]
                for j in range(P):
                    out[j] += jim * srow[j]
    return 0


augmented_rhs = LazyCfunc(RHS_SIGNATURE, _augmented)
"""The augmented right-hand side (``augmented_rhs.get()``: a C-callable of RHS_SIGNATURE,
compiled, or loaded from numba's cache, the first time forward sensitivities run rather than
whenever ``scichains.adjoint`` is imported)."""


def augmented_params(f_address: int, vjp_address: int, n: int, p: np.ndarray) -> np.ndarray:
    """The augmented parameter vector: header, ``p``, scratch."""
    npar = p.size
    pa = np.zeros(HEADER + npar + n * (n + npar) + n)
    pa[:2].view(np.int64)[:] = (f_address, vjp_address)
    pa[2] = n
    pa[3] = npar
    pa[HEADER : HEADER + npar] = p
    return pa


def augmented_u0(u0: np.ndarray, npar: int) -> np.ndarray:
    """``[u0, S0]`` with ``S0 = [0, I]``."""
    n = u0.size
    P = npar + n
    y0 = np.zeros(n + n * P)
    y0[:n] = u0
    S = y0[n:].reshape(n, P)
    S[:, npar:] = np.eye(n)
    return y0
