"""Ensembles of sparse fits (E-SINDy: Fasel, Kutz, Brunton and Brunton 2022): STLSQ on
bootstrap resamples of the regression rows, giving each term an inclusion probability and
each coefficient an interval."""

from __future__ import annotations

import numpy as np

from ._regression import control_names_for
from ._stlsq import SparseFit, optimizer_fn, select_threshold, stlsq, with_controls
from ._weak import weak_rows


class EnsembleFit(SparseFit):
    """Result of :func:`ensemble_sparse_regression`: a :class:`SparseFit` whose
    ``coefficients`` are the ensemble's medians on the terms included in at least
    ``min_inclusion`` of the models (zero elsewhere), so ``equations()`` and ``to_sympy()``
    work as for one fit.

    Attributes (beyond :class:`SparseFit`'s)
    ----------------------------------------
    ensemble : numpy.ndarray
        The bagged fits' coefficients, shape ``(n_models, n_features, n_targets)``.
    inclusion : numpy.ndarray
        The fraction of the models in which each term is nonzero, shape ``(n_features,
        n_targets)``.
    min_inclusion : float
        The inclusion probability a term needs to enter ``coefficients``.
    """

    def __init__(self, ensemble, min_inclusion, threshold, path, *names):
        self.ensemble = ensemble
        self.inclusion = np.mean(ensemble != 0, axis=0)
        self.min_inclusion = float(min_inclusion)
        Xi = np.where(self.inclusion >= min_inclusion, np.median(ensemble, axis=0), 0.0)
        super().__init__(Xi, threshold, path, *names)

    def intervals(self, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """Percentile intervals of the coefficients over the models, ``(low, high)``, each of
        shape ``(n_features, n_targets)`` (a model without a term counts as 0 for it)."""
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        q = 100 * (1 - level) / 2
        low, high = np.percentile(self.ensemble, [q, 100 - q], axis=0)
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


def _bag(Theta, Y, thresholds, n_models, ridge, seed, n_eff, fit=stlsq):
    rng = np.random.default_rng(seed)
    m = Theta.shape[0]
    out = np.empty((n_models, Theta.shape[1], Y.shape[1]))
    for k in range(n_models):
        rows = rng.integers(0, m, m)
        if np.ndim(thresholds) == 0:
            out[k] = fit(Theta[rows], Y[rows], float(thresholds), ridge)
        else:
            # a resample holds fewer independent rows than its length: count the distinct ones
            distinct = np.unique(rows).size / m
            n_k = distinct * (m if n_eff is None else n_eff)
            out[k] = select_threshold(Theta[rows], Y[rows], thresholds, ridge, n_k, fit)[1]
    return out


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
    **weak_options,
) -> EnsembleFit:
    """Bagged sparse regression (E-SINDy, U. Fasel, J. N. Kutz, B. W. Brunton and S. L.
    Brunton, Proc. R. Soc. A 478, 2022): STLSQ on ``n_models`` bootstrap resamples of the
    regression's rows, each with its threshold chosen as the single fit chooses it (the lowest
    AICc among the same candidates), giving inclusion probabilities and coefficient intervals.
    A fixed ``thresholds=`` number is used for every resample instead (PySINDy's E-SINDy).

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
    **weak_options
        ``window``, ``n_windows``, ``p`` of :func:`weak_sparse_regression` (``weak=True``).

    Returns
    -------
    EnsembleFit
        ``ensemble`` (``(n_models, n_features, n_targets)``), ``inclusion``,
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
    return EnsembleFit(
        _bag(Theta, Y, cands, int(n_models), ridge, seed, n_eff, fit),
        min_inclusion,
        threshold,
        path,
        library.names(input_names),
        target_names,
        library,
        input_names,
    )
