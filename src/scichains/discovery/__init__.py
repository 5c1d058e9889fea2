"""scichains.discovery: which terms a model is missing, from data (SINDy and beyond).

- Libraries of candidate functions: :class:`PolynomialLibrary`, :class:`CustomLibrary` (user
  functions, SymPy-expressible), their sums, and :class:`PySINDyLibrary` (a PySINDy feature
  library, optional dependency). ``lib(X)`` evaluates, ``lib.expressions(symbols)`` writes
  the features in SymPy.
- Derivatives from samples: :func:`derivatives` (finite differences, smoothed finite
  differences, Savitzky-Golay, smoothing splines, total variation; irregular times).
- Collocation (two-stage) fitting: :class:`CollocationObjective` (the right-hand side at the
  smoothed samples against their estimated derivatives, with its exact gradient, no solves)
  and :func:`collocate`, the warm start of a UDE before its adjoint fit.
- Sparse regression: :func:`stlsq`, :func:`sr3` (relaxed, :class:`SR3` as the
  ``optimizer=`` of the regressions), :func:`stlsq_path`, :func:`sparse_regression`
  (``fit.equations()``, ``fit.to_sympy()``); from noisy samples without derivatives,
  :func:`weak_sparse_regression` (weak SINDy), with the same :class:`SparseFit` result;
  bagged (E-SINDy: rows and/or library terms, optionally on an executor) with inclusion
  probabilities and intervals, :func:`ensemble_sparse_regression` (:class:`EnsembleFit`).
- Structure search on the data: :func:`candidate_structures` (STLSQ paths of learned terms),
  :class:`StructureSearch` (each candidate refitted to the data through the adjoint, scored
  by BIC/AIC plus a per-term margin, improved by a stepwise add/drop search) and
  :func:`select_structure` for a trained UDE. The selected :class:`Structure` becomes a
  :class:`scichains.ode.SymbolicModel` with ``structure.to_symbolic_model()``.

``result = select_structure(ude_model, p, PolynomialLibrary(3), data, saveat, u0)``;
``print(result.best.equations())``.
"""

from ._candidates import Candidate, candidate_structures, identifiable, polynomial_sublibraries
from ._collocation import CollocationObjective, collocate
from ._criteria import aic, aicc, bic
from ._derivatives import derivatives
from ._ensemble import EnsembleFit, ensemble_sparse_regression
from ._library import ConcatLibrary, CustomLibrary, Library, PolynomialLibrary
from ._pysindy import PySINDyLibrary, to_pysindy
from ._search import SearchResult, StructureSearch, select_structure, ude_samples
from ._sr3 import SR3, sr3
from ._stlsq import SparseFit, sparse_regression, stlsq, stlsq_path
from ._structure import Structure
from ._weak import weak_sparse_regression

__all__ = [
    "Candidate",
    "CollocationObjective",
    "ConcatLibrary",
    "CustomLibrary",
    "EnsembleFit",
    "Library",
    "PolynomialLibrary",
    "PySINDyLibrary",
    "SR3",
    "SearchResult",
    "SparseFit",
    "Structure",
    "StructureSearch",
    "aic",
    "aicc",
    "bic",
    "candidate_structures",
    "collocate",
    "derivatives",
    "ensemble_sparse_regression",
    "identifiable",
    "polynomial_sublibraries",
    "select_structure",
    "sparse_regression",
    "sr3",
    "stlsq",
    "stlsq_path",
    "to_pysindy",
    "ude_samples",
    "weak_sparse_regression",
]
