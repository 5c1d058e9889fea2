"""After a fit: the covariance step (R, S, sandwich), standard errors, shrinkage, residuals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._objective import PopulationObjective


@dataclass
class Covariance:
    """The covariance step at the estimates ``x`` (all matrices ``(size, size)``, on the
    scale of ``x``: see :meth:`PKModel.pack`), as :func:`covariance` returns it.

    Attributes
    ----------
    kind : ``"sandwich"`` (``cov = R^-1 S R^-1``, NONMEM's default and nlmixr2's ``"r,s"``),
        ``"r"`` (``R^-1``) or ``"s"`` (``S^-1``): the estimate in ``cov``
    x : the estimated vector, shape ``(size,)`` (a copy)
    names : the names of the entries of ``x`` (:meth:`PKModel.parameter_names`)
    R : half the Hessian of the OFV (the Hessian of minus the log-likelihood), by central
        differences of the exact gradient
    S : the sum over subjects of the outer products of their scores (``-1/2`` times each
        subject's exact OFV gradient)
    cov : the chosen estimate of the covariance of ``x`` (see ``kind``)
    se : its square-root diagonal, shape ``(size,)``
    se_theta : the standard errors of the typical values, shape ``(p,)``
    rse_theta : ``se_theta`` in percent of ``|theta|``, shape ``(p,)`` (infinite where
        ``theta = 0``)
    se_omega : the standard errors of the omega entries, shape ``(q, q)`` (delta method)
    se_sd : the standard errors of the error model's standard deviations, one per standard
        deviation (delta method)
    """

    kind: str
    x: np.ndarray
    names: list
    R: np.ndarray
    S: np.ndarray
    cov: np.ndarray
    se: np.ndarray
    se_theta: np.ndarray
    rse_theta: np.ndarray
    se_omega: np.ndarray
    se_sd: np.ndarray


def covariance(model, data, fit, kind: str = "sandwich", h: float = 1e-4, **objective_kwargs):
    """The covariance step at a :class:`FitResult` ``fit`` (or an estimated vector ``x``).

    Parameters
    ----------
    model : the fitted :class:`PKModel`
    data : the :class:`EventData` it was fitted to
    fit : a :class:`FitResult` (its EBEs start the inner problems), or an estimated vector
        ``x`` of shape ``(size,)`` laid out as :meth:`PKModel.pack` makes it
    kind : ``"sandwich"`` (default), ``"r"`` or ``"s"``: the estimate returned as ``cov``
        (see :class:`Covariance`)
    h : the step, on the scale of ``x``, of the central differences of the exact gradient
        that give ``R`` (default ``1e-4``; ``2 size`` gradient evaluations)
    **objective_kwargs : options of :class:`PopulationObjective` (``rtol``, ``atol``,
        ``inner_tol``, ``inner_maxiter``, ``sensitivities``); the objective is FOCE-I's
        whatever method the fit used

    Returns a :class:`Covariance`. Raises ``ValueError`` for an unknown ``kind`` and
    ``np.linalg.LinAlgError`` when ``R`` (or ``S``) is singular: the model is then not
    identifiable from the data at ``x``.
    """
    if kind not in ("sandwich", "r", "s"):
        raise ValueError(f"kind must be 'sandwich', 'r' or 's', got {kind!r}")
    x = np.asarray(getattr(fit, "x", fit), dtype=np.float64)
    obj = PopulationObjective(model, data, method="focei", **objective_kwargs)
    if hasattr(fit, "etas"):
        obj.etas = np.array(fit.etas, dtype=np.float64)
    start = obj.etas.copy()
    n = x.size
    H = np.zeros((n, n))
    for k in range(n):
        e = np.zeros(n)
        e[k] = h
        obj.etas = start.copy()
        gp = obj.value_and_grad(x + e)[1]
        obj.etas = start.copy()
        gm = obj.value_and_grad(x - e)[1]
        H[k] = (gp - gm) / (2 * h)
    R = 0.25 * (H + H.T)  # half the Hessian of the OFV, symmetrised
    obj.etas = start.copy()
    _, gi = obj.per_subject(x, grad=True)
    scores = -0.5 * gi
    S = scores.T @ scores
    if kind == "r":
        cov = np.linalg.inv(R)
    elif kind == "s":
        cov = np.linalg.inv(S)
    else:
        Ri = np.linalg.inv(R)
        cov = Ri @ S @ Ri
    cov = 0.5 * (cov + cov.T)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    p, no = model.p, model.n_omega
    theta = x[:p]
    se_theta = se[:p].copy()
    with np.errstate(divide="ignore"):
        rse = 100.0 * se_theta / np.abs(theta)
    _, dom = model.omega_from(x[p : p + no])
    J = np.stack([d.ravel() for d in dom], axis=1)  # d vec(Omega) / d w
    cw = cov[p : p + no, p : p + no]
    var_om = np.einsum("ia,ab,ib->i", J, cw, J).reshape(model.q, model.q)
    se_omega = np.sqrt(np.clip(var_om, 0.0, None))
    sd = np.exp(x[p + no :])
    se_sd = sd * se[p + no :]
    return Covariance(
        kind, x.copy(), model.parameter_names(), R, S, cov, se, se_theta, rse, se_omega, se_sd
    )


def shrinkage(fit) -> np.ndarray:
    """Eta shrinkage in percent, ``100 (1 - sd(eta_k) / sqrt(omega_kk))``, one per random
    effect (``sd`` over subjects with the ``N - 1`` denominator).

    ``fit``: a :class:`FitResult` (its ``etas``, shape ``(N, q)``, and ``omega``, shape
    ``(q, q)``, are used). Returns a float64 array of shape ``(q,)``; NaN with a single
    subject.
    """
    etas = np.asarray(fit.etas)
    return 100.0 * (1.0 - np.std(etas, axis=0, ddof=1) / np.sqrt(np.diag(fit.omega)))


def residuals(model, data, fit, decorrelate: bool = False, **objective_kwargs) -> dict:
    """Per-observation diagnostics at a :class:`FitResult`: a dict of arrays (one entry per
    observation, subjects in data order) with keys ``ID``, ``TIME``, ``DV``, ``PRED``
    (``eta = 0``), ``RES = DV - PRED``, ``WRES`` (FO weighted residuals), ``IPRED`` (at the
    EBEs), ``IRES``, ``IWRES = IRES / sqrt(R(IPRED))``, ``CPRED = IPRED - G eta`` and
    ``CWRES`` (the conditional weighted residuals of Hooker et al. 2007: ``C^-1/2 (DV -
    CPRED)`` with ``C = G Omega G^T + R(IPRED)``, ``G = dIPRED/deta``). By default each
    weighted residual is divided by the square root of its own variance (the diagonal of
    ``C``), the convention of nlmixr2's tables (checked against one in the tests);
    ``decorrelate=True`` applies the symmetric ``C^-1/2`` within each subject instead. With
    the exponential error model every column is on the log scale.
    ``pandas.DataFrame(residuals(...))`` makes it a table.

    Parameters
    ----------
    model : the fitted :class:`PKModel`
    data : the :class:`EventData` it was fitted to; subjects without observations add no rows
    fit : the :class:`FitResult` (its estimates ``x`` and EBEs ``etas`` are used as they are,
        not re-estimated)
    decorrelate : whiten ``WRES`` and ``CWRES`` with the symmetric ``C^-1/2`` within each
        subject instead of dividing by ``sqrt(diag C)`` (default False)
    **objective_kwargs : options of :class:`PopulationObjective` for the predictions and
        their sensitivities (``rtol``, ``atol``, ``sensitivities``)
    """
    obj = PopulationObjective(model, data, method="focei", **objective_kwargs)
    x = np.asarray(fit.x, dtype=np.float64)
    theta, om, _, log_sd = obj._unpack(x)
    etas = np.asarray(fit.etas, dtype=np.float64)
    cols = {k: [] for k in ("ID", "TIME", "DV", "PRED", "RES", "WRES", "IPRED", "IRES")}
    cols.update({k: [] for k in ("IWRES", "CPRED", "CWRES")})
    errf = obj._errf
    log = model.error.log_transform

    def variance(f):
        # the residual variance R(f): the generated l = (y - f)^2 / R + log R at y = f
        ell = errf(f, f, log_sd)[0]
        return np.exp(ell)

    def whiten(C, r):
        if decorrelate:  # the symmetric inverse square root of C
            w, V = np.linalg.eigh(C)
            return (V / np.sqrt(w)) @ V.T @ r
        return r / np.sqrt(np.diag(C))

    for i, s in enumerate(data.subjects):
        if s.n_obs == 0:
            continue
        y = np.log(s.dv) if log else s.dv
        f0, G0, *_ = obj._predict(i, theta, np.zeros(model.q))
        f1, G1, *_ = obj._predict(i, theta, etas[i])
        R0, R1 = variance(f0), variance(f1)
        wres = whiten(G0 @ om @ G0.T + np.diag(R0), y - f0)
        cpred = f1 - G1 @ etas[i]
        cwres = whiten(G1 @ om @ G1.T + np.diag(R1), y - cpred)
        cols["ID"] += [s.id] * s.n_obs
        cols["TIME"].append(s.times)
        cols["DV"].append(y)
        cols["PRED"].append(f0)
        cols["RES"].append(y - f0)
        cols["WRES"].append(wres)
        cols["IPRED"].append(f1)
        cols["IRES"].append(y - f1)
        cols["IWRES"].append((y - f1) / np.sqrt(R1))
        cols["CPRED"].append(cpred)
        cols["CWRES"].append(cwres)
    out = {"ID": np.array(cols.pop("ID"))}
    for k, v in cols.items():
        out[k] = np.concatenate(v) if v else np.zeros(0)
    return out
