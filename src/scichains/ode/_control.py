"""The step-size controller shared by the compiled stepper and the continuous adjoints.

A PI controller on the scaled error norm ``e`` of a step (Hairer & Wanner, Solving ODEs II,
IV.2; Söderlind's gains ``beta1 = 0.7 / k``, ``beta2 = 0.4 / k`` for a method whose error
estimate has order ``k - 1``): accept when ``e <= 1`` and propose
``h_new = h / clamp((e^beta1 / e_old^beta2) / 0.9, 1/10, 5)``; reject otherwise and shrink
by ``e^beta1 / 0.9`` (at most 5x); a non-finite ``e`` (a stage overflowed) shrinks 5x.
"""

from __future__ import annotations

import math

import numba

from .._jit import FLAGS

QMIN = 0.2  # the largest shrink per step: 1 / 5
QMAX = 10.0  # the largest growth per step
GAMMA = 0.9  # safety factor
E_FLOOR = 1e-4  # the smallest error remembered as e_old


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
    q11 = e**beta1
    if e > 1.0:
        return False, h_try / min(1.0 / QMIN, q11 / GAMMA), qold
    q = q11 / qold**beta2
    q = max(1.0 / QMAX, min(1.0 / QMIN, q / GAMMA))
    return True, h_try / q, max(e, E_FLOOR)
