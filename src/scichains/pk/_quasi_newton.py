"""BFGS with a weak-Wolfe line search that treats failed trial points as a wall.

The population objective fails at some trial points (an ODE solve, an EBE search, an overflow:
:func:`~scichains.pk.fit` returns ``inf`` there). SciPy's line searches interpolate with
those values and can give up at the first step (the fit then returned its start); this one
shrinks the step towards the last good point instead, and accepts a point when it lowers the
objective enough (Armijo) and the slope has risen enough (curvature, so the BFGS update stays
positive definite): the bracketing search of Lewis and Overton (2013), with a safeguarded
quadratic interpolation where the values are finite and doubling until a bracket is found.

The variables are the fit's scaled ones (see :mod:`._scaling`), so the first step, ``-g``,
is a diagonal Newton step and a unit of each variable is about one standard error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

C1, C2 = 1e-4, 0.9
LINE_SEARCH_EVALUATIONS = 30
MAX_STEP = 1e8


@dataclass
class QNResult:
    u: np.ndarray
    f: float
    g: np.ndarray
    status: int  # 0 converged (gtol), 1 iteration limit, 2 no lower point found
    message: str
    nit: int
    H: np.ndarray  # the inverse Hessian approximation at the end


def _line_search(fun, u, f, g, d, t):
    """``(t, f_t, g_t, wolfe)`` of an accepted step along ``d`` (``wolfe`` False: the point
    lowers ``f`` enough but the curvature condition was not met), or None."""
    gd = float(g @ d)
    a, fa, gda = 0.0, f, gd
    b, fb = math.inf, math.inf
    best = None
    dmax = float(np.max(np.abs(d)))
    for _ in range(LINE_SEARCH_EVALUATIONS):
        ft, gt = fun(u + t * d)
        if not math.isfinite(ft) or ft > f + C1 * t * gd:
            b, fb = t, ft
        else:
            if best is None or ft < best[1]:
                best = (t, ft, gt)
            gtd = float(gt @ d)
            if gtd >= C2 * gd:
                return t, ft, gt, True
            a, fa, gda = t, ft, gtd
        if b == math.inf:
            t = min(2.0 * a, MAX_STEP)
            if t <= a:
                break
            continue
        width = b - a
        if width * dmax <= 1e-13 * (1.0 + float(np.max(np.abs(u)))):
            break
        t = a + 0.5 * width
        if math.isfinite(fb):  # safeguarded minimiser of the quadratic through a and b
            c = (fb - fa - gda * width) / (width * width)
            if c > 0:
                t = a + min(max(-gda / (2.0 * c), 0.1 * width), 0.5 * width)
        else:  # a failed point: back off further towards the last good one
            t = a + 0.25 * width
    if best is not None:
        return best[0], best[1], best[2], False
    return None


def bfgs(fun, u0, f0, g0, gtol: float, maxiter: int, H0=None) -> QNResult:
    """Minimise ``fun`` (``u -> (f, g)``, ``f = inf`` at a failed point) from ``u0`` where
    ``fun`` gave ``(f0, g0)``: at most ``maxiter`` iterations, until ``max |g| <= gtol``,
    from the inverse Hessian approximation ``H0`` (default: the identity). A line search
    that finds no lower point is retried once along ``-g`` with the inverse Hessian reset to
    the identity; a second failure stops (status 2)."""
    n = u0.size
    u, f, g = u0.copy(), float(f0), g0.copy()
    fresh = H0 is None  # H is the identity (no curvature learnt since the last reset)
    H = np.eye(n) if H0 is None else np.array(H0, dtype=np.float64)
    for nit in range(maxiter):
        gmax = float(np.max(np.abs(g))) if n else 0.0
        if gmax <= gtol:
            return QNResult(u, f, g, 0, "converged: the largest scaled gradient entry "
                            f"{gmax:.2g} <= gtol {gtol:g}", nit, H)  # fmt: skip
        d = -H @ g
        if not (np.all(np.isfinite(d)) and float(g @ d) < 0):
            H, fresh = np.eye(n), True
            d = -g
        ls = _line_search(fun, u, f, g, d, 1.0)
        if ls is None:
            if not fresh:
                H, fresh = np.eye(n), True
                continue
            return QNResult(
                u, f, g, 2,
                "no lower OFV was found along the steepest-descent direction (the OFV does not "
                "decrease there to within its numerical precision, or every trial point "
                f"failed); the largest scaled gradient entry is {gmax:.3g} (gtol {gtol:g})",
                nit, H,
            )  # fmt: skip
        t, ft, gt, _ = ls
        s = t * d
        y = gt - g
        sy = float(s @ y)
        if sy > 1e-12 * float(np.linalg.norm(s) * np.linalg.norm(y)):
            if fresh:  # Shanno-Phua: the identity scaled to the curvature seen
                H = np.eye(n) * (sy / float(y @ y))
            rho = 1.0 / sy
            Hy = H @ y
            H = H + (rho * rho * float(y @ Hy) + rho) * np.outer(s, s)
            H -= rho * (np.outer(Hy, s) + np.outer(s, Hy))
            fresh = False
        u, f, g = u + s, float(ft), gt
    gmax = float(np.max(np.abs(g))) if n else 0.0
    if gmax <= gtol:
        return QNResult(u, f, g, 0, f"converged: the largest scaled gradient entry {gmax:.2g} "
                        f"<= gtol {gtol:g}", maxiter, H)  # fmt: skip
    return QNResult(
        u, f, g, 1,
        f"the iteration limit ({maxiter} iterations) was reached; the largest scaled gradient "
        f"entry is {gmax:.3g} (gtol {gtol:g})",
        maxiter, H,
    )  # fmt: skip
