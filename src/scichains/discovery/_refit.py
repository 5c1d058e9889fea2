"""The refit engine of a structure search: the known model with every library term in every
unknown, one compiled SymbolicModel whose coefficients on a given support are fitted to the
data by L-BFGS with adjoint gradients (the others held at zero)."""

from __future__ import annotations

import re

import numpy as np
import sympy as sp

from .._blas import minimize_lbfgsb
from ..adjoint import Objective, ScipyFun, SquaredError
from ..ode import SymbolicModel, solve


def coefficient_name(unknown, feature: str) -> str:
    """The coefficient symbol's name of ``feature`` in ``unknown``: ``"U_0__x_y"`` for the
    feature ``"x*y"`` of ``U_0`` (non-identifier characters become ``_``)."""
    tail = re.sub(r"\W+", "_", feature.replace("^", "_pow")).strip("_") or "f"
    return f"{unknown}__{tail}"


class LibraryModel:
    """Known right-hand side ``rhs`` (expressions of ``states``, ``params`` and the
    ``unknowns``) with each unknown replaced by ``sum_i c_i f_i`` over every library feature.

    Parameter vector: the known parameters (``n_phys``), then the coefficients in blocks of
    ``n_features``, one block per unknown (``Xi.T.ravel()`` for ``Xi`` of shape
    ``(n_features, n_unknowns)``).
    """

    def __init__(
        self,
        states,
        rhs,
        unknowns,
        params,
        features,
        feature_names,
        data,
        saveat,
        u0,
        t0,
        weights,
        t,
        solver,
        rtol,
        atol,
        max_steps,
        sensealg,
    ):
        self.states, self.unknowns, self.params = list(states), list(unknowns), list(params)
        self.rhs = [sp.sympify(e) for e in rhs]
        self.features = list(features)
        self.feature_names = list(feature_names)
        self.t, self.t0 = t, float(t0)
        self.u0 = np.asarray(u0, dtype=np.float64)
        self.saveat = np.asarray(saveat, dtype=np.float64)
        self.solver, self.rtol, self.atol, self.max_steps = solver, rtol, atol, max_steps
        nf, nu = len(self.features), len(self.unknowns)
        self.n_features, self.n_unknowns, self.n_phys = nf, nu, len(self.params)
        self.coefs = [
            [sp.Symbol(coefficient_name(u, f)) for f in self.feature_names] for u in self.unknowns
        ]
        names = {str(s) for s in self.states + self.params}
        clash = names & {str(c) for row in self.coefs for c in row}
        if clash:
            raise ValueError(f"coefficient names clash with states or parameters: {clash}")
        sub = {
            u: sum((c * f for c, f in zip(self.coefs[j], self.features)), sp.Integer(0))
            for j, u in enumerate(self.unknowns)
        }
        eqs = [e.xreplace(sub) for e in self.rhs]
        flat = [c for row in self.coefs for c in row]
        self.model = SymbolicModel(self.states, self.params + flat, eqs, t=t)
        p0 = np.zeros(self.model.num_params)
        tend = float(self.saveat[-1])
        self.obj = Objective(
            self.model.problem(self.u0, (self.t0, tend), p0),
            SquaredError(data, weights),
            self.saveat,
            solver=solver,
            rtol=rtol,
            atol=atol,
            max_steps=max_steps,
            sensealg=sensealg,
        )

    def vector(self, Xi, params) -> np.ndarray:
        return np.concatenate([np.asarray(params, dtype=np.float64), Xi.T.ravel()])

    def simulate(self, Xi, params, t_eval, rtol=1e-8, atol=1e-10):
        """States at ``t_eval`` from ``u0`` (shape ``(len(t_eval), n)``), or None if the
        model fails or blows up (any state above 1e6 in magnitude)."""
        t_eval = np.asarray(t_eval, dtype=np.float64)
        prob = self.model.problem(self.u0, (self.t0, float(t_eval[-1])), self.vector(Xi, params))
        sol = solve(
            prob, self.solver, saveat=t_eval, rtol=rtol, atol=atol, max_steps=self.max_steps
        )
        if not sol.success or not np.all(np.isfinite(sol.u)) or np.abs(sol.u).max() > 1e6:
            return None
        return sol.u

    def refit(self, Xi, support, params, fit_params: bool):
        """The coefficients on ``support`` (boolean ``(n_features, n_unknowns)``) and, if
        ``fit_params``, the known parameters, that best fit the data, by L-BFGS from ``Xi`` and
        ``params`` to a tight tolerance (so that refits of one structure from different starts
        agree far below the score differences that decide). Returns ``(Xi, params, SSE)``, SSE
        infinite if the model fails at the start."""
        support = np.asarray(support, dtype=bool)
        free = np.concatenate([np.full(self.n_phys, bool(fit_params)), support.T.ravel()])
        full = self.vector(np.where(support, Xi, 0.0), params)
        q0 = full[free].copy()
        # in units of 10% of each coefficient: L-BFGS's first step has unit length, which in
        # raw coefficients can throw the model far enough to fail the solve, and then the
        # line search gives up where it started
        scale = 0.1 * np.maximum(np.abs(q0), 0.1)

        def value_and_grad(r):
            full[free] = q0 + scale * r
            value, g, _ = self.obj.value_and_grad(full)
            return value, g[free] * scale

        fun = ScipyFun(value_and_grad)
        r0 = np.zeros(q0.size)
        if q0.size == 0 or fun(r0)[0] == np.inf:
            full[free] = q0
            sse = fun(r0)[0] if q0.size == 0 else np.inf
            return self._split(full) + (float(sse),)
        res = minimize_lbfgsb(fun, r0, options={"ftol": 1e-13, "gtol": 1e-9})
        full[free] = q0 + scale * res.x
        return self._split(full) + (float(res.fun),)

    def _split(self, full):
        params = full[: self.n_phys].copy()
        Xi = full[self.n_phys :].reshape(self.n_unknowns, self.n_features).T.copy()
        return Xi, params
