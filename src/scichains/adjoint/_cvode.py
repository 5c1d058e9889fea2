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
from ._events import refuse_simultaneous


def cvode_adjoint(
    prob, solver, ts, us, fs, save_pos, dl_du, rtol, atol, max_steps, cuts=None, jump=None
):
    """``(dL/dp, dL/du0)`` by CVODE on the adjoint system over the stored forward steps.

    ``cuts``: state-dependent events to pass back through, ``{R: (L, i, dL/dtau)}`` with
    ``L``/``R`` the stored entries just before and after event ``i``'s affect (``L == R``
    for an event without an applied affect, or whose affect changed no state); there the
    adjoint jumps by ``jump(i, L, R, lambda+, dL/dtau) -> (lambda-, the event's part of
    dL/dp)``."""
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
    cuts = {} if cuts is None else dict(cuts)
    while True:
        while sp >= 0 and save_pos[sp] == hi:
            y[:n] += dl_du[sp]
            sp -= 1
        if hi in cuts:  # an event: the adjoint's jump (and the event's part of dL/dp)
            L, i, dl_dtau = cuts.pop(hi)
            lam, dp_event = jump(i, L, hi, y[:n].copy(), dl_dtau)
            y[:n] = lam
            y[n:] += dp_event
            if L != hi:
                hi = L
                continue
        if hi == 0:
            break
        if ts[hi - 1] == ts[hi]:
            hi -= 1  # a dose: lam is continuous
            continue
        lo = hi - 1
        while (
            lo > 0
            and not (sp >= 0 and save_pos[sp] == lo)
            and ts[lo - 1] != ts[lo]
            and lo not in cuts
        ):
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


def event_records(found) -> tuple[np.ndarray, np.ndarray]:
    """``(times, which)`` of the events a CVODE solve recorded (``CVODEEvents``), in the order
    they happened (events at one time in list order)."""
    rec = sorted(((t, i) for i, times in enumerate(found.times) for t in times), key=lambda r: r[0])
    times = np.array([r[0] for r in rec], dtype=np.float64)
    return times, np.array([r[1] for r in rec], dtype=np.int64)


def event_cuts(ts, times, which, has_affect, dl_dtau) -> dict:
    """Where the CVODE adjoint jumps (:func:`cvode_adjoint`'s ``cuts``): for each recorded
    event that moves the loss (an affect, or its time in the loss), ``R: (L, i, dL/dtau)``
    with ``L`` the stored entry of its left limit and ``R`` of its right limit (``L`` when
    nothing was stored after it). Refuses simultaneous events, as the other methods do."""
    cuts = {}
    start = 0
    m = ts.size
    for r in range(times.size):
        i, t = int(which[r]), float(times[r])
        c = 0.0 if dl_dtau is None else float(dl_dtau[r])
        if not has_affect[i] and c == 0.0:
            continue
        refuse_simultaneous(times, which, t)
        L = start
        while L < m and ts[L] != t:
            L += 1
        if L == m:
            raise RuntimeError(f"events[{i}] at t = {t!r} is not among the stored steps")
        R = L + 1 if L + 1 < m and ts[L + 1] == t else L
        cuts[R] = (L, i, c)
        start = R
    return cuts
