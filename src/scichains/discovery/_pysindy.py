"""PySINDy interoperability (optional dependency): a PySINDy feature library as a scichains
library, and the regression problem of learned terms in PySINDy's conventions."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import sympy as sp
from sympy.core.function import AppliedUndef

from ._library import Library, _as_inputs, _symbols


def _parse(name: str, symbols: Sequence) -> sp.Expr:
    """A PySINDy feature name (``"x^2 y"``, ``"sin(1 x)"``, ``"x y"``) as SymPy."""
    text = name.replace("^", "**")
    text = re.sub(r"(?<=[\w\)])\s+(?=[\w\(])", "*", text.strip())
    local = {str(s): s for s in symbols}
    e = sp.sympify(text, locals=local)
    if e.atoms(AppliedUndef) or e.free_symbols - set(symbols):
        raise TypeError(f"{name!r} names functions or symbols SymPy does not know")
    return e


class PySINDyLibrary(Library):
    """A PySINDy feature library (``pysindy.PolynomialLibrary``, ``FourierLibrary``, their
    sums...) used as a scichains library, so that its features can enter
    :func:`candidate_structures`, :class:`StructureSearch` and a
    :class:`scichains.ode.SymbolicModel`.

    Parameters
    ----------
    feature_library : a PySINDy feature library (fitted here on first use)
    expressions : optional callable ``symbols -> list of SymPy expressions``, one per feature,
        for libraries whose feature names are not SymPy-readable (``CustomLibrary``'s
        ``f0(x)``); default: PySINDy's feature names parsed (``"x^2 y"`` -> ``x**2*y``,
        ``"sin(1 x)"`` -> ``sin(x)``), each checked against the library's own numbers.

    PySINDy itself is needed only to build and evaluate such a library.
    """

    def __init__(self, feature_library, expressions=None):
        if not hasattr(feature_library, "fit") or not hasattr(feature_library, "transform"):
            raise TypeError(f"not a PySINDy feature library: {feature_library!r}")
        self.feature_library = feature_library
        self._expressions = expressions
        self._fitted_d: int | None = None
        self._checked: set[int] = set()

    def _fit(self, d: int):
        if self._fitted_d != d:
            self.feature_library.fit(np.zeros((2, d)) + np.arange(1.0, d + 1.0))
            self._fitted_d = d

    def __call__(self, X) -> np.ndarray:
        X = _as_inputs(X)
        self._fit(X.shape[1])
        return np.asarray(self.feature_library.transform(X), dtype=np.float64)

    def names(self, inputs) -> list[str]:
        inputs = [str(s) for s in inputs]
        self._fit(len(inputs))
        return list(self.feature_library.get_feature_names(inputs))

    def expressions(self, symbols) -> list:
        s = _symbols(symbols)
        d = len(s)
        if self._expressions is not None:
            out = [sp.sympify(e) for e in self._expressions(s)]
        else:
            plain = sp.symbols(f"z0:{d}")
            names = self.names([str(z) for z in plain])
            try:
                out = [_parse(n, plain) for n in names]
            except (sp.SympifyError, SyntaxError, TypeError) as err:
                raise ValueError(
                    f"cannot read PySINDy's feature names {names} as SymPy ({err}); pass "
                    "expressions= to PySINDyLibrary"
                ) from None
            out = [e.xreplace(dict(zip(plain, s))) for e in out]
            self._check(out, s)
        self._fit(d)
        return out

    def _check(self, exprs, s):
        """The parsed expressions must reproduce the library's numbers."""
        d = len(s)
        if d in self._checked:
            return
        z = sp.symbols(f"z0:{d}")
        plain = [e.xreplace(dict(zip(s, z))) for e in exprs]
        X = np.random.default_rng(0).uniform(0.5, 1.5, (7, d))
        ours = np.stack(
            [
                np.broadcast_to(np.asarray(sp.lambdify(z, e, "numpy")(*X.T), float), (7,))
                for e in plain
            ],
            axis=1,
        )
        theirs = self(X)
        if ours.shape != theirs.shape or not np.allclose(ours, theirs, rtol=1e-10, atol=1e-12):
            raise ValueError(
                "PySINDy's feature names, read as SymPy, do not reproduce the library's "
                "values; pass expressions= to PySINDyLibrary"
            )
        self._checked.add(d)

    def __repr__(self) -> str:
        return f"PySINDyLibrary({self.feature_library!r})"


def to_pysindy(Theta, targets, coefficients=None) -> dict:
    """The regression of learned terms in PySINDy's conventions: ``{"x": Theta, "y":
    targets}`` (samples in rows) to fit any PySINDy optimizer (``opt.fit(d["x"], d["y"])``;
    its ``coef_`` has shape ``(n_targets, n_features)``), and with ``coefficients`` (ours:
    ``(n_features, n_targets)``) also ``"coef"``, their transpose in PySINDy's layout."""
    Theta = np.asarray(Theta, dtype=np.float64)
    Y = np.asarray(targets, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    if Theta.ndim != 2 or Y.ndim != 2 or Theta.shape[0] != Y.shape[0]:
        raise ValueError(f"Theta {Theta.shape} and targets {Y.shape} must have the same rows")
    out = {"x": Theta, "y": Y}
    if coefficients is not None:
        C = np.asarray(coefficients, dtype=np.float64)
        if C.shape != (Theta.shape[1], Y.shape[1]):
            raise ValueError(
                f"coefficients must have shape {(Theta.shape[1], Y.shape[1])}, got {C.shape}"
            )
        out["coef"] = C.T.copy()
    return out
