"""One subject's predictions and their derivatives: the dosing regimen as ODE segments.

The regimen cuts time at every dose and every infusion end. Each segment is one solve of the
augmented (sensitivity) system with the infusion rates running in it held constant; boluses
are added to the state at the segment's start, and observations at a segment's start see
them (doses before observations at equal times).
"""

from __future__ import annotations

import numpy as np

from ..ode import solve
from ..ode._solution import ReturnCode


class PKSolveError(RuntimeError):
    """The ODE solve of a subject failed (the message names the subject and return code)."""


class Regimen:
    """The segments of one subject's regimen up to its last observation.

    Cut points ``c_0 < ... < c_k``: the first dose or observation, every dose, every infusion
    start and end, the last observation (doses into a ``lagged`` state, with their infusion
    ends, move by that state's lag time). Segment ``i`` runs over ``[c_i, c_{i+1})`` and holds
    the events at ``c_i`` in groups, the infusion rates running after them and the
    observations in ``[c_i, c_{i+1})``; a final zero-length segment at ``c_k`` holds its
    events and observations. :meth:`plan` returns ``(a, b, groups, rates (n,), obs_idx)``
    with ``groups`` a list of ``(lag_state, boluses [(state, amount)], rates_before,
    rates_after)``, ``lag_state = -1`` for the doses without a lag, and a last entry
    ``piece``: the index of the individual parameters in effect (``changes``: the times at
    which piece ``1, 2, ...`` starts, time-varying covariates; every change is a cut).
    """

    def __init__(self, subject, n_states: int, lagged=(), changes=()):
        self.subject = subject
        self.n = n_states
        self.lagged = frozenset(lagged)
        self.changes = np.asarray(sorted(changes), dtype=np.float64)
        self._fixed = None if self.lagged else self._plan(np.zeros(n_states))

    @property
    def segments(self):
        """The plan of a regimen without lag times."""
        if self._fixed is None:
            raise ValueError("the regimen has lagged doses: call plan(lags)")
        return self._fixed

    def plan(self, lags=None):
        """The segments with each state's lag time ``lags`` (``(n,)``; None: no lags)."""
        if self._fixed is not None:
            return self._fixed
        return self._plan(np.asarray(lags, dtype=np.float64))

    def _plan(self, lags):
        subject, n = self.subject, self.n
        times = subject.times
        if times.size == 0:
            return []
        t_end = float(times[-1])
        events = []  # (time, lag_state, state, bolus amount, rate change)
        for d in subject.doses:
            ls = d.state if d.state in self.lagged else -1
            t0 = d.time + (float(lags[d.state]) if ls >= 0 else 0.0)
            if d.duration > 0:
                events.append((t0, ls, d.state, 0.0, d.rate))
                events.append((t0 + d.duration, ls, d.state, 0.0, -d.rate))
            else:
                events.append((t0, ls, d.state, d.amount, 0.0))
        events = sorted((e for e in events if e[0] <= t_end), key=lambda e: (e[0], e[1]))
        scale = max([abs(e[4]) for e in events] + [1.0])
        cuts = {float(times[0]), t_end} | {e[0] for e in events}
        cuts |= {float(c) for c in self.changes if c <= t_end}
        cuts = sorted(cuts)
        r = np.zeros(n)
        segments = []
        k = 0
        for i, a in enumerate(cuts):
            b = cuts[i + 1] if i + 1 < len(cuts) else a
            here = []
            while k < len(events) and events[k][0] == a:
                here.append(events[k])
                k += 1
            groups = []
            for ls in sorted({e[1] for e in here}):
                mine = [e for e in here if e[1] == ls]
                before = r.copy()
                for e in mine:
                    r[e[2]] += e[4]
                # infusions that start and end cancel to rounding: make them exactly 0
                r[np.abs(r) <= 1e-12 * scale] = 0.0
                boluses = [(e[2], e[3]) for e in mine if e[3] > 0]
                groups.append((ls, boluses, before, r.copy()))
            if b > a:
                sel = np.nonzero((times >= a) & (times < b))[0]
            else:
                sel = np.nonzero(times == a)[0]
            piece = int(np.searchsorted(self.changes, a, side="right"))
            segments.append((a, b, groups, r.copy(), sel, piece))
        return segments


def predict_subject(sens, regimen, par, rtol, atol):
    """Saved augmented states ``(n_obs, size)`` of one subject at its observation times.

    ``par``: the system's parameters without the rates (``phi``, or in direction mode the
    vector of ``Sensitivities.direction_params``), ``(n_params,)`` or one row per piece of
    the regimen (``(K, n_params)``, time-varying covariates)."""
    subject = regimen.subject
    n, size = sens.n, sens.size
    pars = np.atleast_2d(np.asarray(par, dtype=np.float64))
    out = np.empty((subject.times.size, size))
    y = np.zeros(size)
    npar = pars.shape[1]
    p = np.empty(npar + n)
    lags = sens.lag_values(pars[0])
    if lags is not None and not np.all(np.isfinite(lags)):
        raise PKSolveError(f"subject ID {subject.id}: a lag time is not finite ({lags})")
    for a, b, groups, rates, sel, piece in regimen.plan(lags):
        cur = pars[piece]
        for ls, boluses, r_before, r_after in groups:
            if ls < 0:
                for s, amount in boluses:
                    sens.add_bolus(y, s, amount, cur)
            else:
                amount = sum(am for _, am in boluses)
                y = sens.lagged_jump(y, ls, amount, r_before, r_after, cur)
        if b <= a:
            out[sel] = y
            continue
        p[:npar] = cur
        p[npar:] = rates
        ts = subject.times[sel]
        uniq = np.unique(np.concatenate([ts, [b]]))
        prob = sens.model.problem(y, (a, b), p)
        sol = solve(prob, saveat=uniq, rtol=rtol, atol=atol)
        if sol.status != ReturnCode.SUCCESS:
            raise PKSolveError(
                f"subject ID {subject.id}: the ODE solve on [{a:g}, {b:g}] failed with "
                f"{sol.status.name}: {sol.message}"
            )
        if sel.size:
            out[sel] = sol.u[np.searchsorted(uniq, ts)]
        y = sol.u[-1].copy()
    return out
