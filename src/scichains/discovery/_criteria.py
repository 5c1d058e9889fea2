"""Information criteria of least-squares fits (Gaussian noise of unknown variance)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def aic(rss: float, m: int, k: int) -> float:
    """Akaike information criterion of a least-squares fit with ``k`` coefficients to ``m``
    points with residual sum of squares ``rss`` (up to a constant): ``m log(rss/m) + 2k``."""
    return m * np.log(max(rss, 1e-300) / m) + 2 * k


def aicc(rss: float, m: int, k: int) -> float:
    """Corrected AIC of a least-squares fit with ``k`` coefficients to ``m`` points with
    residual sum of squares ``rss`` (up to a constant): ``m log(rss/m) + 2k + 2k(k+1)/(m-k-1)``,
    infinite when ``m <= k + 1``. ``rss`` is floored at ``1e-300`` (an exact fit stays
    finite)."""
    rss = max(rss, 1e-300)
    pen = 2 * k + (2 * k * (k + 1) / (m - k - 1) if m - k - 1 > 0 else np.inf)
    return m * np.log(rss / m) + pen


def bic(rss: float, m: int, k: int) -> float:
    """Bayesian information criterion of a least-squares fit: ``m log(rss/m) + k log(m)``."""
    return m * np.log(max(rss, 1e-300) / m) + k * np.log(m)


CRITERIA: dict[str, Callable[[float, int, int], float]] = {"aic": aic, "aicc": aicc, "bic": bic}


def criterion_function(criterion) -> Callable[[float, int, int], float]:
    """``"bic"``, ``"aic"``, ``"aicc"`` or a callable ``(rss, m, k) -> float``."""
    if callable(criterion):
        return criterion
    try:
        return CRITERIA[str(criterion).lower()]
    except KeyError:
        raise ValueError(
            f"unknown criterion {criterion!r}: use one of {sorted(CRITERIA)} or a callable "
            "(rss, m, k) -> float"
        ) from None
