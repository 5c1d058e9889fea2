"""The Jacobian ``df/du`` inside the compiled stiff steppers (Rosenbrock and ESDIRK): exact
from the problem's vjp, or by forward differences; a non-finite entry is a status code that
names it."""

from __future__ import annotations

import math

from ..._jit import inline_kernel
from .._abi import record_failure
from .._codes import JACOBIAN_NONFINITE, RHS_ERROR, SUCCESS

JAC_EXACT, JAC_FD = 0, 1
"""How the Jacobian is made: from the vjp (``n`` calls, exact) or by forward differences."""


@inline_kernel
def jacobian_into(f, vjp, jac_mode, u, f0, p, t, k, J, evec, tmp, du, pb, fail):
    """``J = df/du(t, u)`` (``f0 = f(t, u)``, used by the differences). Returns ``(code,
    calls of f)``: SUCCESS; RHS_ERROR (``f`` or the vjp raised: ``fail = [t, x]`` of that
    call); JACOBIAN_NONFINITE (``fail = [t, u, i, j]``: entry ``df_i/du_j`` is NaN or
    infinite). ``evec``, ``tmp``, ``du`` (n,) and ``pb`` (len(p),) are scratch."""
    n = u.shape[0]
    nf = 0
    if jac_mode == JAC_EXACT:
        # row i of df/du is e_i^T df/du: one vjp each, exact
        for i in range(n):
            for j in range(n):
                evec[j] = 0.0
            evec[i] = 1.0
            if vjp(evec, u, p, t, k, J[i], pb) != 0:
                record_failure(fail, t, u)
                return RHS_ERROR, nf
    else:
        # forward differences, column by column (Hairer & Wanner's increment)
        for j in range(n):
            delta = math.sqrt(2.220446049250313e-16 * max(1e-5, abs(u[j])))
            for i in range(n):
                tmp[i] = u[i]
            tmp[j] += delta
            nf += 1
            if f(du, tmp, p, t, k) != 0:
                record_failure(fail, t, tmp)
                return RHS_ERROR, nf
            for i in range(n):
                J[i, j] = (du[i] - f0[i]) / delta
    bad = -1
    for i in range(n):
        for j in range(n):
            if bad < 0 and not math.isfinite(J[i, j]):
                bad = i * n + j
    if bad >= 0:
        record_failure(fail, t, u)
        fail[1 + n] = bad // n
        fail[2 + n] = bad % n
        return JACOBIAN_NONFINITE, nf
    return SUCCESS, nf
