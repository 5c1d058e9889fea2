"""Goodness-of-fit plots and the visual predictive check (matplotlib, one call each)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ._objective import PopulationObjective


def gof_plot(table: dict, fig=None, endpoint=None):
    """Four panels from a :func:`residuals` table: DV vs PRED, DV vs IPRED (with the line of
    identity), CWRES vs TIME and CWRES vs PRED (with zero). Censored observations (``CENS``
    not 0) are drawn at their limit with another marker in the first two and have no CWRES.

    A table of several endpoints (a ``DVID`` column with more than one value): a row of the
    four panels per endpoint, titled by its ``DVID``; ``endpoint`` (a ``DVID``) draws that
    endpoint's rows alone (``ValueError`` for a ``DVID`` the table does not hold, or without a
    ``DVID`` column). Returns the matplotlib figure (a new one unless ``fig`` is given)."""
    import matplotlib.pyplot as plt

    for key in ("DV", "PRED", "IPRED", "CWRES", "TIME"):
        if key not in table:
            raise ValueError(f"the table needs a {key} column (from pk.residuals)")
    dvid = table.get("DVID")
    present = [] if dvid is None else sorted({int(v) for v in np.asarray(dvid)})
    if endpoint is not None:
        if dvid is None:
            raise ValueError(
                "endpoint is given but the table has no DVID column (a model with one endpoint)"
            )
        if endpoint not in present:
            raise ValueError(f"the table has no rows of DVID {endpoint!r} (it has {present})")
        ids = [endpoint]
    else:
        ids = present if len(present) > 1 else [None]
    fig = fig or plt.figure(figsize=(9, 7) if len(ids) == 1 else (14, 3.4 * len(ids)))
    if len(ids) == 1:
        axes = fig.subplots(2, 2)
        rows = [(axes[0], axes[1])]
    else:
        axes = np.atleast_2d(fig.subplots(len(ids), 4))
        rows = [(ax[:2], ax[2:]) for ax in axes]
    for (top, bottom), k in zip(rows, ids):
        sel = slice(None) if k is None else np.asarray(dvid) == k
        part = {key: np.asarray(v)[sel] for key, v in table.items() if key != "ID"}
        _gof_panels(top, bottom, part, None if k is None else f"DVID {k}")
    fig.tight_layout()
    return fig


def _gof_panels(top, bottom, table, title):
    dv = np.asarray(table["DV"])
    cens = np.asarray(table.get("CENS", np.zeros(dv.size)))
    seen = cens == 0
    for ax, key in zip(top, ("PRED", "IPRED")):
        x = np.asarray(table[key])
        ax.scatter(x[seen], dv[seen], s=10, alpha=0.7)
        if not np.all(seen):  # censored: at their limit, marked apart
            ax.scatter(
                x[~seen], dv[~seen], s=14, marker="x", color="C3", label="censored (DV: limit)"
            )
            ax.legend(fontsize=8)
        if dv.size:
            lim = [min(x.min(), dv.min()), max(x.max(), dv.max())]
            ax.plot(lim, lim, "k--", lw=1)
        ax.set_xlabel(key)
        ax.set_ylabel("DV")
        if title:
            ax.set_title(title, fontsize=9)
    for ax, key in zip(bottom, ("TIME", "PRED")):
        ax.scatter(table[key], table["CWRES"], s=10, alpha=0.7)
        ax.axhline(0.0, color="k", lw=1, ls="--")
        ax.set_xlabel(key)
        ax.set_ylabel("CWRES")
        if title:
            ax.set_title(title, fontsize=9)


@dataclass
class VPC:
    """A visual predictive check, as :func:`vpc` returns it: per time bin, the observed
    percentiles and, for each percentile, the median and the ``ci`` interval over the simulated
    replicates. ``plot(ax=None)`` draws it. Bins without observations hold NaN.

    Attributes
    ----------
    percentiles : the percentiles compared (e.g. ``(5, 50, 95)``)
    ci : the coverage of the simulated intervals (e.g. 0.95)
    edges : the bin edges in time, shape ``(n_bins + 1,)``
    centers : the median observation time in each bin, shape ``(n_bins,)``
    observed : the observed percentiles, shape ``(n_bins, len(percentiles))``
    simulated_median : the median over the replicates of each simulated percentile, same
        shape
    simulated_low : the lower end of the ``ci`` interval over the replicates of each
        simulated percentile, same shape
    simulated_high : the upper end of that interval, same shape
    times : the observation times of every subject (data order), shape ``(n_obs,)``
    dv : the observations at ``times``, shape ``(n_obs,)`` (a censored one: its limit)
    lloq : the limit of quantification of each observation, shape ``(n_obs,)``, or None
        (no censoring handled). With one, an observed or simulated value below it counts as
        below the limit: it enters the percentiles at the LLOQ and a percentile at or below
        the bin's LLOQ is NaN (not shown: it is not known), and the fraction below the limit
        is compared per bin:
    observed_below : the observed fraction below the LLOQ per bin, shape ``(n_bins,)``
        (NaN without ``lloq``)
    simulated_below_median, simulated_below_low, simulated_below_high : the median and
        ``ci`` interval over the replicates of that fraction, shape ``(n_bins,)``
    cens : the data's ``CENS`` of each observation, shape ``(n_obs,)``
    endpoint : the ``DVID`` of the endpoint checked (``vpc(..., endpoint=)``), or None (a
        model with one endpoint); ``times``, ``dv``, ``lloq`` and ``cens`` then hold its
        observations only
    prediction_corrected : whether this is a prediction-corrected VPC (``vpc(...,
        prediction_corrected=True)``): ``dv``, ``lloq``, the observed and simulated
        percentiles are then prediction-corrected values
    n_excluded : the observations left out of a prediction-corrected VPC because their
        population prediction is not positive (0 otherwise)
    """

    percentiles: tuple
    ci: float
    edges: np.ndarray
    centers: np.ndarray
    observed: np.ndarray
    simulated_median: np.ndarray
    simulated_low: np.ndarray
    simulated_high: np.ndarray
    times: np.ndarray
    dv: np.ndarray
    lloq: np.ndarray | None = None
    observed_below: np.ndarray | None = None
    simulated_below_median: np.ndarray | None = None
    simulated_below_low: np.ndarray | None = None
    simulated_below_high: np.ndarray | None = None
    cens: np.ndarray | None = None
    endpoint: int | None = None
    prediction_corrected: bool = False
    n_excluded: int = 0

    def plot(self, ax=None):
        """Observed data and percentiles (lines) over the simulated intervals (bands);
        with an LLOQ, censored observations are marked at their limit and the LLOQ drawn
        (see :meth:`plot_below` for the fraction below it). Returns the axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 5))
        cens = np.zeros(self.dv.size) if self.cens is None else self.cens
        seen = cens == 0
        ax.scatter(self.times[seen], self.dv[seen], s=8, color="0.5", alpha=0.6, label="observed")
        if not np.all(seen):
            ax.scatter(
                self.times[~seen], self.dv[~seen], s=12, marker="x", color="C3", alpha=0.6,
                label="censored (at its limit)",
            )  # fmt: skip
        if self.lloq is not None:
            ax.axhline(float(np.max(self.lloq)), color="C3", lw=1, ls=":", label="LLOQ")
        for k, pct in enumerate(self.percentiles):
            color = "C0" if pct == 50 else "C1"
            ax.fill_between(
                self.centers,
                self.simulated_low[:, k],
                self.simulated_high[:, k],
                color=color,
                alpha=0.25,
            )
            ax.plot(
                self.centers, self.observed[:, k], color=color, lw=1.5, label=f"observed P{pct:g}"
            )
        ax.set_xlabel("TIME")
        label = "prediction-corrected DV" if self.prediction_corrected else "DV"
        ax.set_ylabel(label if self.endpoint is None else f"{label} (DVID {self.endpoint})")
        if self.prediction_corrected:
            ax.set_title("prediction-corrected VPC", fontsize=10)
        ax.legend(fontsize=8)
        return ax

    def plot_below(self, ax=None):
        """The observed fraction below the LLOQ per bin (line) over the simulated median
        and ``ci`` interval (band). ``ValueError`` without an LLOQ. Returns the axes."""
        import matplotlib.pyplot as plt

        if self.lloq is None:
            raise ValueError("this VPC has no LLOQ (vpc(..., lloq=...) or censored data)")
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 3))
        ax.fill_between(
            self.centers, self.simulated_below_low, self.simulated_below_high, color="C3",
            alpha=0.25, label=f"simulated {100 * self.ci:g}% interval",
        )  # fmt: skip
        ax.plot(self.centers, self.simulated_below_median, color="C3", lw=1, ls="--")
        ax.plot(self.centers, self.observed_below, color="k", lw=1.5, label="observed")
        ax.set_xlabel("TIME")
        ax.set_ylabel("fraction < LLOQ")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
        return ax


def simulate(model, data, x, n: int, seed=0, **objective_kwargs) -> np.ndarray:
    """``n`` replicates of the observations of ``data`` simulated from ``model`` at ``x``
    (random effects from omega, residuals from the error model): an array of shape
    ``(n, data.n_obs)``, subjects in data order. Censored observations are simulated like
    the others (uncensored values: :func:`vpc` applies the limit).

    Parameters
    ----------
    model : the :class:`PKModel`
    data : the :class:`EventData` whose doses, covariates and observation times are simulated
    x : the estimated vector, shape ``(size,)`` as :meth:`PKModel.pack` lays it out (e.g.
        ``fit.x``); another shape raises ``ValueError``
    n : the number of replicates
    seed : the seed of ``numpy.random.default_rng`` (default 0)
    **objective_kwargs : options of :class:`PopulationObjective` used for the predictions
        (``rtol``, ``atol``)
    """
    objective_kwargs.pop("blq", None)  # every observation is simulated
    obj = PopulationObjective(model, data, **objective_kwargs)
    _, om, _ = model.unpack(x)
    log_sd = np.asarray(x, dtype=np.float64)[model.p + model.n_omega :]
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(om)
    N = len(data.subjects)
    n_obs = [s.n_obs for s in data.subjects]
    # each observation's endpoint (one endpoint: 0) and whether it is on the log scale
    ep = np.concatenate(
        [np.zeros(k, np.int64) if e is None else e for k, e in zip(n_obs, obj.endpoint)]
    ).astype(np.int64)
    log = obj._err.log[ep]
    out = np.empty((n, data.n_obs))
    for r in range(n):
        etas = rng.standard_normal((N, model.q)) @ L.T
        f = np.concatenate(obj.predict(x, etas))
        with np.errstate(divide="ignore", invalid="ignore"):
            f = np.where(log, np.log(np.where(log, f, 1.0)), f)
        sd = np.sqrt(obj._err.variance(f, log_sd, ep))
        y = f + sd * rng.standard_normal(f.size)
        out[r] = np.where(log, np.exp(np.where(log, y, 0.0)), y)
    return out


def vpc(
    model,
    data,
    fit,
    n_sim: int = 200,
    bins=8,
    percentiles=(5, 50, 95),
    ci=0.95,
    seed=0,
    lloq=None,
    endpoint=None,
    prediction_corrected: bool = False,
    **objective_kwargs,
) -> VPC:
    """A visual predictive check of ``fit``: ``n_sim`` replicates of the data simulated with
    the estimates (:func:`simulate`), binned in time (``bins``: a number of bins with about
    equal counts of observations, or the edges), the observed ``percentiles`` per bin
    against the simulated ones' medians and ``ci`` intervals. ``.plot()`` draws it.

    Parameters
    ----------
    model : the fitted :class:`PKModel`
    data : the :class:`EventData` it was fitted to
    fit : a :class:`FitResult`, or an estimated vector ``x`` of shape ``(size,)``
    n_sim : the number of simulated replicates (default 200)
    bins : a number of bins (default 8) with about equal counts of observations (edges at
        quantiles of the observation times; tied quantiles merge bins), or the bin edges,
        ascending; observations outside the edges count in the first or last bin
    percentiles : the percentiles to compare, in ``[0, 100]`` (default ``(5, 50, 95)``)
    ci : the coverage of the simulated intervals, in ``(0, 1)`` (default 0.95)
    seed : the seed of the simulation (default 0)
    lloq : the lower limit of quantification: a number, or one per observation (shape
        ``(n_obs,)``); default: the data's, when observations are censored below one
        (``CENS=1``): each such observation's own ``DV``, and the smallest of them for the
        others. With one, values below it (observed: ``CENS=1``; simulated: below the
        observation's LLOQ) enter the percentiles at the LLOQ, a percentile at or below the
        bin's LLOQ is not shown (NaN), and the fraction below it is compared per bin (see
        :class:`VPC`)
    endpoint : the ``DVID`` of the endpoint to check, required for a model with several
        (``PKModel(observe={dvid: ...})``: percentiles of a concentration and an effect
        together mean nothing; ``ValueError`` without it, or for a ``DVID`` the model does
        not have): its observations alone are binned and compared, the simulations being
        those of every endpoint. ``lloq`` per observation then holds one value per
        observation of the data (all endpoints), of which the endpoint's are used
    prediction_corrected : a prediction-corrected VPC (pcVPC, Bergstrand et al. 2011; PsN's
        ``vpc -predcorr``; default False): each observed and simulated value ``Y_ij`` (and
        its LLOQ) is multiplied by ``PRED_bin / PRED_ij``, with ``PRED_ij`` its population
        prediction (random effects 0) and ``PRED_bin`` the median of ``PRED`` over the
        observations of its bin, so that the spread that the design (doses, covariates,
        times within a bin) explains is removed. Observations whose ``PRED`` is not positive
        (e.g. a sample before an oral dose is absorbed) cannot be corrected: they are left
        out, with a warning, and counted in ``VPC.n_excluded``. The variability correction
        and the additive (lower-bound) variant are not implemented
    **objective_kwargs : options of :class:`PopulationObjective` for the simulations

    Returns a :class:`VPC`.
    """
    x = np.asarray(getattr(fit, "x", fit), dtype=np.float64)
    times = np.concatenate([s.times for s in data.subjects])
    dv = np.concatenate([s.dv for s in data.subjects])
    cens = np.concatenate(
        [np.zeros(s.n_obs) if s.cens is None else np.asarray(s.cens) for s in data.subjects]
    )
    rows = _endpoint_selection(model, data, endpoint)
    if rows is not None:
        times, dv, cens = times[rows], dv[rows], cens[rows]
        if lloq is not None and np.ndim(lloq) > 0:
            lloq = np.asarray(lloq, dtype=np.float64)
            if lloq.shape != rows.shape:
                raise ValueError(
                    f"lloq must be a number or one value per observation of the data "
                    f"({rows.size}), got shape {lloq.shape}"
                )
            lloq = lloq[rows]
    if lloq is None and np.any(cens == 1):
        lloq = np.where(cens == 1, dv, np.min(dv[cens == 1]))
    if lloq is not None:
        lloq = np.broadcast_to(np.asarray(lloq, dtype=np.float64), dv.shape).copy()
        if not np.all(np.isfinite(lloq)):
            raise ValueError("lloq must be finite")
    below_obs = None if lloq is None else (cens == 1) | (dv < lloq)
    keep = np.ones(dv.size, dtype=bool)
    if prediction_corrected:
        kw = {k: v for k, v in objective_kwargs.items() if k != "blq"}
        pred = np.concatenate(PopulationObjective(model, data, **kw).predict(x) or [np.zeros(0)])
        pred = pred if rows is None else pred[rows]
        keep = pred > 0
        if not np.all(keep):
            warnings.warn(
                f"pk.vpc(prediction_corrected=True): {np.count_nonzero(~keep)} observation(s) "
                "whose population prediction is not positive are left out (they cannot be "
                "prediction-corrected)",
                stacklevel=2,
            )
            times, dv, cens, pred = times[keep], dv[keep], cens[keep], pred[keep]
            if lloq is not None:
                lloq, below_obs = lloq[keep], below_obs[keep]
        if dv.size == 0:
            raise ValueError("no observation has a positive population prediction")
    if np.isscalar(bins):
        edges = np.unique(np.quantile(times, np.linspace(0, 1, int(bins) + 1)))
    else:
        edges = np.asarray(bins, dtype=np.float64)
    which = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, edges.size - 2)
    nb = edges.size - 1
    sims = simulate(model, data, x, n_sim, seed=seed, **objective_kwargs)
    if rows is not None:
        sims = sims[:, rows]
    sims = sims[:, keep]
    if prediction_corrected:
        factor = prediction_correction(pred, which, nb)
        dv, sims = dv * factor, sims * factor
        if lloq is not None:
            lloq = lloq * factor
    pct = np.asarray(percentiles, dtype=np.float64)
    observed = np.full((nb, pct.size), np.nan)
    med = np.full((nb, pct.size), np.nan)
    low = np.full((nb, pct.size), np.nan)
    high = np.full((nb, pct.size), np.nan)
    centers = np.full(nb, np.nan)
    below = np.full((4, nb), np.nan)  # observed, simulated median, low, high
    a = 100 * (1 - ci) / 2
    if lloq is not None:
        below_sim = sims < lloq
        sims = np.where(below_sim, lloq, sims)
        obs_values = np.where(below_obs, lloq, dv)
    else:
        obs_values = dv
    for b in range(nb):
        sel = which == b
        if not np.any(sel):
            continue
        centers[b] = np.median(times[sel])
        observed[b] = np.percentile(obs_values[sel], pct)
        per_rep = np.percentile(sims[:, sel], pct, axis=1).T  # (n_sim, n_pct)
        med[b] = np.median(per_rep, axis=0)
        low[b] = np.percentile(per_rep, a, axis=0)
        high[b] = np.percentile(per_rep, 100 - a, axis=0)
        if lloq is not None:
            floor = np.max(lloq[sel])
            observed[b][observed[b] <= floor] = np.nan
            for arr in (med, low, high):
                arr[b][arr[b] <= floor] = np.nan
            frac = np.mean(below_sim[:, sel], axis=1)
            below[:, b] = [
                np.mean(below_obs[sel]),
                np.median(frac),
                np.percentile(frac, a),
                np.percentile(frac, 100 - a),
            ]
    return VPC(
        tuple(percentiles), ci, edges, centers, observed, med, low, high, times, dv,
        lloq=lloq, observed_below=below[0], simulated_below_median=below[1],
        simulated_below_low=below[2], simulated_below_high=below[3], cens=cens,
        endpoint=endpoint, prediction_corrected=bool(prediction_corrected),
        n_excluded=int(np.count_nonzero(~keep)),
    )  # fmt: skip


def prediction_correction(pred, which, n_bins) -> np.ndarray:
    """``PRED_bin / PRED_ij`` per observation (Bergstrand et al. 2011): ``pred`` the
    population predictions, shape ``(n,)`` (positive), ``which`` each one's bin (``0 ..
    n_bins - 1``); ``PRED_bin`` is the median of ``pred`` over the bin."""
    med = np.full(n_bins, np.nan)
    for b in range(n_bins):
        sel = which == b
        if np.any(sel):
            med[b] = np.median(pred[sel])
    return med[which] / pred


def _endpoint_selection(model, data, endpoint):
    """The observations (a mask over all of ``data``'s) of the endpoint ``endpoint`` (a
    ``DVID``), or None for a model with one endpoint and no ``endpoint``."""
    dvids = getattr(model, "dvids", None)
    if endpoint is None:
        if dvids is not None and len(dvids) > 1:
            raise ValueError(
                f"the model has endpoints {list(dvids)}: give vpc(..., endpoint=dvid) (a VPC "
                "compares one endpoint's observations)"
            )
        return None
    if dvids is None or endpoint not in dvids:
        have = "one endpoint (no DVID)" if dvids is None else f"endpoints {list(dvids)}"
        raise ValueError(f"endpoint {endpoint!r} is not an endpoint of the model (it has {have})")
    ids = [
        np.full(s.n_obs, dvids[0], dtype=np.int64) if s.dvid is None else s.dvid
        for s in data.subjects
    ]
    rows = np.concatenate(ids) == endpoint if ids else np.zeros(0, dtype=bool)
    if not np.any(rows):
        raise ValueError(f"the data have no observations of DVID {endpoint}")
    return rows
