"""One subject's part of the population objective: predictions with their derivatives along
the random effects and typical values, the inner objective ``L_i(eta)`` with its gradient and
Hessians, and the empirical Bayes estimate (Newton's method on ``L_i``).

:class:`SubjectTerms` holds these as methods of :class:`~._objective.PopulationObjective`
(which inherits them); they read the objective's model, per-subject regimens, covariates,
censoring plans and tolerances. :func:`numerical_failure` draws the line between a rejected
trial point and an error in code.
"""

from __future__ import annotations

import numpy as np

from ..ode._solution import ODESolveError
from ._predict import PKSolveError, predict_subject


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
        return e.numerical
    return isinstance(e, (InnerFailure, PKSolveError, np.linalg.LinAlgError, ArithmeticError))


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


class SubjectTerms:
    """The per-subject methods of :class:`~._objective.PopulationObjective` (a mixin: it
    uses the objective's ``model``, ``data``, ``regimens``, ``cov``, ``pieces``, ``plans``,
    ``endpoint``, ``_err``, ``rtol``, ``atol``, ``inner_tol`` and ``inner_maxiter``)."""

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
        obs = sens.observe(y, phi, self.endpoint[i])
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
        return sens.observe_directions(y, pars[obs_piece], self.endpoint[i])

    def _log_transform(self, i, g, G, Ft, Hf, B, Tf, Tt, third):
        """The rows of endpoints with an exponential error model on the log scale."""
        log = self._err.log_rows(self.endpoint[i], g.size)
        if not np.any(log):
            return g, G, Ft, Hf, B, Tf, Tt
        s = self.regimens[i].subject
        if np.all(log):
            return _to_log(s.id, s.times, g, G, Ft, Hf, B, Tf, Tt, third)
        out = [
            None if a is None else np.array(a, dtype=np.float64) for a in (g, G, Ft, Hf, B, Tf, Tt)
        ]
        part = [None if a is None else a[log] for a in out]
        for a, b in zip(out, _to_log(s.id, s.times[log], *part, third)):
            if a is not None:
                a[log] = b
        return tuple(out)

    def _evaluate(self, i, theta, eta, oinv, log_sd, third=False):
        ev = _Eval()
        s = self.data.subjects[i]
        f, G, Ft, Hf, B, Tf, Tt = self._predict(i, theta, eta, third)
        ep = self.endpoint[i]
        log = self._err.log_rows(ep, s.n_obs)
        yv = np.log(s.dv) if np.all(log) else np.where(log, np.log(np.where(log, s.dv, 1.0)), s.dv)
        terms = self._err.terms(self.plans[i], ep, yv, f, log_sd)
        ell, ell_f, ell_ff = terms[0], terms[1], terms[2]
        w = terms[5]
        ev.L = float(np.sum(ell) + eta @ oinv @ eta)
        ev.gL = G.T @ ell_f + 2.0 * oinv @ eta
        ev.H = (G.T * ell_ff) @ G + np.einsum("j,jqr->qr", ell_f, Hf) + 2.0 * oinv
        ev.GN = 2.0 * ((G.T * w) @ G + oinv)
        ev.f, ev.G, ev.Hf, ev.Ft, ev.B, ev.terms = f, G, Hf, Ft, B, terms
        ev.Tf, ev.Tt = Tf, Tt
        return ev

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
                    f"(gradient {np.max(np.abs(ev.gL)):.3g}){self._rules_hint()}"
                )
            eta, ev = cand, new
        raise InnerFailure(
            f"subject ID {sid}: the EBE did not converge in "
            f"{self.inner_maxiter} iterations (gradient {np.max(np.abs(ev.gL)):.3g})"
            f"{self._rules_hint()}"
        )

    def _rules_hint(self) -> str:
        if not self.model.rules:
            return ""
        return (
            "; with dosing rules the predictions jump where a rule's dose time crosses an "
            "observation time, and an EBE at such a jump cannot converge"
        )


def _to_log(sid, times, g, G, Ft, Hf, B, Tf, Tt, third):
    """Predictions ``log f`` and their derivatives from those of ``f`` (every row)."""
    if np.any(g <= 0):
        j = int(np.argmin(g))
        raise PKSolveError(
            f"subject ID {sid}: prediction {g[j]:g} at time {times[j]:g} is not positive "
            "(exponential error)"
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
