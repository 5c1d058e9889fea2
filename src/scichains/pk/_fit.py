"""fit: FOCE-I / Laplace estimation (quasi-Newton on the exact gradient of the OFV)."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ._inner import numerical_failure
from ._objective import PopulationObjective
from ._quasi_newton import bfgs
from ._scaling import Scaling

RESTARTS = 2
RESCALES = 5


class FitWarning(RuntimeWarning):
    """:func:`fit` ended without converging (its message says why and where), or with a
    typical value at one of its bounds."""


@dataclass
class FitResult:
    """The estimates of a population fit.

    ``method``: ``"focei"`` or ``"laplace"``, as given to :func:`fit`; ``ofv``: the objective
    at the estimates (NONMEM convention, without ``N log 2 pi``);
    ``minus2ll = ofv + n log(2 pi)`` with ``n`` the observations that have a density (not
    the censored ones, whose terms are ``-2 log`` of a probability); ``n_obs``: the
    observations fitted (censored ones included, except under ``blq="m1"``), ``n_censored``
    the censored ones among them, ``blq`` the censored likelihood (see
    :class:`PopulationObjective`); ``x``: the estimated vector (see
    :meth:`PKModel.pack`); ``theta`` (name -> value, the scale the model writes them on),
    ``omega`` (``(q, q)`` covariance of the random effects), ``sd`` (error model name ->
    standard deviation; several endpoints: ``"prop[2]"``, ... see :class:`PKModel`);
    ``etas`` (``(N, q)``, the EBEs, subjects in data order);
    ``success``/``status``/``message`` from the optimiser (``status`` 0: converged, 1: the
    iteration limit, 2: no lower point found along the search direction; the estimates are
    its best point either way, and :func:`fit` warns (:class:`FitWarning`) when ``success``
    is False; ``success`` is also False when the run stopped on rejected trial points, and
    the message then says so, and says when the estimates are the initial values);
    ``n_evaluations`` of the objective and gradient; ``seconds`` of wall time; ``penalty``:
    the L2 prior's value at the estimates (``fit(l2=...)``; 0 without one; the minimised
    objective was ``ofv + penalty``); ``n_rejected``: the trial points whose evaluation
    failed numerically and counted as ``inf`` (see :func:`fit`), ``rejection``: the last
    one's reason (``""`` when none was rejected); ``fixed``: the names
    (:meth:`PKModel.parameter_names`) of the entries of ``x`` held fixed (``fit(fix=...)``);
    ``gradient``: ``dOFV/dx`` at the estimates, shape ``(size,)`` (without the L2 prior's;
    the fixed entries' too); ``at_bounds``: the typical values that ended at one of their
    bounds (``PKModel(theta={th: (low, init, up)})``).
    """

    method: str
    ofv: float
    minus2ll: float
    n_obs: int
    x: np.ndarray
    theta: dict
    omega: np.ndarray
    sd: dict
    etas: np.ndarray
    success: bool
    status: int
    message: str
    n_evaluations: int
    seconds: float
    penalty: float = 0.0
    n_rejected: int = 0
    rejection: str = ""
    fixed: tuple = ()
    gradient: np.ndarray = field(default_factory=lambda: np.zeros(0))
    at_bounds: tuple = ()
    blq: str = "m3"
    n_censored: int = 0

    def omega_cv(self) -> np.ndarray:
        """Percent CV of log-normal individual parameters, ``100 sqrt(exp(omega_kk) - 1)``
        (nlmixr2's ``BSV(CV%)``)."""
        return 100.0 * np.sqrt(np.expm1(np.diag(self.omega)))


def fit(
    model,
    data,
    method: str = "focei",
    x0=None,
    gtol: float = 1e-3,
    maxiter: int = 500,
    l2: dict | None = None,
    executor=None,
    batch_size: int | None = None,
    fix=None,
    **objective_kwargs,
) -> FitResult:
    """Estimate typical values, omega and the residual error of ``model`` on ``data``.

    Parameters
    ----------
    model : PKModel
    data : EventData (e.g. from :func:`read_events` or :func:`theophylline`)
    method : ``"focei"`` (first-order conditional estimation with interaction) or
        ``"laplace"`` (the exact Hessian of the inner objective in the log det term)
    x0 : starting vector, shape ``(size,)`` (default: the model's initial values,
        ``model.pack()``); typical values with bounds must start strictly inside them
    gtol : stop when the largest entry of the gradient with respect to the scaled variables
        (below) is below this (OFV units per scaled unit, about one standard error; default
        1e-3: the estimates are then within about 0.001 standard errors of the minimum and
        the OFV within about 1e-6 of it). The OFV comes from adaptive ODE solves (``rtol``
        1e-8) and is smooth only to about 1e-8: below that a line search cannot make
        progress, and the fit stops with ``status`` 2
    maxiter : quasi-Newton iterations
    l2 : optional ``{theta symbol (or its name), or a network's name: lambda}``: an L2
        prior on those typical values (a :class:`Network`'s name: all its weights),
        ``sum lambda theta^2`` added to the minimised objective (a Gaussian prior with
        variance ``1 / (2 lambda)`` in OFV units); ``FitResult.ofv`` is the OFV without it
    executor : None (this process), a ``dask.distributed.Client`` (``"dask"``: the running
        one) or any object with ``submit``/``map``: the subjects' inner problems, OFV terms
        and gradients are computed on its workers, the subjects sent there once (see
        :class:`PopulationObjective`); the estimates, OFV and EBEs are the same bit for bit
        as in this process. ``TypeError`` for another kind of object
    batch_size : subjects per chunk sent to a worker (default: one chunk per worker)
    fix : parameters held at a value (NONMEM's ``FIX``): a list of names, held at their
        values in ``x0`` (or the model's initial values), or a dict ``{name: value}``. A
        name is a typical value (its symbol or name; value on the model's scale), a random
        effect of a diagonal omega (its variance), ``"omega"`` (the whole omega: a ``(q,
        q)`` matrix or ``q`` variances), a residual error parameter (``"add"``, ``"prop"``,
        ...: its standard deviation; with several endpoints ``"prop[2]"``, the name with the
        endpoint's ``DVID``) or a :class:`Network`'s name (all its weights).
        ``ValueError`` for an unknown or ambiguous name, one element of a full omega, or a
        value that is not valid. Fixed entries drop out of the optimisation (and out of
        :func:`covariance`); ``FitResult.fixed`` names them
    objective_kwargs : ``rtol``, ``atol``, ``inner_tol``, ``block``, ``blq`` (the likelihood
        of censored observations: ``"m3"``, the default, ``"m4"`` or ``"m1"``) of
        :class:`PopulationObjective`

    Quasi-Newton (BFGS with a weak-Wolfe line search, :mod:`._quasi_newton`) on the exact
    gradient of the OFV, in scaled variables (:mod:`._scaling`): each free entry of ``x``,
    unbounded (a typical value with bounds through ``log`` or ``logit`` of its distance to
    them), and divided by ``sqrt(2 / sum_i (dOFV_i/dx_k)^2)`` from the subjects' gradients
    at the start (about its standard error): the first step is a diagonal Newton step
    whatever the units, so a model written as NONMEM users write it (``CL = THETA(1) *
    WT`` with ``THETA(1)`` near 0.005) converges as its log-scale form does. When the line
    search finds no lower point after the fit has moved, the scales are computed again at
    the best point and the iteration restarts (at most twice).

    A trial point whose evaluation fails numerically is a rejected point: a failed ODE solve
    (individual parameters that overflow to inf or NaN fail before any solve; a solve that
    ends on NaN is a failed one), an EBE search that does not converge, a singular or
    indefinite matrix (``LinAlgError``), an OFV or gradient that is not finite, a
    floating-point error or overflow (``ArithmeticError``; NumPy's floating-point warnings
    are off while a trial point is evaluated: an overflow is a rejected point, not a
    warning). It counts as ``inf`` (the line search backs off towards the last good point),
    the EBE warm starts are those before it, and ``FitResult.n_rejected`` counts it. In the
    inner EBE search a failing trial eta makes that line search back off in the same way.
    The fit never ends on an exception from a trial point: the result is the best point
    evaluated, with the optimiser's status and a message that names the rejected points,
    and says when the run stopped on them (``success`` False). A numerical failure at the
    starting point raises ``ValueError`` (chained to it: there is no point to return). An
    error that is not numerical (an exception raised in user code, a bug, an executor's
    error) is never a rejected point: it is raised, at the start or later.

    A fit that ends without converging (``success`` False) warns (:class:`FitWarning`):
    why, the OFV and the parameters with the largest scaled gradient there, and whether the
    estimates are the initial values; so does a typical value that ends at a bound.
    """
    out, notes = fit_quietly(
        model, data, method, x0, gtol, maxiter, l2, executor, batch_size, fix,
        **objective_kwargs,
    )  # fmt: skip
    for note in notes:
        warnings.warn(note, FitWarning, stacklevel=2)
    return out


def fit_quietly(
    model, data, method="focei", x0=None, gtol=1e-3, maxiter=500, l2=None, executor=None,
    batch_size=None, fix=None, **objective_kwargs,
) -> tuple[FitResult, list[str]]:  # fmt: skip
    """:func:`fit` without its warnings: ``(FitResult, the FitWarning messages)``, for
    callers that make many fits on threads (the warnings filters are global to the
    process)."""
    notes: list[str] = []
    if method not in ("focei", "laplace"):
        raise ValueError(f"method must be 'focei' or 'laplace', got {method!r}")
    obj = PopulationObjective(
        model, data, method=method, executor=executor, batch_size=batch_size, **objective_kwargs
    )
    if x0 is None:
        x = model.pack()
    else:
        x = np.array(x0, dtype=np.float64)
        if x.shape != (model.size,):
            raise ValueError(f"x0 must have shape ({model.size},), got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("x0 must be finite")
    fixed, x = fixed_entries(model, fix, x)
    low, up = _bounds(model)
    names = model.parameter_names()
    outside = [
        f"{names[k]} = {x[k]:g} (bounds {low[k]:g}, {up[k]:g})"
        for k in range(model.p)
        if not low[k] < x[k] < up[k] and not (fixed[k] and low[k] <= x[k] <= up[k])
    ]
    if outside:
        raise ValueError(
            f"typical values must start strictly inside their bounds: {', '.join(outside)}"
        )
    lam = _l2_weights(model, l2)
    free = np.flatnonzero(~fixed)
    scaling = Scaling(x, free, low, up)
    x_start = x.copy()
    best = {"f": math.inf, "pen": 0.0, "x": x.copy(), "etas": obj.etas.copy(), "g": None}
    count = [0]
    rejected = {"n": 0, "run": 0, "last": ""}  # all, since the last accepted point, why

    def record(z, f, g):
        pen = float(np.sum(lam * z * z))
        if f + pen < best["f"] + best["pen"]:
            best.update(f=f, pen=pen, x=z.copy(), etas=obj.etas.copy(), g=g.copy())
        return f + pen, g + 2.0 * lam * z

    def evaluate(z, subjects=False):
        """``(f, g, gi or None)`` at ``x = z``; a numerical failure raises."""
        with np.errstate(all="ignore"):
            if not np.all(np.isfinite(z)):
                raise FloatingPointError("the parameters overflow (not finite)")
            if subjects:
                f, g, gi = obj.value_grad_and_subjects(z)
            else:
                (f, g), gi = obj.value_and_grad(z), None
        if not (np.isfinite(f) and np.all(np.isfinite(g))):
            raise FloatingPointError(f"the OFV or its gradient is not finite (OFV {f})")
        return f, g, gi

    def fun(u):
        count[0] += 1
        # the EBEs of the best point start the inner problems (those of the last point
        # evaluated may belong to a far trial point that the line search then backed off from)
        obj.etas = best["etas"].copy()
        saved = obj.etas.copy()
        with np.errstate(all="ignore"):
            z = scaling.x(u)
        try:
            f, g, _ = evaluate(z)
        except Exception as e:
            obj.etas = saved
            if not numerical_failure(e):
                raise  # an error in code (yours or ours) is never a rejected point
            rejected["n"] += 1
            rejected["run"] += 1
            rejected["last"] = f"{type(e).__name__}: {e}"
            return math.inf, np.zeros_like(u)
        rejected["run"] = 0
        fp, gp = record(z, f, g)
        return fp, scaling.grad(u, gp)

    t0 = time.perf_counter()
    count[0] += 1
    try:
        f, g, gi = evaluate(x, subjects=True)
    except Exception as e:
        if not numerical_failure(e):
            raise
        raise ValueError(
            f"the objective cannot be evaluated at the starting point: {type(e).__name__}: {e}"
        ) from e
    fp, gp = record(x, f, g)
    u = scaling.rescale(x, _with_prior(gi, lam, x))
    scaled_at = x.copy()
    nit, restarts, rescales, H = 0, 0, 0, None
    while True:
        run_start = best["f"] + best["pen"]
        res = bfgs(fun, u, fp, scaling.grad(u, gp), gtol, maxiter - nit, H0=H)
        nit += res.nit
        moved = best["f"] + best["pen"] < run_start
        if res.status == 0:
            # converged in scales computed elsewhere: check again in the scales here
            if np.array_equal(best["x"], scaled_at) or rescales >= RESCALES:
                break
            rescales += 1
            keep = True
        elif res.status == 2 and moved and rejected["run"] == 0 and restarts < RESTARTS:
            restarts += 1
            keep = False
        else:
            break
        if nit >= maxiter:
            break
        obj.etas = best["etas"].copy()
        count[0] += 1
        try:
            f, g, gi = evaluate(best["x"], subjects=True)
        except Exception as e:
            if not numerical_failure(e):
                raise
            break
        z = best["x"].copy()
        fp, gp = record(z, f, g)
        old_s = scaling.s.copy()
        u = scaling.rescale(z, _with_prior(gi, lam, z))
        scaled_at = z
        # the curvature learnt, in the new scales (u_new = u_old s_old / s_new); a restart
        # after a failed line search starts from the identity
        c = old_s / scaling.s
        H = res.H * np.outer(c, c) if keep else None
        if keep and float(np.max(np.abs(scaling.grad(u, gp + 2.0 * lam * z)), initial=0)) <= gtol:
            res = _converged_here(res, scaling.grad(u, gp + 2.0 * lam * z), gtol)
            break
    seconds = time.perf_counter() - t0
    xb = best["x"]
    success = res.status == 0 and rejected["run"] == 0
    message = res.message
    if restarts:
        message += f" ({restarts} restart(s) with new scales)"
    if rejected["run"]:
        message += (
            f" (it stopped on rejected trial points: the last {rejected['run']} evaluations "
            f"failed, the last with {rejected['last']}; the result is the best point evaluated)"
        )
    elif rejected["n"]:
        message += f" ({rejected['n']} trial point(s) rejected on the way)"
    at_start = bool(np.array_equal(xb, x_start))
    if at_start and not success:
        message += " (the estimates are the initial values: no trial point lowered the OFV)"
    gradient = best["g"] if best["g"] is not None else np.full(model.size, np.nan)
    at_bounds = _at_bounds(names, xb, x_start, low, up, fixed)
    theta, om, sd = model.unpack(xb)
    n_obs = obj.n_obs
    out = FitResult(
        method=method,
        ofv=float(best["f"]),
        minus2ll=float(best["f"] + obj.n_density * math.log(2 * math.pi)),
        n_obs=n_obs,
        x=xb.copy(),
        theta={str(k): float(v) for k, v in zip(model.theta_symbols, theta)},
        omega=om,
        sd={k: float(v) for k, v in zip(model.error_names, sd)},
        etas=best["etas"].copy(),
        success=success,
        status=int(res.status),
        message=message,
        n_evaluations=count[0],
        seconds=seconds,
        penalty=float(best["pen"]),
        n_rejected=rejected["n"],
        rejection=rejected["last"],
        fixed=tuple(names[k] for k in np.flatnonzero(fixed)),
        gradient=np.array(gradient, dtype=np.float64),
        at_bounds=tuple(at_bounds),
        blq=obj.blq,
        n_censored=obj.n_obs - obj.n_density,
    )
    if not success:
        gu = np.abs(scaling.grad(scaling.u(xb), gradient + 2.0 * lam * xb))
        order = np.argsort(-gu)[:3]
        where = ", ".join(f"{names[free[k]]} {gu[k]:.3g}" for k in order)
        notes.append(
            f"pk.fit ({method}) did not converge: {message}. At the returned point the OFV is "
            f"{out.ofv:.6f} after {out.n_evaluations} evaluations; the largest scaled gradient "
            f"entries: {where or 'none'}"
        )
    if at_bounds:
        notes.append(
            f"pk.fit ({method}): typical value(s) at a bound: {', '.join(at_bounds)}; the "
            "minimum may lie beyond it (check the model, or widen the bound)"
        )
    return out, notes


def _converged_here(res, gu, gtol):
    """The optimiser's result, converged at the point where the scales were computed."""
    gmax = float(np.max(np.abs(gu), initial=0))
    res.status = 0
    res.message = (
        f"converged: the largest scaled gradient entry {gmax:.2g} <= gtol {gtol:g} (scales "
        "at the estimates)"
    )
    return res


def _with_prior(gi, lam, x):
    """The subjects' gradients and a row whose square is twice the L2 prior's curvature
    (``sum_i g_i^2 / 2`` approximates the Hessian of the OFV; the prior adds ``2 lambda``)."""
    if not np.any(lam):
        return gi
    return np.vstack([gi, np.sqrt(4.0 * lam)[None, :]])


def _bounds(model):
    """``(low, up)`` per entry of ``x``: the typical values' bounds, none elsewhere."""
    low = np.full(model.size, -np.inf)
    up = np.full(model.size, np.inf)
    b = getattr(model, "theta_bounds", None)
    if b is not None and len(b):
        low[: model.p], up[: model.p] = b[:, 0], b[:, 1]
    return low, up


def _at_bounds(names, x, x0, low, up, fixed) -> list:
    """The free typical values within 0.1% of the way from their start to a bound."""
    out = []
    for k in range(len(low)):
        if fixed[k]:
            continue
        if np.isfinite(low[k]) and x[k] - low[k] <= 1e-3 * (x0[k] - low[k]):
            out.append(f"{names[k]} = {x[k]:.6g} (lower bound {low[k]:g})")
        elif np.isfinite(up[k]) and up[k] - x[k] <= 1e-3 * (up[k] - x0[k]):
            out.append(f"{names[k]} = {x[k]:.6g} (upper bound {up[k]:g})")
    return out


def fixed_entries(model, fix, x):
    """``(mask (size,), x)``: the entries of ``x`` that ``fix`` holds (see :func:`fit`) and
    ``x`` with the values a dict gives them (a copy)."""
    x = np.array(x, dtype=np.float64)
    mask = np.zeros(model.size, dtype=bool)
    if fix is None:
        return mask, x
    if isinstance(fix, (str, bytes)) or not hasattr(fix, "__iter__"):
        raise TypeError("fix must be a list of names or a dict {name: value}")
    items = list(fix.items()) if isinstance(fix, dict) else [(k, None) for k in fix]
    p, q, no = model.p, model.q, model.n_omega
    thetas = [str(s) for s in model.theta_symbols]
    etas = model.omega_layout.names
    errors = list(model.error_names)
    nets = {net.name: net for net in getattr(model, "networks", ())}
    for key, value in items:
        name = str(key)
        kinds = [
            k
            for k, ok in (
                ("theta", name in thetas),
                ("eta", name in etas),
                ("omega", name == "omega"),
                ("error", name in errors),
                ("network", name in nets),
            )
            if ok
        ]
        if not kinds:
            raise ValueError(
                f"fix names {name!r}: neither a typical value ({', '.join(thetas)}), a random "
                f"effect ({', '.join(etas)}), 'omega', a residual error parameter "
                f"({', '.join(errors)}) nor a network"
            )
        if len(kinds) > 1:
            raise ValueError(f"fix names {name!r}, which is ambiguous ({' and '.join(kinds)})")
        kind = kinds[0]
        if kind == "theta":
            k = thetas.index(name)
            mask[k] = True
            if value is not None:
                v = float(value)
                if not np.isfinite(v):
                    raise ValueError(f"fix: the value of {name} must be finite, got {v}")
                x[k] = v
        elif kind == "network":
            idx = [thetas.index(str(w)) for w in nets[name].theta_symbols]
            mask[idx] = True
            if value is not None:
                w = np.asarray(value, dtype=np.float64).ravel()
                if w.shape != (len(idx),) or not np.all(np.isfinite(w)):
                    raise ValueError(
                        f"fix: the weights of network {name} must be {len(idx)} finite values"
                    )
                x[idx] = w
        elif kind == "eta":
            try:
                k, _ = model.omega_layout.variance(name)
            except ValueError:
                raise ValueError(
                    f"fix names {name}, one random effect of a full omega: fixing one element "
                    "of a full omega is not supported (fix 'omega' as a whole, or use a "
                    "diagonal omega)"
                ) from None
            mask[p + k] = True
            if value is not None:
                v = float(value)
                if not (np.isfinite(v) and v > 0):
                    raise ValueError(
                        f"fix: the variance of {name} must be positive and finite, got {v}"
                    )
                x[p + k] = 0.5 * math.log(v)
        elif kind == "omega":
            mask[p : p + no] = True
            if value is not None:
                om = np.asarray(value, dtype=np.float64)
                short = len(model.omega_layout.names)  # one variance per name (occasions once)
                if om.shape == (short,) and short != q:
                    om = model.omega_layout.expand(om)
                if om.shape not in ((q,), (q, q)):
                    raise ValueError(
                        f"fix: omega must have shape ({q},) or ({q}, {q}), got {om.shape}"
                    )
                if om.ndim == 1:
                    om = np.diag(om)
                try:
                    with np.errstate(all="ignore"):
                        packed = model.pack(omega=om)
                except np.linalg.LinAlgError:
                    raise ValueError("fix: omega must be positive definite") from None
                except ValueError as e:
                    raise ValueError(f"fix: {e}") from None
                if not np.all(np.isfinite(packed[p : p + no])):
                    raise ValueError("fix: omega's variances must be positive and finite")
                x[p : p + no] = packed[p : p + no]
        else:
            k = errors.index(name)
            mask[p + no + k] = True
            if value is not None:
                v = float(value)
                if not (np.isfinite(v) and v > 0):
                    raise ValueError(
                        f"fix: the standard deviation {name} must be positive and finite, got {v}"
                    )
                x[p + no + k] = math.log(v)
    return mask, x


def _l2_weights(model, l2) -> np.ndarray:
    """The per-entry weights of the L2 prior on ``x`` (zero outside the named thetas)."""
    lam = np.zeros(model.size)
    if not l2:
        return lam
    if not isinstance(l2, dict):
        raise TypeError("l2 must be a dict {theta symbol or name: lambda}")
    names = [str(s) for s in model.theta_symbols]
    nets = {net.name: net for net in getattr(model, "networks", ())}
    for k, v in l2.items():
        if str(k) in nets:
            targets = [str(w) for w in nets[str(k)].theta_symbols]
        elif str(k) in names:
            targets = [str(k)]
        else:
            raise ValueError(
                f"l2 names {k}, which is not a typical value (theta) or a network of the model"
            )
        v = float(v)
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"the l2 weight of {k} must be finite and >= 0, got {v}")
        for name in targets:
            lam[names.index(name)] = v
    return lam
