"""A discovered structure: selected library terms with coefficients refitted to the data, and
its conversion to SymPy expressions and to a :class:`scichains.ode.SymbolicModel`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import sympy as sp

if TYPE_CHECKING:  # pragma: no cover
    from ..ode import SymbolicModel
    from ._refit import LibraryModel


def _rounded(e, precision: int):
    return e.xreplace({n: sp.Float(n, precision) for n in e.atoms(sp.Float)})


class Structure:
    """Selected library terms of each unknown, refitted to the data.

    Attributes
    ----------
    support : boolean array ``(n_features, n_unknowns)``
    coefficients : array ``(n_features, n_unknowns)``, refitted (zero off the support)
    params : array ``(n_params,)``, the known model's parameters (refitted if the search fits
        them)
    sse : the data's (weighted) sum of squared errors; infinite if the model failed
    score : the search's selection score (criterion plus margin per term)
    label : how the structure was found (STLSQ labels of the candidate it came from)
    moves : ``(action, feature, unknown)`` steps of the stepwise search that led here

    Made by :func:`select_structure`. The constructor takes, before the attributes listed here,
    ``engine``: the search's internal model of the known right-hand side, the library and the
    data, which names the features and builds the SymPy expressions, the
    :class:`~scichains.ode.SymbolicModel` and the simulations of this structure.
    """

    def __init__(
        self, engine: LibraryModel, support, coefficients, params, sse, score, label=(), moves=()
    ):
        self._engine = engine
        self.support = np.asarray(support, dtype=bool)
        self.coefficients = np.where(self.support, coefficients, 0.0)
        self.params = np.asarray(params, dtype=np.float64)
        self.sse = float(sse)
        self.score = float(score)
        self.label = tuple(label)
        self.moves = list(moves)

    @property
    def n_terms(self) -> int:
        """Number of selected library terms."""
        return int(np.count_nonzero(self.support))

    @property
    def feature_names(self) -> list[str]:
        return list(self._engine.feature_names)

    def terms(self) -> dict[str, dict[str, float]]:
        """``{unknown: {feature name: coefficient}}`` of the selected terms."""
        e = self._engine
        return {
            str(u): {
                e.feature_names[i]: float(self.coefficients[i, j])
                for i in np.flatnonzero(self.support[:, j])
            }
            for j, u in enumerate(e.unknowns)
        }

    def learned_sympy(self) -> dict:
        """``{unknown symbol: SymPy expression}``: each unknown as its selected features with
        the refitted coefficients."""
        e = self._engine
        return {
            u: sum(
                (
                    sp.Float(self.coefficients[i, j]) * e.features[i]
                    for i in np.flatnonzero(self.support[:, j])
                ),
                sp.Integer(0),
            )
            for j, u in enumerate(e.unknowns)
        }

    def to_sympy(self, symbolic: bool = False) -> list:
        """The right-hand side, one SymPy expression per state: the known part with each
        unknown replaced by its selected terms. ``symbolic=False``: refitted numbers for the
        coefficients and the known parameters; ``True``: coefficient symbols (as in
        :meth:`to_symbolic_model`) and the parameter symbols."""
        e = self._engine
        if symbolic:
            sub = {
                u: sum(
                    (e.coefs[j][i] * e.features[i] for i in np.flatnonzero(self.support[:, j])),
                    sp.Integer(0),
                )
                for j, u in enumerate(e.unknowns)
            }
            return [r.xreplace(sub) for r in e.rhs]
        sub = dict(self.learned_sympy())
        sub.update({s: sp.Float(v) for s, v in zip(e.params, self.params)})
        return [r.xreplace(sub) for r in e.rhs]

    def equations(self, precision: int = 4) -> list[str]:
        """``["x' = 1.3*x - 0.8924*x*y", ...]``: :meth:`to_sympy` as text, numbers rounded to
        ``precision`` significant digits."""
        return [
            f"{s}' = {_rounded(r, precision)}" for s, r in zip(self._engine.states, self.to_sympy())
        ]

    def to_symbolic_model(self) -> tuple[SymbolicModel, np.ndarray]:
        """The discovered model as a :class:`scichains.ode.SymbolicModel` and its parameter
        vector: parameters are the known ones, then one coefficient symbol per selected term
        (named ``"<unknown>__<feature>"``, e.g. ``U_0__x_y``), valued at the refit. Refit it
        further with :mod:`scichains.adjoint`, or solve it past the data to extrapolate."""
        from ..ode import SymbolicModel

        e = self._engine
        coefs = [
            e.coefs[j][i] for j in range(e.n_unknowns) for i in np.flatnonzero(self.support[:, j])
        ]
        values = [
            self.coefficients[i, j]
            for j in range(e.n_unknowns)
            for i in np.flatnonzero(self.support[:, j])
        ]
        model = SymbolicModel(e.states, e.params + coefs, self.to_sympy(symbolic=True), t=e.t)
        return model, np.concatenate([self.params, np.asarray(values, dtype=np.float64)])

    def simulate(self, t_eval) -> np.ndarray | None:
        """The structure's solution from the search's ``u0`` at ``t_eval``, shape
        ``(len(t_eval), n)``; None if the solve fails or blows up."""
        return self._engine.simulate(self.coefficients, self.params, t_eval)

    def __repr__(self) -> str:
        lines = "\n  ".join(self.equations())
        return (
            f"Structure(\n  {lines}\n  terms={self.n_terms}, sse={self.sse:.5g}, "
            f"score={self.score:.5g})"
        )
