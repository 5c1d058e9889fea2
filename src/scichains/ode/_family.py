"""Method families as data.

Every solver class names its family in a class attribute ``family`` (and the gradient method
used when none is given in ``default_sensealg``). ``solve``, the adjoints, the ensembles and
the models look the family up here and dispatch on it through tables, instead of testing
the solver's class: a new family is a solver class with these attributes and an entry in the
tables of the code that supports it, and registers its solvers here (:func:`register`), so that
the tests and the benchmarks that go over every solver of a family find it.
"""

from __future__ import annotations

FAMILIES = {
    "explicit": "explicit Runge-Kutta (Tsit5, DP5, BS3, Vern7, RK4, Euler)",
    "rosenbrock": "Rosenbrock (Rodas5P, Rosenbrock23)",
    "esdirk": "ESDIRK (Kvaerno5, KenCarp4)",
    "radau": "Radau IIA (RadauIIA5)",
    "cvode": "SUNDIALS CVODE (CVODE_BDF, CVODE_Adams)",
    "auto": "automatic stiffness switching (AutoTsit5Rodas5P)",
}
"""The families, with the solvers of each in words (for messages)."""


def family_of(solver, what: str = "solver", accept=tuple(FAMILIES)) -> str:
    """The family of ``solver`` (an instance); ``TypeError`` naming the families in
    ``accept`` when it is not a solver of one of them."""
    if isinstance(solver, type):
        raise TypeError(f"{what} must be a solver instance ({solver.__name__}()), not the class")
    family = getattr(type(solver), "family", None)
    if family not in FAMILIES or family not in accept:
        names = "; ".join(FAMILIES[f] for f in accept)
        got = getattr(solver, "name", None) or type(solver).__name__
        raise TypeError(f"{what} {got!r} is not accepted here: give one of {names}")
    return family


_REGISTRY: dict[str, object] = {}


def register(*solvers) -> None:
    """Record ready-to-use solvers (instances, or the CVODE classes) under their ``name``; each
    family's module calls this for the solvers it defines."""
    for solver in solvers:
        family = getattr(solver, "family", None)
        if family not in FAMILIES:
            raise ValueError(f"{solver!r} names no known family (got {family!r})")
        _REGISTRY[solver.name] = solver


def registered(*families: str) -> list:
    """The registered solvers of ``families`` (all when none is given), in registration order."""
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown families {unknown}: known are {sorted(FAMILIES)}")
    return [s for s in _REGISTRY.values() if not families or s.family in families]
