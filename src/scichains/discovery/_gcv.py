"""Cubic smoothing splines with the penalty chosen by generalised cross-validation, the GCV
search done in the Demmler-Reinsch basis.

SciPy's ``make_smoothing_spline(t, y)`` (``lam=None``) minimises the GCV score over
``lam`` in ``(0, m)`` by a bounded Brent search; each score costs it a banded factorisation
and a Python loop over the samples (about 12 ms per column of 31 samples). Here the same
score, for the same penalty (``sum (y_i - g(t_i))^2 + lam * integral g''^2``), comes from one
eigendecomposition of the Reinsch matrix ``K = Q R^-1 Q^T`` (P. J. Green and B. W.
Silverman, *Nonparametric Regression and Generalized Linear Models*, 1994, sections 2.1 and
3.3): with ``K = U diag(d) U^T`` and ``z = U^T y`` the fitted values are ``U (z / (1 + lam
d))``, so the residual sum of squares and the trace of the smoother cost ``O(m)`` per
``lam``, and the decomposition serves every column. The same bounded Brent search over
``(0, m)`` then picks the same penalty as SciPy (to its tolerance), and SciPy builds the
spline at that penalty. Above ``DENSE_LIMIT`` samples the ``O(m^3)`` decomposition no longer
pays, and where the eigenvalues span more than ``MAX_SPREAD`` (closely spaced samples among
sparse ones) the smallest nonzero ones, those of the smoothest functions, lose more than about
six digits to round-off: in both cases SciPy's own search runs.
"""

from __future__ import annotations

import numpy as np

#: Largest number of samples for the eigendecomposition; above it, SciPy's GCV search.
DENSE_LIMIT = 300
#: Largest ratio of the largest to the smallest nonzero eigenvalue for the eigen route.
MAX_SPREAD = 1e10


def reinsch_eigen(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(d, U)``: the eigenvalues (ascending, the two of the linear functions set to 0) and
    orthonormal eigenvectors (columns) of the Reinsch penalty matrix ``K`` (``(m, m)``) of the
    natural cubic smoothing spline on the strictly increasing times ``t`` (``(m,)``, at
    least 3): ``g = (I + lam K)^-1 y`` are the spline's values at ``t``."""
    from scipy.linalg import eigh, solve_banded

    m = t.size
    h = np.diff(t)
    j = np.arange(m - 2)
    Q = np.zeros((m, m - 2))
    Q[j, j] = 1.0 / h[:-1]
    Q[j + 1, j] = -1.0 / h[:-1] - 1.0 / h[1:]
    Q[j + 2, j] = 1.0 / h[1:]
    R = np.zeros((3, m - 2))  # symmetric tridiagonal, banded storage
    R[1] = (h[:-1] + h[1:]) / 3.0
    R[0, 1:] = h[1:-1] / 6.0
    R[2, :-1] = h[1:-1] / 6.0
    K = Q @ solve_banded((1, 1), R, Q.T)
    d, U = eigh((K + K.T) / 2.0)
    d[:2] = 0.0  # the null space (constants and lines): round-off only
    return np.maximum(d, 0.0), U


def gcv_score(lam: float, d: np.ndarray, z: np.ndarray) -> float:
    """The GCV score ``(RSS / m) / (1 - tr(S) / m)^2`` of the spline of penalty ``lam`` with
    Demmler-Reinsch eigenvalues ``d`` and data ``z = U^T y`` (both ``(m,)``)."""
    m = d.size
    ld = lam * d
    shrink = ld / (1.0 + ld)
    rss = float(np.dot(shrink * z, shrink * z)) / m
    # 1 - tr(S) / m written as the mean of the shrinkages: no cancellation when every lam d
    # is tiny (samples far apart in t's units)
    free = float(np.mean(shrink))
    return rss / free**2 if free > 0.0 else np.inf


def gcv_penalty(d: np.ndarray, z: np.ndarray) -> float:
    """The penalty ``lam`` in ``(0, m)`` minimising :func:`gcv_score` by SciPy's bounded
    Brent search (as ``make_smoothing_spline`` does)."""
    from scipy.optimize import minimize_scalar

    found = minimize_scalar(gcv_score, bounds=(0.0, d.size), args=(d, z), method="bounded")
    if not found.success:
        raise ValueError(f"unable to find the minimum of the GCV score: {found.message}")
    return float(found.x)


def smoothing_splines(t: np.ndarray, X: np.ndarray, lam) -> list:
    """The cubic smoothing splines (SciPy ``BSpline`` objects) of the columns of ``X``
    (``(m, n)``) on the times ``t`` (``(m,)``, strictly increasing, at least 5), each with
    the penalty ``lam`` (a number >= 0) or, for ``None``, its own GCV penalty."""
    from scipy.interpolate import make_smoothing_spline

    number = isinstance(lam, (int, float, np.integer, np.floating)) and not isinstance(lam, bool)
    if lam is not None and not (number and 0 <= lam < np.inf):
        raise ValueError(f"lam must be a non-negative number or None (GCV), got {lam!r}")
    if t.size < 5:
        raise ValueError(f"the smoothing spline needs at least 5 samples, got {t.size}")
    lams = [lam] * X.shape[1]  # None: SciPy's own GCV search
    if lam is None and t.size <= DENSE_LIMIT:
        d, U = reinsch_eigen(t)
        if d[-1] <= MAX_SPREAD * d[2]:
            Z = U.T @ X
            lams = [gcv_penalty(d, Z[:, j]) for j in range(X.shape[1])]
    return [make_smoothing_spline(t, X[:, j], lam=lams[j]) for j in range(X.shape[1])]
