"""Log-likelihood profiles of a population fit (PsN's ``llp``): confidence intervals from the
objective function itself, not from its curvature at the minimum.

For one parameter ``c`` (a typical value, a random effect's variance of a diagonal omega, or a
residual standard deviation), the profile is ``OFV(c) = min over the others of OFV`` with ``c``
held (``fit(fix={name: c})``, each fit started from the estimates); the interval at level
``1 - alpha`` is where ``OFV(c) - OFV_min`` stays below the chi-square quantile with one degree
of freedom (3.84 at 95%). Its ends are found by expanding from the estimate until the profile
crosses the quantile, then by Brent's method on the crossing (each evaluation a fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ._bootstrap import _Progress
from ._fit import FitResult, fit_quietly


@dataclass
class Profile:
    """The result of :func:`profile`: ``name``, ``estimate`` (the parameter at the
    unconstrained fit), ``ofv_min``, ``level``, ``threshold`` (the rise in OFV that bounds the
    interval), ``lower``/``upper`` (the interval's ends: NaN where the profile did not rise
    by ``threshold`` within the search, with ``message`` saying so), and every profiled point
    (``values``, ``ofv``, sorted by value; ``converged`` per point)."""

    name: str
    estimate: float
    ofv_min: float
    level: float
    threshold: float
    lower: float
    upper: float
    values: np.ndarray
    ofv: np.ndarray
    converged: np.ndarray
    message: str = ""
    fits: list = field(default_factory=list, repr=False)

    def plot(self, ax=None):
        """OFV - OFV_min against the value, the threshold and the interval."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        ax.plot(self.values, self.ofv - self.ofv_min, "o-", label="profile")
        ax.axhline(self.threshold, color="k", lw=0.8, ls="--", label=f"{self.level:.0%} level")
        for end in (self.lower, self.upper):
            if math.isfinite(end):
                ax.axvline(end, color="gray", lw=0.8)
        ax.axvline(self.estimate, color="C1", lw=0.8, label="estimate")
        ax.set_xlabel(self.name)
        ax.set_ylabel("OFV - OFV at the estimates")
        ax.legend()
        return ax


def _current(model, fit: FitResult, name: str) -> float:
    """The parameter's value at ``fit`` on the scale ``fix`` takes."""
    if name in fit.theta:
        return float(fit.theta[name])
    if name in fit.sd:
        return float(fit.sd[name])
    etas = model.omega_layout.names
    if name in etas:
        try:
            _, k = model.omega_layout.variance(name)
        except ValueError:
            raise ValueError(
                f"{name!r}: profiles of a full omega's elements are not supported"
            ) from None
        return float(fit.omega[k, k])
    known = list(fit.theta) + etas + list(fit.sd)
    raise ValueError(f"no parameter {name!r} to profile (known: {', '.join(known)})")


def profile(
    model,
    data,
    fit: FitResult,
    name: str,
    level: float = 0.95,
    step: float | None = None,
    max_fits: int = 40,
    xtol: float = 1e-3,
    progress: bool | None = None,
    **fit_kwargs,
) -> Profile:
    """The log-likelihood profile of one parameter and its likelihood-based interval.

    Parameters
    ----------
    model, data : as given to :func:`fit`
    fit : the unconstrained fit (its estimates start every profiled fit)
    name : a typical value (its name; the model's scale), a random effect of a diagonal omega
        (its variance) or a residual error parameter (its standard deviation), as
        :func:`fit`'s ``fix`` names them
    level : the interval's confidence level (default 0.95: an OFV rise of 3.84)
    step : the first step away from the estimate on each side (default: 10% of its
        magnitude, or 0.1 for an estimate at 0); the search doubles it until the profile
        rises past the threshold. A variance or a standard deviation stays positive (the
        search halves its way to 0 instead)
    max_fits : fits at most per side
    xtol : the ends' tolerance, relative to ``step``
    progress : a progress bar over the fits (as :func:`bootstrap`'s)
    fit_kwargs : passed to each :func:`fit` (``method`` should be the fit's own)

    Returns a :class:`Profile`. Each fit of the profile that does not converge is marked in
    ``converged``; its OFV bounds the profile from above.
    """
    from scipy.stats import chi2

    if not (isinstance(level, float | int) and 0.0 < level < 1.0):
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    if "fix" in fit_kwargs or "x0" in fit_kwargs:
        raise TypeError("profile chooses fix= and x0= itself")
    estimate = _current(model, fit, name)
    positive = name not in fit.theta
    threshold = float(chi2.ppf(level, 1))
    if step is None:
        step = 0.1 * abs(estimate) if estimate != 0 else 0.1
    if not (isinstance(step, float | int) and step > 0):
        raise ValueError(f"step must be positive, got {step!r}")
    seen: dict[float, tuple[float, bool, FitResult]] = {}
    bar = _Progress(progress, None, f"profile of {name}")

    def ofv_at(c: float) -> float:
        c = float(c)
        if c not in seen:
            res, notes = fit_quietly(model, data, x0=fit.x, fix={name: c}, **fit_kwargs)
            seen[c] = (res.ofv, not notes, res)
            bar.update("unconverged" if notes else "ok")
        return seen[c][0] - fit.ofv - threshold

    try:
        ends, messages = _search_ends(
            ofv_at, estimate, positive, float(step), max_fits, xtol, threshold
        )
    finally:
        bar.close()

    points = {v: (ofv_v, ok) for v, (ofv_v, ok, _) in seen.items()}
    points.setdefault(estimate, (fit.ofv, True))  # (unless held there too: then its refit)
    values = np.array(sorted(points))
    ofv = np.array([points[v][0] for v in values])
    ok = np.array([points[v][1] for v in values])
    fits = [seen[v][2] for v in sorted(seen)]
    return Profile(
        name=name,
        estimate=estimate,
        ofv_min=fit.ofv,
        level=float(level),
        threshold=threshold,
        lower=ends[0],
        upper=ends[1],
        values=values,
        ofv=ofv,
        converged=ok,
        message="; ".join(messages),
        fits=fits,
    )


def _search_ends(ofv_at, estimate, positive, step, max_fits, xtol, threshold):
    """The interval's ends: from the estimate outwards by doubling steps until ``ofv_at``
    (the refitted OFV less the minimum and the threshold) turns positive, then Brent's
    method on the crossing; NaN and a message for a side that never crossed."""
    from scipy.optimize import brentq

    ends, messages = [], []
    for side in (-1.0, 1.0):
        h, inside = float(step), estimate
        end = math.nan
        for _ in range(max_fits):
            c = estimate + side * h
            if positive and c <= 0.0:
                c = inside / 2.0  # halve the way to 0
            if ofv_at(c) > 0.0:
                lo, hi = sorted((inside, c))
                end = brentq(ofv_at, lo, hi, xtol=xtol * step, rtol=1e-8, maxiter=max_fits)
                break
            inside = c
            h *= 2.0
        else:
            messages.append(
                f"the profile did not rise by {threshold:.2f} on the "
                f"{'lower' if side < 0 else 'upper'} side within {max_fits} fits (last value "
                f"{inside:.6g})"
            )
        ends.append(end)
    return ends, messages
