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
    end, the last observation. Segment ``i`` runs over ``[c_i, c_{i+1})`` and holds the
    boluses at ``c_i``, the infusion rates running at ``c_i`` and the observations in
    ``[c_i, c_{i+1})``; a final zero-length segment at ``c_k`` holds its boluses and
    observations. ``segments``: ``(a, b, boluses [(state, amount)], rates (n,), obs_idx)``.
    """

    def __init__(self, subject, n_states: int):
        self.subject = subject
        times = subject.times
        self.segments = []
        if times.size == 0:
            return
        t_end = float(times[-1])
        doses = [d for d in subject.doses if d.time <= t_end]
        cuts = {float(times[0]), t_end}
        for d in doses:
            cuts.add(d.time)
            if d.duration > 0 and d.time + d.duration < t_end:
                cuts.add(d.time + d.duration)
        cuts = sorted(cuts)
        for i, a in enumerate(cuts):
            b = cuts[i + 1] if i + 1 < len(cuts) else a
            boluses = [(d.state, d.amount) for d in doses if d.duration == 0 and d.time == a]
            rates = np.zeros(n_states)
            for d in doses:
                if d.duration > 0 and d.time <= a < d.time + d.duration:
                    rates[d.state] += d.rate
            if b > a:
                sel = np.nonzero((times >= a) & (times < b))[0]
            else:
                sel = np.nonzero(times == a)[0]
            self.segments.append((a, b, boluses, rates, sel))


def predict_subject(sens, regimen, phi, rtol, atol):
    """Saved augmented states ``(n_obs, size)`` of one subject at its observation times."""
    subject = regimen.subject
    n, size = sens.n, sens.size
    out = np.empty((subject.times.size, size))
    y = np.zeros(size)
    p = np.empty(sens.m + n)
    p[: sens.m] = phi
    for a, b, boluses, rates, sel in regimen.segments:
        for s, amount in boluses:
            sens.add_bolus(y, s, amount, phi)
        if b <= a:
            out[sel] = y
            continue
        p[sens.m :] = rates
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
