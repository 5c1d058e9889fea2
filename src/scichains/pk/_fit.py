"""fit: FOCE-I / Laplace estimation (quasi-Newton on the exact gradient of the OFV)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ._objective import PopulationObjective, numerical_failure


@dataclass
class FitResult:
    """The estimates of a population fit.

    ``method``: ``"focei"`` or ``"laplace"``, as given to :func:`fit`; ``ofv``: the objective
    at the estimates (NONMEM convention, without ``N log 2 pi``);
    ``minus2ll = ofv + n_obs log(2 pi)``; ``x``: the estimated vector (see
    :meth:`PKModel.pack`); ``theta`` (name -> value, the scale the model writes them on),
    ``omega`` (``(q, q)`` covariance of the random effects), ``sd`` (error model name ->
    standard deviation); ``etas`` (``(N, q)``, the EBEs, subjects in data order);
    ``success``/``status``/``message`` from the optimiser (the estimates are its best point
    either way; ``success`` is also False when the run stopped on rejected trial points, and
    the message then says so); ``n_evaluations`` of the objective and gradient; ``seconds``
    of wall time; ``penalty``: the L2 prior's value at the estimates (``fit(l2=...)``; 0
    without one; the minimised objective was ``ofv + penalty``); ``n_rejected``: the trial
    points whose evaluation failed numerically and counted as ``inf`` (see :func:`fit`),
    ``rejection``: the last one's reason (``""`` when none was rejected).
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
    **objective_kwargs,
) -> FitResult:
    """Estimate typical values, omega and the residual error of ``model`` on ``data``.

    Parameters
    ----------
    model : PKModel
    data : EventData (e.g. from :func:`read_events` or :func:`theophylline`)
    method : ``"focei"`` (first-order conditional estimation with interaction) or
        ``"laplace"`` (the exact Hessian of the inner objective in the log det term)
    x0 : starting vector (default: the model's initial values, ``model.pack()``)
    gtol : stop when the largest gradient entry is below this (OFV units per unit of ``x``;
        default 1e-3). The OFV comes from adaptive ODE solves (``rtol`` 1e-8) and is smooth
        only to about 1e-8, so below gradients of ~1e-4 a line search can no longer make
        progress (BFGS then stops with "precision loss"). On the Theophylline data a fit with
        ``gtol=1e-6`` evaluates 17 more points after the default's last one, finds none with
        a lower OFV, and returns the same estimates
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
    objective_kwargs : ``rtol``, ``atol``, ``inner_tol``, ``block`` of
        :class:`PopulationObjective`

    BFGS (SciPy) on the exact gradient of the OFV (see :mod:`scichains.pk._objective`).

    A trial point whose evaluation fails numerically is a rejected point: a failed ODE solve
    (individual parameters that overflow to inf or NaN fail before any solve; a solve that
    ends on NaN is a failed one), an EBE search that does not converge, a singular or
    indefinite matrix (``LinAlgError``), an OFV or gradient that is not finite, a
    floating-point error (``ArithmeticError``). It counts as ``inf`` (the line search backs
    off), the EBE warm starts are those before it, and ``FitResult.n_rejected`` counts it.
    In the inner EBE search a failing trial eta makes that line search back off in the same
    way. The fit never ends on an exception from a
    trial point: the result is the best point evaluated, with the optimiser's status and a
    message that names the rejected points, and says when the run stopped on them
    (``success`` False). A numerical failure at the starting point raises ``ValueError``
    (chained to it: there is no point to return). An error that is not numerical (an
    exception raised in user code, a bug, an executor's error) is never a rejected point: it
    is raised, at the start or later.
    """
    import scipy.optimize

    if method not in ("focei", "laplace"):
        raise ValueError(f"method must be 'focei' or 'laplace', got {method!r}")
    obj = PopulationObjective(
        model, data, method=method, executor=executor, batch_size=batch_size, **objective_kwargs
    )
    x = model.pack() if x0 is None else np.asarray(x0, dtype=np.float64).copy()
    lam = _l2_weights(model, l2)
    best = {"f": math.inf, "pen": 0.0, "x": x.copy(), "etas": obj.etas.copy()}
    count = [0]
    rejected = {"n": 0, "run": 0, "last": ""}  # all, since the last accepted point, why

    def fun(z):
        count[0] += 1
        saved = obj.etas.copy()
        try:
            f, g = obj.value_and_grad(z)
            if not (np.isfinite(f) and np.all(np.isfinite(g))):
                raise FloatingPointError(f"the OFV or its gradient is not finite (OFV {f})")
        except Exception as e:
            obj.etas = saved
            if not numerical_failure(e):
                raise  # an error in code (yours or ours) is never a rejected point
            if count[0] == 1:
                raise ValueError(
                    f"the objective cannot be evaluated at the starting point: "
                    f"{type(e).__name__}: {e}"
                ) from e
            rejected["n"] += 1
            rejected["run"] += 1
            rejected["last"] = f"{type(e).__name__}: {e}"
            return math.inf, np.zeros_like(z)
        rejected["run"] = 0
        pen = float(np.sum(lam * z * z))
        if f + pen < best["f"] + best["pen"]:
            best.update(f=f, pen=pen, x=z.copy(), etas=obj.etas.copy())
        return f + pen, g + 2.0 * lam * z

    t0 = time.perf_counter()
    fun(x)
    res = scipy.optimize.minimize(
        fun, x, jac=True, method="BFGS", options={"gtol": gtol, "maxiter": maxiter}
    )
    seconds = time.perf_counter() - t0
    message = str(res.message)
    if rejected["run"]:
        message += (
            f" (it stopped on rejected trial points: the last {rejected['run']} evaluations "
            f"failed, the last with {rejected['last']}; the result is the best point evaluated)"
        )
    elif rejected["n"]:
        message += f" ({rejected['n']} trial point(s) rejected on the way)"
    xb = best["x"]
    theta, om, sd = model.unpack(xb)
    n_obs = data.n_obs
    return FitResult(
        method=method,
        ofv=float(best["f"]),
        minus2ll=float(best["f"] + n_obs * math.log(2 * math.pi)),
        n_obs=n_obs,
        x=xb.copy(),
        theta={str(k): float(v) for k, v in zip(model.theta_symbols, theta)},
        omega=om,
        sd={k: float(v) for k, v in zip(model.error.names, sd)},
        etas=best["etas"].copy(),
        success=bool(res.success) and rejected["run"] == 0,
        status=int(res.status),
        message=message,
        n_evaluations=count[0],
        seconds=seconds,
        penalty=float(best["pen"]),
        n_rejected=rejected["n"],
        rejection=rejected["last"],
    )


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
