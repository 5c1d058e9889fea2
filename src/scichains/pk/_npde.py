"""Normalised prediction distribution errors (NPDE; Brendel et al. 2006, Comets et al. 2008).

Each subject's observations are compared with ``K`` replicates of them simulated from the
fitted model at the observed design (random effects from omega, residuals from the error
model: :func:`simulate`). With ``E_i`` and ``V_i`` the empirical mean and covariance
(``K - 1`` denominator) of subject ``i``'s simulated observations and ``L_i`` the lower
Cholesky factor of ``V_i``, the observations and each simulated replicate are decorrelated
as ``L_i^-1 (y - E_i)`` (the npde package's default ``decorr.method="cholesky"``:
``t(solve(chol(V)))``, whose result has identity covariance); the prediction distribution
error ``pde_ij`` is the fraction of the ``K`` decorrelated simulated values below the
decorrelated observation, set to ``1 / (2K)`` where it is 0 and ``1 - 1 / (2K)`` where it is
1, and ``npde_ij = Phi^-1(pde_ij)``. ``pd_ij`` is the same fraction without the
decorrelation (the prediction discrepancy). Under the model the npde are independent
standard normal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._plots import simulate


@dataclass
class NPDE:
    """The NPDE of a fit, as :func:`npde` returns them: one entry per observation of the data
    (subjects in data order), arrays of shape ``(n_obs,)``.

    Attributes
    ----------
    id : the subject ``ID`` of each observation (object array)
    time : the observation times
    dv : the observations (a censored one: its limit, as in the data)
    npde : the normalised prediction distribution errors; NaN for censored observations
        (``CENS`` not 0: left out, see :func:`npde`) and for observations whose simulated
        values are all equal (nothing to compare with: e.g. a proportional error where the
        prediction is exactly 0)
    pd : the prediction discrepancies (the fraction of simulated values below the
        observation, without decorrelation, in ``[1/(2K), 1 - 1/(2K)]``); NaN for censored
        observations
    epred : the mean of the simulated values of each observation
    cens : the data's ``CENS`` of each observation (0: observed)
    dvid : the ``DVID`` of each observation (a model with several endpoints), or None
    n_sim : ``K``, the simulated replicates
    n_censored : the censored observations left out
    n_degenerate : the observations whose simulated values are all equal (NaN npde)
    """

    id: np.ndarray
    time: np.ndarray
    dv: np.ndarray
    npde: np.ndarray
    pd: np.ndarray
    epred: np.ndarray
    cens: np.ndarray
    dvid: np.ndarray | None
    n_sim: int
    n_censored: int = 0
    n_degenerate: int = 0

    def table(self) -> dict:
        """A dict of the per-observation columns (``ID``, ``TIME``, ``DV``, ``EPRED``,
        ``PD``, ``NPDE``, ``CENS``, and ``DVID`` with several endpoints), each of shape
        ``(n_obs,)``: ``pandas.DataFrame(result.table())`` makes it a table."""
        out = {"ID": self.id, "TIME": self.time, "DV": self.dv, "EPRED": self.epred}
        out.update({"PD": self.pd, "NPDE": self.npde, "CENS": self.cens})
        if self.dvid is not None:
            out["DVID"] = self.dvid
        return out

    def summary(self) -> dict:
        """The npde package's tests of the finite npde: ``n``, ``mean``, ``variance``
        (``n - 1`` denominator), ``skewness``, ``kurtosis`` (excess), ``p_mean`` (Wilcoxon
        signed-rank test of a zero location), ``p_mean_t`` (Student's t test of a zero
        mean), ``p_variance`` (Fisher's test of a variance of 1: ``(n - 1) s^2`` against a
        chi-square with ``n - 1`` degrees of freedom, two-sided), ``p_shapiro`` (Shapiro-Wilk
        test of normality) and ``p_global`` (the three tests the npde package combines,
        Wilcoxon, Fisher and Shapiro-Wilk, with a Bonferroni correction:
        ``min(1, 3 min(p))``). ``ValueError`` with fewer than 3 finite npde."""
        from scipy import stats

        z = self.npde[np.isfinite(self.npde)]
        n = z.size
        if n < 3:
            raise ValueError(f"the tests need at least 3 finite npde, there are {n}")
        var = float(np.var(z, ddof=1))
        chi = (n - 1) * var
        p_var = float(min(1.0, 2.0 * min(stats.chi2.cdf(chi, n - 1), stats.chi2.sf(chi, n - 1))))
        p_mean = float(stats.wilcoxon(z).pvalue)
        p_shapiro = float(stats.shapiro(z).pvalue)
        return {
            "n": int(n),
            "mean": float(np.mean(z)),
            "variance": var,
            "skewness": float(stats.skew(z)),
            "kurtosis": float(stats.kurtosis(z)),
            "p_mean": p_mean,
            "p_mean_t": float(stats.ttest_1samp(z, 0.0).pvalue),
            "p_variance": p_var,
            "p_shapiro": p_shapiro,
            "p_global": float(min(1.0, 3.0 * min(p_mean, p_var, p_shapiro))),
        }

    def plot(self, fig=None):
        """Three panels, as the npde package draws them: a histogram of the npde over the
        standard normal density, their QQ plot against it, and npde vs time (with 0 and
        +-1.96). Returns the matplotlib figure (a new one unless ``fig`` is given)."""
        import matplotlib.pyplot as plt
        from scipy import stats

        ok = np.isfinite(self.npde)
        z = self.npde[ok]
        fig = fig or plt.figure(figsize=(12, 3.8))
        a, b, c = fig.subplots(1, 3)
        a.hist(z, bins="auto", density=True, color="C0", alpha=0.6)
        grid = np.linspace(-4, 4, 200)
        a.plot(grid, stats.norm.pdf(grid), "k--", lw=1)
        a.set_xlabel("npde")
        a.set_ylabel("density")
        q = stats.norm.ppf((np.arange(1, z.size + 1) - 0.5) / max(z.size, 1))
        b.scatter(q, np.sort(z), s=8)
        b.plot([-4, 4], [-4, 4], "k--", lw=1)
        b.set_xlabel("N(0, 1) quantiles")
        b.set_ylabel("sorted npde")
        c.scatter(self.time[ok], z, s=8, alpha=0.7)
        for h, ls in ((0.0, "--"), (-1.96, ":"), (1.96, ":")):
            c.axhline(h, color="k", lw=1, ls=ls)
        c.set_xlabel("TIME")
        c.set_ylabel("npde")
        fig.tight_layout()
        return fig


def npde(model, data, fit, n_sim: int = 1000, seed=0, **objective_kwargs) -> NPDE:
    """The normalised prediction distribution errors of ``fit`` (see :mod:`._npde` for
    the method; Brendel et al. 2006, Comets et al. 2008, as the npde package computes them).

    Parameters
    ----------
    model : the fitted :class:`PKModel`
    data : the :class:`EventData` it was fitted to
    fit : a :class:`FitResult`, or an estimated vector ``x`` of shape ``(size,)``
    n_sim : ``K``, the replicates of the data simulated from the model (default 1000, the
        npde package's recommendation); it must exceed the largest number of observations
        of a subject (the covariance of a subject's simulated observations must be
        invertible)
    seed : the seed of the simulation (default 0; :func:`simulate`)
    **objective_kwargs : options of :class:`PopulationObjective` for the simulations
        (``rtol``, ``atol``)

    Observations are compared on the scale they are recorded on (also with the exponential
    error model), and the observations of all endpoints of a subject are decorrelated
    together (the npde package decorrelates by subject). Censored observations (``CENS``
    not 0) are left out: they get no pd or npde (NaN), and their simulated values are left
    out of their subject's mean, covariance and decorrelation (``NPDE.n_censored`` counts
    them). The npde package imputes them instead; leaving them out biases the npde of the
    lowest concentrations upward when a large fraction is censored (Nguyen et al. 2012), so
    read the npde near the LLOQ with that in mind.

    Returns an :class:`NPDE` (``.summary()``: the npde package's tests; ``.table()``;
    ``.plot()``). Raises ``ValueError`` for an ``n_sim`` that is not a whole number above
    the largest subject's number of observations, an ``x`` of the wrong shape or not finite,
    an observation (``DV``) that is not finite, and a subject whose simulated observations
    have a singular covariance (named).
    """
    if isinstance(n_sim, bool) or not isinstance(n_sim, (int, np.integer)):
        raise ValueError(f"n_sim must be a whole number, got {n_sim!r}")
    n_sim = int(n_sim)
    largest = max((s.n_obs for s in data.subjects), default=0)
    if n_sim < 2 or n_sim <= largest:
        raise ValueError(
            f"n_sim must be at least 2 and above the largest number of observations of a "
            f"subject ({largest}), got {n_sim}"
        )
    x = np.asarray(getattr(fit, "x", fit), dtype=np.float64)
    if x.shape != (model.size,):
        raise ValueError(f"x must have shape ({model.size},), got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("the estimates x must be finite")
    for s in data.subjects:
        if not np.all(np.isfinite(s.dv)):
            raise ValueError(f"subject ID {s.id}: an observation (DV) is not finite")
    sims = simulate(model, data, x, n_sim, seed=seed, **objective_kwargs)
    n = data.n_obs
    out_npde = np.full(n, np.nan)
    out_pd = np.full(n, np.nan)
    epred = sims.mean(axis=0) if n else np.zeros(0)
    cens = np.concatenate(
        [np.zeros(s.n_obs) if s.cens is None else np.asarray(s.cens, float) for s in data.subjects]
        or [np.zeros(0)]
    )
    degenerate = 0
    k = 0
    for s in data.subjects:
        rows = np.arange(k, k + s.n_obs)
        k += s.n_obs
        seen = rows[cens[rows] == 0]
        if seen.size == 0:
            continue
        y, S = s.dv[seen - rows[0]], sims[:, seen]
        out_pd[seen] = _fraction_below(S, y)
        varies = np.ptp(S, axis=0) > 0
        degenerate += int(np.count_nonzero(~varies))
        seen, y, S = seen[varies], y[varies], S[:, varies]
        if seen.size == 0:
            continue
        E = S.mean(axis=0)
        V = np.atleast_2d(np.cov(S, rowvar=False))
        try:
            L = np.linalg.cholesky(V)
        except np.linalg.LinAlgError:
            raise ValueError(
                f"subject ID {s.id}: the covariance of its {seen.size} simulated observations "
                f"is singular (n_sim={n_sim}); more replicates, or observations that are not "
                "duplicates of each other, are needed"
            ) from None
        yd = _forward(L, (y - E)[:, None])[:, 0]
        Sd = _forward(L, (S - E).T).T
        out_npde[seen] = _ndtri(_fraction_below(Sd, yd))
    dvid = None
    if getattr(model, "dvids", None) is not None:
        dvid = np.concatenate(
            [
                np.full(s.n_obs, model.dvids[0], dtype=np.int64) if s.dvid is None else s.dvid
                for s in data.subjects
            ]
            or [np.zeros(0, np.int64)]
        )
    ids = np.empty(n, dtype=object)
    ids[:] = [s.id for s in data.subjects for _ in range(s.n_obs)]
    return NPDE(
        id=ids,
        time=np.concatenate([s.times for s in data.subjects] or [np.zeros(0)]),
        dv=np.concatenate([s.dv for s in data.subjects] or [np.zeros(0)]),
        npde=out_npde,
        pd=out_pd,
        epred=epred,
        cens=cens,
        dvid=dvid,
        n_sim=n_sim,
        n_censored=int(np.count_nonzero(cens)),
        n_degenerate=degenerate,
    )


def _fraction_below(S, y):
    """The fraction of the rows of ``S`` (``(K, m)``) below ``y`` (``(m,)``), kept within
    ``[1/(2K), 1 - 1/(2K)]`` as the npde package does."""
    K = S.shape[0]
    p = np.mean(S < y, axis=0)
    return np.clip(p, 1.0 / (2 * K), 1.0 - 1.0 / (2 * K))


def _forward(L, b):
    from scipy.linalg import solve_triangular

    return solve_triangular(L, b, lower=True)


def _ndtri(p):
    from scipy.special import ndtri

    return ndtri(p)
