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
    rates_after)`` (the input channels of ``Sensitivities``: a rate per state, then the
    amount of the modelled-duration inputs running into each ``timed`` state),
    ``lag_state = -1`` for the doses without a lag, ``n + a`` for the ends of the
    modelled-duration inputs into state ``a`` (``-2``: a steady-state
    reset, ``(-2, [Dose], None, None)``, before the doses at that time; ``-3``: a reset event,
    ``EVID`` 3/4, ``(-3, [], None, None)``, before everything else at its time), and a last entry
    ``piece``: the index of the individual parameters in effect (``changes``: the times at
    which piece ``1, 2, ...`` starts, time-varying covariates; every change is a cut).
    """

    def __init__(self, subject, n_states: int, lagged=(), changes=(), timed=()):
        self.subject = subject
        self.n = n_states
        self.lagged = frozenset(lagged)
        self.timed = tuple(timed)
        self.changes = np.asarray(sorted(changes), dtype=np.float64)
        moving = self.lagged or any(d.modelled for d in subject.doses)
        self._fixed = None if moving else self._plan(np.zeros(n_states), np.zeros((2, n_states)))

    @property
    def segments(self):
        """The plan of a regimen without lag times or modelled durations."""
        if self._fixed is None:
            raise ValueError("the regimen has lagged or modelled doses: call plan(lags, durations)")
        return self._fixed

    def plan(self, lags=None, durations=None):
        """The segments with each state's lag time ``lags`` (``(n,)``, or ``(K, n)``: one row
        per piece of time-varying covariates, a dose taking the row in effect at its record's
        time) and modelled durations and rates ``durations`` (``(2, n)``; None: none).
        :class:`PKSolveError` when a covariate changes between a dose and its lagged
        arrival."""
        if self._fixed is not None:
            return self._fixed
        lags = np.zeros(self.n) if lags is None else np.asarray(lags, dtype=np.float64)
        if durations is None:
            durations = np.zeros((2, self.n))
        return self._plan(lags, np.asarray(durations, dtype=np.float64))

    def lag_of(self, d, lags) -> float:
        """The lag time of dose ``d``: its state's, in the piece in effect at its record."""
        lags = np.asarray(lags)
        if lags.ndim == 1:
            return float(lags[d.state])
        return float(lags[int(np.searchsorted(self.changes, d.time, side="right")), d.state])

    def _plan(self, lags, durations):
        subject, n = self.subject, self.n
        times = subject.times
        if times.size == 0:
            return []
        t_end = float(times[-1])
        # (time, group, input channel (the state for a bolus), bolus amount, channel change)
        events = []
        for tr in getattr(subject, "resets", ()):
            events.append((tr, -3, 0, 0.0, 0.0))
        for d in subject.doses:
            if d.ss_interval > 0:
                # reset to the steady state first (lag_state -2 sorts before the doses)
                events.append((d.time, -2, d.state, d, 0.0))
            ls = d.state if d.state in self.lagged else -1
            t0 = d.time + (self.lag_of(d, lags) if ls >= 0 else 0.0)
            last = t0 + d.duration  # a lagged infusion's end moves with the lag too
            if ls >= 0 and np.any((self.changes > d.time) & (self.changes <= last)):
                raise PKSolveError(
                    f"subject ID {subject.id}, row {d.row}: a covariate changes between the "
                    f"dose at {d.time:g} and its lagged arrival at {t0:g}"
                    f"{f' or the end of its infusion at {last:g}' if d.duration > 0 else ''}: "
                    "not supported"
                )
            if d.modelled:  # (the objective refuses one into a state without its input)
                c = n + self.timed.index(d.state)
                if d.modelled == -2:  # the channel holds the amount running, over D
                    length, change, amt = float(durations[0, d.state]), d.amount, 0.0
                else:  # the number of inputs running, at R each; F AMT / R is the length
                    length, change, amt = d.amount / float(durations[1, d.state]), 1.0, d.amount
                events.append((t0, ls, c, 0.0, change))
                events.append((t0 + length, n + d.state, c, amt, -change))
            elif d.duration > 0:
                events.append((t0, ls, d.state, 0.0, d.rate))
                events.append((t0 + d.duration, ls, d.state, 0.0, -d.rate))
            else:
                events.append((t0, ls, d.state, d.amount, 0.0))
        events = sorted((e for e in events if e[0] <= t_end), key=lambda e: (e[0], e[1]))
        scale = max([abs(e[4]) for e in events] + [1.0])
        cuts = {float(times[0]), t_end} | {e[0] for e in events}
        cuts |= {float(c) for c in self.changes if c <= t_end}
        cuts = sorted(cuts)
        r = np.zeros(n + len(self.timed))
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
                if ls == -2:
                    groups.append((-2, [e[3] for e in mine], None, None))
                    continue
                if ls == -3:
                    groups.append((-3, [], None, None))
                    continue
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
    if not np.all(np.isfinite(pars)):
        # e.g. exp(theta + eta) overflowing at a trial point: that point fails here, as a
        # solve would, instead of reaching the ODE problem's check of its parameters
        k, j = np.argwhere(~np.isfinite(pars))[0]
        raise PKSolveError(
            f"subject ID {subject.id}: the ODE's parameters are not finite (entry {j} is "
            f"{pars[k, j]}: an individual parameter, or its derivative, overflowed)"
        )
    p = np.empty(npar + sens.n_channels)
    lags = sens.lag_values(pars[0])
    if lags is not None and pars.shape[0] > 1:  # one row per piece
        lags = np.array([sens.lag_values(row) for row in pars])
    if lags is not None and not np.all(np.isfinite(lags)):
        raise PKSolveError(f"subject ID {subject.id}: a lag time is not finite ({lags})")
    durations = sens.duration_values(pars[0])  # (2, n): durations, rates over F
    if durations is not None:
        used = np.array([durations[0 if sens.duration[a] != 0 else 1, a] for a in sens.timed])
        if not np.all(np.isfinite(used) & (used > 0)):
            raise PKSolveError(
                f"subject ID {subject.id}: a modelled duration or rate is not finite and "
                f"positive ({durations})"
            )
    given = [0] * len(sens.rules)  # the doses each dosing rule gave
    for a, b, groups, rates, sel, piece in regimen.plan(lags, durations):
        cur = pars[piece]
        for ls, boluses, r_before, r_after in groups:
            if ls == -3:
                y = np.zeros(size)
            elif ls == -2:  # SS=1 replaces the state, SS=2 adds to it, in record order
                for d in boluses:
                    lag = 0.0 if lags is None else regimen.lag_of(d, lags)
                    ss = steady_state(sens, d, cur, rtol, atol, subject, lag=lag)
                    y = y + ss if d.ss_add else ss
            elif ls < 0:
                for s, amount in boluses:
                    sens.add_bolus(y, s, amount, cur)
            elif ls >= n:  # the ends of modelled inputs into state ls - n (RATE=-1: its AMT)
                if len(boluses) > 1:
                    raise PKSolveError(
                        f"subject ID {subject.id}: two inputs of modelled rate (RATE=-1) into "
                        f"compartment {ls - n + 1} end at the same time {a:g}: not supported"
                    )
                amount = sum(am for _, am in boluses)
                y = sens.lagged_jump(y, ls - n, amount, r_before, r_after, cur, end=True)
            else:
                amount = sum(am for _, am in boluses)
                y = sens.lagged_jump(y, ls, amount, r_before, r_after, cur)
        if not np.all(np.isfinite(y)):
            raise PKSolveError(
                f"subject ID {subject.id}: the state at time {a:g} (after its doses) is not finite"
            )
        if b <= a:
            out[sel] = y
            continue
        p[:npar] = cur
        p[npar:] = rates
        ts = subject.times[sel]
        uniq = np.unique(np.concatenate([ts, [b]]))
        if sens.rules:
            saved = _ruled_segment(sens, y, a, b, p, uniq, rtol, atol, subject, given)
        else:
            saved = _solved(sens, y, a, b, p, uniq, rtol, atol, subject).u
        if sel.size:
            out[sel] = saved[np.searchsorted(uniq, ts)]
        y = saved[-1].copy()
    return out


def _solved(sens, y, a, b, p, saveat, rtol, atol, subject, events=None):
    """The solve of the augmented system from ``y`` over ``[a, b]`` (``PKSolveError`` when it
    fails); without events, every save checked."""
    prob = sens.model.problem(y, (a, b), p)
    sol = solve(prob, saveat=saveat, rtol=rtol, atol=atol, events=events)
    if sol.status != ReturnCode.SUCCESS:
        raise PKSolveError(
            f"subject ID {subject.id}: the ODE solve on [{a:g}, {b:g}] failed with "
            f"{sol.status.name}: {sol.message}"
        )
    if not events:
        _check_saved(sol, saveat.size, subject, a, b)
    return sol


def _ruled_segment(sens, y, a, b, p, uniq, rtol, atol, subject, given):
    """The saved states at ``uniq`` of a segment with dosing rules: solve to the first
    crossing of a rule still giving doses (``given``: the doses each rule gave this subject,
    updated), apply its dose there (:meth:`Sensitivities.rule_jump`), go on."""
    npar = sens.n_params
    rows, t0, k0 = [], a, 0
    while True:
        live = [i for i, r in enumerate(sens.rules) if r[4] is None or given[i] < r[4]]
        if t0 >= b:  # a dose at the segment's end: its saves see it
            rows.append(np.repeat(y[None], uniq.size - k0, axis=0))
            break
        events = [sens.rule_events()[i] for i in live]
        sol = _solved(sens, y, t0, b, p, uniq[k0:], rtol, atol, subject, events or None)
        fired = [j for j, te in enumerate(sol.t_events or ()) if te.size]
        if not fired:
            _check_saved(sol, uniq.size - k0, subject, t0, b)
            rows.append(sol.u)
            break
        if len(fired) > 1:
            raise PKSolveError(
                f"subject ID {subject.id}: two dosing rules fire together at "
                f"{sol.t_events[fired[0]][0]:g}: not supported"
            )
        j = fired[0]
        te = float(sol.t_events[j][0])
        # the saves before the dose; one at its time (or at b) is the next solve's, after it
        k = int(np.searchsorted(sol.t, te, side="left"))
        if k:
            _check_saved(sol, sol.t.size, subject, t0, b)
            rows.append(sol.u[:k])
        k0 += k
        i = live[j]
        given[i] += 1
        y = sens.rule_jump(sol.u_events[j][0], i, sens.rules[i][3], p[npar:], p[:npar])
        t0 = te
        if not np.all(np.isfinite(y)):
            raise PKSolveError(
                f"subject ID {subject.id}: the state after the dose of rule {i} at {t0:g} is "
                "not finite (the rule's condition grazes zero there)"
            )
    return np.concatenate(rows)


def _check_saved(sol, n_saved, subject, a, b) -> None:
    """A solve reported as successful must have saved ``n_saved`` finite states: anything
    else (an empty or truncated solution, NaN or inf) is a failed solve of that subject."""
    if sol.u.shape[0] != n_saved or not np.all(np.isfinite(sol.u)):
        raise PKSolveError(
            f"subject ID {subject.id}: the ODE solve on [{a:g}, {b:g}] returned "
            f"{sol.u.shape[0]} of {n_saved} saved states"
            f"{'' if np.all(np.isfinite(sol.u)) else ', not all finite'}"
        )


def steady_state(sens, dose, par, rtol, atol, subject, maxiter=50, lag=0.0):
    """The augmented state just before a steady-state dose (``SS=1``; of that dose alone, which
    ``SS=2`` adds to the state): the fixed point
    ``y = P(y)`` of ``P``, one interval ``II`` of this dose alone (bolus, or infusion then
    washout), from which the state's derivatives follow: the fixed point of the augmented
    map is the augmented fixed point.

    Newton-like iteration ``y <- y + (I - M)^-1 (P(y) - y)`` with ``M = dx(II)/dx(0)`` (by
    central differences, ``2n`` extra solves) applied to every sensitivity column: the
    augmented map's Jacobian is block lower triangular with ``M`` on the diagonal, so for a
    linear model the iteration is exact after ``order + 1`` steps, whatever the ratio of
    half-life to interval; a nonlinear model converges linearly at the rate of the error in
    ``M``. Raises :class:`PKSolveError` (subject and row) when it does not converge.

    ``lag > 0`` (a dose into a state with a lag time, which must be shorter than ``II``):
    the doses arrive ``lag`` after their records, so the state at the record's time is the
    orbit ``II - lag`` after an arrival: the fixed point above (the state just before an
    arrival), the dose (a bolus, or an infusion that must end before ``II - lag``), ``II -
    lag`` of flow, and :meth:`Sensitivities.shifted` for the derivatives along the lag."""
    ss = _fixed_point(sens, dose, par, rtol, atol, subject, maxiter)
    if lag == 0.0:
        return ss
    ii = dose.ss_interval
    if not lag < ii:
        raise PKSolveError(
            f"subject ID {subject.id}, row {dose.row}: the lag time {lag:g} of a steady-state "
            f"dose is not shorter than its interval II {ii:g}"
        )
    if dose.duration > 0 and not dose.duration < ii - lag:
        raise PKSolveError(
            f"subject ID {subject.id}, row {dose.row}: a steady-state infusion whose lag "
            f"{lag:g} plus duration {dose.duration:g} reach its interval II {ii:g} (an "
            "infusion running at the record's time) is not supported"
        )
    y = _dose_then_flow(sens, dose, par, ss, ii - lag, rtol, atol, subject)
    return sens.shifted(y, dose.state, np.zeros(sens.n_channels), par)


def _dose_then_flow(sens, dose, par, y, T, rtol, atol, subject):
    """The augmented state ``T`` after ``dose`` given to ``y`` (a bolus, or its infusion then
    the washout; ``T`` past the infusion's end), the dose alone running: a new array."""
    p = np.zeros(par.size + sens.n_channels)
    p[: par.size] = par
    y = y.copy()
    pieces = [(0.0, T)]
    if dose.duration == 0:
        sens.add_bolus(y, dose.state, dose.amount, par)
    else:
        pieces = [(0.0, dose.duration), (dose.duration, T)]
    for a, b in pieces:
        p[par.size + dose.state] = dose.rate if (dose.duration > 0 and a == 0.0) else 0.0
        sol = solve(sens.model.problem(y, (a, b), p), saveat=np.array([b]), rtol=rtol, atol=atol)
        if sol.status != ReturnCode.SUCCESS:
            raise PKSolveError(
                f"subject ID {subject.id}, row {dose.row}: the steady-state solve on "
                f"[{a:g}, {b:g}] failed with {sol.status.name}: {sol.message}"
            )
        _check_saved(sol, 1, subject, a, b)
        y = sol.u[-1].copy()
    return y


def _fixed_point(sens, dose, par, rtol, atol, subject, maxiter):
    """The steady state just before a dose (see :func:`steady_state`)."""
    n, size = sens.n, sens.size
    ii = dose.ss_interval

    def P(y):
        return _dose_then_flow(sens, dose, par, y, ii, rtol, atol, subject)

    # the sensitivity columns of each order, as (n, columns) blocks of y
    blocks, o = [], n
    for k in range(1, sens.order + 1):
        c = len(sens._tuples[k])
        blocks.append((o, c))
        o += n * c
    y = np.zeros(size)
    Minv = None
    for _ in range(maxiter):
        py = P(y)
        r = py - y
        scale = rtol * np.abs(py) + atol
        if np.all(np.abs(r) <= 10.0 * scale):
            return py
        if Minv is None:
            M = np.empty((n, n))
            for j in range(n):
                dx = 1e-6 * max(1.0, abs(py[j]))
                e = np.zeros(size)
                e[j] = dx
                M[:, j] = (P(py + e)[:n] - P(py - e)[:n]) / (2 * dx)
            try:
                Minv = np.linalg.inv(np.eye(n) - M)
            except np.linalg.LinAlgError:
                raise PKSolveError(
                    f"subject ID {subject.id}, row {dose.row}: no steady state (the interval "
                    "map has an eigenvalue 1: nothing is eliminated)"
                ) from None
        step = np.empty(size)
        step[:n] = Minv @ r[:n]
        for start, c in blocks:
            blk = r[start : start + n * c].reshape(n, c)
            step[start : start + n * c] = (Minv @ blk).ravel()
        y = y + step
    raise PKSolveError(
        f"subject ID {subject.id}, row {dose.row}: the steady state did not converge in "
        f"{maxiter} iterations (largest change {np.max(np.abs(r)):.3g})"
    )
