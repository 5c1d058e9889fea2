"""scichains.discovery: sparse regression of learned terms onto candidate functions (SINDy).

``fit = sparse_regression(X, U, PolynomialLibrary(3, sin=True), input_names=["x", "y"])``;
``fit.equations()`` prints the recovered terms.
"""

from ._library import PolynomialLibrary
from ._stlsq import SparseFit, aicc, sparse_regression, stlsq, stlsq_path

__all__ = ["PolynomialLibrary", "SparseFit", "aicc", "sparse_regression", "stlsq", "stlsq_path"]
