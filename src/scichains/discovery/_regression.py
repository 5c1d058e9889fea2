"""Checks and least squares shared by the sparse regressions (STLSQ, SR3, the weak form)."""

from __future__ import annotations

import numpy as np


def check_regression(Theta, Y) -> tuple[np.ndarray, np.ndarray]:
    """``Theta`` (``(m, n_features)``) and ``Y`` (``(m, n_targets)``, a vector made a column)
    as float64, else ``ValueError`` for other rows or NaN/inf."""
    Theta = np.asarray(Theta, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    if Theta.ndim != 2 or Theta.shape[0] != Y.shape[0]:
        raise ValueError(f"Theta {Theta.shape} and Y {Y.shape} must have the same rows")
    if not (np.all(np.isfinite(Theta)) and np.all(np.isfinite(Y))):
        raise ValueError("Theta and Y must be finite")
    return Theta, Y


def ridge_lstsq(A, y, ridge: float):
    """Least squares of ``y`` on ``A``, with ``ridge * |x|^2`` added when ``ridge > 0``."""
    if ridge > 0:
        n = A.shape[1]
        return np.linalg.solve(A.T @ A + ridge * np.eye(n), A.T @ y)
    return np.linalg.lstsq(A, y, rcond=None)[0]


def check_controls(u, rows: int) -> np.ndarray:
    """Control inputs ``u`` (``(rows,)`` or ``(rows, q)``) as a float64 ``(rows, q)`` array,
    else ``ValueError``."""
    U = np.asarray(u, dtype=np.float64)
    U = U[:, None] if U.ndim == 1 else U
    if U.ndim != 2 or U.shape[0] != rows:
        raise ValueError(
            f"u must have shape ({rows},) or ({rows}, q): one row per sample, got {np.shape(u)}"
        )
    if not np.all(np.isfinite(U)):
        raise ValueError("u contains NaN or infinite values")
    return U


def control_names_for(u, control_names, q: int | None = None) -> list[str]:
    """The control inputs' names (default ``u0, u1, ...``; ``q`` of them, or as many as the
    columns of ``u`` or of its first trajectory); [] without controls."""
    if u is None:
        if control_names is not None:
            raise ValueError("control_names without u: give the control inputs as u=")
        return []
    if q is None:
        first = u[0] if isinstance(u, (list, tuple)) and np.ndim(u[0]) >= 1 else u
        q = 1 if np.ndim(first) == 1 else np.shape(first)[1]
    names = [f"u{i}" for i in range(q)] if control_names is None else list(control_names)
    if len(names) != q:
        raise ValueError(f"control_names has {len(names)} names for {q} control inputs")
    return names
