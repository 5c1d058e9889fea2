"""Checks of hand-written derivatives against float64 central differences.

Each entry's derivative is estimated by Ridders' extrapolation of central differences: steps
``h0, h0 / 2, h0 / 4, ...`` with ``h0 = eps * scale_j`` (``scale_j = |x_j|``, or 1 where
``x_j`` is 0) combined in a Richardson tableau, stopped when the estimate has settled or when
rounding starts to dominate. Each estimate comes with an error estimate: the truncation error
(the tableau's last change) and the rounding error (the noise of the function values, measured
near ``x``, and at least their resolution: float64's, or float32's for float32 values, over
the smallest step). A step chosen per entry keeps parameters of very different scales
(a rate of 1e-4 per second beside a volume of 50) each at a relative step of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ..nn._validate import as_real
from ..ode._problem import ODEProblem

_ROUNDOFF = np.finfo(np.float64).eps
_SHRINK = 2.0  # step ratio between consecutive columns of the tableau
_LEVELS = 10  # at most this many steps per entry (the smallest h0 / 2**9)
_FLOOR = 1e-3  # entries with little effect are judged against this share of the largest


@dataclass
class DerivativeCheck:
    """The result of :func:`check_vjp` or :func:`check_gradient`.

    ``analytic`` and ``numeric`` are the compared vectors (for a vjp: ``[v^T df/du,
    v^T df/dp]``); ``truncation`` and ``rounding`` the estimated errors of each ``numeric``
    entry (their sum: ``error_estimate``), ``steps`` the smallest step each used.

    An entry ``j`` agrees when ``|analytic_j - numeric_j| <= rtol * scale_j +
    error_estimate_j``, with ``scale_j = max(|numeric_j|, 1e-3 * max_k |x_k numeric_k| /
    |x_j|)`` (``|x_j|`` taken as 1 where ``x_j`` is 0): the entry's own magnitude, or for an
    entry on which the function hardly depends, a thousandth of the largest change of the
    function under a relative change of one entry. ``verdict`` is ``"DISAGREES"`` when an entry
    does not agree (or ``analytic_j`` is not finite), ``"UNRESOLVED"`` when none disagrees but
    an entry's error estimate exceeds ``rtol * scale_j`` or its difference is not finite (the
    function left its domain at every step: the differences cannot tell), else ``"agrees"``;
    ``ok`` is True only for ``"agrees"``. ``worst`` names the entry nearest to (or
    furthest beyond) its bound, e.g. ``"dp[2]"``; ``max_abs_error`` is the largest
    difference over all entries, ``rel_error`` the worst entry's difference over its
    ``scale_j``."""

    analytic: np.ndarray
    numeric: np.ndarray
    max_abs_error: float
    rel_error: float
    worst: str
    ok: bool
    verdict: str
    truncation: np.ndarray
    rounding: np.ndarray
    steps: np.ndarray
    rtol: float
    worst_index: int

    @property
    def error_estimate(self) -> np.ndarray:
        """The estimated error of each ``numeric`` entry: truncation plus rounding."""
        return self.truncation + self.rounding

    def __repr__(self) -> str:
        if self.analytic.size == 0:
            return f"DerivativeCheck({self.verdict}: nothing to compare)"
        i = self.worst_index
        verdict = {
            "agrees": "agrees with",
            "DISAGREES": "DISAGREES with",
            "UNRESOLVED": "is UNRESOLVED by",
        }[self.verdict]
        return (
            f"DerivativeCheck({verdict} central differences: worst entry {self.worst}, "
            f"analytic {self.analytic[i]:.6g} vs numeric {self.numeric[i]:.6g} "
            f"(estimated error {self.error_estimate[i]:.2g}: truncation "
            f"{self.truncation[i]:.2g}, rounding {self.rounding[i]:.2g}; smallest step "
            f"{self.steps[i]:.2g}), abs error {abs(self.analytic[i] - self.numeric[i]):.3g} "
            f"(max over entries {self.max_abs_error:.3g}), relative {self.rel_error:.3g} "
            f"(rtol {self.rtol:g}))"
        )


def _compare(analytic, numeric, trunc, rnd, steps, scales, names, rtol) -> DerivativeCheck:
    diff = np.abs(analytic - numeric)
    err = trunc + rnd
    if diff.size == 0:
        return DerivativeCheck(
            analytic, numeric, 0.0, 0.0, "-", True, "agrees", trunc, rnd, steps, rtol, 0
        )
    with np.errstate(invalid="ignore", over="ignore"):
        effect = np.abs(numeric) * scales  # the change of f per relative change of x_j
        largest = float(np.max(effect[np.isfinite(effect)], initial=0.0))
        scale = np.maximum(np.abs(numeric), _FLOOR * largest / scales)
        tol = rtol * scale
        with np.errstate(divide="ignore"):
            ratio = np.where(diff == 0.0, 0.0, diff / (tol + err))
            rel = np.where(diff == 0.0, 0.0, diff / scale)
    known = np.isfinite(numeric)  # f left its domain at every step: nothing to compare
    wrong = ~np.isfinite(analytic) | (known & (ratio > 1.0))
    unsure = ~known | ((err > tol) & (tol > 0.0))
    if np.any(wrong):
        verdict = "DISAGREES"
        i = int(np.argmax(np.where(wrong, np.where(np.isfinite(analytic), ratio, np.inf), -1.0)))
    elif np.any(unsure):
        verdict = "UNRESOLVED"
        with np.errstate(invalid="ignore", divide="ignore"):
            how = np.where(known, err / np.where(tol > 0.0, tol, 1.0), np.inf)
        i = int(np.argmax(np.where(unsure, how, -1.0)))
    else:
        verdict = "agrees"
        i = int(np.argmax(ratio))
    return DerivativeCheck(
        analytic,
        numeric,
        float(np.max(diff, initial=0.0, where=known)),
        float(rel[i]),
        names[i],
        verdict == "agrees",
        verdict,
        trunc,
        rnd,
        steps,
        float(rtol),
        i,
    )


def _scales(x: np.ndarray) -> np.ndarray:
    s = np.abs(x)
    s[s == 0.0] = 1.0
    return s


def _check_step(eps: float) -> float:
    eps = float(eps)
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps (the first relative step) must lie in (0, 1), got {eps}")
    return eps


def _resolution(values: np.ndarray) -> float:
    """The relative resolution of ``values``: float32's (1.2e-7) when they are at least 3
    distinct float32 numbers (a float32 loss), else float64's (2.2e-16)."""
    v = values[np.isfinite(values)]
    if np.unique(v).size >= 3 and np.all(v.astype(np.float32).astype(np.float64) == v):
        return float(np.finfo(np.float32).eps)
    return _ROUNDOFF


def _noise(f: Callable[[np.ndarray], float], x: np.ndarray, scales: np.ndarray):
    """``(noise, resolution)`` of ``f``'s values near ``x``: the noise's standard deviation
    from the high-order differences of ``f`` at 9 points spaced ``1e-5`` (relative) along a
    fixed random direction (Moré and Wild's ECnoise: for a smooth ``f`` the 4th to 6th
    differences at that spacing are rounding only, for a noisy one, such as a solver's step
    choices, they are the noise; the largest of the three orders' estimates), and the
    relative resolution of the values (:func:`_resolution`)."""
    d = np.random.default_rng(0).standard_normal(x.size)
    d *= 1e-5 * scales / max(float(np.max(np.abs(d))), 1e-300)
    values = np.array([float(f(x + (i - 4) * d)) for i in range(9)])
    if not np.isfinite(values).all():
        return np.inf, _ROUNDOFF
    sigma = 0.0
    diffs = values
    for k in range(1, 7):
        diffs = np.diff(diffs)
        if k >= 4:
            gamma = math.factorial(k) ** 2 / math.factorial(2 * k)
            sigma = max(sigma, math.sqrt(gamma * float(np.mean(diffs**2))))
    return sigma, _resolution(values)


def _derivative(
    f: Callable[[np.ndarray], float],
    x: np.ndarray,
    j: int,
    h0: float,
    scale: float,
    rtol: float,
    noise: tuple[float, float],
):
    """``(estimate, truncation, rounding, smallest step)`` of ``df/dx_j`` at ``x``: Ridders'
    extrapolation of central differences (Numerical Recipes' ``dfridr``), from step ``h0``
    halved at each level.

    The rounding of a step ``h`` is the values' noise over ``h`` (``noise = (sigma,
    resolution)``: the larger of ``sigma`` and ``resolution`` times the values' magnitude).
    When it exceeds ``rtol / 100`` of the first difference, the first step grows eightfold (at
    most to ``scale / 8``, twice at most). The tableau entry with the smallest truncation
    estimate plus rounding is kept; the search stops when that is below ``rtol / 100`` of the
    estimate, when the extrapolation stops improving (rounding or noise dominates), or after
    ``_LEVELS`` steps. A step at which ``f`` is not finite is divided by 8 (at the first
    level) or ends the search (later)."""
    sigma, resolution = noise

    def central(h):
        xp, xm = x.copy(), x.copy()
        xp[j] += h
        xm[j] -= h
        span = xp[j] - xm[j]  # the step as represented (0: below x_j's resolution)
        if span == 0.0:
            return np.nan, 0.0
        fp, fm = float(f(xp)), float(f(xm))
        return (fp - fm) / span, max(abs(fp), abs(fm))

    def rounding(h, fmax):  # the noise of two values over 2h, amplified by the tableau
        return 2.0 * max(sigma, resolution * fmax) / h

    h = h0
    d, fmax = central(h)
    for _ in range(20):  # the first step leaves f's domain: shrink it
        if np.isfinite(d):
            break
        h /= 8.0
        d, fmax = central(h)
    if not np.isfinite(d):
        return d, np.inf, np.inf, h
    for _ in range(2):  # noise dominates the first difference: a longer step
        if rounding(h, fmax) <= 1e-2 * rtol * abs(d) or 8.0 * h > scale / 8.0:
            break
        d8, f8 = central(8.0 * h)
        if not np.isfinite(d8):
            break
        h, d, fmax = 8.0 * h, d8, max(fmax, f8)
    table = np.empty((_LEVELS, _LEVELS))
    table[0, 0] = d
    best, err, rnd, h_best = d, np.inf, rounding(h, fmax), h
    for i in range(1, _LEVELS):
        h /= _SHRINK
        d, fm = central(h)
        if not np.isfinite(d):
            break
        fmax = max(fmax, fm)
        table[0, i] = d
        fac = _SHRINK**2
        r = rounding(h, fmax)
        for k in range(1, i + 1):
            table[k, i] = (table[k - 1, i] * fac - table[k - 1, i - 1]) / (fac - 1.0)
            fac *= _SHRINK**2
            e = max(abs(table[k, i] - table[k - 1, i]), abs(table[k, i] - table[k - 1, i - 1]))
            if e + r <= err + rnd:
                best, err, rnd, h_best = table[k, i], e, r, h
        if abs(table[i, i] - table[i - 1, i - 1]) >= 2.0 * (err + rnd):
            break  # higher orders got worse: rounding or noise dominates
        if err + rnd <= 1e-2 * rtol * abs(best):
            break
    return best, err, rnd, h_best


def _differences(f, x: np.ndarray, eps: float, rtol: float):
    """Extrapolated central differences of ``f`` at ``x`` for every entry: ``(numeric,
    truncation, rounding, steps, scales)``."""
    scales = _scales(x)
    noise = _noise(f, x, scales) if x.size else (0.0, _ROUNDOFF)
    out = [_derivative(f, x, j, eps * scales[j], scales[j], rtol, noise) for j in range(x.size)]
    out = np.array(out, dtype=np.float64).reshape(x.size, 4)
    return out[:, 0].copy(), out[:, 1].copy(), out[:, 2].copy(), out[:, 3].copy(), scales


def check_vjp(
    prob: ODEProblem,
    u: ArrayLike | None = None,
    p: ArrayLike | None = None,
    t: float | None = None,
    v: ArrayLike | None = None,
    eps: float = 1e-3,
    rtol: float = 1e-6,
) -> DerivativeCheck:
    """Compare the problem's vjp at ``(u, p, t)`` with central differences of its right-hand
    side (float64, extrapolated from a step chosen per entry), for the cotangent ``v``.

    Returns a :class:`DerivativeCheck` (the verdict rule, the error estimates); a wrong vjp
    shows as ``ok = False`` with the worst entry named (``du[i]`` or ``dp[j]``). The vjp runs
    from Python here (its exceptions are raised as they are).

    Parameters
    ----------
    prob : ODEProblem
        A problem with a vjp; anything else raises ``TypeError``, a problem without a vjp
        ``ValueError``.
    u : array_like, optional
        The state, shape ``(n,)`` (default ``prob.u0``).
    p : array_like, optional
        The parameters, shape ``prob.p.shape`` (default ``prob.p``).
    t : float, optional
        The time (default ``t0``, the start of ``prob.tspan``).
    v : array_like, optional
        The cotangent, shape ``(n,)``; default a fixed random vector (standard normal, seed
        0), so that every entry of the Jacobian counts.
    eps : float
        The first relative step of each entry: ``eps * |x|`` (``eps`` where ``x`` is 0) for
        each entry ``x`` of ``u`` and ``p``, halved by Ridders' extrapolation until its
        estimate settles, grown where the values' noise dominates it (default ``1e-3``; in
        ``(0, 1)``).
    rtol : float
        The tolerance of the verdict (see :class:`DerivativeCheck`; default ``1e-6``).

    ``u``, ``p``, ``v`` are converted to float64: non-real values raise ``TypeError``, another
    shape ``ValueError``.
    """
    if not isinstance(prob, ODEProblem):
        raise TypeError(f"check_vjp needs an ODEProblem, got {type(prob).__name__}")
    if prob.vjp is None:
        raise ValueError("the problem has no vjp to check (pass vjp= to ODEProblem)")
    eps = _check_step(eps)
    n = prob.u0.size
    u = prob.u0.copy() if u is None else as_real(u, "u").copy()
    p = prob.p.copy() if p is None else as_real(p, "p").copy()
    if u.shape != (n,) or p.shape != prob.p.shape:
        raise ValueError(f"u must have shape ({n},) and p {prob.p.shape}; got {u.shape}, {p.shape}")
    t = prob.tspan[0] if t is None else float(t)
    v = np.random.default_rng(0).standard_normal(n) if v is None else as_real(v, "v")
    if v.shape != (n,):
        raise ValueError(f"v must have shape ({n},), got {v.shape}")
    ub, pb = np.zeros(n), np.zeros(p.size)
    if prob.vjp_takes_kernel:
        prob.vjp(v, u.copy(), p.copy(), t, prob.kernel, ub, pb)
    else:
        prob.vjp(v, u.copy(), p.copy(), t, ub, pb)

    def f(up):  # v . rhs at the stacked point [u, p]
        du = np.empty(n)
        prob.rhs(du, up[:n].copy(), t, up[n:].reshape(p.shape).copy())
        return float(v @ du)

    x = np.concatenate([u, p.ravel()])
    numeric, trunc, rnd, steps, scales = _differences(f, x, eps, rtol)
    names = [f"du[{i}]" for i in range(n)] + [f"dp[{j}]" for j in range(p.size)]
    analytic = np.concatenate([ub, pb])
    return _compare(analytic, numeric, trunc, rnd, steps, scales, names, rtol)


def check_gradient(
    fun: Callable[[np.ndarray], tuple], x: ArrayLike, eps: float = 1e-3, rtol: float = 1e-5
) -> DerivativeCheck:
    """Compare the gradient that ``fun(x)`` returns with central differences of its value.

    Each entry's central difference starts at the step ``eps * |x_j|`` (``eps`` where ``x_j``
    is 0: a step of its own for each scale) and is refined by Ridders' extrapolation; the
    result carries each entry's truncation and rounding error estimates. Returns a
    :class:`DerivativeCheck` naming the worst entry (``dx[j]``; the verdict rule is
    described there). ``fun`` is called once at ``x``, 9 times near it (the noise of its
    values) and 4 to 24 times per entry (about 6 for a smooth function; more where it is not
    finite at the first steps), each time on a copy of ``x``.

    Parameters
    ----------
    fun : callable
        ``fun(x)`` returns a tuple ``(value, gradient, ...)`` (as ``Objective.value_and_grad``,
        whose third output, dL/du0, is ignored, or the function of ``nn.loss_and_grad``); the
        gradient must have ``x``'s shape (else ``ValueError``); another return type raises
        ``TypeError``.
    x : array_like
        The point, a vector of real numbers (converted to float64); not a vector:
        ``ValueError``.
    eps : float
        The first relative step, ``eps * |x_j|`` (default ``1e-3``; in ``(0, 1)``).
    rtol : float
        The tolerance of the verdict (default ``1e-5``): an entry agrees when it is within
        ``rtol`` of the numeric one, relative to that entry's scale, or within the numeric
        entry's error estimate beyond that. Gradients through an adaptive solver can only
        agree to about the solver's tolerance (the step sizes move with ``x``): check them at
        tight tolerances.
    """
    eps = _check_step(eps)
    x = as_real(x, "x").copy()
    if x.ndim != 1:
        raise ValueError(f"x must be a vector, got shape {x.shape}")
    out = fun(x.copy())
    if not isinstance(out, tuple) or len(out) < 2:
        raise TypeError("fun(x) must return (value, gradient)")
    g = as_real(out[1], "the gradient fun returns")
    if g.shape != x.shape:
        raise ValueError(f"the gradient has shape {g.shape}, x {x.shape}")
    g = g.astype(np.float64)  # a copy: fun may reuse its buffer

    def value(xx):
        return float(fun(xx)[0])

    numeric, trunc, rnd, steps, scales = _differences(value, x, eps, rtol)
    names = [f"dx[{j}]" for j in range(x.size)]
    return _compare(g, numeric, trunc, rnd, steps, scales, names, rtol)
