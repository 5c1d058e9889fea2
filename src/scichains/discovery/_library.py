"""Candidate-function libraries for sparse regression: polynomials (and sines) of the inputs,
user functions, and sums of libraries.

Every library evaluates numerically (``lib(X)``: ``Theta`` of shape ``(m, n_features)`` for
``X`` of shape ``(m, d)``), names its features (``lib.names(["x", "y"])``) and writes them as
SymPy expressions (``lib.expressions([x, y])``), so that a selected set of features can become a
:class:`scichains.ode.SymbolicModel`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from itertools import combinations, combinations_with_replacement

import numpy as np
import sympy as sp


def _as_inputs(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must have shape (samples, inputs), got {X.shape}")
    return X


def _symbols(inputs, d: int | None = None) -> list:
    """SymPy symbols from names or symbols."""
    out = [s if isinstance(s, sp.Basic) else sp.Symbol(str(s)) for s in inputs]
    if d is not None and len(out) != d:
        raise ValueError(f"the library was built for {d} inputs, got {len(out)} names")
    return out


class Library:
    """Base class of candidate libraries.

    Subclasses implement ``__call__(X) -> Theta`` (``X``: ``(m, d)``; ``Theta``:
    ``(m, n_features)``) and ``expressions(symbols) -> list`` (one SymPy expression per
    feature, in the same order); :meth:`names` defaults to the expressions as text.
    ``lib1 + lib2`` concatenates the features of two libraries.
    """

    def __call__(self, X) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def expressions(self, symbols) -> list:  # pragma: no cover - abstract
        raise NotImplementedError

    def names(self, inputs) -> list[str]:
        """Feature names for inputs named ``inputs`` (strings or SymPy symbols)."""
        return [str(e) for e in self.expressions(_symbols(inputs))]

    def n_features(self, d: int) -> int:
        """Number of features for ``d`` inputs."""
        return len(self.expressions(sp.symbols(f"z0:{d}")))

    def __add__(self, other: Library) -> ConcatLibrary:
        if not isinstance(other, Library):
            return NotImplemented
        return ConcatLibrary(self, other)


class PolynomialLibrary(Library):
    """Monomials of the inputs up to ``degree`` (with the constant), optionally ``sin`` and
    ``cos`` of each input.

    ``lib(X)`` with ``X`` of shape ``(m, d)`` returns ``Theta`` of shape ``(m, n_features)``
    (float64; ``X`` not 2-D raises ``ValueError``); ``lib.names(["x", "y"])`` the features'
    names (``"x*y"``, ``"x^2"``, ``"sin(x)"``); ``lib.expressions([x, y])`` the same as SymPy
    expressions. The features come in the order: the constant, the monomials of degree 1, 2,
    ... (each degree in ``itertools.combinations_with_replacement`` order of the inputs), then
    ``sin`` of each input, then ``cos`` of each input.

    Parameters
    ----------
    degree : int
        The highest total degree of the monomials (default 3); less than 1 raises
        ``ValueError``.
    include_constant : bool
        Include the constant feature ``1`` (default True).
    sin : bool
        Add ``sin(x_i)`` and ``cos(x_i)`` of each input (default False).
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
        X = _as_inputs(X)
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
        inputs = [str(s) for s in inputs]
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

    def expressions(self, symbols) -> list:
        """The features as SymPy expressions of ``symbols`` (one per input)."""
        s = _symbols(symbols)
        out = [sp.Mul(*[s[i] for i in t]) if t else sp.Integer(1) for t in self._terms(len(s))]
        if self.sin:
            out += [sp.sin(x) for x in s] + [sp.cos(x) for x in s]
        return out

    def __repr__(self) -> str:
        return (
            f"PolynomialLibrary(degree={self.degree}, include_constant={self.include_constant}, "
            f"sin={self.sin})"
        )


def _arity(f) -> int:
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        raise TypeError(f"cannot read the arguments of {f!r}") from None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in kinds for p in params):
        raise TypeError(f"library functions take plain positional arguments, got {f!r}")
    n = sum(1 for p in params if p.default is inspect.Parameter.empty)
    if n < 1:
        raise TypeError(f"library function {f!r} takes no arguments")
    return n


class CustomLibrary(Library):
    """Features from user functions, each SymPy-expressible.

    Parameters
    ----------
    functions : callables ``f(a)``, ``f(a, b)``, ... that, called with SymPy symbols, return a
        SymPy expression of them (use ``sympy.exp``, ``sympy.sin``... not NumPy's), for
        example ``lambda x: sympy.exp(-x)`` or ``lambda x, y: x / (1 + y)``. As in PySINDy's
        ``CustomLibrary``, a function of ``k`` arguments is applied to every combination of
        ``k`` distinct inputs (in input order): with inputs ``(x, y, z)`` a one-argument
        function gives three features, a two-argument one gives ``f(x, y), f(x, z), f(y, z)``.
    names : optional text names, one per function: callables of the input names
        (``lambda a, b: f"{a}/(1+{b})"``); default: the SymPy expression as text.

    Numerical values come from the expressions (``sympy.lambdify`` with NumPy), so the
    numbers regressed on are exactly the model's terms.
    """

    def __init__(
        self,
        functions: Sequence[Callable],
        names: Sequence[Callable] | None = None,
    ):
        functions = list(functions)
        if not functions:
            raise ValueError("give at least one function")
        for f in functions:
            if not callable(f):
                raise TypeError(f"library functions must be callable, got {f!r}")
        self.functions = functions
        self.arities = [_arity(f) for f in functions]
        if names is not None:
            names = list(names)
            if len(names) != len(functions):
                raise ValueError(f"{len(functions)} functions but {len(names)} names")
            for f, n in zip(functions, names):
                if not callable(n) or _arity(n) != _arity(f):
                    raise TypeError(
                        "names must be callables of the input names, one per function, with "
                        "the same number of arguments"
                    )
        self._names = names
        self._cache: dict[int, tuple] = {}

    def _combos(self, d):
        for k, a in enumerate(self.arities):
            if a > d:
                raise ValueError(f"library function {k} takes {a} arguments; there are {d} inputs")
            for c in combinations(range(d), a):
                yield k, c

    def expressions(self, symbols) -> list:
        """The features as SymPy expressions of ``symbols`` (one per input)."""
        s = _symbols(symbols)
        out = []
        for k, c in self._combos(len(s)):
            f = self.functions[k]
            try:
                e = sp.sympify(f(*[s[i] for i in c]))
            except (TypeError, AttributeError, sp.SympifyError) as err:
                raise TypeError(
                    f"library function {k} ({f!r}) must return a SymPy expression when called "
                    f"with SymPy symbols (use sympy functions, not numpy's): {err}"
                ) from None
            if not isinstance(e, sp.Expr):
                raise TypeError(f"library function {k} returned {e!r}, not an expression")
            out.append(e)
        return out

    def names(self, inputs) -> list[str]:
        """Feature names for inputs named ``inputs``."""
        if self._names is None:
            return super().names(inputs)
        inputs = [str(x) for x in inputs]
        return [self._names[k](*[inputs[i] for i in c]) for k, c in self._combos(len(inputs))]

    def __call__(self, X) -> np.ndarray:
        X = _as_inputs(X)
        d = X.shape[1]
        if d not in self._cache:
            z = sp.symbols(f"z0:{d}", real=True)
            exprs = self.expressions(z)
            self._cache[d] = [sp.lambdify(z, e, modules="numpy") for e in exprs]
        with np.errstate(all="ignore"):
            cols = [
                np.broadcast_to(np.asarray(f(*X.T), dtype=np.float64), (len(X),))
                for f in self._cache[d]
            ]
        Theta = np.stack(cols, axis=1)
        if not np.all(np.isfinite(Theta)):
            bad = np.flatnonzero(~np.all(np.isfinite(Theta), axis=0))
            names = self.names([f"x{i}" for i in range(d)])
            raise ValueError(
                f"library features {[names[i] for i in bad]} are not finite on these inputs"
            )
        return Theta

    def __repr__(self) -> str:
        return f"CustomLibrary({self.names([f'x{i}' for i in range(max(self.arities))])})"


class ConcatLibrary(Library):
    """The features of several libraries side by side (``lib1 + lib2``)."""

    def __init__(self, *libraries: Library):
        flat = []
        for lib in libraries:
            if not isinstance(lib, Library):
                raise TypeError(f"not a scichains.discovery library: {lib!r}")
            flat += list(lib.libraries) if isinstance(lib, ConcatLibrary) else [lib]
        self.libraries = flat

    def __call__(self, X) -> np.ndarray:
        X = _as_inputs(X)
        return np.concatenate([lib(X) for lib in self.libraries], axis=1)

    def names(self, inputs) -> list[str]:
        return [n for lib in self.libraries for n in lib.names(inputs)]

    def expressions(self, symbols) -> list:
        return [e for lib in self.libraries for e in lib.expressions(symbols)]

    def __repr__(self) -> str:
        return " + ".join(map(repr, self.libraries))
