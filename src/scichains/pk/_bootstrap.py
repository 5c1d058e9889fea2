"""The nonparametric bootstrap of a population fit (PsN's ``bootstrap``): case resampling of
subjects with replacement, each resample fitted again from the original estimates."""

from __future__ import annotations

import sys
import threading
import time
import warnings
from dataclasses import dataclass, replace

import numpy as np

from ._fit import FitResult, FitWarning
from ._fit import fit as _fit
from ._inner import numerical_failure
from ._records import EventData

# the options of pk.fit (and of its objective) that a bootstrap passes on to each refit
FIT_OPTIONS = frozenset(
    {"gtol", "maxiter", "l2", "fix", "rtol", "atol", "inner_tol", "inner_maxiter"}
    | {"sensitivities", "block", "blq"}
)


@dataclass
class Bootstrap:
    """A bootstrap of a population fit, as :func:`bootstrap` returns it. With ``n``
    resamples and ``m`` reported parameters:

    Attributes
    ----------
    names : the reported parameters, ``m`` of them: the typical values (their symbols' names,
        on the scale the model writes them), the omega entries (``"omega(eta_cl)"``: a
        variance; ``"omega(eta_v,eta_cl)"``: a covariance, full omega only) and the residual
        error standard deviations (``"add"``, ``"prop"``, ``"prop[2]"``, ...)
    original : the estimates of the fit to the data, shape ``(m,)``
    fit : the :class:`FitResult` of the fit to the data (the refits' starting point)
    estimates : each resample's estimates, shape ``(n, m)``; NaN rows for failed refits
    x : each resample's estimated vector (:meth:`PKModel.pack`), shape ``(n, size)``; NaN
        rows for failed refits
    ofv : each resample's OFV, shape ``(n,)`` (NaN: failed)
    status : each resample's outcome, shape ``(n,)``: ``"ok"`` (converged), ``"unconverged"``
        (the fit ended without converging: see ``messages``) or ``"failed"`` (the fit raised
        a numerical failure: an ODE solve, an EBE search, the objective at the start)
    messages : each resample's optimiser message or failure, a list of ``n`` str
    subjects : the subjects of each resample, indices into ``data.subjects``, shape
        ``(n, N)`` (resample ``b``'s subject ``k`` is ``data.subjects[subjects[b, k]]``,
        renumbered ``ID = k + 1``)
    level : the coverage of the intervals (e.g. 0.95)
    used : the resamples that the summaries use, a boolean mask of shape ``(n,)``: the
        ``"ok"`` ones (and the ``"unconverged"`` ones with ``include_unconverged``)
    median, low, high : the median and the percentile interval (``100 (1 - level) / 2`` and
        ``100 (1 + level) / 2`` percentiles, NumPy's linear interpolation) of the used
        resamples' estimates, shape ``(m,)``; NaN when none is used
    se : their standard deviation (``n - 1`` denominator), shape ``(m,)``
    seconds : the wall time of the refits
    """

    names: list
    original: np.ndarray
    fit: FitResult
    estimates: np.ndarray
    x: np.ndarray
    ofv: np.ndarray
    status: np.ndarray
    messages: list
    subjects: np.ndarray
    level: float
    used: np.ndarray
    median: np.ndarray
    low: np.ndarray
    high: np.ndarray
    se: np.ndarray
    seconds: float

    @property
    def n(self) -> int:
        """The number of resamples."""
        return int(self.status.size)

    @property
    def n_failed(self) -> int:
        """The resamples whose refit raised a numerical failure."""
        return int(np.count_nonzero(self.status == "failed"))

    @property
    def n_unconverged(self) -> int:
        """The resamples whose refit ended without converging."""
        return int(np.count_nonzero(self.status == "unconverged"))

    @property
    def success_rate(self) -> float:
        """The fraction of resamples whose refit converged."""
        return float(np.mean(self.status == "ok")) if self.n else float("nan")

    def table(self) -> dict:
        """``{name: (original, median, low, high, se)}`` per reported parameter."""
        return {
            k: tuple(
                float(a[j]) for a in (self.original, self.median, self.low, self.high, self.se)
            )
            for j, k in enumerate(self.names)
        }

    def plot(self, fig=None):
        """A histogram of each reported parameter over the used resamples, with the original
        estimate (solid) and the percentile interval (dashed). Returns the figure."""
        import matplotlib.pyplot as plt

        m = len(self.names)
        cols = min(m, 4)
        rows = -(-m // cols)
        fig = fig or plt.figure(figsize=(3.2 * cols, 2.6 * rows))
        axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
        for j, name in enumerate(self.names):
            ax = axes[j]
            ax.hist(self.estimates[self.used, j], bins="auto", color="C0", alpha=0.6)
            ax.axvline(self.original[j], color="k", lw=1.5)
            for v in (self.low[j], self.high[j]):
                ax.axvline(v, color="C3", lw=1, ls="--")
            ax.set_title(name, fontsize=9)
        for ax in axes[m:]:
            ax.set_visible(False)
        fig.tight_layout()
        return fig


def bootstrap(
    model,
    data,
    fit=None,
    n: int = 200,
    seed=0,
    level: float = 0.95,
    method: str | None = None,
    executor=None,
    stratify: str | None = None,
    include_unconverged: bool = False,
    progress: bool | None = None,
    **fit_kwargs,
) -> Bootstrap:
    """The nonparametric (case-resampling) bootstrap of a population fit, as PsN's
    ``bootstrap`` does it: ``n`` resamples of the subjects drawn with replacement (each of
    ``N`` subjects, ``N`` the data's), each fitted by :func:`fit` from the original estimates.

    Parameters
    ----------
    model : the :class:`PKModel`
    data : the :class:`EventData`
    fit : the :class:`FitResult` of ``model`` on ``data`` (its estimates start every
        refit; its ``method`` and ``blq`` are the refits' unless given), or an estimated
        vector ``x``, shape ``(size,)``, that starts them; None (default): the data are
        fitted first (with ``method`` and ``fit_kwargs``)
    n : the number of resamples, a whole number >= 1 (default 200)
    seed : the seed of ``numpy.random.default_rng`` that draws the resamples (default 0);
        they are all drawn before any refit, so the results do not depend on the executor
    level : the coverage of the percentile intervals, in ``(0, 1)`` (default 0.95: the 2.5
        and 97.5 percentiles)
    method : ``"focei"`` or ``"laplace"`` (default: the fit's, else ``"focei"``)
    executor : None (the refits one after the other, in this process) or an executor with
        ``submit`` (a ``concurrent.futures`` executor, a ``dask.distributed.Client``): one
        task per resample. Results are gathered in resample order; an error in code (not a
        numerical failure) raised by a refit is raised here
    stratify : a covariate name: the subjects are resampled within each value of it (at
        each subject's first record), so every resample keeps the strata's sizes
    include_unconverged : whether the summaries use the refits that ended without
        converging (default False: only the converged ones; they are counted either way)
    progress : a progress bar over the resamples, with the counts of failed and unconverged
        refits: tqdm's where installed, else a line on stderr (``True``); ``None`` (default):
        tqdm's in a terminal or a notebook, nothing otherwise; ``False``: none
    **fit_kwargs : options of :func:`fit` for every refit: ``gtol``, ``maxiter``, ``l2``,
        ``fix`` (give the original fit's again: it is not read from the :class:`FitResult`),
        and the objective's ``rtol``, ``atol``, ``inner_tol``, ``inner_maxiter``,
        ``sensitivities``, ``block``, ``blq``. ``ValueError`` for another name

    A refit that raises a numerical failure (a failed ODE solve, an EBE search, an objective
    that cannot be evaluated at the start: see :func:`fit`) is a ``"failed"`` resample and
    one that ends unconverged an ``"unconverged"`` one (its :class:`FitWarning` is not
    repeated): both are counted in the result (``status``, ``messages``, ``n_failed``,
    ``n_unconverged``, ``success_rate``), never dropped without a count. Any other error is
    raised.

    Returns a :class:`Bootstrap`: the estimates of each resample, their median, standard
    deviation and percentile intervals. Raises ``ValueError`` for ``n`` not a whole number
    >= 1, ``level`` outside ``(0, 1)``, an unknown option or ``stratify`` name, and data
    without subjects; ``TypeError`` for an executor without ``submit``.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a whole number >= 1, got {n!r}")
    n = int(n)
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    unknown = sorted(set(fit_kwargs) - FIT_OPTIONS)
    if unknown:
        raise ValueError(
            f"bootstrap got unknown option(s) {', '.join(unknown)}; the refits take "
            f"{', '.join(sorted(FIT_OPTIONS))}"
        )
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError(
            f"executor must have a submit method (a concurrent.futures executor or a Dask "
            f"client), got {type(executor).__name__}"
        )
    N = len(data.subjects)
    if N == 0:
        raise ValueError("the data have no subjects")
    groups = _strata(data, stratify)
    if isinstance(fit, FitResult):
        method = method or fit.method
        fit_kwargs.setdefault("blq", fit.blq)
        if fit.fixed and "fix" not in fit_kwargs:
            raise ValueError(
                f"the fit held {', '.join(fit.fixed)} fixed: pass the same fix= to "
                "bootstrap (the refits would otherwise estimate them)"
            )
        original = fit
    elif fit is None:
        original = _fit(model, data, method=method or "focei", **fit_kwargs)
    else:
        x0 = np.asarray(fit, dtype=np.float64)
        if x0.shape != (model.size,) or not np.all(np.isfinite(x0)):
            raise ValueError(f"the estimates must be {model.size} finite values, got {x0.shape}")
        original = None
    method = method or (original.method if original is not None else "focei")
    x0 = original.x.copy() if original is not None else x0
    rng = np.random.default_rng(seed)
    picks = np.empty((n, N), dtype=np.int64)
    for b in range(n):
        picks[b] = np.concatenate([g[rng.integers(0, g.size, g.size)] for g in groups])
    resamples = [
        EventData(
            [replace(data.subjects[i], id=k + 1) for k, i in enumerate(picks[b])],
            data.covariates,
        )
        for b in range(n)
    ]
    t0 = time.perf_counter()
    bar = _Progress(progress, n)
    out = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FitWarning)
            if executor is None:
                for r in resamples:
                    out.append(_refit(model, r, x0, method, fit_kwargs))
                    bar.update(out[-1][2])
            else:
                futures = [
                    executor.submit(_refit, model, r, x0, method, fit_kwargs) for r in resamples
                ]
                for f in futures:
                    out.append(f.result())
                    bar.update(out[-1][2])
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    if original is None:  # a vector: a FitResult-like record of it for the summaries
        original = _vector_result(model, x0, method)
    xs = np.array([o[0] for o in out], dtype=np.float64).reshape(n, model.size)
    status = np.array([o[2] for o in out], dtype=object)
    est = np.array([_reported(model, xb) for xb in xs]).reshape(n, -1)
    used = (status == "ok") | ((status == "unconverged") & bool(include_unconverged))
    a = 100.0 * (1.0 - level) / 2.0
    m = est.shape[1]
    if np.any(used):
        median = np.median(est[used], axis=0)
        low, high = np.percentile(est[used], [a, 100.0 - a], axis=0)
        se = np.std(est[used], axis=0, ddof=1) if used.sum() > 1 else np.full(m, np.nan)
    else:
        median = low = high = se = np.full(m, np.nan)
    return Bootstrap(
        names=_reported_names(model),
        original=_reported(model, original.x),
        fit=original,
        estimates=est,
        x=xs,
        ofv=np.array([o[1] for o in out], dtype=np.float64),
        status=status,
        messages=[o[3] for o in out],
        subjects=picks,
        level=level,
        used=used,
        median=median,
        low=low,
        high=high,
        se=se,
        seconds=seconds,
    )


def _refit(model, data, x0, method, fit_kwargs):
    """``(x, ofv, status, message)`` of one resample's fit (NaN ``x`` and ``ofv`` when it
    raised a numerical failure); any other error is raised."""
    quiet = threading.current_thread() is threading.main_thread()  # (a worker process)
    with warnings.catch_warnings() if quiet else _nothing():
        if quiet:
            warnings.simplefilter("ignore", FitWarning)
        try:
            res = _fit(model, data, method=method, x0=x0, **fit_kwargs)
        except Exception as e:
            cause = e.__cause__ if isinstance(e, ValueError) else None
            if not (numerical_failure(e) or (cause is not None and numerical_failure(cause))):
                raise
            return np.full(model.size, np.nan), np.nan, "failed", f"{type(e).__name__}: {e}"
    return res.x, res.ofv, "ok" if res.success else "unconverged", res.message


class _Progress:
    """A progress bar over fits (see :func:`bootstrap`'s ``progress``; also the covariate
    search's and the profile's, whose ``total`` is not known in advance: None)."""

    def __init__(self, progress, total, desc: str = "bootstrap"):
        from .._fit_report import _tqdm_class, _use_tqdm

        self.mode = "tqdm" if _use_tqdm(progress) else ("text" if progress else "off")
        self.total, self.done, self.counts = total, 0, {"failed": 0, "unconverged": 0}
        self.desc = desc
        self.t_draw = 0.0
        self.bar = None
        if self.mode == "tqdm":
            self.bar = _tqdm_class()(total=total, desc=desc, leave=True, dynamic_ncols=True)

    def update(self, status: str):
        self.done += 1
        if status in self.counts:
            self.counts[status] += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(self.counts, refresh=False)
        elif self.mode == "text" and time.perf_counter() - self.t_draw > 0.5:
            self._line("")
            self.t_draw = time.perf_counter()

    def _line(self, end):
        c = self.counts
        of = "" if self.total is None else f"/{self.total}"
        sys.stderr.write(
            f"\r{self.desc}: {self.done}{of}  failed {c['failed']}  unconverged "
            f"{c['unconverged']}{end}"
        )
        sys.stderr.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "text":
            self._line("\n")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _strata(data, stratify):
    """The subjects' indices, one array per stratum (one array without ``stratify``)."""
    N = len(data.subjects)
    if stratify is None:
        return [np.arange(N)]
    name = str(stratify).upper()
    if name not in data.covariates:
        raise ValueError(
            f"stratify names {stratify!r}, which is not a covariate of the data "
            f"({', '.join(data.covariates) or 'none'})"
        )
    values = np.array([s.covariates.get(name, np.nan) for s in data.subjects], dtype=np.float64)
    if np.any(np.isnan(values)):
        raise ValueError(f"stratify: covariate {name} is missing at the first record of a subject")
    return [np.flatnonzero(values == v) for v in np.unique(values)]


def _reported_names(model) -> list:
    names = [str(s) for s in model.theta_symbols]
    names += [f"omega({label})" for label, _, _ in model.omega_layout.reported()]
    return names + list(model.error_names)


def _reported(model, x) -> np.ndarray:
    """The reported parameters (see :class:`Bootstrap`) of an estimated vector ``x``."""
    x = np.asarray(x, dtype=np.float64)
    entries = model.omega_layout.reported()
    if not np.all(np.isfinite(x)):
        return np.full(model.p + len(entries) + model.r, np.nan)
    theta, om, sd = model.unpack(x)
    w = np.array([om[i, j] for _, i, j in entries])
    return np.concatenate([theta, w, sd])


def _vector_result(model, x, method) -> FitResult:
    theta, om, sd = model.unpack(x)
    return FitResult(
        method=method, ofv=float("nan"), minus2ll=float("nan"), n_obs=0, x=x.copy(),
        theta={str(k): float(v) for k, v in zip(model.theta_symbols, theta)}, omega=om,
        sd={k: float(v) for k, v in zip(model.error_names, sd)}, etas=np.zeros((0, model.q)),
        success=True, status=0, message="given estimates (not fitted here)", n_evaluations=0,
        seconds=0.0,
    )  # fmt: skip
