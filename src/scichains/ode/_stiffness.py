"""Whether an explicit solve that ran out of steps was held back by stiffness.

An explicit Runge-Kutta method on a stiff problem takes steps limited by its stability region,
not by its error estimate: ``h |lambda|`` stays near the region's boundary (about 3.3 for
DP5 and Tsit5, 2.5 for BS3, on the negative real axis) for the largest eigenvalue
``lambda`` of ``df/du``, however loose the tolerances (Hairer & Wanner, Solving ODEs II,
IV.2, whose DOPRI5 estimates ``h |lambda|`` from two stages for the same purpose). After the
fact, from Python: the magnitude of the dominant eigenvalue at the last point reached, by
power iteration on finite differences of ``f`` (a few dozen calls), times the typical
recent step. An accuracy-limited solve has ``h |lambda|`` well below 1.
"""

from __future__ import annotations

import numpy as np

STIFF_RATIO = 1.0
"""``h |lambda|`` at or above which the steps count as stability-limited."""


def spectral_radius(prob, p, t: float, u: np.ndarray, iterations: int = 40) -> float:
    """Estimate of the largest ``|lambda|`` of ``df/du`` at ``(t, u)`` (power iteration on
    forward differences of the right-hand side; NaN if ``f`` raises or is not finite)."""
    n = u.size
    f0 = np.empty(n)
    f1 = np.empty(n)
    try:
        prob.rhs(f0, u, t, p)
        if not np.all(np.isfinite(f0)):
            return float("nan")
        v = np.random.default_rng(0).standard_normal(n)
        v /= np.linalg.norm(v)
        eps = np.sqrt(np.finfo(float).eps) * max(1.0, float(np.linalg.norm(u)))
        rho = 0.0
        for _ in range(iterations):
            prob.rhs(f1, u + eps * v, t, p)
            w = (f1 - f0) / eps
            nw = float(np.linalg.norm(w))
            if not np.isfinite(nw) or nw == 0.0:
                break
            rho = nw
            v = w / nw
        return rho
    except Exception:  # noqa: BLE001 - only a hint: a function that fails here gives none
        return float("nan")


def stiffness_hint(prob, p, ts: np.ndarray, us: np.ndarray) -> str:
    """A sentence for the MAX_STEPS message of an explicit solve that stored steps ``ts``,
    ``us`` (``m`` entries): that the problem looks stiff (with the measured ``h |lambda|``)
    and what to use instead; ``""`` when the steps were not stability-limited."""
    h = np.abs(np.diff(ts))
    h = h[h > 0.0][-50:]
    if h.size < 10:
        return ""
    hmed = float(np.median(h))
    rho = spectral_radius(prob, p, float(ts[-1]), np.array(us[-1], dtype=np.float64))
    if not np.isfinite(rho) or hmed * rho < STIFF_RATIO:
        return ""
    return (
        f"; the problem looks stiff: the last {h.size} steps (median {hmed:.3g}) were held "
        f"to the explicit method's stability limit, h |lambda| = {hmed * rho:.2g} for the "
        f"largest eigenvalue of df/du (|lambda| ~ {rho:.3g} at t = {float(ts[-1])!r}). Use a "
        "stiff solver: Rodas5P(), KenCarp4() or CVODE_BDF()"
    )
