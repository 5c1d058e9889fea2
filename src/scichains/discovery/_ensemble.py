"""Ensembles of sparse fits (E-SINDy: Fasel, Kutz, Brunton and Brunton 2022): STLSQ on
bootstrap resamples of the regression rows and/or on random sub-libraries, giving each term an
inclusion probability and each coefficient an interval; the fits optionally on an executor."""

from __future__ import annotations

import functools
import warnings

import numpy as np

from ._regression import control_names_for
from ._stlsq import SparseFit, optimizer_fn, select_threshold, with_controls
from ._weak import weak_rows


class EnsembleFit(SparseFit):
    """Result of :func:`ensemble_sparse_regression`: a :class:`SparseFit` whose
    ``coefficients`` are the ensemble's medians on the terms included in at least
    ``min_inclusion`` of the models (zero elsewhere), so ``equations()`` and ``to_sympy()``
    work as for one fit.

    Attributes (beyond :class:`SparseFit`'s)
    ----------------------------------------
    ensemble : numpy.ndarray
        The bagged fits' coefficients, shape ``(n_models, n_features, n_targets)`` (0 for a
        term a model's library left out).
    offered : numpy.ndarray
        Which terms each model's library held, bool, shape ``(n_models, n_features)`` (all
        True without library bagging).
    inclusion : numpy.ndarray
        The fraction of the models in which each term is nonzero, among the models whose
        library held it, shape ``(n_features, n_targets)``.
    min_inclusion : float
        The inclusion probability a term needs to enter ``coefficients``.
    """

    def __init__(self, ensemble, min_inclusion, threshold, path, *names, offered=None):
        self.ensemble = ensemble
        if offered is None:
            offered = np.ones(ensemble.shape[:2], dtype=bool)
        self.offered = offered
        # over the models whose library held the term (all of them without library bagging)
        self._offered_only = np.where(offered[:, :, None], ensemble, np.nan)
        counts = offered.sum(axis=0)[:, None]
        kept = np.sum((ensemble != 0) & offered[:, :, None], axis=0)
        self.inclusion = kept / np.maximum(counts, 1)
        self.min_inclusion = float(min_inclusion)
        with warnings.catch_warnings():  # a term no model's library held: median NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            median = np.nanmedian(self._offered_only, axis=0)
        Xi = np.where(self.inclusion >= min_inclusion, median, 0.0)
        super().__init__(Xi, threshold, path, *names)

    def intervals(self, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """Percentile intervals of the coefficients over the models, ``(low, high)``, each of
        shape ``(n_features, n_targets)`` (a model that fitted a term and dropped it counts as
        0 for it; with library bagging, models whose library left the term out do not
        count)."""
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        q = 100 * (1 - level) / 2
        with warnings.catch_warnings():  # a term no model's library held: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            low, high = np.nanpercentile(self._offered_only, [q, 100 - q], axis=0)
        return low, high

    def inclusion_table(self) -> list[str]:
        """``["x' : x 1.00, x*y 1.00, y^2 0.03", ...]``: each target's terms with a nonzero
        inclusion probability, most probable first."""
        out = []
        for j, name in enumerate(self.target_names):
            order = np.argsort(-self.inclusion[:, j], kind="stable")
            terms = [
                f"{self.feature_names[i]} {self.inclusion[i, j]:.2f}"
                for i in order
                if self.inclusion[i, j] > 0
            ]
            out.append(f"{name} : " + (", ".join(terms) if terms else "none"))
        return out


def _draws(m, n_features, n_models, seed, bootstrap, drop_terms):
    """Each model's rows (``None``: all) and library columns. The rows come from
    ``default_rng(seed)`` in model order (as before library bagging existed, so the same seed
    gives the same resamples); the columns from a second stream spawned from the seed."""
    rng = np.random.default_rng(seed)
    col_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    out = []
    for _ in range(n_models):
        rows = rng.integers(0, m, m) if bootstrap else None
        if drop_terms:
            cols = np.sort(col_rng.choice(n_features, n_features - drop_terms, replace=False))
        else:
            cols = None
        out.append((rows, cols))
    return out


def _fit_models(Theta, Y, cands, ridge, n_eff, fit, draws):
    """The fits of the models ``draws`` (a list of ``(rows, cols)``): ``(k, n_features,
    n_targets)``. A module-level function, so that process executors can run it."""
    m, F = Theta.shape
    out = np.zeros((len(draws), F, Y.shape[1]))
    for k, (rows, cols) in enumerate(draws):
        T = Theta if rows is None else Theta[rows]
        Yk = Y if rows is None else Y[rows]
        if cols is not None:
            T = T[:, cols]
        if np.ndim(cands) == 0:
            Xi = fit(T, Yk, float(cands), ridge)
        else:
            # a resample holds fewer independent rows than its length: count the distinct ones
            distinct = 1.0 if rows is None else np.unique(rows).size / m
            n_k = distinct * (m if n_eff is None else n_eff)
            Xi = select_threshold(T, Yk, cands, ridge, n_k, fit)[1]
        if cols is None:
            out[k] = Xi
        else:
            out[k, cols] = Xi
    return out


def _bag(Theta, Y, cands, ridge, n_eff, fit, draws, executor, chunk):
    if executor is None:
        return _fit_models(Theta, Y, cands, ridge, n_eff, fit, draws)
    chunks = [draws[i : i + chunk] for i in range(0, len(draws), chunk)]
    parts = executor.map(functools.partial(_fit_models, Theta, Y, cands, ridge, n_eff, fit), chunks)
    return np.concatenate(list(parts), axis=0)


def ensemble_sparse_regression(
    X,
    Y=None,
    library=None,
    thresholds=None,
    *,
    t=None,
    weak: bool = False,
    n_models: int = 100,
    min_inclusion: float = 0.5,
    seed: int = 0,
    input_names=None,
    target_names=None,
    ridge: float = 0.0,
    optimizer="stlsq",
    u=None,
    control_names=None,
    bootstrap: bool = True,
    drop_terms: int = 0,
    executor=None,
    chunk: int = 10,
    **weak_options,
) -> EnsembleFit:
    """Bagged sparse regression (E-SINDy, U. Fasel, J. N. Kutz, B. W. Brunton and S. L.
    Brunton, Proc. R. Soc. A 478, 2022): STLSQ on ``n_models`` bootstrap resamples of the
    regression's rows, each with its threshold chosen as the single fit chooses it (the lowest
    AICc among the same candidates), giving inclusion probabilities and coefficient intervals.
    A fixed ``thresholds=`` number is used for every resample instead (PySINDy's E-SINDy).
    Library bagging (``drop_terms=k``, PySINDy's ``library_ensemble`` with
    ``n_candidates_to_drop``) fits each model on the library less ``k`` terms drawn at random,
    alone (``bootstrap=False``) or with the row resampling ("double bagging" in Fasel et
    al.); a term's inclusion probability then counts the models whose library held it. A model
    whose library lacks a true term makes up for it with spurious ones, so library bagging ranks
    terms (to prune a large library, as Fasel et al. use it) rather than settling them: on
    Lotka-Volterra derivatives (200 samples, 5% noise, 6 terms, one dropped per model) the
    spurious terms' inclusion was 0-0.76 (mean 0.36), the true terms' 0.82-1, and the median
    model the true one.

    In the weak form the rows are the test functions. Measured on Lotka-Volterra (the UDE
    example's parameters, ``t`` in ``[0, 10]``, 101 samples, polynomials of degree 2, noise
    seeds 0-9, ``benchmarks/discovery_noise.py``): spurious terms' inclusion 0 at 5% and 10%
    noise and at most 0.16 at 20%; the true terms' at least 0.83; the median model has exactly
    the true terms for every seed. A resample's criterion counts its distinct rows only (a
    bootstrap repeats rows, which would otherwise pass for more evidence).

    Parameters
    ----------
    X : array_like
        Strong form (``weak=False``): the inputs, shape ``(m, d)``; weak form
        (``weak=True``): the samples, shape ``(m, n)`` or a list of them, with ``t=``.
    Y : array_like, optional
        Strong form only: the targets (derivatives), shape ``(m,)`` or ``(m, n_targets)``,
        e.g. from :func:`derivatives`.
    library : Library
        The candidate features.
    thresholds : float or array_like, optional
        A number: the STLSQ threshold of every resample. Otherwise the candidate thresholds
        (default: :func:`sparse_regression`'s, from all rows), among which each resample takes
        the one with the lowest AICc (in the weak form counting the disjoint windows, as
        :func:`weak_sparse_regression`); the ``threshold`` reported is the one chosen on all
        rows.
    t : array_like, optional
        The sample times (``weak=True``), as in :func:`weak_sparse_regression`.
    weak : bool
        Bag the weak form's rows (test functions) instead of samples (default False).
    n_models : int
        Bootstrap resamples (default 100).
    min_inclusion : float
        Terms in fewer models than this fraction are left out of ``coefficients`` (default
        0.5).
    seed : int
        Seed of the resampling (default 0).
    input_names, target_names, ridge, optimizer, u, control_names
        As in :func:`sparse_regression` / :func:`weak_sparse_regression` (``optimizer``:
        ``"stlsq"``, ``"sr3"`` or :class:`SR3`, run on every resample; ``u``: control
        inputs, SINDYc).
    bootstrap : bool
        Resample the rows (default True). ``False`` with ``drop_terms`` bags the library only.
    drop_terms : int
        Library bagging: each model leaves out this many terms, drawn at random (default 0;
        at most ``n_features - 1``).
    executor : concurrent.futures.Executor, optional
        Fits the models in chunks of ``chunk`` with ``executor.map`` (a
        ``ThreadPoolExecutor``, a ``ProcessPoolExecutor``, ``dask.distributed``'s
        ``Client.get_executor()``, ...). The resamples are drawn before, so the result is the
        same as without it, for any executor and chunk size.
    chunk : int
        Models per task on the executor (default 10).
    **weak_options
        ``window``, ``n_windows``, ``p`` of :func:`weak_sparse_regression` (``weak=True``).

    Returns
    -------
    EnsembleFit
        ``ensemble`` (``(n_models, n_features, n_targets)``), ``offered``, ``inclusion``,
        ``intervals(level)``, and the median model as ``coefficients``.
    """
    from ._library import Library

    fit = optimizer_fn(optimizer)
    if not isinstance(library, Library):
        raise TypeError(f"library must be a scichains.discovery library, got {library!r}")
    if not (isinstance(n_models, (int, np.integer)) and n_models >= 1):
        raise ValueError(f"n_models must be a positive integer, got {n_models!r}")
    if not 0 < min_inclusion <= 1:
        raise ValueError(f"min_inclusion must be in (0, 1], got {min_inclusion!r}")
    if not (isinstance(drop_terms, (int, np.integer)) and drop_terms >= 0):
        raise ValueError(f"drop_terms must be a non-negative integer, got {drop_terms!r}")
    if not bootstrap and drop_terms == 0:
        raise ValueError("bootstrap=False without drop_terms leaves nothing to bag")
    if not (isinstance(chunk, (int, np.integer)) and chunk >= 1):
        raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
    if executor is not None and not callable(getattr(executor, "map", None)):
        raise TypeError(f"executor must have a map method (concurrent.futures), got {executor!r}")
    if weak:
        if t is None or Y is not None:
            raise ValueError("weak=True takes the samples X with their times t=, and no Y")
        Theta, Y, n_eff, n = weak_rows(t, X, library, **weak_options, u=u)
        default_targets = [f"{s}'" for s in (input_names or [f"x{i}" for i in range(n)])]
    else:
        if Y is None or t is not None or weak_options:
            raise ValueError("the strong form takes X and Y (e.g. from derivatives), no t")
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64)
        Y = Y[:, None] if Y.ndim == 1 else Y
        XU, _ = with_controls(X, u, [""] * X.shape[1], control_names)
        Theta, n_eff, n = library(XU), None, X.shape[1]
        default_targets = [f"y{j}" for j in range(Y.shape[1])]
    threshold, _, path = select_threshold(Theta, Y, thresholds, ridge, n_eff, fit)
    # a fixed threshold stays fixed; otherwise each resample chooses among the candidates
    cands = float(thresholds) if np.ndim(thresholds) == 0 and thresholds is not None else None
    if cands is None:
        cands = np.array([row[0] for row in path])
    input_names = list(input_names) if input_names is not None else [f"x{i}" for i in range(n)]
    input_names = input_names + control_names_for(u, control_names)
    target_names = list(target_names) if target_names is not None else default_targets
    F = Theta.shape[1]
    if drop_terms >= F:
        raise ValueError(f"drop_terms must be below the library's {F} terms, got {drop_terms}")
    draws = _draws(Theta.shape[0], F, int(n_models), seed, bootstrap, int(drop_terms))
    offered = np.ones((int(n_models), F), dtype=bool)
    if drop_terms:
        offered[:] = False
        for k, (_, cols) in enumerate(draws):
            offered[k, cols] = True
    return EnsembleFit(
        _bag(Theta, Y, cands, ridge, n_eff, fit, draws, executor, int(chunk)),
        min_inclusion,
        threshold,
        path,
        library.names(input_names),
        target_names,
        library,
        input_names,
        offered=offered,
    )
