"""SUNDIALS CVODE through scikit-sundae: the solver classes and a direct call of its compiled
library with C callbacks (ODEs only; a mass-matrix problem is refused)."""
