"""Candidate structures: the supports that STLSQ paths of learned terms go through."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import sympy as sp

from ._stlsq import stlsq_path

DEFAULT_THRESHOLDS = np.geomspace(1e-3, 10.0, 120)


class Candidate(NamedTuple):
    """One candidate structure.

    label : how it was found (sub-library and threshold per target)
    support : boolean array ``(n_features, n_targets)``, the selected terms
    coefficients : array ``(n_features, n_targets)``, STLSQ's coefficients (zero off support)
    """

    label: tuple[str, ...]
    support: np.ndarray
    coefficients: np.ndarray


def identifiable(Theta, support, max_cond: float = 1e3) -> bool:
    """Whether each target's selected library columns are far from linearly dependent on the
    samples: the condition number of the column-normalised submatrix below ``max_cond``.

    ``Theta``: ``(m, n_features)``; ``support``: ``(n_features, n_targets)`` (nonzeros count).
    Near-dependent terms (such as ``x``, ``x^3`` and ``sin(x)`` on ``x`` in ``[0.2, 1.6]``)
    fit anything with huge cancelling coefficients and cannot be told apart by the data.
    """
    Theta = np.asarray(Theta, dtype=np.float64)
    support = np.asarray(support)
    if support.ndim == 1:
        support = support[:, None]
    if support.shape[0] != Theta.shape[1]:
        raise ValueError(
            f"support has {support.shape[0]} rows but Theta has {Theta.shape[1]} columns"
        )
    for j in range(support.shape[1]):
        cols = np.flatnonzero(support[:, j])
        if cols.size > 1:
            norms = np.linalg.norm(Theta[:, cols], axis=0)
            if np.any(norms == 0):
                return False
            if np.linalg.cond(Theta[:, cols] / norms) > max_cond:
                return False
    return True


def polynomial_sublibraries(expressions: Sequence, symbols: Sequence) -> dict[str, list[int]]:
    """Nested sub-libraries by polynomial degree: ``{"all": every column, "degree<=D": the
    polynomial features of degree at most D, ...}`` for D from the highest degree present down
    to 2 (when they differ from the ones before). STLSQ on a smaller, less collinear library
    finds supports that the whole library's path misses.

    ``expressions``: the library's features as SymPy expressions of ``symbols``."""
    degrees = []
    for e in expressions:
        e = sp.sympify(e)
        if e.is_polynomial(*symbols):
            degrees.append(sp.Poly(e, *symbols).total_degree() if e.free_symbols else 0)
        else:
            degrees.append(None)
    out = {"all": list(range(len(expressions)))}
    poly = [d for d in degrees if d is not None]
    seen = {tuple(out["all"])}
    for top in range(max(poly, default=0), 1, -1):
        cols = [i for i, d in enumerate(degrees) if d is not None and d <= top]
        if cols and tuple(cols) not in seen:
            seen.add(tuple(cols))
            out[f"degree<={top}"] = cols
    return out


def _paths(Theta, u, thresholds, sublibraries):
    """``[(label, Xi), ...]``: one per distinct support found by STLSQ on any sub-library."""
    seen, out = set(), []
    for name, cols in sublibraries.items():
        for thr, Xs in stlsq_path(Theta[:, cols], u, thresholds):
            Xi = np.zeros((Theta.shape[1], 1))
            Xi[cols] = Xs
            key = (Xi != 0).tobytes()
            if key not in seen:
                seen.add(key)
                out.append((f"{name} {thr:.3g}", Xi))
    return out


def candidate_structures(
    Theta,
    targets,
    thresholds=None,
    sublibraries: Mapping[str, Sequence[int]] | None = None,
    max_terms: int | None = 12,
    max_cond: float | None = 1e3,
) -> list[Candidate]:
    """Candidate structures for learned terms from STLSQ paths.

    Parameters
    ----------
    Theta : array ``(m, n_features)``, the library evaluated on the samples
    targets : array ``(m, n_targets)`` (or ``(m,)``), the learned terms (for example a trained
        network's outputs) on the same samples
    thresholds : STLSQ thresholds (default: 120 values log-spaced over ``[1e-3, 10]``,
        coefficient magnitudes)
    sublibraries : ``{label: column indices}`` on which to run the paths as well (default:
        the whole library only; see :func:`polynomial_sublibraries`)
    max_terms : candidates with more terms in all are dropped (None: no limit)
    max_cond : candidates whose terms are nearly collinear on the samples are dropped (see
        :func:`identifiable`; None: keep them)

    Each target's distinct supports along the paths are paired with every other target's
    (all combinations); the empty structure is dropped. Returns a list of :class:`Candidate`,
    one per distinct support, in a deterministic order.
    """
    Theta = np.asarray(Theta, dtype=np.float64)
    U = np.asarray(targets, dtype=np.float64)
    if U.ndim == 1:
        U = U[:, None]
    if Theta.ndim != 2 or U.ndim != 2 or Theta.shape[0] != U.shape[0]:
        raise ValueError(
            f"Theta (m, n_features) and targets (m, n_targets) must have the same rows, got "
            f"{Theta.shape} and {U.shape}"
        )
    if not (np.all(np.isfinite(Theta)) and np.all(np.isfinite(U))):
        raise ValueError("Theta and targets must be finite")
    thresholds = DEFAULT_THRESHOLDS if thresholds is None else np.asarray(thresholds, float)
    if thresholds.ndim != 1 or thresholds.size == 0 or np.any(~(thresholds >= 0)):
        raise ValueError("thresholds must be a non-empty 1-D array of non-negative numbers")
    nf = Theta.shape[1]
    subs = {"all": list(range(nf))} if sublibraries is None else dict(sublibraries)
    for name, cols in subs.items():
        cols = list(cols)
        if not cols or min(cols) < 0 or max(cols) >= nf:
            raise ValueError(f"sub-library {name!r} has column indices outside 0..{nf - 1}")
    paths = [_paths(Theta, U[:, j], thresholds, subs) for j in range(U.shape[1])]
    seen, out = set(), []
    for combo in itertools.product(*paths):
        Xi = np.concatenate([X for _, X in combo], axis=1)
        support = Xi != 0
        k = int(np.count_nonzero(support))
        if k == 0 or (max_terms is not None and k > max_terms):
            continue
        key = support.tobytes()
        if key in seen:
            continue
        seen.add(key)
        if max_cond is not None and not identifiable(Theta, support, max_cond):
            continue
        out.append(Candidate(tuple(lab for lab, _ in combo), support, Xi))
    return out
