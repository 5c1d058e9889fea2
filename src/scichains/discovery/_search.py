"""Structure search on the data: candidate structures refitted through the adjoint, scored by
an information criterion plus a per-term margin, improved by a stepwise search."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import sympy as sp

from ..adjoint._methods import adjoint_family
from ..nn._validate import reject_class
from ..ode import ESDIRK, CVODESolver, ExplicitRK, Rosenbrock, SymbolicModel, Tsit5, solve
from ._candidates import Candidate, candidate_structures, identifiable, polynomial_sublibraries
from ._criteria import criterion_function
from ._library import Library
from ._refit import LibraryModel
from ._structure import Structure


class SearchResult:
    """Outcome of :meth:`StructureSearch.run` / :func:`select_structure`.

    best : the selected :class:`Structure`
    candidates : every refitted candidate (a :class:`Structure` each), lowest score first
    """

    def __init__(self, best: Structure, candidates: list[Structure]):
        self.best = best
        self.candidates = candidates

    def __repr__(self) -> str:
        return f"SearchResult({len(self.candidates)} candidates, best={self.best!r})"


class StructureSearch:
    """Which library terms the unknown parts of a model need, judged on the data.

    Parameters
    ----------
    states : SymPy symbols of the ``n`` states
    rhs : ``n`` SymPy expressions, the right-hand side, in the states, ``params``, the time
        ``t`` and the ``unknowns`` (symbols standing for the terms to discover, e.g. the
        outputs of a :class:`scichains.ode.NetworkTerm`)
    unknowns : the unknown symbols (``n_unknowns``)
    library : a :class:`Library` (``PolynomialLibrary``, ``CustomLibrary``, a sum of them, or
        :class:`PySINDyLibrary`); each unknown becomes a linear combination of its features
    data : observations, shape ``(len(saveat), n)``
    saveat : observation times, shape ``(len(saveat),)``
    u0 : initial state at ``t0``, shape ``(n,)``
    params : ``{symbol: start value}`` of the known model's parameters (default none)
    fit_params : refit the known parameters with each structure (default True)
    inputs : expressions of the states on which the library is evaluated (default: the
        states)
    weights : per-observation weights as in :class:`scichains.adjoint.SquaredError` (0 drops an
        observation; the number of nonzero weights is the ``m`` of the criterion)
    criterion : ``"bic"`` (default), ``"aic"``, ``"aicc"`` or a callable ``(sse, m, k)``
    margin : added to the criterion per selected term (default 2: a term must lower the BIC
        by more than 2, positive evidence on Kass and Raftery's scale, to earn its place; it
        keeps the choice from flipping between structures the data cannot tell apart)
    max_terms, max_cond : structures with more terms, or with nearly collinear terms on the
        samples (see :func:`identifiable`), are not refitted
    starts : stepwise searches from this many of the best candidates (default 4)
    thresholds, sublibraries : of :func:`candidate_structures` (default sub-libraries:
        :func:`polynomial_sublibraries` of the library; ``None`` for the whole library only)
    solver, rtol, atol, max_steps, sensealg : of the refits' solves and adjoint (default
        Tsit5, 1e-9, 1e-11, 20000, and :class:`scichains.adjoint.Objective`'s default method,
        the solver's ``default_sensealg``). ``solver``: an adaptive solver of any family with
        an adjoint (a stiff model: Rodas5P, KenCarp4, CVODE_BDF); :meth:`run_ude` also samples
        the trained UDE with it. Anything else raises ``TypeError`` naming those solvers.

    The score of a structure with ``k`` terms and data SSE ``sse`` is ``criterion(sse, m, k +
    n_fitted_params) + margin * k``, infinite when its model fails on the data.
    """

    def __init__(
        self,
        states: Sequence,
        rhs: Sequence,
        unknowns: Sequence,
        library: Library,
        data,
        saveat,
        u0,
        *,
        params: Mapping | None = None,
        fit_params: bool = True,
        inputs: Sequence | None = None,
        t=None,
        t0: float | None = None,
        weights=None,
        criterion="bic",
        margin: float = 2.0,
        max_terms: int | None = 12,
        max_cond: float | None = 1e3,
        starts: int = 4,
        thresholds=None,
        sublibraries="polynomial",
        solver: ExplicitRK | Rosenbrock | ESDIRK | CVODESolver = Tsit5,
        rtol: float = 1e-9,
        atol: float = 1e-11,
        max_steps: int = 20_000,
        sensealg=None,
    ):
        states = list(states)
        rhs = [sp.sympify(e) for e in rhs]
        unknowns = list(unknowns)
        if len(rhs) != len(states):
            raise ValueError(f"{len(states)} states but {len(rhs)} right-hand sides")
        if not unknowns:
            raise ValueError("give at least one unknown symbol to discover")
        used = set().union(*(e.free_symbols for e in rhs))
        missing = [str(u) for u in unknowns if u not in used]
        if missing:
            raise ValueError(f"unknowns {missing} appear in no right-hand side")
        if not isinstance(library, Library):
            raise TypeError(f"library must be a scichains.discovery library, got {library!r}")
        reject_class(solver, "solver")
        adjoint_family(solver)  # TypeError naming the solvers with an adjoint
        params = dict(params or {})
        self.states, self.rhs, self.unknowns, self.library = states, rhs, unknowns, library
        self.inputs = list(states) if inputs is None else [sp.sympify(e) for e in inputs]
        for e in self.inputs:
            extra = e.free_symbols - set(states)
            if extra:
                raise ValueError(f"library inputs must be expressions of the states: {extra}")
        self._inputs_fn = sp.lambdify(states, self.inputs, modules="numpy")
        features = library.expressions(self.inputs)
        names = library.names([str(e) for e in self.inputs])
        saveat = np.asarray(saveat, dtype=np.float64)
        data = np.asarray(data, dtype=np.float64)
        if saveat.ndim != 1 or data.shape != (saveat.size, len(states)):
            raise ValueError(
                f"data must have shape (len(saveat), states) = ({saveat.size}, {len(states)}), "
                f"got {data.shape}"
            )
        self.engine = LibraryModel(
            states,
            rhs,
            unknowns,
            list(params),
            features,
            names,
            data,
            saveat,
            u0,
            saveat[0] if t0 is None else t0,
            weights,
            t,
            solver,
            rtol,
            atol,
            max_steps,
            sensealg,
        )
        self.params0 = np.array([float(v) for v in params.values()])
        self.fit_params = bool(fit_params) and len(params) > 0
        w = np.ones_like(data) if weights is None else np.broadcast_to(weights, data.shape)
        self.m = int(np.count_nonzero(w))
        self._criterion = criterion_function(criterion)
        self.margin = float(margin)
        self.max_terms, self.max_cond, self.starts = max_terms, max_cond, int(starts)
        if self.starts < 1:
            raise ValueError("starts must be at least 1")
        self.thresholds = thresholds
        if isinstance(sublibraries, str):
            if sublibraries != "polynomial":
                raise ValueError(
                    f"sublibraries must be 'polynomial', None or a dict, got {sublibraries!r}"
                )
            sublibraries = polynomial_sublibraries(features, self.inputs)
        self.sublibraries = sublibraries
        self._fits: dict[bytes, Structure] = {}

    # ------------------------------------------------------------------ building blocks
    @classmethod
    def from_ude(cls, model: SymbolicModel, p, library: Library, data, saveat, u0, **kwargs):
        """The search for a trained universal differential equation: the unknowns are the
        model's network outputs, the known parameters start at ``p``'s physical part, and
        the library is evaluated on the network's inputs (unless ``inputs=`` is given).
        :meth:`run_ude` then takes the candidates from the trained network."""
        if not isinstance(model, SymbolicModel) or model.network is None:
            raise TypeError("from_ude needs a SymbolicModel with a NetworkTerm")
        p = np.asarray(p, dtype=np.float64)
        if p.shape != (model.num_params,):
            raise ValueError(f"p must have shape ({model.num_params},), got {p.shape}")
        kwargs.setdefault("inputs", model.network.inputs)
        kwargs.setdefault("params", dict(zip(model.params, p[: model.n_phys])))
        kwargs.setdefault("t", model.t)
        return cls(
            model.states,
            model.equations,
            model.network.outputs,
            library,
            data,
            saveat,
            u0,
            **kwargs,
        )

    @property
    def feature_names(self) -> list[str]:
        """Names of the library's features on the inputs."""
        return list(self.engine.feature_names)

    def library_matrix(self, states) -> np.ndarray:
        """The library on the inputs at ``states`` (shape ``(m, n)``): ``(m, n_features)``."""
        states = np.asarray(states, dtype=np.float64)
        if states.ndim != 2 or states.shape[1] != len(self.states):
            raise ValueError(f"states must have shape (m, {len(self.states)}), got {states.shape}")
        cols = self._inputs_fn(*states.T)
        X = np.stack([np.broadcast_to(np.asarray(c, float), (len(states),)) for c in cols], 1)
        return self.library(X)

    def score(self, sse: float, k: int) -> float:
        """Selection score of a structure with ``k`` terms and data SSE ``sse``."""
        if not np.isfinite(sse):
            return np.inf
        n_fit = len(self.params0) if self.fit_params else 0
        return float(self._criterion(sse, self.m, k + n_fit) + self.margin * k)

    def refit(self, coefficients, support=None, params=None, label=(), moves=()) -> Structure:
        """Refit the terms on ``support`` (default: the nonzeros of ``coefficients``, shape
        ``(n_features, n_unknowns)``) and the known parameters (if fitted) to the data, from
        ``coefficients`` and ``params``; cached by support. Returns a :class:`Structure`."""
        Xi = np.asarray(coefficients, dtype=np.float64)
        shape = (self.engine.n_features, self.engine.n_unknowns)
        if Xi.shape != shape:
            raise ValueError(f"coefficients must have shape {shape}, got {Xi.shape}")
        support = Xi != 0 if support is None else np.asarray(support, dtype=bool)
        if support.shape != shape:
            raise ValueError(f"support must have shape {shape}, got {support.shape}")
        key = support.tobytes()
        if key not in self._fits:
            params = self.params0 if params is None else params
            Xi_fit, p_fit, sse = self.engine.refit(Xi, support, params, self.fit_params)
            k = int(np.count_nonzero(support))
            self._fits[key] = Structure(
                self.engine, support, Xi_fit, p_fit, sse, self.score(sse, k), label, moves
            )
        s = self._fits[key]
        return Structure(
            self.engine,
            s.support,
            s.coefficients,
            s.params,
            s.sse,
            s.score,
            label or s.label,
            moves,
        )

    def candidates(self, states, targets) -> list[Candidate]:
        """:func:`candidate_structures` of ``targets`` (``(m, n_unknowns)``, the learned
        terms at ``states``, ``(m, n)``) on the library at ``states``."""
        return candidate_structures(
            self.library_matrix(states),
            targets,
            self.thresholds,
            self.sublibraries,
            self.max_terms,
            self.max_cond,
        )

    def _allowed(self, Theta, support) -> bool:
        k = int(np.count_nonzero(support))
        if k == 0 or (self.max_terms is not None and k > self.max_terms):
            return False
        return self.max_cond is None or identifiable(Theta, support, self.max_cond)

    def stepwise(self, start: Structure, Theta) -> Structure:
        """Bidirectional stepwise search on the data from ``start``: among the structures one
        term away (any term dropped, or any library term added to any unknown; identifiable
        on ``Theta`` with at most ``max_terms`` terms), each refitted, move to the one with the
        lowest score while it is lower than the current one. Returns the end point, a local
        optimum of the score, with the ``moves`` taken."""
        cur, moves = start, []
        names, unknowns = self.engine.feature_names, self.engine.unknowns
        while True:
            trials = []
            for i, j in itertools.product(range(cur.support.shape[0]), range(cur.support.shape[1])):
                support = cur.support.copy()
                support[i, j] = not support[i, j]
                if not self._allowed(Theta, support):
                    continue
                fit = self.refit(np.where(support, cur.coefficients, 0.0), support, cur.params)
                action = "added" if support[i, j] else "dropped"
                trials.append((fit.score, fit, (action, names[i], str(unknowns[j]))))
            if not trials:
                break
            score, fit, move = min(trials, key=lambda r: r[0])
            if not score < cur.score:
                break
            moves.append(move)
            cur = Structure(
                self.engine,
                fit.support,
                fit.coefficients,
                fit.params,
                fit.sse,
                fit.score,
                start.label,
                list(moves),
            )
        return cur

    def search(self, candidates: Sequence[Candidate], Theta) -> SearchResult:
        """Refit each candidate, then :meth:`stepwise` from the ``starts`` best; the lowest
        end point wins (ties: the better start)."""
        fitted = {}
        for c in candidates:
            key = np.asarray(c.support, dtype=bool).tobytes()
            if key not in fitted:
                fitted[key] = self.refit(c.coefficients, c.support, label=c.label)
        if not fitted:
            raise RuntimeError(
                "no candidate structure to refit: every support found by STLSQ has nearly "
                "collinear terms on these samples, or too many terms"
            )
        ranked = sorted(fitted.values(), key=lambda s: s.score)
        best = None
        for s in ranked[: self.starts]:
            end = self.stepwise(s, Theta)
            if best is None or end.score < best.score:
                best = end
        return SearchResult(best, ranked)

    def run(self, states, targets) -> SearchResult:
        """Candidates from ``targets`` (the learned terms, ``(m, n_unknowns)``) at ``states``
        (``(m, n)``), refitted and searched on the data."""
        return self.search(self.candidates(states, targets), self.library_matrix(states))

    def run_ude(self, model: SymbolicModel, p, saveat=None) -> SearchResult:
        """:meth:`run` with the trained UDE's trajectory at ``saveat`` (default: the data's
        times) and its network outputs there (solved with the search's ``solver``)."""
        states, targets = ude_samples(
            model,
            p,
            self.engine.u0,
            self.engine.saveat if saveat is None else saveat,
            t0=self.engine.t0,
            solver=self.engine.solver,
        )
        return self.run(states, targets)


def ude_samples(
    model: SymbolicModel,
    p,
    u0,
    saveat,
    t0: float | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    solver: ExplicitRK | Rosenbrock | ESDIRK | CVODESolver = Tsit5,
):
    """The trained UDE's states at ``saveat`` (``(len(saveat), n)``) and its network's outputs
    there (``(len(saveat), n_out)``): the samples to regress the learned terms on.

    Parameters
    ----------
    model : a :class:`scichains.ode.SymbolicModel` with a ``NetworkTerm`` (else
        ``TypeError``)
    p : its parameter vector, shape ``(model.num_params,)``: the physical parameters, then the
        network's (another shape raises ``ValueError``)
    u0 : the initial state at ``t0``, shape ``(n,)`` (another shape raises ``ValueError``)
    saveat : the sample times, shape ``(len(saveat),)``, sorted in the direction of
        integration; the solve runs from ``t0`` to ``saveat[-1]``
    t0 : the initial time (default ``saveat[0]``)
    rtol, atol : tolerances of the solve (defaults ``1e-8`` and ``1e-10``). A failed solve
        raises :class:`scichains.ode.ODESolveError`.
    solver : the solver (default Tsit5; a stiff UDE: Rodas5P, KenCarp4, ...; any solver
        :func:`scichains.ode.solve` takes)

    Returns
    -------
    tuple of numpy.ndarray
        ``(states, outputs)``, float64, shapes ``(len(saveat), n)`` and
        ``(len(saveat), n_out)``.
    """
    if not isinstance(model, SymbolicModel) or model.network is None:
        raise TypeError("ude_samples needs a SymbolicModel with a NetworkTerm")
    saveat = np.asarray(saveat, dtype=np.float64)
    t0 = float(saveat[0]) if t0 is None else float(t0)
    p = np.asarray(p, dtype=np.float64)
    prob = model.problem(u0, (t0, float(saveat[-1])), p)
    states = solve(prob, solver, saveat=saveat, rtol=rtol, atol=atol, throw=True).u
    net = model.network
    sub = dict(zip(model.params, p[: model.n_phys]))
    args = list(model.states) + ([model.t] if model.t is not None else [])
    fn = sp.lambdify(args, [sp.sympify(e).xreplace(sub) for e in net.inputs], modules="numpy")
    vals = list(states.T) + ([saveat] if model.t is not None else [])
    X = np.stack([np.broadcast_to(np.asarray(c, float), (len(saveat),)) for c in fn(*vals)], 1)
    return states, np.asarray(net.chain(X, p[model.n_phys :]), dtype=np.float64)


def select_structure(
    model: SymbolicModel, p, library: Library, data, saveat, u0, **kwargs
) -> SearchResult:
    """Discover the terms a trained UDE's network stands for: STLSQ candidates from the
    network's outputs along the trained trajectory, each refitted to the data through the
    adjoint and scored (criterion plus margin per term), then stepwise searches from the best.
    Returns a :class:`SearchResult`; its ``best`` converts to a model with
    ``best.to_symbolic_model()``.

    Parameters
    ----------
    model : the trained UDE, a :class:`scichains.ode.SymbolicModel` with a ``NetworkTerm``
        (else ``TypeError``); its network outputs are the unknowns to discover
    p : its trained parameter vector, shape ``(model.num_params,)`` (another shape raises
        ``ValueError``): the physical part is where the refits start, the network part gives
        the candidates
    library : a :class:`Library` evaluated on the network's inputs (unless ``inputs=`` is
        given)
    data : observations, shape ``(len(saveat), n)`` (another shape raises ``ValueError``)
    saveat : observation times, shape ``(len(saveat),)``; also the times at which the trained
        trajectory is sampled for the candidates
    u0 : initial state at ``t0`` (default ``saveat[0]``), shape ``(n,)``
    **kwargs : the keyword options of :class:`StructureSearch` (``t0``, ``criterion``,
        ``margin``, ``weights``, ``max_terms``, ``solver``, ...); ``inputs``, ``params`` and
        ``t`` default to the model's
    """
    search = StructureSearch.from_ude(model, p, library, data, saveat, u0, **kwargs)
    return search.run_ude(model, p)
