"""Sparse relaxed regularized regression (SR3; P. Zheng, T. Askham, S. L. Brunton, J. N. Kutz
and A. Y. Aravkin, IEEE Access 7, 2019; for SINDy, K. Champion, P. Zheng, A. Y. Aravkin,
S. L. Brunton and J. N. Kutz, IEEE Access 8, 2020), beside STLSQ.

SR3 minimises ``0.5 |Y - Theta Xi|^2 + lam R(W) + |Xi - W|^2 / (2 nu)`` over the coefficients
``Xi`` and their sparse relaxation ``W``, alternating a ridge-like solve for ``Xi`` with the
proximal map of ``lam R`` for ``W``. ``R`` is the count of nonzeros (``"l0"``: the proximal
map zeroes entries below ``sqrt(2 lam nu)`` and keeps the others) or the L1 norm (``"l1"``:
soft thresholding at ``lam nu``). The weight ``lam`` is set from ``threshold`` so that the
proximal map cuts at ``threshold`` in magnitude, the meaning STLSQ gives it, and the two can
share one list of thresholds and one selection by the information criterion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._regression import check_regression, ridge_lstsq


def sr3(
    Theta,
    Y,
    threshold: float,
    ridge: float = 0.0,
    *,
    nu: float = 1.0,
    thresholder: str = "l0",
    max_iter: int = 10_000,
    tol: float = 1e-10,
    unbias: bool = True,
) -> np.ndarray:
    """SR3 coefficients ``Xi`` (``n_features x n_targets``) with ``Y ~ Theta Xi``.

    Parameters
    ----------
    Theta : array_like
        The features, shape ``(m, n_features)``.
    Y : array_like
        The targets, shape ``(m,)`` or ``(m, n_targets)`` (errors as in :func:`stlsq`).
    threshold : float
        The magnitude below which the proximal map zeroes a coefficient (``lam =
        threshold^2 / (2 nu)`` for ``"l0"``, ``threshold / nu`` for ``"l1"``).
    ridge : float
        Ridge weight added to the ``Xi`` solve and to the final refit (default 0).
    nu : float
        The relaxation: how far ``Xi`` may stray from its sparse ``W`` (default 1; smaller
        ties them closer, larger converges faster on well-conditioned libraries).
    thresholder : {"l0", "l1"}
        The penalty ``R`` (default ``"l0"``, hard thresholding).
    max_iter, tol : the alternation stops when ``W`` moves by at most ``tol`` (relative to its
        norm, at least 1) or after ``max_iter`` rounds.
    unbias : bool
        Refit the nonzero terms of ``W`` by least squares (default True, as PySINDy does), so
        that the L1 shrinkage and the relaxation do not bias the kept coefficients.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(n_features, n_targets)``, zero off the selected support.
    """
    Theta, Y = check_regression(Theta, Y)
    if not (np.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number >= 0, got {threshold!r}")
    if not (np.isfinite(nu) and nu > 0):
        raise ValueError(f"nu must be a positive number, got {nu!r}")
    if thresholder not in ("l0", "l1"):
        raise ValueError(f"thresholder must be 'l0' or 'l1', got {thresholder!r}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    nf = Theta.shape[1]
    # the Xi update solves (Theta^T Theta + (1/nu + ridge) I) Xi = Theta^T Y + W / nu
    H = Theta.T @ Theta + (1.0 / nu + ridge) * np.eye(nf)
    chol = np.linalg.cholesky(H)
    TY = Theta.T @ Y

    def solve(rhs):
        return np.linalg.solve(chol.T, np.linalg.solve(chol, rhs))

    W = solve(TY)  # the ridge solution: W = 0 relaxed towards least squares
    for _ in range(int(max_iter)):
        Xi = solve(TY + W / nu)
        if thresholder == "l0":
            W_new = np.where(np.abs(Xi) > threshold, Xi, 0.0)
        else:
            W_new = np.sign(Xi) * np.maximum(np.abs(Xi) - threshold, 0.0)
        moved = np.max(np.abs(W_new - W))
        W = W_new
        if moved <= tol * max(1.0, float(np.max(np.abs(W)))):
            break
    if not unbias:
        return W
    out = np.zeros_like(W)
    for j in range(Y.shape[1]):
        support = W[:, j] != 0
        if support.any():
            out[support, j] = ridge_lstsq(Theta[:, support], Y[:, j], ridge)
    return out


@dataclass(frozen=True)
class SR3:
    """SR3 as the optimizer of :func:`sparse_regression`, :func:`weak_sparse_regression` and
    :func:`ensemble_sparse_regression` (``optimizer=SR3(nu=0.5, thresholder="l1")``;
    ``optimizer="sr3"`` is ``SR3()``): the thresholds keep their meaning (the magnitude cut)
    and are selected by the same criterion as STLSQ's. Fields as in :func:`sr3`."""

    nu: float = 1.0
    thresholder: str = "l0"
    max_iter: int = 10_000
    tol: float = 1e-10
    unbias: bool = True

    def __call__(self, Theta, Y, threshold: float, ridge: float = 0.0) -> np.ndarray:
        return sr3(
            Theta,
            Y,
            threshold,
            ridge,
            nu=self.nu,
            thresholder=self.thresholder,
            max_iter=self.max_iter,
            tol=self.tol,
            unbias=self.unbias,
        )
