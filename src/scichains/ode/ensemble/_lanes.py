"""The lane-parallel ensemble loop: ``LANES`` trajectories of an explicit Runge-Kutta method
stepped together, one per SIMD lane.

The scalar stepper (:func:`scichains.ode.explicit._kernels.integrate`) spends most of a small
problem's time on the control around the stages (the error norm, a square root and two powers
for the step factor, branches, the continuous extension at the save times), which no
rearrangement of one trajectory vectorises. Here ``LANES`` trajectories share one loop: their
states are stored lanes-contiguous (``U[i, lane]``, stages ``K[stage, i, lane]``) so the stage
combinations, the solution update, the error estimate and its norm run as vector instructions
across the lanes. Each lane keeps its own time, step size, error-controller memory, stop and
save pointers, counters and status: masked lockstep, the same per-trajectory adaptive control
as ``solve`` (same controller, tolerances, tableau, first-step guess and continuous extension),
written so that a lane's arithmetic is the scalar stepper's operation for operation. A lane
whose trajectory ends (done or failed) takes the next trajectory of its block, so lanes stay
busy. The saves are made on the fly after each accepted step instead of from stored steps.

The right-hand side is called once per stage for all lanes, through a C-callable compiled per
problem (``_lane_ops.lane_rhs_address``) that runs the user's ``f(du, u, p, t)`` on each lane
in turn on small contiguous buffers (the user's function is inlined there). The kernel takes
its address, so it is compiled once per machine and cached.

State-dependent events: the lanes evaluate the conditions (``lane_conditions_address``, the
same way) at each trajectory's start and after each accepted step. A trajectory where a
condition moved to or across zero in its direction, or raised, leaves its lane at once and is
solved again from the start by the scalar stepper with events (which locates, records and
applies them); the others never leave the lanes, so an event that never fires costs one
condition call per step.

A trajectory's arithmetic does not depend on its lane or block: every lane runs the same
instructions (a vector instruction does per lane what the scalar one does), so the results are
identical bit for bit for any thread count or split into blocks and batches. The PI
controller's two fractional powers per step are :func:`lpow` for all lanes at once: the
instructions of the scalar steppers' :func:`~scichains.ode._pow.cpow` (fdlibm's log and exp)
on vectors, where the C library's ``pow`` lane by lane took ~2 us of a Lotka-Volterra
trajectory's ~8.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ..._jit import FLAGS, parallel_kernel
from .._codes import DT_UNDERFLOW, MAX_STEPS, NONFINITE, RHS_ERROR, SUCCESS
from .._control import (
    ACCEPT,
    E_FLOOR,
    GAMMA,
    GIVE_UP,
    QMAX,
    QMIN,
    REJECT,
    initial_finish,
    initial_probe,
    pi_gains,
)
from ._lane_ops import (
    LANES,
    data_address,
    events_seen,
    labs,
    ladd,
    lane_rhs_from_address,
    ldiv,
    lload,
    lmax,
    lmin,
    lmul,
    lpow,
    lsplat,
    lsqrt,
    lstore,
    lsub,
)


@numba.njit(inline="always", **FLAGS)
def _verdict(e, h_accept, h_reject, q_accept, h_try, qold, landing, dtmin):
    """:func:`scichains.ode._control.judge_step` given the controller's proposals for an
    accepted and for a rejected step (``h_try / q`` and ``h_try / min(1 / QMIN, q11 /
    GAMMA)``, made for all lanes at once with the same operations) and the error to remember
    (``max(e, E_FLOOR)``): ``(verdict, h, qold, nonfinite)``."""
    if not math.isfinite(e):
        h_next = h_try * QMIN
        if landing and h_try < dtmin:
            return GIVE_UP, h_next, qold, True
        return REJECT, h_next, qold, True
    if e > 1.0:
        return REJECT, h_reject, qold, False
    return ACCEPT, h_accept, q_accept, False


@numba.njit(**FLAGS)
def _finish(lane, code, traj, T, nf, naccept, nreject, status, t_reached, counts, active):
    """End lane ``lane``'s trajectory with ``code`` and free the lane."""
    i = traj[lane]
    status[i] = code
    t_reached[i] = T[lane]
    counts[i, 0] = nf[lane]
    counts[i, 1] = naccept[lane]
    counts[i, 2] = nreject[lane]
    traj[lane] = -1
    active[lane] = False


@numba.njit(**FLAGS)
def _record_failure(fail, i, t, X, lane):
    """``fail[i] = [t, X[:, lane]]``: where the right-hand side raised."""
    fail[i, 0] = t
    for c in range(X.shape[0]):
        fail[i, 1 + c] = X[c, lane]


@numba.njit(**FLAGS)
def _end_failed(
    failed, times, X, fail, traj, T, nf, naccept, nreject, status, t_reached, counts, active
):
    """End with ``RHS_ERROR`` the trajectories of the lanes set in ``failed`` (the right-hand
    side raised at ``times[lane]``, ``X[:, lane]``), recording where in ``fail``."""
    for lane in range(LANES):
        if (failed >> lane) & 1:
            _record_failure(fail, traj[lane], times[lane], X, lane)
            _finish(
                lane, RHS_ERROR, traj, T, nf, naccept, nreject, status, t_reached, counts, active
            )


@numba.njit(**FLAGS)
def lane_block(
    faddr,
    lo,
    hi,
    U0,
    P,
    t0,
    t1,
    method,
    control,
    stops,
    save,
    interp,
    out,
    status,
    t_reached,
    fail,
    counts,
    caddr,
    edir,
    redo,
):
    """Solve trajectories ``lo..hi-1`` (see :func:`solve_lanes`) ``LANES`` at a time."""
    A, b, c, btilde, ctrl_order, fsal = method
    rtol, atol, dt0, dtmin, max_steps, group = control[:6]
    f = lane_rhs_from_address(faddr)
    L = LANES
    n = out.shape[2]
    m_p = P.shape[1]
    s = b.shape[0]
    nsave = save.shape[0]
    deg = interp.shape[1]
    use_interp = interp.shape[0] > 0
    direction = 1.0 if t1 >= t0 else -1.0
    adaptive = ctrl_order > 0
    beta1, beta2 = pi_gains(ctrl_order)
    span = abs(t1 - t0)
    # the lanes' state: trajectory (-1: free), time, step (the controller's proposal), the
    # step tried and its signed form, whether it lands on a stop, the controller's memory
    traj = np.full(L, -1, dtype=np.int64)
    active = np.zeros(L, dtype=np.bool_)
    T = np.zeros(L)
    H = np.zeros(L)
    HT = np.zeros(L)
    HS = np.zeros(L)
    HN = np.zeros(L)
    landing = np.zeros(L, dtype=np.bool_)
    accepted = np.zeros(L, dtype=np.bool_)
    qold = np.full(L, E_FLOOR)
    last_nonfinite = np.zeros(L, dtype=np.bool_)
    stop_i = np.zeros(L, dtype=np.int64)
    save_q = np.zeros(L, dtype=np.int64)
    nf = np.zeros(L, dtype=np.int64)
    naccept = np.zeros(L, dtype=np.int64)
    nreject = np.zeros(L, dtype=np.int64)
    steps = np.zeros(L, dtype=np.int64)
    U = np.zeros((n, L))
    Unew = np.zeros((n, L))
    Tmp = np.zeros((n, L))
    Err = np.zeros((n, L))  # f at the first step's probe
    K = np.zeros((s, n, L))
    Ts = np.zeros(L)
    E = np.zeros(L)
    HACC = np.zeros(L)
    HREJ = np.zeros(L)
    QNEW = np.zeros(L)
    PL = np.zeros((L, m_p))
    scratch = np.zeros((2, n))
    # one lane's vectors, contiguous, for the first-step guess
    u1 = np.empty(n)
    f0 = np.empty(n)
    f1 = np.empty(n)
    tmp1 = np.empty(n)
    h0s = np.zeros(L)
    d1s = np.zeros(L)
    TN = np.zeros(L)
    SQ = np.zeros(L)
    THP = np.zeros((max(deg, 1), L))
    WST = np.zeros((s, L))
    SOUT = np.zeros((n, L))
    kaddr = np.empty(s, dtype=np.uintp)
    for st in range(s):
        kaddr[st] = data_address(K[st])
    a_u = data_address(U)
    a_tmp = data_address(Tmp)
    a_err = data_address(Err)
    a_p = data_address(PL)
    a_t = data_address(T)
    a_ts = data_address(Ts)
    a_w = data_address(scratch)
    # events: the conditions at each lane's last point (GP) and at its new one (G)
    nev = edir.shape[0]
    conditions = lane_rhs_from_address(caddr)
    GP = np.zeros((max(nev, 1), L))
    G = np.zeros((max(nev, 1), L))
    cscratch = np.zeros((2, max(n, nev)))
    a_g = data_address(G)
    a_unew = data_address(Unew)
    a_tn = data_address(TN)
    a_cw = data_address(cscratch)
    nxt = lo
    while True:
        # ---- give free lanes the next trajectories, and start them; a lane whose start
        # fails (the right-hand side raised) is free again at once; then the step each
        # active lane tries, ending the trajectories that are done or cannot go on
        while True:
            while True:
                new = 0
                for lane in range(L):
                    if traj[lane] < 0 and nxt < hi:
                        i = nxt
                        nxt += 1
                        traj[lane] = i
                        active[lane] = True
                        urow = i if U0.shape[0] > 1 else 0
                        prow = i if P.shape[0] > 1 else 0
                        for q in range(n):
                            U[q, lane] = U0[urow, q]
                        for q in range(m_p):
                            PL[lane, q] = P[prow, q]
                        T[lane] = t0
                        qold[lane] = E_FLOOR
                        last_nonfinite[lane] = False
                        nf[lane] = 1
                        naccept[lane] = 0
                        nreject[lane] = 0
                        steps[lane] = 0
                        k = 0
                        while k < stops.shape[0] and stops[k] == t0:
                            k += 1
                        stop_i[lane] = k
                        # save times at t0 take the initial state
                        q = 0
                        while q < nsave and save[q] == t0:
                            for r in range(n):
                                out[i, q, r] = U[r, lane]
                            q += 1
                        save_q[lane] = q
                        new |= 1 << lane
                if new == 0:
                    break
                failed = f(kaddr[0], a_u, a_p, a_t, a_w, n, m_p, new) & new
                if nev > 0:  # the conditions at t0; where one raised, the scalar stepper
                    # solves the trajectory (and says what raised)
                    raised = conditions(a_g, a_u, a_p, a_t, a_cw, n, m_p, new) & new
                    for lane in range(L):
                        if (raised >> lane) & 1:
                            redo[traj[lane]] = 1
                            traj[lane] = -1
                            active[lane] = False
                        elif (new >> lane) & 1:
                            for j in range(nev):
                                GP[j, lane] = G[j, lane]
                    new &= ~raised
                    failed &= ~raised
                # (the failed lanes' times are t0)
                _end_failed(
                    failed,
                    T,
                    U,
                    fail,
                    traj,
                    T,
                    nf,
                    naccept,
                    nreject,
                    status,
                    t_reached,
                    counts,
                    active,
                )
                probe = 0
                for lane in range(L):
                    if not (new >> lane) & 1 or (failed >> lane) & 1:
                        continue
                    if dt0 > 0.0:
                        H[lane] = abs(dt0)
                    else:
                        # Hairer & Wanner's first step, as the scalar stepper makes it
                        for q in range(n):
                            u1[q] = U[q, lane]
                            f0[q] = K[0, q, lane]
                        h0, d1 = initial_probe(u1, f0, span, direction, rtol, atol, tmp1)
                        h0s[lane] = h0
                        d1s[lane] = d1
                        for q in range(n):
                            Tmp[q, lane] = tmp1[q]
                        Ts[lane] = t0 + direction * h0
                        probe |= 1 << lane
                if probe != 0:
                    failed = f(a_err, a_tmp, a_p, a_ts, a_w, n, m_p, probe)
                    for lane in range(L):
                        if not (probe >> lane) & 1:
                            continue
                        nf[lane] += 1
                        for q in range(n):
                            u1[q] = U[q, lane]
                            f0[q] = K[0, q, lane]
                            f1[q] = Err[q, lane]
                        h = initial_finish(u1, f0, f1, h0s[lane], d1s[lane], rtol, atol, ctrl_order)
                        H[lane] = abs(h)
                    _end_failed(
                        failed & probe,
                        Ts,
                        Tmp,
                        fail,
                        traj,
                        T,
                        nf,
                        naccept,
                        nreject,
                        status,
                        t_reached,
                        counts,
                        active,
                    )
            freed = False
            for lane in range(L):
                if traj[lane] < 0:
                    continue
                code = -1
                if not direction * (t1 - T[lane]) > 0.0:
                    code = SUCCESS
                elif steps[lane] >= max_steps:
                    code = MAX_STEPS
                else:
                    target = stops[stop_i[lane]]
                    dist = direction * (target - T[lane])
                    if H[lane] >= dist * (1.0 - 1e-12):
                        h_try = dist
                        land = True
                    else:
                        h_try = H[lane]
                        land = False
                    if not land and h_try < dtmin:
                        code = NONFINITE if last_nonfinite[lane] else DT_UNDERFLOW
                    HT[lane] = h_try
                    HS[lane] = direction * h_try
                    landing[lane] = land
                if code >= 0:
                    freed = True
                    _finish(
                        lane,
                        code,
                        traj,
                        T,
                        nf,
                        naccept,
                        nreject,
                        status,
                        t_reached,
                        counts,
                        active,
                    )
            if not (freed and nxt < hi):
                break
        mask = 0
        for lane in range(L):
            if active[lane]:
                mask |= 1 << lane
        if mask == 0:
            break  # every lane free and no trajectory left
        # ---- the stages, for every lane at once (one vector instruction per operation of
        # the scalar stepper)
        hsv = lload(HS, 0)
        tv = lload(T, 0)
        zero = lsplat(0.0)
        for st in range(1, s):
            for q in range(n):
                av = zero
                for j in range(st):
                    av = ladd(av, lmul(lsplat(A[st, j]), lload(K, (j * n + q) * L)))
                lstore(Tmp, q * L, ladd(lload(U, q * L), lmul(hsv, av)))
            lstore(Ts, 0, ladd(tv, lmul(lsplat(c[st]), hsv)))
            failed = f(kaddr[st], a_tmp, a_p, a_ts, a_w, n, m_p, mask)
            for lane in range(L):
                if (mask >> lane) & 1:
                    nf[lane] += 1
            if failed != 0:
                _end_failed(
                    failed,
                    Ts,
                    Tmp,
                    fail,
                    traj,
                    T,
                    nf,
                    naccept,
                    nreject,
                    status,
                    t_reached,
                    counts,
                    active,
                )
                mask &= ~failed
        # ---- the new state, its error estimate and the estimate's scaled norm
        ev = zero
        atolv = lsplat(atol)
        rtolv = lsplat(rtol)
        for q in range(n):
            av = zero
            bv = zero
            for j in range(s):
                kv = lload(K, (j * n + q) * L)
                av = ladd(av, lmul(lsplat(b[j]), kv))
                bv = ladd(bv, lmul(lsplat(btilde[j]), kv))
            uv = lload(U, q * L)
            unv = ladd(uv, lmul(hsv, av))
            lstore(Unew, q * L, unv)
            sc = ladd(atolv, lmul(lmax(labs(uv), labs(unv)), rtolv))
            r = ldiv(lmul(hsv, bv), sc)
            ev = ladd(ev, lmul(r, r))
        # a sum of squares: no max(0, .) as the scalar norm has, which would turn NaN into 0
        ev = lsqrt(ldiv(ev, lsplat(float(n))))
        lstore(E, 0, ev)
        if adaptive:
            # the PI controller's arithmetic (pi_control's operations) for all lanes at once;
            # _verdict below takes each lane's proposals
            q11v = lpow(ev, beta1)
            qbv = lpow(lload(qold, 0), beta2)
            htv = lload(HT, 0)
            gammav = lsplat(GAMMA)
            qv = lmax(lsplat(1.0 / QMAX), lmin(lsplat(1.0 / QMIN), ldiv(ldiv(q11v, qbv), gammav)))
            lstore(HACC, 0, ldiv(htv, qv))
            lstore(HREJ, 0, ldiv(htv, lmin(lsplat(1.0 / QMIN), ldiv(q11v, gammav))))
            lstore(QNEW, 0, lmax(ev, lsplat(E_FLOOR)))
        for lane in range(L):
            accepted[lane] = False
            if not active[lane]:
                continue
            steps[lane] += 1
            if adaptive:
                e = E[lane]
                for q in range(n):
                    if not math.isfinite(Unew[q, lane]):
                        e = math.nan  # as error_norm: an infinite state is never accurate
                verdict, h_next, qnew, nonfinite = _verdict(
                    e,
                    HACC[lane],
                    HREJ[lane],
                    QNEW[lane],
                    HT[lane],
                    qold[lane],
                    landing[lane],
                    dtmin,
                )
                qold[lane] = qnew
                if verdict != ACCEPT:
                    H[lane] = h_next
                    nreject[lane] += 1
                    if nonfinite:
                        last_nonfinite[lane] = True
                    if verdict == GIVE_UP:
                        _finish(
                            lane,
                            NONFINITE,
                            traj,
                            T,
                            nf,
                            naccept,
                            nreject,
                            status,
                            t_reached,
                            counts,
                            active,
                        )
                    continue
                last_nonfinite[lane] = False
            else:
                h_next = H[lane]
                finite = True
                for q in range(n):
                    if not np.isfinite(Unew[q, lane]):
                        finite = False
                if not finite:
                    _finish(
                        lane,
                        NONFINITE,
                        traj,
                        T,
                        nf,
                        naccept,
                        nreject,
                        status,
                        t_reached,
                        counts,
                        active,
                    )
                    continue
            accepted[lane] = True
            HN[lane] = h_next
            naccept[lane] += 1
            tnew = stops[stop_i[lane]] if landing[lane] else T[lane] + HS[lane]
            TN[lane] = tnew
            if not use_interp:
                # the steps land on the save times
                i = traj[lane]
                q = save_q[lane]
                while q < nsave and save[q] == tnew:
                    for r in range(n):
                        out[i, q, r] = Unew[r, lane]
                    q += 1
                save_q[lane] = q
            if landing[lane]:
                stop_i[lane] += 1
            H[lane] = h_next if not landing[lane] else max(h_next, H[lane])
        if nev > 0:
            amask = 0
            for lane in range(L):
                if accepted[lane]:
                    amask |= 1 << lane
            if amask != 0:
                raised = conditions(a_g, a_unew, a_p, a_tn, a_cw, n, m_p, amask)
                seen = events_seen(G, GP, edir, amask, raised)
                for lane in range(L):
                    if (seen >> lane) & 1:  # an event may have happened in this step: the
                        # scalar stepper solves this trajectory again
                        redo[traj[lane]] = 1
                        accepted[lane] = False
                        traj[lane] = -1
                        active[lane] = False
        if use_interp:
            # the saves inside the accepted steps, by the continuous extension on each lane's
            # step T -> TN: for all lanes at once, as often as one lane has another save time
            # there. A lane's operations are interpolate_saves' (the powers of theta made
            # once, then each stage's weight, then the state)
            while True:
                smask = 0
                for lane in range(L):
                    SQ[lane] = TN[lane]
                    if accepted[lane]:
                        q = save_q[lane]
                        if q < nsave and direction * (save[q] - TN[lane]) <= 0.0:
                            SQ[lane] = save[q]
                            smask |= 1 << lane
                if smask == 0:
                    break
                tov = lload(T, 0)
                hv = lsub(lload(TN, 0), tov)
                thv = ldiv(lsub(lload(SQ, 0), tov), hv)
                tp = lsplat(1.0)
                for d in range(deg):
                    tp = lmul(tp, thv)
                    lstore(THP, d * L, tp)
                for st in range(s):
                    wa = zero
                    for d in range(deg):
                        wa = ladd(wa, lmul(lsplat(interp[st, d]), lload(THP, d * L)))
                    lstore(WST, st * L, wa)
                for r in range(n):
                    wa = zero
                    for st in range(s):
                        wa = ladd(wa, lmul(lload(WST, st * L), lload(K, (st * n + r) * L)))
                    lstore(SOUT, r * L, ladd(lload(U, r * L), lmul(hv, wa)))
                for lane in range(L):
                    if (smask >> lane) & 1:
                        i = traj[lane]
                        q = save_q[lane]
                        src = Unew if SQ[lane] == TN[lane] else SOUT
                        for r in range(n):
                            out[i, q, r] = src[r, lane]
                        save_q[lane] = q + 1
        for lane in range(L):
            if accepted[lane]:
                T[lane] = TN[lane]
        for q in range(n):
            for lane in range(L):
                if accepted[lane]:
                    U[q, lane] = Unew[q, lane]
        if fsal:
            for q in range(n):
                for lane in range(L):
                    if accepted[lane]:
                        K[0, q, lane] = K[s - 1, q, lane]
        else:
            amask = 0
            for lane in range(L):
                if accepted[lane]:
                    amask |= 1 << lane
            if amask != 0:
                failed = f(kaddr[0], a_u, a_p, a_t, a_w, n, m_p, amask)
                for lane in range(L):
                    if (amask >> lane) & 1:
                        nf[lane] += 1
                _end_failed(
                    failed & amask,
                    T,
                    U,
                    fail,
                    traj,
                    T,
                    nf,
                    naccept,
                    nreject,
                    status,
                    t_reached,
                    counts,
                    active,
                )


@parallel_kernel
def solve_lanes(
    faddr,
    U0,
    P,
    t0,
    t1,
    method,
    control,
    stops,
    save,
    interp,
    nblocks,
    out,
    status,
    t_reached,
    fail,
    counts,
    caddr,
    edir,
    redo,
):
    """Solve ``m = out.shape[0]`` trajectories of an explicit method ``LANES`` at a time:
    trajectory ``i`` from ``U0[i]`` (or ``U0[0]`` when ``U0`` has one row) with parameters
    ``P[i]`` (or ``P[0]``), the right-hand side at ``faddr`` (:data:`LANE_RHS_SIGNATURE`),
    ``nblocks`` blocks of consecutive trajectories, one thread each.

    ``stops``: the times to land on (no jumps), ending with ``t1``; ``out[i]`` receives the
    states at ``save`` by the continuous extension ``interp`` when it has rows, else where the
    steps land on the save times (which are then among ``stops``). Unreached save times are
    left as they are. ``status``, ``t_reached``, ``fail`` (on RHS_ERROR the time and state of
    the failed call) and ``counts = [nf, naccept, nreject]`` as :func:`solve_batch` writes
    them. The ``control``'s error group must be 0.

    Events: ``caddr`` the conditions' lane C-callable (:func:`lane_conditions_address`) and
    ``edir`` their directions (``(0,)``: none; ``caddr`` is then not called). The conditions
    are evaluated at each trajectory's start and after each accepted step; a trajectory where
    an event may have happened is left with ``redo[i] = 1`` (its results unwritten but for
    earlier saves) for the scalar stepper.
    """
    m = out.shape[0]
    for blk in numba.prange(nblocks):
        lo = m * blk // nblocks
        hi = m * (blk + 1) // nblocks
        lane_block(
            faddr,
            lo,
            hi,
            U0,
            P,
            t0,
            t1,
            method,
            control,
            stops,
            save,
            interp,
            out,
            status,
            t_reached,
            fail,
            counts,
            caddr,
            edir,
            redo,
        )
