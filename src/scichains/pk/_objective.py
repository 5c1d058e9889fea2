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

from ..parallel import _executor as ex
from ._censoring import CensoringPlan
from ._endpoints import ErrorTerms, blq_by_endpoint, endpoint_rows
from ._inner import InnerFailure, SubjectTerms
from ._outer_gradient import focei_gradient, laplace_gradient
from ._predict import Regimen, predict_subject
from ._remote import chunks_for


def drop_censored(data, model=None, kinds=None):
    """``data`` without its censored observations (M1); with ``model`` and ``kinds`` (the
    likelihood of each endpoint's, :func:`blq_by_endpoint`), only those of the endpoints
    whose kind is ``"m1"``."""
    from ._records import EventData, Subject

    if data.n_censored == 0:
        return data
    out = []
    for s in data.subjects:
        if s.n_censored == 0:
            out.append(s)
            continue
        keep = s.cens == 0
        if kinds is not None:
            ep = endpoint_rows(model, s)
            m1 = np.array([k == "m1" for k in kinds])
            keep |= ~(m1[0] if ep is None else m1[ep])
        limit = None if s.limit is None else s.limit[keep]
        dvid = None if s.dvid is None else s.dvid[keep]
        out.append(
            Subject(
                s.id, s.doses, s.times[keep], s.dv[keep], s.rows[keep], s.covariates,
                s.covariate_changes, s.covariate_history, s.cens[keep], limit, dvid, s.resets,
            )
        )  # fmt: skip
    return EventData(out, data.covariates)


class PopulationObjective(SubjectTerms):
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
        with a density (``-2 log L = OFV + n_density log 2 pi``). Several endpoints: one
        kind for all, or a dict ``{dvid: kind}`` (endpoints not named: ``"m3"``)

    Several endpoints (``PKModel(observe={dvid: ...}, error={dvid: ...})``): each observation
    is predicted by its ``DVID``'s expression and enters with its endpoint's error model;
    ``endpoint``: per subject, each observation's endpoint (its index in ``model.dvids``), or
    None for a model with one. ``ValueError`` for data with a ``DVID`` column and a model
    with one ``observe`` expression, a ``DVID`` the model does not have (naming it and the
    subject), and a model with several endpoints and data without ``DVID``.

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
        kinds = blq_by_endpoint(model, blq)
        self.blq = dict(blq) if isinstance(blq, dict) else blq
        if "m1" in kinds:
            data = drop_censored(data, model, kinds)
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
        self._err = ErrorTerms(model.errors)
        self.cov = []
        self.endpoint = []  # per subject: None (one endpoint) or each observation's endpoint
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
            if model.occasions:
                check_occasions(s, model)
            changing = [c for c in names if c in s.covariate_changes]
            piece = None
            if changing:
                if model.timed_states:
                    raise ValueError(
                        f"subject ID {s.id}: covariate(s) {changing} change within the subject, "
                        "and modelled inputs (RATE=-1/-2) with time-varying covariates are not "
                        "supported"
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
            if s.resets and any(d.modelled for d in s.doses):
                raise ValueError(
                    f"subject ID {s.id}: reset events (EVID 3/4) with modelled inputs "
                    "(RATE=-1/-2) are not supported"
                )
            if s.resets and model.lag is not None:
                raise ValueError(
                    f"subject ID {s.id}: reset events (EVID 3/4) with lag times are not "
                    "supported (whether a lagged dose arrives before a reset would depend on "
                    "the parameters)"
                )
            for d in s.doses:
                what = {-1: ("rate", model.rate), -2: ("duration", model.duration)}
                if d.modelled and (
                    what[d.modelled][1] is None or what[d.modelled][1][d.state] == 0
                ):
                    kind = what[d.modelled][0]
                    raise ValueError(
                        f"subject ID {s.id}, row {d.row}: RATE={d.modelled} (a modelled {kind}) "
                        f"into compartment {d.state + 1}, for which the model gives no {kind} "
                        f"(PKModel({kind}={{state: expression}}))"
                    )
                if d.ss_interval > 0 and d.modelled:
                    raise ValueError(
                        f"subject ID {s.id}, row {d.row}: a steady-state dose with a modelled "
                        f"input (RATE={d.modelled}) is not supported"
                    )
                if d.ss_interval > 0 and model.rules:
                    raise ValueError(
                        f"subject ID {s.id}, row {d.row}: a steady-state dose (SS>0) with the "
                        "model's dosing rules is not supported"
                    )
                if d.ss_interval > 0 and model.t is not None:
                    raise ValueError(
                        f"subject ID {s.id}, row {d.row}: a steady-state dose (SS=1) with a "
                        "time-dependent ODE is not supported"
                    )
                if d.ss_add and not model.linear_in_states:
                    raise ValueError(
                        f"subject ID {s.id}, row {d.row}: a steady-state dose added to the "
                        "state (SS=2) needs a model linear in the states (dx/dt = A x, no "
                        "zero-order or nonlinear terms: superposition); use SS=1"
                    )
            ep = endpoint_rows(model, s)
            log = self._err.log_rows(ep, s.n_obs)
            if np.any(log & (s.dv <= 0)):
                j = int(np.flatnonzero(log & (s.dv <= 0))[0])
                raise ValueError(
                    f"subject ID {s.id}, row {s.rows[j]}: the exponential error model needs "
                    f"positive observations, got DV {s.dv[j]:g}"
                )
            self.cov.append(np.array(vals, dtype=np.float64))
            self.endpoint.append(ep)
            m4 = np.array([k == "m4" for k in kinds])
            m4 = m4[0] if ep is None else m4[ep]
            plan = CensoringPlan(s.dv, s.cens, s.limit, m4, log)
            self.plans.append(plan if plan.any else None)
        self.regimens = [
            Regimen(
                s, model.n, model.lagged_states, () if pc is None else pc[0], model.timed_states
            )
            for s, pc in zip(data.subjects, self.pieces)
        ]
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
                out.append(sens.observe(y, phi, self.endpoint[i])[0].copy())
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
                out.append(dsens.observe_directions(y, pars[rows], self.endpoint[i])[0].copy())
                continue
            phis = np.array([self.model.individual(theta, etas[i], c)[0] for c in covs])
            y = predict_subject(sens, self.regimens[i], phis, self.rtol, self.atol)
            out.append(sens.observe(y, phis[rows], self.endpoint[i])[0].copy())
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
                gout[i] = laplace_gradient(model, ev3, eta, oinv, dom)
            elif grad:
                gout[i] = focei_gradient(model, ev, eta, A, oinv, dom)
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


def _chunk_task(chunk, x, etas, grad, per_subject):
    """One call on a worker: :meth:`PopulationObjective._part` of the chunk's objective."""
    return chunk.objective()._part(x, etas, grad, per_subject)


def check_occasions(subject, model) -> None:
    """``ValueError`` naming the subject and row of an ``OCC`` that is not a whole number from
    1 to the model's ``occasions``."""
    name = str(model.occasion_symbol).upper()
    values = [("its first record", subject.covariates[name])]
    values += [(f"row {row}", v[name]) for _, row, v in subject.covariate_history]
    for where, v in values:
        if not (np.isfinite(v) and v == int(v) and 1 <= v <= model.occasions):
            raise ValueError(
                f"subject ID {subject.id}, {where}: OCC {v:g} is not an occasion of the "
                f"model (whole numbers 1 to {model.occasions})"
            )
