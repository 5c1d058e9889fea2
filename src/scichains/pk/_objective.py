"""The population objective (OFV, NONMEM's -2 log-likelihood convention) and its gradient.

For subject ``i`` with observations ``y_j``, predictions ``f_j(eta)``, residual variances
``R_j = R(f_j)`` and ``l_j = (y_j - f_j)^2 / R_j + log R_j``:

    L_i(eta) = sum_j l_j + eta^T Omega^-1 eta                      (inner objective)
    eta_i    = argmin L_i                                          (empirical Bayes estimate)
    OFV_i    = L_i(eta_i) + log det Omega + log det A_i

``A_i`` is half the Hessian of ``L_i`` at ``eta_i``: exactly (``method="laplace"``), or its
first-order approximation (``method="focei"``, FOCE with interaction: the predictions and the
variances linearised around ``eta_i``), ``A = Omega^-1 + G^T W G`` with ``G = df/deta`` and
``W_jj = 1/R_j + (dR_j/df)^2 / (2 R_j^2)``, the Fisher information of ``f_j`` (Almquist et
al. 2015; for an additive error ``W = R^-1``). ``OFV = sum_i OFV_i`` omits the constant
``N log(2 pi)`` (``N`` observations), as NONMEM and nlmixr2's ``OBJF`` do:
``-2 log-likelihood = OFV + N log(2 pi)``.

Gradient (FOCE-I), exact given the solver's derivatives: the EBE moves with the parameters,
``d eta_i/dx = -H^-1 d2L/(deta dx)`` (implicit function theorem, ``H = d2L/deta2``), so

    dOFV_i/dx = dOFV_i/dx|_eta - v^T d2L/(deta dx),   v = H^-1 dOFV_i/deta|_x,

with every term built from the second-order sensitivities of the predictions along the
individual parameters (:mod:`._sensitivity`) and the chain rule through the
individual-parameter block. Laplace's gradient differentiates ``log det H`` too, with the
third-order sensitivities (a larger augmented system, built on first use).
"""

from __future__ import annotations

import threading

import numpy as np

from ..ode._solution import ODESolveError, ReturnCode
from ..parallel import _executor as ex
from ._censoring import CensoringPlan
from ._predict import PKSolveError, Regimen, predict_subject
from ._remote import chunks_for


class InnerFailure(RuntimeError):
    """The empirical Bayes estimate of a subject did not converge."""


def numerical_failure(e: BaseException) -> bool:
    """Whether ``e`` is a numerical failure of an evaluation at a trial point: a failed ODE
    solve (:class:`PKSolveError`, or an ``ODESolveError`` other than ``RHS_ERROR``), an EBE
    that does not converge (:class:`InnerFailure`), a singular or indefinite matrix
    (``LinAlgError``) or floating point (``ArithmeticError``: overflow, division by zero).
    Anything else (``TypeError``, ``ValueError``, an exception a user function raised, an
    executor's error) is an error in code and is never treated as a rejected point."""
    if isinstance(e, ODESolveError):
        return e.solution.status != ReturnCode.RHS_ERROR
    return isinstance(e, (InnerFailure, PKSolveError, np.linalg.LinAlgError, ArithmeticError))


def drop_censored(data):
    """``data`` without its censored observations (M1)."""
    from ._events import EventData, Subject

    if data.n_censored == 0:
        return data
    out = []
    for s in data.subjects:
        if s.n_censored == 0:
            out.append(s)
            continue
        keep = s.cens == 0
        limit = None if s.limit is None else s.limit[keep]
        out.append(
            Subject(
                s.id, s.doses, s.times[keep], s.dv[keep], s.rows[keep], s.covariates,
                s.covariate_changes, s.covariate_history, s.cens[keep], limit,
            )
        )  # fmt: skip
    return EventData(out, data.covariates)


class _Eval:
    """Everything at one subject's ``eta`` that the inner and outer steps need."""

    __slots__ = ("L", "gL", "H", "GN", "f", "G", "Hf", "Ft", "B", "Tf", "Tt", "terms")


def _finite(ev: _Eval) -> bool:
    """The inner objective and the derivatives its Newton step uses are finite."""
    return bool(
        np.isfinite(ev.L)
        and np.all(np.isfinite(ev.gL))
        and np.all(np.isfinite(ev.H))
        and np.all(np.isfinite(ev.GN))
    )


class PopulationObjective:
    """The FOCE-I / Laplace objective of a :class:`PKModel` on an :class:`EventData`.

    Parameters
    ----------
    model : PKModel
    data : EventData (checked against the model: compartments, covariates)
    method : ``"focei"`` or ``"laplace"`` (both with exact gradients)
    rtol, atol : ODE tolerances (on states and sensitivities)
    inner_tol, inner_maxiter : the inner (EBE) Newton iteration stops when its step is below
        ``inner_tol (1 + max|eta|)``; after ``inner_maxiter`` iterations (default 100)
        without that, the evaluation raises ``InnerFailure`` naming the subject
    sensitivities : ``"phi"``: the system along the individual parameters, composed with
        the individual-parameter block (small when there are few individual parameters);
        ``"directions"``: the system along the random effects and typical values (small
        when there are many individual parameters, e.g. a network's weights; always used
        for subjects whose covariates change); ``"auto"`` (default): the smaller
    executor : None (default: this process), a ``dask.distributed.Client`` (``"dask"``: the
        running one) or any object with ``submit``/``map``: the subjects are split into
        chunks of whole blocks (``batch_size`` subjects each, rounded up to a multiple of
        ``block``; default: one chunk per worker thread), sent to the workers once, here,
        with the model's description (:meth:`PKModel.__reduce__`: the workers build it
        again, nothing compiled travels); each evaluation sends ``x`` and each chunk's rows of
        the EBE warm starts, and the workers return the chunk's block sums of the OFV and its
        gradient (with :meth:`per_subject`: the subjects' terms) and the new EBEs. A worker
        that dies has its chunks placed again and the evaluation repeated (same results).
        ``TypeError`` for another kind of object; ``ImportError`` naming
        ``pip install scichains[dask]`` for ``"dask"`` without Dask
    batch_size : subjects per chunk (positive integer or None)
    block : subjects per partial sum (default 4): the OFV and gradient are summed in subject
        order within each block and the block sums in block order, so the results are the
        same bit for bit in this process and on any number of workers and chunk sizes
    blq : the likelihood of censored observations (``CENS`` 1 or -1, ``LIMIT``: see
        :func:`read_events` and :mod:`._censoring`): ``"m3"`` (default: ``-2 log`` of the
        probability of the interval the observation lies in, ``Phi((LLOQ - f) / s)`` below
        the LLOQ), ``"m4"`` (M3 for positive quantities: every observation conditioned on
        ``y > 0``; with the exponential error model the same as M3) or ``"m1"`` (the censored
        observations left out). For FOCE-I a censored observation's weight is the
        Gauss-Newton one (the curvature of its ``-2 log`` probability in the standardised
        limits times the square of their derivatives in ``f``, over 2); Laplace uses its
        exact second derivative. ``n_obs``: the observations fitted, ``n_density``: those
        with a density (``-2 log L = OFV + n_density log 2 pi``)

    ``value(x)``, ``value_and_grad(x)`` (``x`` as :meth:`PKModel.pack` lays it out). The EBEs
    of the last evaluation are ``etas`` (``(N, q)``) and start the next one (warm start, as
    NONMEM does); the value does not depend on the start once the inner problem has
    converged (to a Newton step below ``inner_tol (1 + max|eta|)``). With an executor the
    warm starts are kept here too (the workers keep no state between evaluations), so they
    and the results are those of the run in this process. Threads: the warm starts are
    shared state, so an evaluation while another thread evaluates the same objective raises
    ``RuntimeError``; make one objective per thread (``predict`` may be shared).
    """

    def __init__(
        self,
        model,
        data,
        method="focei",
        rtol=1e-8,
        atol=1e-10,
        inner_tol=1e-10,
        inner_maxiter=100,
        sensitivities="auto",
        executor=None,
        batch_size: int | None = None,
        block: int = 4,
        blq: str = "m3",
    ):
        if blq not in ("m1", "m3", "m4"):
            raise ValueError(f"blq must be 'm1', 'm3' or 'm4', got {blq!r}")
        self.blq = blq
        if blq == "m1":
            data = drop_censored(data)
        if method not in ("focei", "laplace"):
            raise ValueError(f"method must be 'focei' or 'laplace', got {method!r}")
        if sensitivities not in ("auto", "phi", "directions"):
            raise ValueError(
                f"sensitivities must be 'auto', 'phi' or 'directions', got {sensitivities!r}"
            )
        if sensitivities == "auto":
            along_phi, along_z = model.system_sizes(3 if method == "laplace" else 2)
            sensitivities = "directions" if along_z < along_phi else "phi"
        self.sensitivities = sensitivities
        self.model, self.data, self.method = model, data, method
        self.rtol, self.atol = float(rtol), float(atol)
        self.inner_tol, self.inner_maxiter = float(inner_tol), int(inner_maxiter)
        data.check_states(model.n)
        missing = [c for c in model.covariate_names if c not in data.covariates]
        if missing:
            raise ValueError(
                f"the model uses covariates {missing} that the data lack (it has "
                f"{list(data.covariates)})"
            )
        self.cov = []
        self.plans = []  # per subject: None (every observation has a density) or its plan
        self.pieces = []  # per subject: None, or (change times (K-1,), covariates (K, c))
        names = model.covariate_names
        for s in data.subjects:
            vals = [s.covariates[c] for c in names]
            if not np.all(np.isfinite(vals)):
                bad = [c for c, v in zip(names, vals) if not np.isfinite(v)]
                raise ValueError(
                    f"subject ID {s.id}: covariate(s) {bad} of the model are missing at the "
                    "subject's first record"
                )
            changing = [c for c in names if c in s.covariate_changes]
            piece = None
            if changing:
                if model.lag is not None:
                    raise ValueError(
                        f"subject ID {s.id}: covariate(s) {changing} change within the subject, "
                        "and lag times with time-varying covariates are not supported"
                    )
                times, covs = [], [vals]
                for t, _row, values in s.covariate_history:
                    v = [values[c] for c in names]
                    if v != covs[-1]:
                        times.append(t)
                        covs.append(v)
                piece = (np.array(times), np.array(covs, dtype=np.float64))
            if piece is None and sensitivities == "directions":
                piece = (np.zeros(0), np.array([vals], dtype=np.float64))
            self.pieces.append(piece)
            for d in s.doses:
                if d.ss_interval > 0 and (model.t is not None or d.state in model.lagged_states):
                    why = "a lag time" if model.t is None else "a time-dependent ODE"
                    raise ValueError(
                        f"subject ID {s.id}, row {d.row}: a steady-state dose (SS=1) with {why} "
                        "is not supported"
                    )
            if model.error.log_transform and np.any(s.dv <= 0):
                j = int(np.argmin(s.dv))
                raise ValueError(
                    f"subject ID {s.id}, row {s.rows[j]}: the exponential error model needs "
                    f"positive observations, got DV {s.dv[j]:g}"
                )
            self.cov.append(np.array(vals, dtype=np.float64))
            plan = CensoringPlan(s.dv, s.cens, s.limit, blq == "m4", model.error.log_transform)
            self.plans.append(plan if plan.any else None)
        self.regimens = [
            Regimen(s, model.n, model.lagged_states, () if pc is None else pc[0])
            for s, pc in zip(data.subjects, self.pieces)
        ]
        self._errf = model.error.functions()
        self.etas = np.zeros((len(data.subjects), model.q))
        self.n_obs = data.n_obs
        self.n_density = data.n_obs - sum(
            p.left[0].size + p.right[0].size + p.interval[0].size
            for p in self.plans
            if p is not None
        )
        self._busy = threading.Lock()
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"block must be a positive integer, got {block!r}")
        self.block = int(block)
        self.executor = ex.check_executor(executor)
        batch_size = ex.check_batch_size(batch_size)
        self._chunks = None
        self.bounds = [(0, len(data.subjects))]
        if self.executor is not None:
            settings = {
                "method": method,
                "rtol": self.rtol,
                "atol": self.atol,
                "inner_tol": self.inner_tol,
                "inner_maxiter": self.inner_maxiter,
                "sensitivities": self.sensitivities,
                "block": self.block,
                "blq": self.blq,
            }
            n = len(data.subjects)
            size = batch_size or -(-n // ex.n_workers(self.executor))
            self.bounds = ex.batch_bounds(n, size, align=self.block)
            payloads = chunks_for(model, data, settings, self.bounds, type(self))
            self._chunks = ex.ScatteredChunks(self.executor, payloads)

    # ---------------------------------------------------------------- per subject
    def _predict(self, i, theta, eta, third=False):
        """Predictions of subject ``i`` and derivatives along eta and theta (transformed
        to the log scale for the exponential error model): ``f (n,), G (n, q), Ft (n, p),
        Hf (n, q, q), B (n, q, p)`` and with ``third``, ``Tf (n, q, q, q)``,
        ``Tt (n, q, q, p)``."""
        model = self.model
        if self.pieces[i] is not None:
            g, G, Ft, Hf, B, Tf, Tt = self._predict_pieces(i, theta, eta, third)
            return self._log_transform(i, g, G, Ft, Hf, B, Tf, Tt, third)
        sens = model.sensitivities(3) if third else model.sens
        phi, pe, pt, pee, pet = model.individual(theta, eta, self.cov[i])
        y = predict_subject(sens, self.regimens[i], phi, self.rtol, self.atol)
        obs = sens.observe(y, phi)
        g, g1, g2 = obs[0], obs[1], obs[2]
        G = g1 @ pe  # (n, q)
        Ft = g1 @ pt  # (n, p)
        Hf = np.einsum("jab,aq,br->jqr", g2, pe, pe) + np.einsum("ja,aqr->jqr", g1, pee)
        B = np.einsum("jab,aq,bp->jqp", g2, pe, pt) + np.einsum("ja,aqp->jqp", g1, pet)
        Tf = Tt = None
        if third:
            g3 = obs[3]
            peee, peet = model.individual3(theta, eta, self.cov[i])
            Tf = np.einsum("jkln,ka,lb,nc->jabc", g3, pe, pe, pe, optimize=True)
            t2 = np.einsum("jkl,kab,lc->jabc", g2, pee, pe)
            Tf += t2 + t2.transpose(0, 1, 3, 2) + t2.transpose(0, 3, 2, 1)
            Tf += np.einsum("jk,kabc->jabc", g1, peee)
            Tt = np.einsum("jkln,ka,lb,np->jabp", g3, pe, pe, pt, optimize=True)
            Tt += np.einsum("jkl,kab,lp->jabp", g2, pee, pt)
            u = np.einsum("jkl,kap,lb->jabp", g2, pet, pe)
            Tt += u + u.transpose(0, 2, 1, 3)
            Tt += np.einsum("jk,kabp->jabp", g1, peet)
        return self._log_transform(i, g, G, Ft, Hf, B, Tf, Tt, third)

    def _predict_pieces(self, i, theta, eta, third):
        """As :meth:`_predict` (before the log transform) for a subject whose covariates
        change: the system along eta and theta, its parameters piece by piece."""
        model = self.model
        sens = model.directional(3 if third else 2)
        times, covs = self.pieces[i]
        pars = []
        for cov in covs:
            d = model.individual(theta, eta, cov)
            if third:
                d = (*d, *model.individual3(theta, eta, cov))
            pars.append(sens.direction_params(*d))
        pars = np.array(pars)
        y = predict_subject(sens, self.regimens[i], pars, self.rtol, self.atol)
        obs_piece = np.searchsorted(times, self.data.subjects[i].times, side="right")
        return sens.observe_directions(y, pars[obs_piece])

    def _log_transform(self, i, g, G, Ft, Hf, B, Tf, Tt, third):
        model = self.model
        if model.error.log_transform:
            if np.any(g <= 0):
                j = int(np.argmin(g))
                raise PKSolveError(
                    f"subject ID {self.regimens[i].subject.id}: prediction {g[j]:g} at time "
                    f"{self.regimens[i].subject.times[j]:g} is not positive (exponential error)"
                )
            # derivatives of log f from those of f (f_a, f_ab, f_abc: eta or theta indices)
            g_ = g[:, None, None]
            if third:
                three = (
                    np.einsum("jab,jc->jabc", Hf, G)
                    + np.einsum("jac,jb->jabc", Hf, G)
                    + np.einsum("jbc,ja->jabc", Hf, G)
                )
                Tf = (
                    Tf / g_[..., None]
                    - three / g_[..., None] ** 2
                    + 2 * np.einsum("ja,jb,jc->jabc", G, G, G) / g_[..., None] ** 3
                )
                three = (
                    np.einsum("jab,jp->jabp", Hf, Ft)
                    + np.einsum("jap,jb->jabp", B, G)
                    + np.einsum("jbp,ja->jabp", B, G)
                )
                Tt = (
                    Tt / g_[..., None]
                    - three / g_[..., None] ** 2
                    + 2 * np.einsum("ja,jb,jp->jabp", G, G, Ft) / g_[..., None] ** 3
                )
            Hf = Hf / g_ - np.einsum("jq,jr->jqr", G, G) / g_**2
            B = B / g_ - np.einsum("jq,jp->jqp", G, Ft) / g_**2
            G = G / g[:, None]
            Ft = Ft / g[:, None]
            g = np.log(g)
        return g, G, Ft, Hf, B, Tf, Tt

    def _evaluate(self, i, theta, eta, oinv, log_sd, third=False):
        ev = _Eval()
        s = self.data.subjects[i]
        f, G, Ft, Hf, B, Tf, Tt = self._predict(i, theta, eta, third)
        yv = np.log(s.dv) if self.model.error.log_transform else s.dv
        plan = self.plans[i]
        terms = self._errf(yv, f, log_sd) if plan is None else self._terms(plan, yv, f, log_sd)
        ell, ell_f, ell_ff = terms[0], terms[1], terms[2]
        w = terms[5]
        ev.L = float(np.sum(ell) + eta @ oinv @ eta)
        ev.gL = G.T @ ell_f + 2.0 * oinv @ eta
        ev.H = (G.T * ell_ff) @ G + np.einsum("j,jqr->qr", ell_f, Hf) + 2.0 * oinv
        ev.GN = 2.0 * ((G.T * w) @ G + oinv)
        ev.f, ev.G, ev.Hf, ev.Ft, ev.B, ev.terms = f, G, Hf, Ft, B, terms
        ev.Tf, ev.Tt = Tf, Tt
        return ev

    def _terms(self, plan, yv, f, log_sd):
        """The per-observation terms (as :meth:`ErrorModel.functions` gives them) of a
        subject with censored observations or M4's truncation: each kind from its own
        generated functions (see :mod:`._censoring`), truncation terms added."""
        n, r = f.size, self.model.r
        out = [np.zeros(n), np.zeros(n), np.zeros(n), np.zeros((n, r)), np.zeros((n, r))]
        out += [np.zeros(n), np.zeros(n), np.zeros((n, r)), np.zeros(n), np.zeros((n, r))]
        err = self.model.error
        groups = [(plan.normal, self._errf, (yv[plan.normal],))]
        groups.append((plan.left[0], err.censored_functions("left"), plan.left[1:]))
        groups.append((plan.right[0], err.censored_functions("right"), plan.right[1:]))
        groups.append((plan.interval[0], err.censored_functions("interval"), plan.interval[1:]))
        groups.append(
            (plan.truncation[0], err.censored_functions("truncation"), plan.truncation[1:])
        )
        for idx, fn, limits in groups:
            if idx.size == 0:
                continue
            for k, v in enumerate(fn(*limits, f[idx], log_sd)):
                out[k][idx] += v
        return tuple(out)

    def _inner(self, i, theta, oinv, log_sd, eta0):
        """Newton's method on ``L_i`` from ``eta0`` (exact Hessian when positive definite,
        else the Gauss-Newton/Fisher one), with a backtracking line search."""
        q = self.model.q
        eta = np.array(eta0, dtype=np.float64)
        sid = self.data.subjects[i].id
        try:
            ev = self._evaluate(i, theta, eta, oinv, log_sd)
            if not _finite(ev):
                raise FloatingPointError
        except Exception as e:  # the warm start fails at these x: start again from 0
            if not numerical_failure(e):
                raise
            eta = np.zeros(q)
            ev = self._evaluate(i, theta, eta, oinv, log_sd)
            if not _finite(ev):
                raise InnerFailure(
                    f"subject ID {sid}: the inner objective or its derivatives are not finite "
                    "at eta = 0"
                ) from None
        last_dec = np.inf
        for _ in range(self.inner_maxiter):
            try:
                try:
                    c = np.linalg.cholesky(ev.H)
                    step = -np.linalg.solve(c.T, np.linalg.solve(c, ev.gL))
                except np.linalg.LinAlgError:
                    step = -np.linalg.solve(ev.GN, ev.gL)
                slope = float(ev.gL @ step)
                if slope >= 0:
                    step = -np.linalg.solve(ev.GN, ev.gL)
                    slope = float(ev.gL @ step)
            except np.linalg.LinAlgError:
                raise InnerFailure(
                    f"subject ID {sid}: the Hessian of the inner objective is singular"
                ) from None
            if not (np.all(np.isfinite(step)) and np.isfinite(slope)):
                raise InnerFailure(f"subject ID {sid}: the EBE's Newton step is not finite")
            # Converged when the Newton step is negligible: the OFV's log det A term moves
            # to first order with eta, so eta itself must be accurate, not only L. Below the
            # ODE's accuracy the steps stop shrinking: stop there too (a stall).
            dec = -slope
            if np.max(np.abs(step)) <= self.inner_tol * (1.0 + np.max(np.abs(eta))) or (
                dec < 1e-11 and dec > 0.25 * last_dec
            ):
                return eta, ev
            last_dec = dec
            alpha = 1.0
            for _ in range(40):
                cand = eta + alpha * step
                try:
                    new = self._evaluate(i, theta, cand, oinv, log_sd)
                    ok = _finite(new) and (
                        new.L <= ev.L + 1e-4 * alpha * slope or -alpha * slope < 1e-6
                    )
                except Exception as e:  # a failing trial eta: back off
                    if not numerical_failure(e):
                        raise
                    ok = False
                if ok:
                    break
                alpha *= 0.5
            else:
                raise InnerFailure(
                    f"subject ID {sid}: the EBE line search failed "
                    f"(gradient {np.max(np.abs(ev.gL)):.3g})"
                )
            eta, ev = cand, new
        raise InnerFailure(
            f"subject ID {sid}: the EBE did not converge in "
            f"{self.inner_maxiter} iterations (gradient {np.max(np.abs(ev.gL)):.3g})"
        )

    # ---------------------------------------------------------------- population
    def _unpack(self, x):
        model = self.model
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (model.size,):
            raise ValueError(f"x must have shape ({model.size},), got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("x must be finite")
        p, no = model.p, model.n_omega
        om, dom = model.omega_from(x[p : p + no])
        return x[:p], om, dom, x[p + no :]

    def predict(self, x, etas=None) -> list:
        """Predictions at every subject's observation times (a list of arrays, on the scale
        of the observations): ``etas=None`` gives the population predictions (``eta = 0``,
        PRED), an ``(N, q)`` array the individual ones (e.g. ``self.etas``: IPRED)."""
        theta, _, _, _ = self._unpack(x)
        N, q = len(self.data.subjects), self.model.q
        etas = np.zeros((N, q)) if etas is None else np.asarray(etas, dtype=np.float64)
        if etas.shape != (N, q):
            raise ValueError(f"etas must have shape ({N}, {q}), got {etas.shape}")
        sens = self.model.sens if self.sensitivities == "phi" else None
        out = []
        for i, s in enumerate(self.data.subjects):
            if s.n_obs == 0:
                out.append(np.zeros(0))
                continue
            if self.pieces[i] is None:
                phi = self.model.individual(theta, etas[i], self.cov[i])[0]
                y = predict_subject(sens, self.regimens[i], phi, self.rtol, self.atol)
                out.append(sens.observe(y, phi)[0].copy())
                continue
            times, covs = self.pieces[i]
            rows = np.searchsorted(times, s.times, side="right")
            if self.sensitivities == "directions":
                dsens = self.model.directional(2)
                pars = np.array(
                    [
                        dsens.direction_params(*self.model.individual(theta, etas[i], c))
                        for c in covs
                    ]
                )
                y = predict_subject(dsens, self.regimens[i], pars, self.rtol, self.atol)
                out.append(dsens.observe_directions(y, pars[rows])[0].copy())
                continue
            phis = np.array([self.model.individual(theta, etas[i], c)[0] for c in covs])
            y = predict_subject(sens, self.regimens[i], phis, self.rtol, self.atol)
            out.append(sens.observe(y, phis[rows])[0].copy())
        return out

    def value(self, x) -> float:
        """The OFV at ``x`` (NONMEM convention, see the module docstring)."""
        return self._run(x, grad=False)[0]

    def value_and_grad(self, x):
        """``(OFV, dOFV/dx)``."""
        return self._run(x, grad=True)

    def per_subject(self, x, grad=False):
        """``(OFV_i (N,), dOFV_i/dx (N, size) or None)``: the subjects' contributions."""
        return self._run(x, grad=grad, per_subject=True)

    def value_grad_and_subjects(self, x):
        """``(OFV, dOFV/dx, dOFV_i/dx (N, size))``: :meth:`value_and_grad` (the same bits:
        the subjects' terms summed by blocks in the same order) with the subjects' gradients
        (:func:`fit` scales its variables with them)."""
        ofv, gi = self._run(x, grad=True, per_subject=True)
        total, g = 0.0, np.zeros(self.model.size)
        for lo in range(0, ofv.size, self.block):
            value, gb = 0.0, np.zeros(self.model.size)
            for i in range(lo, min(ofv.size, lo + self.block)):
                value += ofv[i]
                gb += gi[i]
            total += value
            g += gb
        return float(total), g, gi

    def _run(self, x, grad, per_subject=False):
        if not self._busy.acquire(blocking=False):
            raise RuntimeError(
                "this PopulationObjective is being evaluated by another thread; the EBE warm "
                "starts are its state, so make one objective per thread"
            )
        try:
            return self._run_locked(x, grad, per_subject)
        finally:
            self._busy.release()

    def _run_locked(self, x, grad, per_subject):
        self._unpack(x)  # bad x raises here, not on a worker
        x = np.array(x, dtype=np.float64)
        if self._chunks is None:
            parts = [self._part(x, self.etas, grad, per_subject)]
        else:  # each chunk gets x and its rows of the warm starts: its data are there
            args = [(x, self.etas[lo:hi], grad, per_subject) for lo, hi in self.bounds]
            parts = self._chunks.run_each(_chunk_task, args)
        size = self.model.size
        new_etas = np.concatenate([q[2] for q in parts]) if parts else self.etas.copy()
        if per_subject:
            ofv = np.concatenate([q[0] for q in parts]) if parts else np.zeros(0)
            gout = None
            if grad:
                gout = np.concatenate([q[1] for q in parts]) if parts else np.zeros((0, size))
            self.etas = new_etas
            return ofv, gout
        # block sums added in block order: the same bits for any executor and chunk size
        total = 0.0
        g = np.zeros(size) if grad else None
        for values, g_blocks, _ in parts:
            for j in range(values.size):
                total += values[j]
                if grad:
                    g += g_blocks[j]
        self.etas = new_etas
        return float(total), g

    def _part(self, x, etas, grad, per_subject):
        """All subjects of this objective (on a worker: one chunk's) from the warm starts
        ``etas`` (``(N, q)``, not changed): ``(OFV terms, gradient terms or None, new
        EBEs)``, the terms per subject with ``per_subject``, else summed over each block of
        ``self.block`` consecutive subjects (in subject order).

        NumPy's floating-point warnings are off here: an overflow (``exp(theta + eta)`` at a
        far trial point) gives inf or NaN, which the checks of the individual parameters,
        the solves and the inner objective turn into a failure of that point (so a program
        run with warnings as errors sees the same failures as any other)."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            return self._part_checked(x, etas, grad, per_subject)

    def _part_checked(self, x, etas, grad, per_subject):
        model = self.model
        theta, om, dom, log_sd = self._unpack(x)
        oinv = np.linalg.inv(om)
        oinv = 0.5 * (oinv + oinv.T)
        _, logdet_om = np.linalg.slogdet(om)
        N = len(self.data.subjects)
        ofv = np.zeros(N)
        gout = np.zeros((N, model.size)) if grad else None
        new_etas = np.array(etas, dtype=np.float64)
        for i in range(N):
            s = self.data.subjects[i]
            if s.n_obs == 0:
                new_etas[i] = 0.0  # contributes log det Omega + log det Omega^-1 = 0
                continue
            eta, ev = self._inner(i, theta, oinv, log_sd, etas[i])
            new_etas[i] = eta
            if self.method == "laplace":
                A = 0.5 * ev.H
            else:
                A = 0.5 * ev.GN
            sign, logdet_a = np.linalg.slogdet(A)
            if sign <= 0:
                raise InnerFailure(f"subject ID {s.id}: the Hessian at the EBE is not positive")
            ofv[i] = ev.L + logdet_om + logdet_a
            if grad and self.method == "laplace":
                ev3 = self._evaluate(i, theta, eta, oinv, log_sd, third=True)
                gout[i] = self._gradient_laplace(ev3, eta, oinv, dom)
            elif grad:
                gout[i] = self._gradient(ev, eta, A, oinv, dom)
        if per_subject:
            return ofv, gout, new_etas
        starts = range(0, N, self.block)
        values = np.zeros(len(starts))
        g_blocks = np.zeros((len(starts), model.size)) if grad else None
        for j, lo in enumerate(starts):
            for i in range(lo, min(N, lo + self.block)):
                values[j] += ofv[i]
                if grad:
                    g_blocks[j] += gout[i]
        return values, g_blocks, new_etas

    def _gradient(self, ev, eta, A, oinv, dom):
        model = self.model
        p, no = model.p, model.n_omega
        ell, ell_f, ell_ff, ell_s, ell_fs, w, w_f, w_s = ev.terms[:8]
        G, Hf, Ft, B = ev.G, ev.Hf, ev.Ft, ev.B
        Ai = np.linalg.inv(A)
        Z = G @ Ai  # rows: A^-1 g_j
        c = np.einsum("jq,jq->j", Z, G)  # g_j^T A^-1 g_j
        # d OFV / d eta at fixed x (the L part is ~0 at the EBE; kept for accuracy)
        dF_eta = ev.gL + G.T @ (w_f * c) + 2.0 * np.einsum("j,jam,ja->m", w, Hf, Z)
        v = np.linalg.solve(ev.H, dF_eta)
        g = np.zeros(model.size)
        # typical values
        part = Ft.T @ ell_f + Ft.T @ (w_f * c) + 2.0 * np.einsum("j,jap,ja->p", w, B, Z)
        cross = (G.T * ell_ff) @ Ft + np.einsum("j,jqp->qp", ell_f, B)
        g[:p] = part - v @ cross
        # omega
        for k, d in enumerate(dom):
            doi = -oinv @ d @ oinv
            part = eta @ doi @ eta + np.trace(oinv @ d) + np.sum(Ai * doi)
            g[p + k] = part - v @ (2.0 * doi @ eta)
        # residual error
        part = ell_s.sum(axis=0) + w_s.T @ c
        cross = G.T @ ell_fs
        g[p + no :] = part - v @ cross
        return g

    def _gradient_laplace(self, ev, eta, oinv, dom):
        """As :meth:`_gradient` with ``A = H / 2`` exact: ``d log det H`` needs the third
        derivatives of the predictions (``ev.Tf``, ``ev.Tt``) and of ``l``."""
        model = self.model
        p, no = model.p, model.n_omega
        ell, ell_f, ell_ff, ell_s, ell_fs, _, _, _, ell_fff, ell_ffs = ev.terms
        G, Hf, Ft, B, Tf, Tt = ev.G, ev.Hf, ev.Ft, ev.B, ev.Tf, ev.Tt
        H = ev.H
        Hi = np.linalg.inv(H)
        Z = G @ Hi
        c = np.einsum("jq,jq->j", Z, G)  # g_j^T H^-1 g_j
        trHf = np.einsum("qr,jrq->j", Hi, Hf)  # tr(H^-1 Hf_j)
        # d log det H / d eta_m at fixed x: tr(H^-1 dH/deta_m)
        dF_eta = (
            ev.gL
            + G.T @ (ell_fff * c + ell_ff * trHf)
            + 2.0 * np.einsum("j,jam,ja->m", ell_ff, Hf, Z)
            + np.einsum("j,ab,jabm->m", ell_f, Hi, Tf)
        )
        v = np.linalg.solve(H, dF_eta)
        g = np.zeros(model.size)
        part = (
            Ft.T @ ell_f
            + Ft.T @ (ell_fff * c + ell_ff * trHf)
            + 2.0 * np.einsum("j,jap,ja->p", ell_ff, B, Z)
            + np.einsum("j,ab,jabp->p", ell_f, Hi, Tt)
        )
        cross = (G.T * ell_ff) @ Ft + np.einsum("j,jqp->qp", ell_f, B)
        g[:p] = part - v @ cross
        for k, d in enumerate(dom):
            doi = -oinv @ d @ oinv
            part = eta @ doi @ eta + np.trace(oinv @ d) + 2.0 * np.sum(Hi * doi)
            g[p + k] = part - v @ (2.0 * doi @ eta)
        part = ell_s.sum(axis=0) + ell_ffs.T @ c + ell_fs.T @ trHf
        g[p + no :] = part - v @ (G.T @ ell_fs)
        return g


def _chunk_task(chunk, x, etas, grad, per_subject):
    """One call on a worker: :meth:`PopulationObjective._part` of the chunk's objective."""
    return chunk.objective()._part(x, etas, grad, per_subject)
