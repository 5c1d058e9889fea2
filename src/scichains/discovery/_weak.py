"""Weak-form sparse regression (weak SINDy, Messenger and Bortz 2021): the equations
``x' = Theta(x) Xi`` integrated against compactly supported test functions, so that no
derivative of the data is needed."""

from __future__ import annotations

import numpy as np

from ._derivatives import _check_samples, trapezoid_weights
from ._library import Library
from ._regression import check_controls, control_names_for
from ._stlsq import SparseFit, optimizer_fn, select_threshold


def _trajectories(t, X, u=None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """``(t, X, U)`` per trajectory, checked (``U`` None without controls)."""
    several = isinstance(t, (list, tuple)) and len(t) > 0 and np.ndim(t[0]) == 1
    if several:
        if not isinstance(X, (list, tuple)) or len(X) != len(t):
            raise ValueError("a list of time arrays needs a list of trajectories X of its length")
        if u is not None and (not isinstance(u, (list, tuple)) or len(u) != len(t)):
            raise ValueError("a list of time arrays needs a list of controls u of its length")
        us = [None] * len(t) if u is None else list(u)
        pairs = [(*_check_samples(ti, Xi)[:2], ui) for ti, Xi, ui in zip(t, X, us)]
    else:
        pairs = [(*_check_samples(t, X)[:2], u)]
    out = []
    for ti, Xi, ui in pairs:
        if ui is None:
            out.append((ti, Xi, None))
            continue
        out.append((ti, Xi, check_controls(ui, ti.size)))
    pairs = out
    n = {Xi.shape[1] for _, Xi, _ in pairs}
    if len(n) > 1:
        raise ValueError(f"the trajectories have different numbers of states: {sorted(n)}")
    return pairs


def weak_system(
    t: np.ndarray,
    X: np.ndarray,
    library: Library,
    window: int,
    n_windows: int,
    p: int,
    U: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The weak-form rows of one trajectory (``t``: ``(m,)``, ``X``: ``(m, n)``): for each of
    ``n_windows`` windows of ``window`` consecutive samples, evenly spread over the samples,
    the test function ``phi(t) = ((t - a)(b - t))^p`` on the window ``[a, b]``, normalised to
    unit integral. Returns ``(G, B)``: ``G[k] = integral phi_k Theta(x)`` (``(n_windows,
    n_features)``) and ``B[k] = -integral phi_k' x`` (``(n_windows, n)``), both by the
    trapezoidal rule on the samples (``integral phi x' = -integral phi' x``: ``phi`` vanishes
    at the window's ends). ``U``: control inputs at the samples (``(m, q)``): the library is
    evaluated on ``[X, U]``, the left-hand side stays ``x``."""
    m = t.size
    Theta = library(X if U is None else np.hstack([X, U]))
    starts = np.unique(np.round(np.linspace(0, m - window, n_windows)).astype(int))
    G = np.empty((starts.size, Theta.shape[1]))
    B = np.empty((starts.size, X.shape[1]))
    for k, i in enumerate(starts):
        tt = t[i : i + window]
        a, b = tt[0], tt[-1]
        s = (tt - a) / (b - a)
        core = s * (1 - s)
        phi = core**p
        dphi = p * core ** (p - 1) * (1 - 2 * s) / (b - a)
        w = trapezoid_weights(tt)
        norm = w @ phi
        G[k] = (w * phi) @ Theta[i : i + window] / norm
        B[k] = -(w * dphi) @ X[i : i + window] / norm
    return G, B


def weak_rows(t, X, library: Library, window=0.1, n_windows=None, p: int = 4, u=None):
    """The weak-form rows of all trajectories, checked: ``(G, B, n_eff, n)`` with ``G``
    ``(rows, n_features)``, ``B`` ``(rows, n)``, ``n_eff`` the number of disjoint windows
    (the criterion's independent rows) and ``n`` the number of states."""
    if not (isinstance(p, (int, np.integer)) and p >= 1):
        raise ValueError(f"p must be an integer of at least 1, got {p!r}")
    pairs = _trajectories(t, X, u)
    rows_G, rows_B = [], []
    n_eff = 0.0
    for ti, Xi, Ui in pairs:
        m = ti.size
        if isinstance(window, (float, np.floating)) and 0 < window <= 1:
            w = max(2 * p + 1, int(round(window * m)))
        elif isinstance(window, (int, np.integer)) and not isinstance(window, bool):
            w = int(window)
        else:
            raise ValueError(
                f"window must be a number of samples or a fraction in (0, 1], got {window!r}"
            )
        if not 2 * p + 1 <= w <= m:
            raise ValueError(
                f"window must hold between 2 p + 1 = {2 * p + 1} and {m} samples (the trajectory's "
                f"length), got {w}"
            )
        k = min(m - w + 1, 200) if n_windows is None else n_windows
        if not (isinstance(k, (int, np.integer)) and k >= 1):
            raise ValueError(f"n_windows must be a positive integer, got {n_windows!r}")
        G, B = weak_system(ti, Xi, library, w, int(k), int(p), Ui)
        rows_G.append(G)
        rows_B.append(B)
        n_eff += min(G.shape[0], m / w)  # disjoint windows: the independent rows
    G, B = np.concatenate(rows_G), np.concatenate(rows_B)
    if G.shape[0] < G.shape[1]:
        raise ValueError(
            f"{G.shape[0]} test functions for {G.shape[1]} library features: use more windows "
            "(n_windows), shorter windows, more samples or a smaller library"
        )
    return G, B, n_eff, B.shape[1]


def weak_sparse_regression(
    t,
    X,
    library: Library,
    thresholds=None,
    *,
    window: int | float = 0.1,
    n_windows: int | None = None,
    p: int = 4,
    input_names=None,
    target_names=None,
    ridge: float = 0.0,
    optimizer="stlsq",
    u=None,
    control_names=None,
) -> SparseFit:
    """Sparse regression of ``x' = Theta(x) Xi`` from samples of ``x`` alone, in weak form
    (weak SINDy: D. A. Messenger and D. M. Bortz, "Weak SINDy: Galerkin-based data-driven
    model selection", Multiscale Modeling & Simulation 19, 2021; PySINDy's
    ``WeakPDELibrary`` for ODEs).

    Each equation is integrated against test functions ``phi_k`` supported on windows of the
    data, ``phi_k(t) = ((t - a_k)(b_k - t))^p``, normalised to unit integral; integrating by
    parts moves the derivative onto ``phi_k``: ``integral phi_k' x dt = -integral phi_k
    Theta(x) dt Xi``. Both integrals are trapezoidal sums over the samples, so the data are
    never differentiated and the noise is averaged over each window. The rows (one per
    window and trajectory) are solved by STLSQ at the threshold with the lowest corrected AIC,
    as :func:`sparse_regression` does with derivatives, except that overlapping windows are
    not independent: the criterion counts ``m / window`` rows per trajectory (the number of
    disjoint windows), without which it keeps spurious terms. The rows are weighted averages
    of ``x'`` and of the features, so thresholds mean the same coefficient magnitudes as in
    :func:`sparse_regression`.

    The data must show the dynamics: on the Lotka-Volterra example's 31 samples over half an
    orbit (``t`` in ``[0, 3]``) no threshold separates the terms at 5% noise; over ``[0, 10]``
    (101 samples) the true support is found for 10 of 10 noise seeds at 5%, 10% and 20% noise
    (``benchmarks/discovery_noise.py``).

    Parameters
    ----------
    t : array_like, shape ``(m,)``, or a list of them
        Sample times, strictly increasing, not necessarily evenly spaced; a list for several
        trajectories (then ``X`` is a list of the same length).
    X : array_like, shape ``(m,)`` or ``(m, n)``, or a list of them
        The samples of the ``n`` states (NaN/inf raises ``ValueError``).
    library : Library
        The candidate features (:class:`PolynomialLibrary`, :class:`CustomLibrary`, sums),
        evaluated on the samples.
    thresholds : float or array_like, optional
        STLSQ threshold(s) to try (default: 40 values log-spaced over the least-squares
        coefficients' magnitudes, as in :func:`sparse_regression`); a single number fixes
        the threshold (PySINDy's ``STLSQ(threshold=...)``).
    window : int or float
        Samples per test function: an integer (from ``2 p + 1`` to ``m``), or a fraction of
        each trajectory's samples (default 0.1; at least ``2 p + 1`` samples).
    n_windows : int, optional
        Test functions per trajectory, their windows evenly spread from the first sample to
        the last (default: one starting at every sample, at most 200); duplicates are
        dropped.
    p : int
        The test functions' order (default 4): ``phi`` and its first ``p - 1`` derivatives
        vanish at the window's ends, which makes the trapezoidal rule accurate.
    input_names, target_names : sequences of str, optional
        As in :func:`sparse_regression` (default ``x0, x1, ...`` and ``x0', x1', ...``).
    ridge : float
        Ridge weight of each least-squares fit (default 0), as in :func:`stlsq`.
    optimizer : ``"stlsq"`` (default), ``"sr3"`` or :class:`SR3`
        The sparse solver, as in :func:`sparse_regression`.
    u, control_names : control inputs sampled with ``X`` (``(m,)`` or ``(m, q)``, a list for
        several trajectories) and their names, as in :func:`sparse_regression`: the library
        runs on ``[x, u]`` (SINDYc); the equations are the states'.

    Returns
    -------
    SparseFit
        ``coefficients`` of shape ``(n_features, n)``; ``fit.equations()``,
        ``fit.to_sympy()`` as for :func:`sparse_regression`.

    Raises
    ------
    ValueError
        Bad shapes, times not strictly increasing, NaN/inf, a window or ``p`` out of range,
        or fewer weak-form rows than library features.
    """
    if not isinstance(library, Library):
        raise TypeError(f"library must be a scichains.discovery library, got {library!r}")
    fit = optimizer_fn(optimizer)
    G, B, n_eff, n = weak_rows(t, X, library, window, n_windows, p, u)
    thr, Xi, path = select_threshold(G, B, thresholds, ridge, n_eff, fit)
    input_names = list(input_names) if input_names is not None else [f"x{i}" for i in range(n)]
    target_names = (
        list(target_names) if target_names is not None else [f"{s}'" for s in input_names]
    )
    names = input_names + control_names_for(u, control_names)
    return SparseFit(Xi, thr, path, library.names(names), target_names, library, names)
