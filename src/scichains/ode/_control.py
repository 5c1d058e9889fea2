"""Step-size control shared by the compiled steppers (explicit, Rosenbrock, ESDIRK) and the
continuous adjoints: the first step (:func:`initial_step`), the scaled error norm
(:func:`error_norm`), and the verdict on a step (:func:`judge_step`, on :func:`pi_control`).

A PI controller on the scaled error norm ``e`` of a step (Hairer & Wanner, Solving ODEs II,
IV.2; Söderlind's gains ``beta1 = 0.7 / k``, ``beta2 = 0.4 / k`` for a method whose error
estimate has order ``k - 1``): accept when ``e <= 1`` and propose
``h_new = h / clamp((e^beta1 / e_old^beta2) / 0.9, 1/10, 5)``; reject otherwise and shrink
by ``e^beta1 / 0.9`` (at most 5x); a non-finite ``e`` (a stage overflowed) shrinks 5x. The
powers are :func:`~scichains.ode._pow.cpow` (fdlibm's log and exp, the same instructions the
ensemble loop runs on vectors of trajectories).
"""

from __future__ import annotations

import math

import numba

from .._jit import FLAGS
from ._pow import cpow

QMIN = 0.2  # the largest shrink per step: 1 / 5
QMAX = 10.0  # the largest growth per step
GAMMA = 0.9  # safety factor
E_FLOOR = 1e-4  # the smallest error remembered as e_old
NONFINITE_FLOOR = 1e-14
"""The adjoint sweeps stop with NONFINITE when a step below ``NONFINITE_FLOOR max(1, |t|)``
still gives a NaN or infinite adjoint state (they have no ``dtmin``)."""


@numba.njit(inline="always", **FLAGS)
def pi_gains(order):
    """``(beta1, beta2)`` for the controller order ``order`` (error order + 1, >= 1)."""
    k = max(order, 1)
    return 7.0 / (10.0 * k), 2.0 / (5.0 * k)


@numba.njit(inline="always", **FLAGS)
def pi_control(e, h_try, qold, beta1, beta2):
    """``(accepted, h, qold)`` after a step of size ``h_try`` (> 0) with error norm ``e``:
    the next step size to try (the retry's if rejected) and the remembered error."""
    if not math.isfinite(e):
        return False, h_try * QMIN, qold
    q11 = cpow(e, beta1)
    if e > 1.0:
        return False, h_try / min(1.0 / QMIN, q11 / GAMMA), qold
    q = q11 / cpow(qold, beta2)
    q = max(1.0 / QMAX, min(1.0 / QMIN, q / GAMMA))
    return True, h_try / q, max(e, E_FLOOR)


ACCEPT, REJECT, GIVE_UP = 0, 1, 2
"""Verdicts of :func:`judge_step`."""


@numba.njit(inline="always", **FLAGS)
def error_norm(err, u, unew, rtol, atol, group):
    """The scaled RMS norm of the local error estimate ``err`` (n,) of a step from ``u`` to
    ``unew``: ``sqrt(mean((err_i / (atol + rtol max(|u_i|, |unew_i|)))^2))``; with ``group``
    > 0 the largest of the norms of consecutive groups of ``group`` components (each trajectory
    of a lockstep system within tolerance on its own). NaN if ``err`` or ``unew`` is not
    finite (comparisons and numba's ``max``/``min`` ignore a NaN: ``max(0.0, nan)`` is 0.0)."""
    n = err.shape[0]
    e = 0.0
    eg = 0.0
    gsize = group if group > 0 else n
    for i in range(n):
        x = unew[i]
        if not math.isfinite(x):
            # an infinite state makes its scale infinite and its term zero: never accurate
            return math.nan
        sc = atol + max(abs(u[i]), abs(x)) * rtol
        eg += (err[i] / sc) ** 2
        if (i + 1) % gsize == 0 or i == n - 1:
            v = eg / gsize
            if not math.isfinite(v):
                # numba's max(e, nan) is e: a NaN estimate would read as an accurate step
                return math.nan
            e = max(e, v)
            eg = 0.0
    return math.sqrt(e)


@numba.njit(inline="always", **FLAGS)
def judge_step(e, h_try, qold, beta1, beta2, landing, dtmin):
    """The verdict on a step of size ``h_try`` (> 0) with error norm ``e`` (see
    :func:`pi_control`): ``(verdict, h, qold, nonfinite)``. ``ACCEPT``: ``h`` is the next
    step's size; ``REJECT``: retry with ``h`` (shrunk 5x when ``e`` is not finite, a stage
    having overflowed: a smaller step may not); ``GIVE_UP``: ``e`` is not finite on a step
    already below ``dtmin`` (status NONFINITE). ``nonfinite``: ``e`` was not finite (the
    stepper reports NONFINITE rather than DT_UNDERFLOW if the steps then shrink below
    ``dtmin``)."""
    accepted, h_next, qold = pi_control(e, h_try, qold, beta1, beta2)
    if accepted:
        return ACCEPT, h_next, qold, False
    if not math.isfinite(e):
        if landing and h_try < dtmin:
            return GIVE_UP, h_next, qold, True
        return REJECT, h_next, qold, True
    return REJECT, h_next, qold, False


@numba.njit(inline="always", **FLAGS)
def initial_probe(u, f0, span, direction, rtol, atol, tmp):
    """First half of :func:`initial_step`: the trial step ``h0`` and the state ``tmp`` where
    ``f`` is to be called next (at ``t + direction h0``). Returns ``(h0, d1)``."""
    n = u.shape[0]
    d0 = 0.0
    d1 = 0.0
    for i in range(n):
        sc = atol + abs(u[i]) * rtol
        d0 += (u[i] / sc) ** 2
        d1 += (f0[i] / sc) ** 2
    d0 = math.sqrt(d0 / n)
    d1 = math.sqrt(d1 / n)
    # (a non-finite f0 takes the smallest guess: the first step's error is then NaN, and the
    # stepper shrinks it until it stops with NONFINITE)
    h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5 or not math.isfinite(d1)) else 0.01 * d0 / d1
    h0 = min(h0, span)
    for i in range(n):
        tmp[i] = u[i] + direction * h0 * f0[i]
    return h0, d1


@numba.njit(inline="always", **FLAGS)
def initial_finish(u, f0, f1, h0, d1, rtol, atol, order):
    """Second half of :func:`initial_step`, with ``f1 = f(t + direction h0, tmp)``."""
    n = u.shape[0]
    d2 = 0.0
    for i in range(n):
        sc = atol + abs(u[i]) * rtol
        d2 += ((f1[i] - f0[i]) / sc) ** 2
    d2 = math.sqrt(d2 / n) / h0
    if not (math.isfinite(d1) and math.isfinite(d2)):
        return h0  # f non-finite at t0 or at the probe: the first step will tell
    dmax = max(d1, d2)
    q = max(order, 1)
    h1 = max(1e-6, h0 * 1e-3) if dmax <= 1e-15 else (0.01 / dmax) ** (1.0 / q)
    return min(100.0 * h0, h1)


@numba.njit(inline="always", **FLAGS)
def initial_step(f, k, u, f0, p, t, span, direction, rtol, atol, order, tmp, f1):
    """Hairer & Wanner's guess of the first step (Solving ODEs I, II.4) from ``(t, u)`` with
    ``f0 = f(t, u)``, for a method whose error estimate has order ``order - 1``; ``span`` =
    ``|t1 - t0|``. One call of ``f`` at ``(t + direction h0, tmp)``. Returns ``(h, h0,
    failed)``: ``failed`` when that call raised (``tmp`` holds its state). ``tmp``, ``f1``:
    (n,) scratch. (The explicit stepper, whose right-hand side comes in two call forms, runs
    :func:`initial_probe` and :func:`initial_finish` around its own call.)"""
    h0, d1 = initial_probe(u, f0, span, direction, rtol, atol, tmp)
    failed = f(f1, tmp, p, t + direction * h0, k) != 0
    return initial_finish(u, f0, f1, h0, d1, rtol, atol, order), h0, failed
