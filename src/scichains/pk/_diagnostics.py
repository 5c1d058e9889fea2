"""After a fit: the covariance step (R, S, sandwich), standard errors, shrinkage, residuals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._inner import numerical_failure
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
    success : False when the step could not give a covariance: ``R`` (or ``S``) singular,
        ``R`` not positive definite (``x`` is not a minimum), or a gradient that could not be
        evaluated on either side of ``x`` along an entry; the estimates that cannot be
        computed are NaN (``R`` and ``S`` are kept as far as they were computed)
    message : why, when not ``success`` (else ``""``); also names the rejected points
    n_rejected : the points ``x +- h e_k`` at which the gradient failed (an ODE solve, an
        EBE, ...): each entry with one failing side uses the one-sided difference of the
        other side with the gradient at ``x``
    fixed : the names of the entries held fixed (not estimated: ``fit(fix=...)``); their
        rows and columns of ``R``, ``S`` and ``cov`` are zero, their standard errors 0
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
    success: bool = True
    message: str = ""
    n_rejected: int = 0
    fixed: tuple = ()


def covariance(
    model, data, fit, kind: str = "sandwich", h: float = 1e-4, fix=None, **objective_kwargs
):
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
    fix : the entries held fixed, named as :func:`fit`'s ``fix`` (default: those of
        ``fit.fixed`` for a :class:`FitResult`, else none): they are not estimated, so they
        drop out (their gradients are not differenced; zero rows and columns, standard
        error 0)
    **objective_kwargs : options of :class:`PopulationObjective` (``rtol``, ``atol``,
        ``inner_tol``, ``inner_maxiter``, ``sensitivities``, ``blq``: default the fit's);
        the objective is FOCE-I's whatever method the fit used

    Returns a :class:`Covariance`; when the step cannot give a covariance (see its
    ``success`` and ``message``: ``R`` singular, i.e. the model is not identifiable from the
    data at ``x``, or not positive definite) the standard errors are NaN, never an exception
    that loses what was computed. A gradient that fails at ``x + h e_k`` or ``x - h e_k`` (an
    ODE solve, an EBE: a rejected point, counted in ``n_rejected``) is replaced by the
    one-sided difference on the other side. Raises ``ValueError`` for an unknown ``kind`` and
    when the objective cannot be evaluated at ``x`` itself (chained to the failure); an error
    in code (not a numerical failure) is raised as it is.
    """
    if kind not in ("sandwich", "r", "s"):
        raise ValueError(f"kind must be 'sandwich', 'r' or 's', got {kind!r}")
    x = np.asarray(getattr(fit, "x", fit), dtype=np.float64)
    names = model.parameter_names()
    if fix is None:
        fixed = np.array([k in getattr(fit, "fixed", ()) for k in names], dtype=bool)
    else:
        from ._fit import fixed_entries

        fixed = fixed_entries(model, list(fix), x)[0]
    free = np.flatnonzero(~fixed)
    objective_kwargs.setdefault("blq", getattr(fit, "blq", "m3"))
    obj = PopulationObjective(model, data, method="focei", **objective_kwargs)
    if hasattr(fit, "etas"):
        obj.etas = np.array(fit.etas, dtype=np.float64)
    start = obj.etas.copy()
    n = x.size
    try:
        _, gi = obj.per_subject(x, grad=True)
        if not np.all(np.isfinite(gi)):
            raise FloatingPointError("the subjects' gradients are not finite")
    except Exception as e:
        if not numerical_failure(e):
            raise
        raise ValueError(
            f"the covariance step cannot evaluate the objective at the estimates: "
            f"{type(e).__name__}: {e}"
        ) from e
    gi[:, fixed] = 0.0
    g0 = gi.sum(axis=0)
    rejected = []

    def grad_at(z):
        obj.etas = start.copy()
        try:
            g = obj.value_and_grad(z)[1]
            if not np.all(np.isfinite(g)):
                raise FloatingPointError("the gradient is not finite")
            return g
        except Exception as e:
            if not numerical_failure(e):
                raise
            rejected.append(f"{type(e).__name__}: {e}")
            return None

    H = np.zeros((n, n))
    for k in free:
        e = np.zeros(n)
        e[k] = h
        gp, gm = grad_at(x + e), grad_at(x - e)
        if gp is not None and gm is not None:
            H[k] = (gp - gm) / (2 * h)
        elif gp is not None:
            H[k] = (gp - g0) / h
        elif gm is not None:
            H[k] = (g0 - gm) / h
        else:
            H[k] = np.nan
    H[:, fixed] = 0.0
    R = 0.25 * (H + H.T)  # half the Hessian of the OFV, symmetrised
    scores = -0.5 * gi
    S = scores.T @ scores
    problems = []
    bad_rows = [names[k] for k in free if not np.all(np.isfinite(H[k]))]
    if bad_rows and kind != "s":
        problems.append(
            f"the gradient failed on both sides of x along {', '.join(bad_rows)}: R is incomplete"
        )
    elif kind != "s":
        try:
            np.linalg.cholesky(R[np.ix_(free, free)])
        except np.linalg.LinAlgError:
            problems.append(
                "R (half the Hessian of the OFV) is not positive definite: x is not a "
                "minimum, or the model is not identifiable from the data there"
            )
    cov = np.full((n, n), np.nan)
    if not problems:
        ff = np.ix_(free, free)
        try:
            c = np.zeros((n, n))
            if kind == "r":
                c[ff] = np.linalg.inv(R[ff])
            elif kind == "s":
                c[ff] = np.linalg.inv(S[ff])
            else:
                Ri = np.linalg.inv(R[ff])
                c[ff] = Ri @ S[ff] @ Ri
            cov = c
        except np.linalg.LinAlgError:
            which = "S" if kind == "s" else "R"
            problems.append(
                f"{which} is singular: the model is not identifiable from the data at x"
            )
    cov = 0.5 * (cov + cov.T)
    var = np.diag(cov)
    se = np.sqrt(np.where(var >= 0, var, np.nan))
    p, no = model.p, model.n_omega
    theta = x[:p]
    se_theta = se[:p].copy()
    with np.errstate(divide="ignore"):
        rse = 100.0 * se_theta / np.abs(theta)
    _, dom = model.omega_from(x[p : p + no])
    J = np.stack([d.ravel() for d in dom], axis=1)  # d vec(Omega) / d w
    cw = cov[p : p + no, p : p + no]
    var_om = np.einsum("ia,ab,ib->i", J, cw, J).reshape(model.q, model.q)
    se_omega = np.sqrt(np.where(var_om >= 0, var_om, np.nan))
    sd = np.exp(x[p + no :])
    se_sd = sd * se[p + no :]
    message = "; ".join(problems)
    if rejected:
        message += (
            f"{'; ' if message else ''}{len(rejected)} gradient evaluation(s) near x rejected "
            f"(one-sided differences used), the last with {rejected[-1]}"
        )
    return Covariance(
        kind, x.copy(), names, R, S, cov, se, se_theta, rse, se_omega, se_sd,
        success=not problems, message=message, n_rejected=len(rejected),
        fixed=tuple(names[k] for k in np.flatnonzero(fixed)),
    )  # fmt: skip


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

    Several endpoints (``PKModel(observe={dvid: ...})``): a ``DVID`` column gives each
    row's endpoint; each row's predictions are its endpoint's, its residual variance that
    of its endpoint's error model (its columns on the log scale where that is exponential),
    and ``C`` is the covariance of all the subject's observations, of every endpoint
    (select rows by ``DVID``; :func:`gof_plot` draws each endpoint apart).

    Censored observations (``CENS`` 1 or -1; see :func:`read_events`): a row each, with
    ``CENS`` (the column is 0 on observed rows), ``DV`` the limit, ``PRED`` and ``IPRED``;
    their residuals (``RES``, ``WRES``, ``IRES``, ``IWRES``, ``CWRES``) are NaN (an
    observation known only to lie beyond its limit has none), and they are left out of the
    other rows' ``C``. With ``blq="m1"`` (the fit's, by default) they are left out of the
    table.

    Parameters
    ----------
    model : the fitted :class:`PKModel`
    data : the :class:`EventData` it was fitted to; subjects without observations add no rows
    fit : the :class:`FitResult` (its estimates ``x`` and EBEs ``etas`` are used as they are,
        not re-estimated)
    decorrelate : whiten ``WRES`` and ``CWRES`` with the symmetric ``C^-1/2`` within each
        subject instead of dividing by ``sqrt(diag C)`` (default False)
    **objective_kwargs : options of :class:`PopulationObjective` for the predictions and
        their sensitivities (``rtol``, ``atol``, ``sensitivities``; ``blq``: default the
        fit's)
    """
    objective_kwargs.setdefault("blq", getattr(fit, "blq", "m3"))
    obj = PopulationObjective(model, data, method="focei", **objective_kwargs)
    data = obj.data  # without the censored observations under M1
    x = np.asarray(fit.x, dtype=np.float64)
    theta, om, _, log_sd = obj._unpack(x)
    etas = np.asarray(fit.etas, dtype=np.float64)
    cols = {k: [] for k in ("ID", "TIME", "DV", "PRED", "RES", "WRES", "IPRED", "IRES")}
    cols.update({k: [] for k in ("IWRES", "CPRED", "CWRES", "CENS", "DVID")})

    def whiten(C, r, ok):
        out = np.full(r.size, np.nan)
        C, r = C[np.ix_(ok, ok)], r[ok]
        if decorrelate:  # the symmetric inverse square root of C
            w, V = np.linalg.eigh(C)
            out[ok] = (V / np.sqrt(w)) @ V.T @ r
        else:
            out[ok] = r / np.sqrt(np.diag(C))
        return out

    for i, s in enumerate(data.subjects):
        if s.n_obs == 0:
            continue
        ep = obj.endpoint[i]
        log = obj._err.log_rows(ep, s.n_obs)
        y = np.where(log, np.log(np.where(log, s.dv, 1.0)), s.dv)
        f0, G0, *_ = obj._predict(i, theta, np.zeros(model.q))
        f1, G1, *_ = obj._predict(i, theta, etas[i])
        R0, R1 = obj._err.variance(f0, log_sd, ep), obj._err.variance(f1, log_sd, ep)
        cens = np.zeros(s.n_obs) if s.cens is None else np.asarray(s.cens, dtype=np.float64)
        ok = cens == 0
        nan = np.where(ok, 1.0, np.nan)
        wres = whiten(G0 @ om @ G0.T + np.diag(R0), y - f0, ok)
        cpred = f1 - G1 @ etas[i]
        cwres = whiten(G1 @ om @ G1.T + np.diag(R1), y - cpred, ok)
        cols["ID"] += [s.id] * s.n_obs
        cols["TIME"].append(s.times)
        cols["DV"].append(y)
        cols["PRED"].append(f0)
        cols["RES"].append((y - f0) * nan)
        cols["WRES"].append(wres)
        cols["IPRED"].append(f1)
        cols["IRES"].append((y - f1) * nan)
        cols["IWRES"].append((y - f1) / np.sqrt(R1) * nan)
        cols["CPRED"].append(cpred)
        cols["CWRES"].append(cwres)
        cols["CENS"].append(cens)
        if model.dvids is not None:
            k = np.zeros(s.n_obs, dtype=np.int64) if ep is None else ep
            cols["DVID"].append(np.asarray(model.dvids, dtype=np.int64)[k])
    out = {"ID": np.array(cols.pop("ID"))}
    if model.dvids is None:
        del cols["DVID"]
    for k, v in cols.items():
        out[k] = np.concatenate(v) if v else np.zeros(0)
    return out
