"""Stepwise covariate modelling (SCM, as in PsN's ``scm``): forward inclusion of covariate
relations by the drop of the objective function value, then backward elimination at a stricter
level.

A relation multiplies an individual parameter by a factor of one new typical value ``th``:

- ``"power"``: ``(COV / ref)^th`` (body weight on clearance, allometry);
- ``"linear"``: ``1 + th (COV - ref)``;
- ``"exponential"``: ``exp(th (COV - ref))``;
- ``"categorical"``: ``exp(th COV)`` for a covariate coded 0/1 (the factor ``exp(th)`` in
  group 1).

``ref`` is the median of the covariate over the subjects (their value at the first record).
With ``th = 0`` every factor is 1, so each candidate's fit starts from the current model's
estimates at the current model's OFV, and the drop in OFV is a likelihood-ratio statistic
with one degree of freedom: forward, a relation enters when its drop exceeds the chi-square
quantile of ``forward`` (3.84 at 0.05); backward, a relation stays when removing it raises the
OFV by more than the quantile of ``backward`` (6.63 at 0.01).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ._bootstrap import _Progress
from ._fit import FitResult, fit_quietly

KINDS = ("power", "linear", "exponential", "categorical")


@dataclass(frozen=True)
class Relation:
    """A candidate covariate relation: ``parameter`` (the name of an individual parameter of
    the model, e.g. ``"cl"``), ``covariate`` (a column of the event table, e.g. ``"WT"``) and
    ``kind`` (``"power"``, ``"linear"``, ``"exponential"`` or ``"categorical"``)."""

    parameter: str
    covariate: str
    kind: str = "power"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}: one of {', '.join(KINDS)}")
        for what in ("parameter", "covariate"):
            if not isinstance(getattr(self, what), str) or not getattr(self, what):
                raise TypeError(f"a relation's {what} must be a name (a string)")

    @property
    def name(self) -> str:
        """The name of the relation's typical value, e.g. ``"cl_WT"``."""
        return f"{self.parameter}_{self.covariate}"

    def __str__(self) -> str:
        return f"{self.parameter}-{self.covariate} ({self.kind})"


@dataclass
class Step:
    """One fit of the search: ``phase`` (``"base"``, ``"forward"``, ``"backward"``), the
    ``relation`` tried (added forward, removed backward; None for the base), the resulting
    ``ofv``, its change ``dofv`` against the model it was compared with (a drop forward, a
    rise backward: positive when the relation helps), whether it was ``chosen`` in its round,
    the fit's ``success`` and ``message``, and ``round`` (1, 2, ... within its phase; 0 for
    the base)."""

    phase: str
    relation: Relation | None
    ofv: float
    dofv: float
    chosen: bool
    success: bool
    message: str
    round: int = 0


@dataclass
class CovariateSearch:
    """The result of :func:`covariate_search`: ``relations`` (those in the final model, in the
    order they entered), ``model`` and ``fit`` (the final model and its fit), ``base`` (the fit
    of the model without relations), ``steps`` (every fit, in order), ``forward_ofv`` (the OFV
    after each forward inclusion) and the thresholds used (``forward_dofv``,
    ``backward_dofv``)."""

    relations: list
    model: object
    fit: FitResult
    base: FitResult
    forward_dofv: float
    backward_dofv: float
    steps: list = field(default_factory=list)
    forward_ofv: list = field(default_factory=list)

    def plot(self, ax=None):
        """The OFV of every fit by round: each round's candidates, the chosen one marked, the
        base and the final model's OFV as lines."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 4))
        rounds = sorted(
            {(s.phase != "forward", s.round) for s in self.steps[1:]}
        )  # forward rounds first, then backward ones
        for s in self.steps[1:]:
            k = rounds.index((s.phase != "forward", s.round))
            ax.plot(k, s.ofv, "o", color="C1" if s.chosen else "C0", ms=7 if s.chosen else 4)
            ax.annotate(str(s.relation).split(" ")[0], (k, s.ofv), fontsize=7,
                        xytext=(4, 0), textcoords="offset points")  # fmt: skip
        ax.axhline(self.base.ofv, color="gray", lw=0.8, ls="--", label="base model")
        ax.axhline(self.fit.ofv, color="k", lw=0.8, label="final model")
        names = [f"{'backward' if back else 'forward'} {r}" for back, r in rounds]
        ax.set_xticks(range(len(rounds)), names)
        ax.set_ylabel("OFV")
        ax.legend()
        return ax

    def table(self) -> str:
        """The steps as text, one line each."""
        lines = [f"{'phase':<9} {'relation':<28} {'OFV':>12} {'dOFV':>9}  chosen"]
        for s in self.steps:
            rel = "-" if s.relation is None else str(s.relation)
            dofv = "" if s.phase == "base" else f"{s.dofv:9.3f}"
            mark = "*" if s.chosen else ("" if s.success else "(failed)")
            lines.append(f"{s.phase:<9} {rel:<28} {s.ofv:12.3f} {dofv:>9}  {mark}")
        return "\n".join(lines)


def _chi2(p: float) -> float:
    from scipy.stats import chi2

    if not (isinstance(p, float | int) and 0.0 < p < 1.0):
        raise ValueError(f"a significance level must lie in (0, 1), got {p!r}")
    return float(chi2.isf(p, 1))


def _relations(candidates) -> list[Relation]:
    out = []
    for c in candidates:
        if isinstance(c, Relation):
            out.append(c)
        elif isinstance(c, tuple | list) and len(c) in (2, 3):
            out.append(Relation(*c))
        else:
            raise TypeError(
                f"a candidate is a pk.Relation or a tuple (parameter, covariate[, kind]), got {c!r}"
            )
    if len(set(out)) != len(out):
        raise ValueError("the candidates repeat a relation")
    return out


def _covariate_values(data, name: str) -> np.ndarray:
    """The subjects' values of covariate ``name`` (at their first record)."""
    values = []
    for s in data.subjects:
        if name not in s.covariates:
            raise ValueError(f"the data have no covariate {name!r} (columns: {data.covariates})")
        values.append(float(s.covariates[name]))
    v = np.array(values)
    if not np.all(np.isfinite(v)):
        raise ValueError(f"covariate {name!r} is missing (NaN) for some subjects")
    return v


class _Builder:
    """Models of ``base`` with a set of relations, and their starting vectors."""

    def __init__(self, base, data, relations):
        import sympy as sp

        self.args = base._arguments
        self.base = base
        names = {str(k): k for k in self.args["individual"]}
        self.refs = {}
        for r in relations:
            if r.parameter not in names:
                raise ValueError(
                    f"{r}: the model has no individual parameter {r.parameter!r} "
                    f"(it has {', '.join(names)})"
                )
            v = _covariate_values(data, r.covariate)
            if r.kind == "categorical" and not np.all(np.isin(v, (0.0, 1.0))):
                raise ValueError(f"{r}: a categorical covariate must be coded 0/1")
            if r.kind == "power" and not np.all(v > 0):
                raise ValueError(f"{r}: a power relation needs a positive covariate")
            self.refs[r] = float(np.median(v))
        self.symbols = names
        known = {str(c).upper(): c for c in self.args["covariates"]}
        self.cov = {}
        for r in relations:
            self.cov[r.covariate] = known.get(r.covariate.upper(), sp.Symbol(r.covariate))
        taken = {str(s) for s in self.args["theta"]}
        for r in relations:
            if r.name in taken:
                raise ValueError(f"{r}: the model already has a typical value named {r.name!r}")

    def model(self, relations):
        import sympy as sp

        from ._model import PKModel

        args = dict(self.args)
        individual = dict(args["individual"])
        theta = dict(args["theta"])
        covariates = list(args["covariates"])
        for r in relations:
            phi = self.symbols[r.parameter]
            th = sp.Symbol(r.name)
            c, ref = self.cov[r.covariate], self.refs[r]
            factor = {
                "power": (c / ref) ** th,
                "linear": 1 + th * (c - ref),
                "exponential": sp.exp(th * (c - ref)),
                "categorical": sp.exp(th * c),
            }[r.kind]
            individual[phi] = individual[phi] * factor
            theta[th] = 0.0
            if c not in covariates:
                covariates.append(c)
        args.update(individual=individual, theta=theta, covariates=covariates)
        return PKModel(**args)

    def start(self, model, estimates: FitResult):
        """The starting vector of ``model`` from ``estimates`` of another model of the search:
        the typical values they share kept, a new relation's at 0 (its factor then 1)."""
        values = dict(estimates.theta)
        theta = [values.get(str(s), 0.0) for s in model.theta_symbols]
        return model.pack(theta=theta, omega=estimates.omega, sd=list(estimates.sd.values()))


def _fit_one(model, data, x0, fit_kwargs):
    """``(FitResult, warned)``: ``warned`` when :func:`fit` would have warned (no
    convergence, a bound reached)."""
    res, notes = fit_quietly(model, data, x0=x0, **fit_kwargs)
    return res, bool(notes)


def covariate_search(
    model,
    data,
    candidates,
    forward: float = 0.05,
    backward: float = 0.01,
    base: FitResult | None = None,
    executor=None,
    progress: bool | None = None,
    **fit_kwargs,
) -> CovariateSearch:
    """Stepwise covariate modelling: forward inclusion, then backward elimination.

    Parameters
    ----------
    model : PKModel without the candidate relations (the base model); its individual
        parameters are on their natural scale (a relation multiplies one)
    data : EventData holding the covariates' columns
    candidates : :class:`Relation` objects or tuples ``(parameter, covariate[, kind])``,
        e.g. ``[("cl", "WT", "power"), ("v", "WT"), ("cl", "SEX", "categorical")]``
    forward, backward : significance levels of the likelihood-ratio tests (one degree of
        freedom): a relation enters when it lowers the OFV by more than the chi-square
        quantile of ``forward`` (default 0.05: 3.84), and stays when removing it raises the
        OFV by more than that of ``backward`` (default 0.01: 6.63); ``backward=None`` skips
        the backward phase
    base : the fit of ``model`` when already made (else it is fitted first)
    executor : optional ``concurrent.futures``-style executor (``map``): the candidates of a
        round are fitted on it (each fit in one worker; a Dask ``Client.get_executor()``
        works); the result is the same as without
    progress : a progress bar over the fits, with the count of unconverged ones (as
        :func:`bootstrap`'s: ``None`` shows tqdm's in a terminal or a notebook)
    fit_kwargs : passed to :func:`fit` for every fit (``method``, ``gtol``, ...)

    Every candidate of a round is fitted from the current model's estimates (its new typical
    value at 0, where its factor is 1). A candidate whose fit does not converge is reported
    in ``steps`` (``success`` False) and can still be chosen if its drop passes the test
    (its OFV is an upper bound of its minimum). Returns a :class:`CovariateSearch`.
    """
    relations = _relations(candidates)
    if not relations:
        raise ValueError("give at least one candidate relation")
    fwd = _chi2(forward)
    bwd = None if backward is None else _chi2(backward)
    build = _Builder(model, data, relations)
    if "x0" in fit_kwargs:
        raise TypeError("x0 is chosen by the search (each fit starts from the current model)")
    mapper = map if executor is None else executor.map
    bar = _Progress(progress, None, "covariate search")
    try:
        return _search(model, data, relations, fwd, bwd, build, mapper, bar, base, fit_kwargs)
    finally:
        bar.close()


def _search(model, data, relations, fwd, bwd, build, mapper, bar, base, fit_kwargs):
    steps: list[Step] = []
    if base is None:
        base, warned = _fit_one(model, data, None, fit_kwargs)
        bar.update("unconverged" if warned else "ok")
    else:
        warned = not base.success
    steps.append(Step("base", None, base.ofv, 0.0, True, not warned, base.message))

    def try_all(sets, estimates):
        """``(models, [(FitResult, warned), ...])`` of the relation sets ``sets``."""
        models = [build.model(s) for s in sets]
        starts = [build.start(m, estimates) for m in models]
        out = []
        for res in mapper(
            _fit_one, models, [data] * len(models), starts, [fit_kwargs] * len(models)
        ):
            bar.update("unconverged" if res[1] else "ok")
            out.append(res)
        return models, out

    rounds = {"forward": 0, "backward": 0}

    def record(phase, tried, results, changes, k_best, chosen):
        rounds[phase] += 1
        for k, (r, (res, warned)) in enumerate(zip(tried, results)):
            steps.append(
                Step(phase, r, res.ofv, changes[k], chosen and k == k_best, not warned,
                     res.message, rounds[phase])
            )  # fmt: skip

    included: list[Relation] = []
    current, final = base, model
    forward_ofv = []
    while len(included) < len(relations):
        left = [r for r in relations if r not in included]
        models, results = try_all([included + [r] for r in left], current)
        drops = [current.ofv - res.ofv for res, _ in results]
        best = int(np.argmax(drops))
        chosen = drops[best] > fwd and math.isfinite(drops[best])
        record("forward", left, results, drops, best, chosen)
        if not chosen:
            break
        included.append(left[best])
        current, final = results[best][0], models[best]
        forward_ofv.append(current.ofv)
    while bwd is not None and included:
        sets = [[r for r in included if r != out] for out in included]
        models, results = try_all(sets, current)
        rises = [res.ofv - current.ofv for res, _ in results]
        worst = int(np.argmin(rises))
        drop = rises[worst] < bwd
        record("backward", included, results, rises, worst, drop)
        if not drop:
            break
        current, final = results[worst][0], models[worst]
        included = sets[worst]
    if not included:
        final = model  # (the base model as given, not its rebuilt twin)
    return CovariateSearch(
        relations=included,
        model=final,
        fit=current,
        base=base,
        forward_dofv=fwd,
        backward_dofv=math.nan if bwd is None else bwd,
        steps=steps,
        forward_ofv=forward_ofv,
    )
