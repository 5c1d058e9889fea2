"""Sequentially thresholded least squares (SINDy, Brunton, Proctor & Kutz 2016), with the
threshold chosen by the corrected Akaike information criterion."""

from __future__ import annotations

import numpy as np

from ._criteria import aicc
from ._regression import check_controls, check_regression, control_names_for, ridge_lstsq
from ._sr3 import SR3


def stlsq(Theta, Y, threshold: float, ridge: float = 0.0, max_iter: int = 20) -> np.ndarray:
    """Coefficients ``Xi`` (``n_features x n_targets``) with ``Y ~ Theta Xi``: least squares,
    then repeatedly zero the coefficients smaller than ``threshold`` in magnitude and refit the
    rest, until the support stops changing. ``ridge`` adds ``ridge * |Xi|^2`` to each fit.

    Parameters
    ----------
    Theta : array_like
        The features at ``m`` points, shape ``(m, n_features)``, converted to float64.
    Y : array_like
        The targets, shape ``(m,)`` or ``(m, n_targets)``. ``Theta`` and ``Y`` with different
        rows, or with NaN/inf values, raise ``ValueError``.
    threshold : float
        Coefficients smaller than this in magnitude are zeroed.
    ridge : float
        Ridge (Tikhonov) weight of each least-squares fit (default 0: plain least squares).
    max_iter : int
        The most threshold-and-refit rounds per target (default 20); the final refit on the
        support follows the last round.

    Returns
    -------
    numpy.ndarray
        ``Xi``, float64, shape ``(n_features, n_targets)`` (``n_targets = 1`` for a vector
        ``Y``), zero off the selected support.
    """
    Theta, Y = check_regression(Theta, Y)
    nf = Theta.shape[1]
    Xi = np.zeros((nf, Y.shape[1]))
    for j in range(Y.shape[1]):
        support = np.ones(nf, dtype=bool)
        for _ in range(max_iter):
            coef = ridge_lstsq(Theta[:, support], Y[:, j], ridge)
            small = np.abs(coef) < threshold
            if not small.any():
                break
            idx = np.flatnonzero(support)
            support[idx[small]] = False
            if not support.any():
                break
        Xi[:, j] = 0.0
        if support.any():
            Xi[support, j] = ridge_lstsq(Theta[:, support], Y[:, j], ridge)
    return Xi


class SparseFit:
    """Result of :func:`sparse_regression`: coefficients, the chosen threshold, the criterion
    along the path, and the equations as text.

    Made by :func:`sparse_regression`; the constructor's arguments are the attributes below,
    in that order, with ``Xi`` stored as ``coefficients``.

    Attributes
    ----------
    coefficients : numpy.ndarray
        ``Xi``, float64, shape ``(n_features, n_targets)``: the coefficients at the chosen
        threshold, zero off the selected support.
    threshold : float
        The chosen STLSQ threshold (the lowest corrected AIC).
    path : list of tuple
        ``(threshold, score, number of nonzero coefficients)`` for every threshold tried,
        ``score`` being the variance-scaled AICc summed over the targets.
    feature_names : list of str
        The library's feature names for ``input_names`` (``"x*y"``), one per row of
        ``coefficients``.
    target_names : list of str
        One name per target (column of ``coefficients``).
    library : Library or None
        The library the features came from (needed by :meth:`to_sympy`).
    input_names : list of str or None
        The names of the inputs (columns of ``X``).
    """

    def __init__(
        self, Xi, threshold, path, feature_names, target_names, library=None, input_names=None
    ):
        self.coefficients = Xi
        self.threshold = threshold
        self.path = path
        self.feature_names = feature_names
        self.target_names = target_names
        self.library = library
        self.input_names = input_names

    def to_sympy(self, symbols=None) -> list:
        """The fitted equations as SymPy expressions, one per target (coefficients as
        floats): ``sum_i Xi[i, j] f_i(symbols)``. ``symbols``: one SymPy symbol per input
        (default: symbols named after ``input_names``)."""
        import sympy as sp

        if self.library is None or not hasattr(self.library, "expressions"):
            raise TypeError("this fit's library cannot write its features as SymPy expressions")
        if symbols is None:
            symbols = sp.symbols(self.input_names)
        feats = self.library.expressions(list(symbols))
        return [
            sum(
                (sp.Float(c) * f for c, f in zip(self.coefficients[:, j], feats) if c != 0.0),
                sp.Integer(0),
            )
            for j in range(self.coefficients.shape[1])
        ]

    def equations(self, precision: int = 4) -> list[str]:
        """``["y0 = +1.3 x0 -0.8924 x0*x1", ...]``: one line per target, with the nonzero
        coefficients to ``precision`` significant digits (``"0"`` for a target without
        terms)."""
        out = []
        for j, name in enumerate(self.target_names):
            terms = [
                f"{c:+.{precision}g} {f}" if f != "1" else f"{c:+.{precision}g}"
                for c, f in zip(self.coefficients[:, j], self.feature_names)
                if c != 0.0
            ]
            out.append(f"{name} = " + (" ".join(terms) if terms else "0"))
        return out

    def __repr__(self) -> str:
        return (
            "SparseFit(\n  "
            + "\n  ".join(self.equations())
            + f"\n  threshold={self.threshold:.4g})"
        )


def sparse_regression(
    X,
    Y,
    library,
    thresholds=None,
    input_names=None,
    target_names=None,
    ridge: float = 0.0,
    optimizer="stlsq",
    u=None,
    control_names=None,
) -> SparseFit:
    """Fit ``Y ~ library(X) Xi`` by STLSQ (or SR3, ``optimizer=``) for each threshold in
    ``thresholds`` (default: 40 values log-spaced over the range of the least-squares
    coefficients) and keep the one with the lowest corrected AIC, summed over the targets
    (each target scaled by its variance, so that no target dominates). Returns a :class:`SparseFit`.

    Parameters
    ----------
    X : array_like
        The inputs, shape ``(m, d)``, converted to float64.
    Y : array_like
        The targets, shape ``(m,)`` or ``(m, n_targets)``. Other rows than ``X``, or NaN/inf
        values in ``Y`` or ``library(X)``, raise ``ValueError`` (or its subclass
        ``numpy.linalg.LinAlgError``, from the least-squares fit that sets the default
        ``thresholds``).
    library : Library
        Maps ``X`` to the features ``Theta`` (shape ``(m, n_features)``) and names them, e.g.
        :class:`PolynomialLibrary`.
    thresholds : array_like, optional
        The STLSQ thresholds to try (default: 40 values log-spaced between the smallest and
        the largest magnitude of the least-squares coefficients, the smallest at least
        ``1e-8`` times the largest).
    input_names : sequence of str, optional
        One name per input (column of ``X``) for the feature names and :meth:`SparseFit.to_sympy`
        (default ``x0, x1, ...``).
    target_names : sequence of str, optional
        One name per target (default ``y0, y1, ...``).
    ridge : float
        Ridge weight of each least-squares fit (default 0), as in :func:`stlsq`.
    optimizer : ``"stlsq"`` (default), ``"sr3"`` or :class:`SR3`
        The sparse solver run at each threshold (:func:`stlsq` or :func:`sr3`; a threshold
        is the magnitude cut for both), the threshold selected by the same criterion.
    u : array_like, optional
        Control inputs at the same rows, shape ``(m,)`` or ``(m, q)`` (SINDYc, PySINDy's
        ``fit(x, u=...)``): the library is evaluated on ``[X, u]``, so its terms may mix
        states and controls (``x*u``); the targets stay the states' derivatives. The
        controls are named ``control_names`` (default ``u0, u1, ...``) after the inputs.
    """
    fit = optimizer_fn(optimizer)
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    d = X.shape[1]
    input_names = list(input_names) if input_names is not None else [f"x{i}" for i in range(d)]
    X, input_names = with_controls(X, u, input_names, control_names)
    thr, Xi, path = select_threshold(library(X), Y, thresholds, ridge, fit=fit)
    target_names = (
        list(target_names) if target_names is not None else [f"y{j}" for j in range(Y.shape[1])]
    )
    return SparseFit(Xi, thr, path, library.names(input_names), target_names, library, input_names)


def select_threshold(
    Theta, Y, thresholds, ridge: float, n_effective: float | None = None, fit=stlsq
):
    """``fit`` (:func:`stlsq` or an :class:`SR3`) of ``Y`` (``(m, n_targets)``) on ``Theta``
    (``(m, n_features)``) at each threshold (default: 40 log-spaced over the least-squares
    coefficients' magnitudes); the one with the lowest variance-scaled AICc summed over the
    targets wins. ``n_effective``: the number of independent rows for the AICc (default
    ``m``; fewer for correlated rows).
    Returns ``(threshold, Xi, path)`` as stored in :class:`SparseFit`."""
    m = Theta.shape[0]
    n_eff = m if n_effective is None else n_effective
    if thresholds is None:
        full = (
            np.abs(ridge_lstsq(Theta, Y, ridge))
            if ridge
            else np.abs(np.linalg.lstsq(Theta, Y, rcond=None)[0])
        )
        nz = full[full > 0]
        lo, hi = (nz.min(), nz.max()) if nz.size else (1e-6, 1.0)
        thresholds = np.geomspace(max(lo, 1e-8 * hi), hi, 40)
    path = []
    best = None
    for thr in np.atleast_1d(np.asarray(thresholds, dtype=np.float64)):
        Xi = fit(Theta, Y, thr, ridge)
        score = 0.0
        for j in range(Y.shape[1]):
            rss = float(np.sum((Theta @ Xi[:, j] - Y[:, j]) ** 2))
            score += aicc(
                rss / max(np.var(Y[:, j]), 1e-300), n_eff, int(np.count_nonzero(Xi[:, j]))
            )
        path.append((float(thr), score, int(np.count_nonzero(Xi))))
        if best is None or score < best[1]:
            best = (float(thr), score, Xi)
    return best[0], best[2], path


def stlsq_path(Theta, Y, thresholds, ridge: float = 0.0) -> list[tuple[float, np.ndarray]]:
    """STLSQ over ``thresholds`` (ascending), keeping one ``(threshold, Xi)`` per distinct
    support: the candidate models for a selection criterion of the caller's choosing (for
    example the fit of each re-simulated model to the data).

    Parameters
    ----------
    Theta : array_like
        The features, shape ``(m, n_features)``.
    Y : array_like
        The targets, shape ``(m,)`` or ``(m, n_targets)`` (errors as in :func:`stlsq`).
    thresholds : array_like
        The thresholds to try, in any order (they are sorted).
    ridge : float
        Ridge weight of each least-squares fit (default 0), as in :func:`stlsq`.

    Returns
    -------
    list of tuple
        ``(threshold, Xi)`` for the smallest threshold of each distinct support, in ascending
        threshold order; ``Xi`` of shape ``(n_features, n_targets)``.
    """
    Theta = np.asarray(Theta, dtype=np.float64)
    seen = set()
    out = []
    for thr in np.sort(np.asarray(thresholds, dtype=np.float64)):
        Xi = stlsq(Theta, Y, float(thr), ridge)
        key = (Xi != 0).tobytes()
        if key not in seen:
            seen.add(key)
            out.append((float(thr), Xi))
    return out


def optimizer_fn(optimizer):
    """``fit(Theta, Y, threshold, ridge) -> Xi`` for ``optimizer`` (``"stlsq"``, ``"sr3"``
    or an :class:`SR3`), else ``ValueError`` naming the choices."""
    if isinstance(optimizer, SR3):
        return optimizer
    if isinstance(optimizer, str) and optimizer.lower() == "stlsq":
        return stlsq
    if isinstance(optimizer, str) and optimizer.lower() == "sr3":
        return SR3()
    raise ValueError(f"optimizer must be 'stlsq', 'sr3' or an SR3(...), got {optimizer!r}")


def with_controls(X, u, input_names, control_names):
    """``([X, u], input_names + control names)`` for control inputs ``u`` (rows as ``X``;
    ``(m,)`` or ``(m, q)``), or ``(X, input_names)`` without; ``ValueError`` for other rows,
    NaN/inf or a wrong number of names."""
    if u is None:
        control_names_for(u, control_names)  # names without inputs: ValueError
        return X, input_names
    U = check_controls(u, X.shape[0])
    names = control_names_for(u, control_names, U.shape[1])
    return np.hstack([X, U]), list(input_names) + names
