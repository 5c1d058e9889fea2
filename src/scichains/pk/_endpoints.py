"""Several endpoints: each observation row's prediction and residual error from its own.

A model declares its endpoints as dicts keyed by the ``DVID`` value of their rows,
``PKModel(observe={1: conc, 2: effect}, error={1: Proportional(0.1), 2: Additive(2.0)})``;
a single expression and error model is one endpoint without a ``DVID`` (as before). Each
endpoint's error model has its own standard deviations: in the estimated vector they follow
one another in the order of the endpoints, named ``prop[1]``, ``add[2]``, ... (the error
model's names with the endpoint's ``DVID``; one endpoint without ``DVID``: ``prop``, ...).

:class:`ErrorTerms` evaluates the per-observation terms of the objective (see
:meth:`ErrorModel.functions` and :mod:`._censoring`) row by row from each row's endpoint:
the columns along the log standard deviations of a row are those of its endpoint (zero
along the others').
"""

from __future__ import annotations

import numpy as np

from ._error import ErrorModel

# the outputs of ErrorModel.functions with a column per log standard deviation
_SD_COLUMNS = (3, 4, 7, 9)


def _endpoint_id(k, what="observe"):
    """A ``DVID`` value as an int (a whole number), else ``ValueError`` naming ``what``."""
    try:
        v = float(k)
        ok = not isinstance(k, bool) and np.isfinite(v) and v.is_integer()
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"{what}: endpoint {k!r} is not a DVID value (a whole number, the DVID column of "
            "its observation records)"
        )
    return int(v)


def endpoint_spec(observe, error):
    """``(dvids, observes, errors)`` of :class:`PKModel`'s ``observe`` and ``error``:
    ``dvids`` the endpoints' ``DVID`` values (a tuple of ints), or None for a single
    expression; the expressions and :class:`ErrorModel` of each endpoint, in that order."""
    if not isinstance(observe, dict):
        if isinstance(error, dict):
            raise ValueError(
                "error is a dict of endpoints but observe is one expression: give "
                "observe={dvid: expression, ...} with the same keys"
            )
        if not isinstance(error, ErrorModel):
            raise TypeError("error must be an ErrorModel instance, e.g. Additive(0.7)")
        return None, [observe], [error]
    if not observe:
        raise ValueError("observe is an empty dict: give {dvid: expression, ...}")
    ids = [_endpoint_id(k) for k in observe]
    dup = sorted({k for k in ids if ids.count(k) > 1})
    if dup:
        raise ValueError(f"observe names endpoint(s) {dup} twice")
    if not isinstance(error, dict):
        raise ValueError(
            f"observe has endpoints {ids} (DVID values): give each its own error model, "
            f"error={{{ids[0]}: pk.Proportional(0.1), ...}}"
        )
    errs = {}
    for k, e in error.items():
        errs.setdefault(_endpoint_id(k, "error"), e)
    extra = sorted(set(errs) - set(ids))
    if extra:
        raise ValueError(f"error is given for endpoint(s) {extra}, which observe does not have")
    missing = [k for k in ids if k not in errs]
    if missing:
        raise ValueError(
            f"no error model for endpoint(s) {missing}: error needs one for each endpoint of "
            f"observe ({ids})"
        )
    for k in ids:
        if not isinstance(errs[k], ErrorModel):
            raise TypeError(
                f"error[{k}] must be an ErrorModel instance, e.g. Additive(0.7), got {errs[k]!r}"
            )
    return tuple(ids), list(observe.values()), [errs[k] for k in ids]


def error_names(dvids, errors) -> list[str]:
    """The names of the standard deviations of every endpoint, in ``x``'s order."""
    if dvids is None:
        return list(errors[0].names)
    return [f"{n}[{k}]" for k, e in zip(dvids, errors) for n in e.names]


class ErrorTerms:
    """The per-observation terms of a model's endpoints' error models (generated once).

    ``endpoint`` arguments: each row's endpoint (its index in the model's endpoints, ``(n,)``
    integers), or None when the model has one endpoint."""

    def __init__(self, errors):
        self.errors = list(errors)
        sizes = np.cumsum([0] + [len(e.names) for e in self.errors])
        self.slices = [slice(int(a), int(b)) for a, b in zip(sizes[:-1], sizes[1:])]
        self.r = int(sizes[-1])
        self.log = np.array([e.log_transform for e in self.errors], dtype=bool)
        self.funcs = [e.functions() for e in self.errors]

    def log_rows(self, endpoint, n: int) -> np.ndarray:
        """Which of ``n`` rows compare ``log y`` with ``log f`` (exponential error)."""
        if endpoint is None:
            return np.full(n, bool(self.log[0]))
        return self.log[endpoint]

    def _groups(self, endpoint, idx):
        """``(k, positions in idx)`` of the endpoints the rows ``idx`` belong to."""
        if endpoint is None:
            return [(0, slice(None))]
        ep = endpoint[idx]
        return [(int(k), ep == k) for k in np.unique(ep)]

    def terms(self, plan, endpoint, yv, f, log_sd):
        """``l, l_f, l_ff, l_s, l_fs, w, w_f, w_s, l_fff, l_ffs`` (as
        :meth:`ErrorModel.functions`; the ``_s`` ones ``(n, r)``) of each row from its own
        endpoint's error model: a density, or with a :class:`CensoringPlan` ``plan`` the
        censored kinds and M4's truncation terms (see :mod:`._censoring`)."""
        if plan is None and endpoint is None:
            return self.funcs[0](yv, f, log_sd)
        n, r = f.size, self.r
        out = [np.zeros(n), np.zeros(n), np.zeros(n), np.zeros((n, r)), np.zeros((n, r))]
        out += [np.zeros(n), np.zeros(n), np.zeros((n, r)), np.zeros(n), np.zeros((n, r))]
        if plan is None:
            groups = [("normal", np.arange(n), (yv,))]
        else:
            groups = [("normal", plan.normal, (yv[plan.normal],))]
            groups.append(("left", plan.left[0], plan.left[1:]))
            groups.append(("right", plan.right[0], plan.right[1:]))
            groups.append(("interval", plan.interval[0], plan.interval[1:]))
            groups.append(("truncation", plan.truncation[0], plan.truncation[1:]))
        for kind, idx, limits in groups:
            if idx.size == 0:
                continue
            for k, pos in self._groups(endpoint, idx):
                rows = idx[pos]
                err = self.errors[k]
                fn = self.funcs[k] if kind == "normal" else err.censored_functions(kind)
                sl = self.slices[k]
                vals = fn(*[lim[pos] for lim in limits], f[rows], log_sd[sl])
                for a, v in enumerate(vals):
                    if a in _SD_COLUMNS:
                        out[a][rows, sl] += v
                    else:
                        out[a][rows] += v
        return tuple(out)

    def variance(self, f, log_sd, endpoint) -> np.ndarray:
        """The residual variance ``R(f)`` of each row (on the log scale for an exponential
        error): the generated ``l = (y - f)^2 / R + log R`` at ``y = f``."""
        out = np.empty(f.size)
        for k, pos in self._groups(endpoint, np.arange(f.size)):
            fk = f[pos]
            out[pos] = np.exp(self.funcs[k](fk, fk, log_sd[self.slices[k]])[0])
        return out


def endpoint_rows(model, subject):
    """Each observation's endpoint (its index in ``model.dvids``, ``(n_obs,)`` int64), or
    None when the model has one endpoint; ``ValueError`` for a ``DVID`` the model does not
    have, data with ``DVID`` for a model with one expression, or several endpoints without
    ``DVID``."""
    dvids = model.dvids
    if subject.n_obs == 0:
        return None
    if subject.dvid is None:
        if dvids is not None and len(dvids) > 1:
            raise ValueError(
                f"the model has endpoints {list(dvids)} (observe={{dvid: ...}}) but subject ID "
                f"{subject.id} has no DVID: each observation record needs the DVID of its "
                "endpoint (a DVID column in the event table)"
            )
        return None
    if dvids is None:
        seen = sorted({int(v) for v in subject.dvid})
        raise ValueError(
            f"the data have a DVID column (subject ID {subject.id}: DVID {seen}) but the model "
            "has one observation expression: for several endpoints give "
            "PKModel(observe={dvid: expression, ...}, error={dvid: ErrorModel, ...}), or leave "
            "the column out (read_events(..., drop=['DVID']))"
        )
    pos = {k: i for i, k in enumerate(dvids)}
    out = np.empty(subject.dvid.size, dtype=np.int64)
    for j, v in enumerate(subject.dvid):
        k = pos.get(int(v))
        if k is None:
            raise ValueError(
                f"subject ID {subject.id}, row {subject.rows[j]}: DVID {int(v)} is not an "
                f"endpoint of the model (its endpoints: DVID {list(dvids)})"
            )
        out[j] = k
    return None if len(dvids) == 1 else out


BLQ = ("m1", "m3", "m4")


def blq_by_endpoint(model, blq) -> list[str]:
    """The likelihood of censored observations of each endpoint: ``blq`` one of ``"m1"``,
    ``"m3"``, ``"m4"`` for all, or (several endpoints) a dict ``{dvid: kind}`` (endpoints
    not named: ``"m3"``)."""
    n = len(model.errors)
    if isinstance(blq, dict):
        if model.dvids is None:
            raise ValueError(
                "blq as a dict {dvid: 'm1' | 'm3' | 'm4'} needs a model with endpoints "
                "(observe={dvid: expression, ...})"
            )
        out = ["m3"] * n
        for k, v in blq.items():
            kk = _endpoint_id(k, "blq")
            if kk not in model.dvids:
                raise ValueError(
                    f"blq names endpoint {k!r}, which the model does not have ({list(model.dvids)})"
                )
            if v not in BLQ:
                raise ValueError(f"blq[{k!r}] must be 'm1', 'm3' or 'm4', got {v!r}")
            out[model.dvids.index(kk)] = v
        return out
    if blq not in BLQ:
        raise ValueError(f"blq must be 'm1', 'm3' or 'm4', got {blq!r}")
    return [blq] * n
