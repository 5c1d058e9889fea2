"""Gradients of problems solved with CVODE: the adjoint system integrated backward by CVODE.

The forward solve keeps CVODE's steps (dense output between them); the interpolating adjoint
``[lam, g]`` is then integrated backward with the same CVODE method, piece by piece between
save points and doses, its right-hand side and exact Jacobian evaluated by compiled kernels
calling the problem's vjp. (scikit-sundae ships no CVODES: this is our adjoint.)
"""

from __future__ import annotations

import numpy as np

from ..ode._solution import FailedSolve, ReturnCode, raise_failure, user_error_failure
from ._continuous import adjoint_jacobian_at, adjoint_rhs_at


def cvode_adjoint(prob, solver, ts, us, fs, save_pos, dl_du, rtol, atol, max_steps):
    """``(dL/dp, dL/du0)`` by CVODE on the adjoint system over the stored forward steps."""
    from sksundae.cvode import CVODE

    n = us.shape[1]
    p = prob.p
    npar = p.size
    N = n + npar
    k = prob.kernel
    vaddr = prob.vjp_address
    ui, ub, pb, e, row = np.empty(n), np.empty(n), np.empty(npar), np.empty(n), np.empty(n)
    ybuf = np.empty(N)
    seg = [0, 0]
    # CVODE integrates each piece in s = d (t_hi - t), from 0 upward (scikit-sundae takes
    # positive steps only; starting at 0 keeps tiny first steps above rounding)
    d = 1.0 if ts[-1] >= ts[0] else -1.0

    failed = []

    def user_error(t, v):
        failure = user_error_failure(prob, p, t, ui, v, "adjoint solve: ")
        failed.append(failure)
        raise failure.exception or RuntimeError(failure.message)

    def rhsfn(s, y, yp):
        ybuf[:] = y
        t = ts[seg[1]] - d * s
        if adjoint_rhs_at(vaddr, k, p, ts, us, fs, seg[0], seg[1], t, ybuf, yp, ui, ub, pb):
            user_error(t, ybuf[:n].copy())
        yp *= -d

    def jacfn(s, y, yp, JJ):
        t = ts[seg[1]] - d * s
        if adjoint_jacobian_at(vaddr, k, p, ts, us, fs, seg[0], seg[1], t, JJ, ui, e, row, pb):
            user_error(t, None)
        JJ *= -d

    options = dict(
        method=solver.method,
        rtol=float(rtol),
        atol=float(atol),
        jacfn=jacfn,
        max_num_steps=int(max_steps),
        linsolver=solver.linsolver,
    )
    y = np.zeros(N)
    m = ts.size
    sp = save_pos.size - 1
    hi = m - 1
    while True:
        while sp >= 0 and save_pos[sp] == hi:
            y[:n] += dl_du[sp]
            sp -= 1
        if hi == 0:
            break
        if ts[hi - 1] == ts[hi]:
            hi -= 1  # a dose: lam is continuous
            continue
        lo = hi - 1
        while lo > 0 and not (sp >= 0 and save_pos[sp] == lo) and ts[lo - 1] != ts[lo]:
            lo -= 1
        seg[0], seg[1] = lo, hi
        # start with the forward solve's last step there (CVODE's own guess can be tiny)
        cv = CVODE(rhsfn, **options)
        s1 = d * float(ts[hi] - ts[lo])
        try:
            cv.init_step(0.0, y)
            res = cv.step(s1, tstop=s1)
        except Exception:
            if failed:  # a user function raised: ODESolveError chained to it
                raise_failure(failed[-1])
            raise
        if res.status < 0:
            raise_failure(
                FailedSolve(
                    ReturnCode.SOLVER_FAILURE,
                    res.t,
                    "adjoint solve: ",
                    f"CVODE failed with return code {res.status}: {res.message}",
                )
            )
        y = np.array(res.y, dtype=np.float64)
        hi = lo
    return y[n:].copy(), y[:n].copy()
