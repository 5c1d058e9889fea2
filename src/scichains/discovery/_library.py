"""Candidate-function libraries for sparse regression: polynomials (and sines) of the states."""

from __future__ import annotations

from itertools import combinations_with_replacement

import numpy as np


class PolynomialLibrary:
    """Monomials of the inputs up to ``degree`` (with the constant), optionally ``sin`` and
    ``cos`` of each input.

    ``lib(X)`` with ``X`` of shape ``(m, d)`` returns ``Theta`` of shape ``(m, n_features)``;
    ``lib.names(["x", "y"])`` the features' names (``"x*y"``, ``"x^2"``, ``"sin(x)"``).
    """

    def __init__(self, degree: int = 3, include_constant: bool = True, sin: bool = False):
        if int(degree) < 1:
            raise ValueError(f"degree must be at least 1, got {degree}")
        self.degree = int(degree)
        self.include_constant = bool(include_constant)
        self.sin = bool(sin)

    def _terms(self, d):
        terms = [()] if self.include_constant else []
        for k in range(1, self.degree + 1):
            terms += list(combinations_with_replacement(range(d), k))
        return terms

    def __call__(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must have shape (samples, inputs), got {X.shape}")
        cols = [
            np.prod(X[:, list(t)], axis=1) if t else np.ones(len(X))
            for t in self._terms(X.shape[1])
        ]
        if self.sin:
            cols += [np.sin(X[:, i]) for i in range(X.shape[1])]
            cols += [np.cos(X[:, i]) for i in range(X.shape[1])]
        return np.stack(cols, axis=1)

    def names(self, inputs) -> list[str]:
        """Feature names for inputs named ``inputs``."""
        inputs = list(inputs)
        out = []
        for t in self._terms(len(inputs)):
            if not t:
                out.append("1")
                continue
            parts = []
            for i in sorted(set(t)):
                c = t.count(i)
                parts.append(inputs[i] if c == 1 else f"{inputs[i]}^{c}")
            out.append("*".join(parts))
        if self.sin:
            out += [f"sin({x})" for x in inputs] + [f"cos({x})" for x in inputs]
        return out
