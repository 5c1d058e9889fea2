"""The sensitivity methods behind :class:`~scichains.adjoint.Objective`, one class each.

Each owns the buffers of its forward solve and of its sweep, and answers three calls:
``forward(p, u0)`` (the states at the save times, a view of its buffer), ``value_and_grad(loss,
p, u0)`` (``(L, dL/dp, dL/du0)``, new arrays) and ``stats()`` (what the last call did). The
objective validates the arguments and picks the class once (:func:`make_method`); nothing
downstream asks which method it is. The base classes are in ``_method_base.py``, the forward
sensitivities' method in ``_forward.py``.
"""

from __future__ import annotations

import numpy as np

from ..ode._dae import consistent_state, start_vjp
from ..ode._events import EventPlan
from ..ode._family import FAMILIES, family_of
from ..ode._plan import plan_solve, stop_tables
from ..ode._problem import ODEProblem
from ..ode._solution import FailedSolve, raise_failure, raise_sweep_failure
from ..ode._steppers import rosenbrock_tableau
from ..ode.cvode._sundials import CVODEEvents, solve_cvode
from ..ode.stiff._rosenbrock import Rodas5P
from ._checkpoint import Checkpoints
from ._continuous import adjoint_over_plan
from ._cvode import cvode_adjoint, event_cuts, event_records
from ._discrete import discrete_adjoint, find_save_positions
from ._events import EventGradients, cut_off, event_jump, records_time_loss, rows
from ._forward import ForwardMethod
from ._method_base import _RK, SensitivityMethod, _Planned, _SweptAdjoint
from ._sensealg import (
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    SensitivityAlgorithm,
    _Continuous,
)
from ._stiff import rosenbrock_adjoint
from ._stiff_discrete import rosenbrock_discrete_adjoint


class DiscreteMethod(EventGradients, _RK):
    """:class:`DiscreteAdjoint`: the forward solve keeps every step's stages (and, for a
    network right-hand side, each stage's activations); the compiled sweep runs the
    method's steps backward (the exact gradient of the discretised solution)."""

    interpolate = True

    def __init__(self, prob, loss, saveat, solver, *args):
        super().__init__(prob, loss, saveat, solver, *args)
        n = prob.u0.size
        self.plan.keep_stages()
        self._pb = np.zeros(prob.p.size)
        self._fail = np.zeros(1 + 2 * n)  # where a vjp failed: [t, v, u]
        self._ws = np.zeros((2 * solver.stages + 3, n))
        # du/dt = chain(u): keep each stage's activations, so the sweep only runs backward
        self.stored = bool(getattr(prob, "network_rhs", False))
        if self.stored:  # room for 256 steps, or fewer for large work buffers (<= ~16 MB)
            per_step = solver.stages * prob.kernel.work.size
            self._grow_activation_store(max(16, min(256, 2_000_000 // per_step)))

    def _grow_activation_store(self, steps):
        plan = self.plan
        plan.set_activation_store(
            np.empty((int(steps), plan.solver.stages, self.prob.kernel.work.size))
        )

    def value_and_grad(self, loss, p, u0):
        plan = self.plan
        saved = self.forward(p, u0)
        m = int(plan.stats[0])
        if self.stored and m > plan.astore.shape[0]:
            # more steps than the activation store holds: grow it and solve again
            self._grow_activation_store(2 * m)
            saved = self.forward(p, u0)
        value = loss.value_and_grad(self.saveat, saved, self._dl_du)
        dp = np.empty(p.size)
        du0 = np.empty(u0.size)
        if plan.events is not None:

            def piece(lo, hi, spos, sin, sw, sdl, pbar, ubar):
                saves = (spos, sin, sw, sdl)
                return discrete_adjoint(*self._piece_args(p, lo, hi, saves, pbar, ubar))

            return self.event_sweep(value, p, dp, du0, piece), dp, du0
        args = self.discrete_args(p, dp, du0)
        raise_sweep_failure(discrete_adjoint(*args), self.prob, p, self._fail, "adjoint sweep: ")
        return value, dp, du0

    def discrete_args(self, p, dp, du0, astore=None):
        """The arguments of :func:`~scichains.adjoint.discrete_adjoint` for the last forward
        solve, writing into ``dp``/``du0``; ``astore`` replaces the stored activations (an
        empty store makes the sweep call the vjp)."""
        plan = self.plan
        saves = (plan.save_pos, plan.save_inner, plan.save_w, self._dl_du)
        return self._piece_args(p, 0, int(plan.stats[0]) - 1, saves, dp, du0, astore)

    def _piece_args(self, p, lo, hi, saves, pbar, ubar, astore=None):
        """The arguments of :func:`~scichains.adjoint.discrete_adjoint` over the stored
        entries ``lo..hi`` (``saves``: ``(save_pos, save_inner, save_w, dl_du)`` relative to
        ``lo``), writing into ``pbar``/``ubar``."""
        plan = self.plan
        return (
            self.prob.vjp_address,
            self.prob.kernel,
            p,
            plan.A,
            plan.b,
            plan.c,
            plan.ts[lo : hi + 1],
            plan.us[lo : hi + 1],
            plan.kstore[lo : hi + 1],
            rows(plan.astore if astore is None else astore, lo, hi),
            hi - lo + 1,
            *saves,
            pbar,
            ubar,
            self._ws,
            self._pb,
            self._fail,
        )


class ContinuousMethod(_SweptAdjoint, _RK):
    """:class:`InterpolatingAdjoint`, :class:`QuadratureAdjoint`, :class:`BacksolveAdjoint`:
    the adjoint ODE integrated backward by the same explicit method (compiled), with its own
    error control. With events, backward in pieces between them, each event's jump applied
    between the pieces (``adjoint/_events.py``: the same jump as the discrete adjoint's)."""

    def __init__(self, prob, loss, saveat, solver, sensealg, rtol, atol, *args):
        super().__init__(prob, loss, saveat, solver, sensealg, rtol, atol, *args)
        big = 2 * prob.u0.size + prob.p.size
        self._ws = np.zeros((5, big))
        self._K = np.zeros((solver.stages, big))
        self.adjoint_stats = np.zeros(3, dtype=np.int64)
        self._artol = self.plan.rtol if sensealg.rtol is None else float(sensealg.rtol)
        self._aatol = self.plan.atol if sensealg.atol is None else float(sensealg.atol)
        self._fail = np.zeros(1 + 2 * prob.u0.size)  # (adjoint_over_plan raises its own)

    def _sweep(self, p, lo, hi, save_pos, dl_du, pbar, ubar):
        """The adjoint over the stored entries ``lo..hi`` (save positions relative to lo);
        a failure raises here (``adjoint_over_plan``), so it returns SUCCESS."""
        adjoint_over_plan(
            self.sensealg.mode,
            self.plan,
            self.prob.vjp_address,
            p,
            self._artol,
            self._aatol,
            hi - lo + 1,
            save_pos,
            dl_du,
            pbar,
            ubar,
            self._ws,
            self._K,
            self.adjoint_stats,
            False,
            lo,
        )
        return 0

    def stats(self) -> dict:
        a = self.adjoint_stats
        return super().stats() | {
            "adjoint_steps": int(a[0]),
            "adjoint_rejected": int(a[1]),
            "vjp_calls": int(a[2]),
        }


class CheckpointedMethod(ContinuousMethod):
    """A continuous adjoint with ``checkpointing=True``: the forward pass keeps only the
    states at the save points and doses; the backward pass re-solves each segment."""

    def __init__(
        self, prob, loss, saveat, solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin
    ):
        super().__init__(
            prob, loss, saveat, solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin
        )
        self._cp = Checkpoints(prob, self.plan, tstops, jumps)

    def forward(self, p, u0):
        self._cp.forward(self.plan, u0, p)
        return self.plan.save_u

    def value_and_grad(self, loss, p, u0):
        saved = self.forward(p, u0)
        value = loss.value_and_grad(self.saveat, saved, self._dl_du)
        dp = np.empty(p.size)
        du0 = np.empty(u0.size)
        self._cp.backward(
            self.plan,
            self.sensealg.mode,
            self.prob.vjp_address,
            p,
            self._dl_du,
            self._artol,
            self._aatol,
            self._ws,
            self._K,
            self.adjoint_stats,
            dp,
            du0,
        )
        return value, dp, du0


class RosenbrockMethod(_SweptAdjoint, _Planned):
    """A compiled stiff solver forward, every step stored, and its
    :class:`InterpolatingAdjoint` integrated backward by a Rosenbrock method, compiled
    (:func:`~scichains.adjoint._stiff.rosenbrock_adjoint`): the same method for Rodas5P and
    Rosenbrock23; Rodas5P for the ESDIRK methods (Kvaerno5): the adjoint system is linear in
    the adjoint state, which a Rosenbrock method solves without Newton iterations."""

    def __init__(
        self, prob, loss, saveat, solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin
    ):
        # a Rosenbrock method runs its own adjoint backward; the implicit Runge-Kutta
        # families (ESDIRK, Radau) that of Rodas5P
        esdirk = family_of(solver) != "rosenbrock"
        if not isinstance(sensealg, InterpolatingAdjoint) or sensealg.checkpointing:
            backward = "Rodas5P" if esdirk else solver.name
            raise TypeError(
                f"with {solver.name} the gradient comes from InterpolatingAdjoint() (the adjoint "
                f"integrated backward by {backward}, without checkpoints), not {sensealg!r}"
                if esdirk
                else f"with {solver.name} the gradient comes from DiscreteAdjoint() (through its "
                f"steps) or InterpolatingAdjoint() (the adjoint integrated backward by "
                f"{solver.name}, without checkpoints), not {sensealg!r}"
            )
        self.prob = prob
        self.sensealg = sensealg
        # the adjoint restarts at each save time, which must be a step: land on them
        self.plan = plan_solve(
            prob, solver, saveat, rtol, atol, None, max_steps, tstops, jumps, dtmin, None
        )
        self.saveat = self.plan.save
        self._adjoint_tableau = (
            rosenbrock_tableau(Rodas5P, self.plan.ctrl) if esdirk else self.plan.tableau
        )
        m, n = self.saveat.size, prob.u0.size
        loss.check(m, n)
        self._dl_du = np.zeros((m, n))
        self._fail = np.zeros(1 + 2 * n)
        self.adjoint_stats = np.zeros(3, dtype=np.int64)
        self._artol = self.plan.rtol if sensealg.rtol is None else float(sensealg.rtol)
        self._aatol = self.plan.atol if sensealg.atol is None else float(sensealg.atol)

    def _sweep(self, p, lo, hi, save_pos, dl_du, pbar, ubar):
        """The adjoint over the stored entries ``lo..hi`` (``save_pos`` relative to ``lo``);
        returns its code."""
        plan = self.plan
        return rosenbrock_adjoint(
            self.prob.vjp_address,
            self.prob.kernel,
            p,
            self._adjoint_tableau,
            self._artol,
            self._aatol,
            plan.max_steps,
            plan.ts[lo:],
            plan.us[lo:],
            plan.fs[lo:],
            hi - lo + 1,
            save_pos,
            dl_du,
            pbar,
            ubar,
            self.adjoint_stats,
            self._fail,
        )

    def stats(self) -> dict:
        s, a = self.plan.stats, self.adjoint_stats
        return {
            "steps": int(s[2]),
            "rejected": int(s[3]),
            "f_calls": int(s[1]),
            "jacobians": int(self.plan.carry[3]),
            "adjoint_steps": int(a[0]),
            "adjoint_rejected": int(a[1]),
            "vjp_calls": int(a[2]),
        }


JACOBIANS_KEPT_UP_TO = 16
"""The Rosenbrock discrete adjoint keeps each forward step's Jacobian (``(n + 1) n`` numbers a
step) up to this many states, and recomputes it (``n`` vjp calls a step) above."""


class RosenbrockDiscreteMethod(_SweptAdjoint, _Planned):
    """:class:`DiscreteAdjoint` with a Rosenbrock solver (Rodas5P, Rosenbrock23): the forward
    solve lands on the save times and keeps every step's stages (and, up to
    :data:`JACOBIANS_KEPT_UP_TO` states, its Jacobian); the compiled sweep
    (:func:`~scichains.adjoint._stiff_discrete.rosenbrock_discrete_adjoint`) runs its accepted
    steps backward, one per step, with transposed solves of each step's iteration matrix
    (``M / (h gamma) - J`` with a mass matrix: the gradient through a DAE solve).

    With a singular mass matrix each call first solves for the algebraic variables of
    ``u0`` at the given ``p`` (the values passed in start the Newton iteration), and the
    gradient includes how that start moves with ``p`` and with the differential part of
    ``u0`` (:func:`scichains.ode._dae.start_vjp`)."""

    _failure = "adjoint sweep: "

    takes_mass_matrix = True

    def _start(self, p, u0):
        part = self.prob.algebraic
        if part is None:
            return u0
        return consistent_state(self.prob, part, u0, p, self.prob.tspan[0])

    def forward(self, p, u0):
        return _Planned.forward(self, p, self._start(p, u0))

    def __init__(
        self, prob, loss, saveat, solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin
    ):
        if solver.jacobian != "exact":
            raise TypeError(
                f"DiscreteAdjoint differentiates the steps of {solver.name} with the exact "
                f"Jacobian; {solver!r} uses {solver.jacobian}s: use {solver.name}() or "
                "InterpolatingAdjoint()"
            )
        self.prob = prob
        self.sensealg = sensealg
        self.plan = plan_solve(
            prob, solver, saveat, rtol, atol, None, max_steps, tstops, jumps, dtmin, None
        )
        self.plan.keep_stages()
        n = prob.u0.size
        if n <= JACOBIANS_KEPT_UP_TO:
            self.plan.keep_jacobians()
        self.saveat = self.plan.save
        m = self.saveat.size
        loss.check(m, n)
        self._dl_du = np.zeros((m, n))
        self._fail = np.zeros(1 + 2 * n)
        self.adjoint_stats = np.zeros(2, dtype=np.int64)

    def value_and_grad(self, loss, p, u0):
        u0 = self._start(p, u0)
        saved = _Planned.forward(self, p, u0)
        value = loss.value_and_grad(self.saveat, saved, self._dl_du)
        dp = np.empty(p.size)
        du0 = np.empty(u0.size)
        value = self.sweep_all(value, p, dp, du0)
        part = self.prob.algebraic  # (None with events: they refuse a mass matrix)
        if part is not None:
            dp, du0 = start_vjp(self.prob, part, u0, p, self.prob.tspan[0], dp, du0)
        return value, dp, du0

    def _sweep(self, p, lo, hi, save_pos, dl_du, pbar, ubar):
        """:func:`~scichains.adjoint._stiff_discrete.rosenbrock_discrete_adjoint` over the
        stored entries ``lo..hi`` (``save_pos`` relative to ``lo``); returns its code."""
        plan = self.plan
        return rosenbrock_discrete_adjoint(
            self.prob.f_address,
            self.prob.vjp_address,
            self.prob.kernel,
            p,
            plan.tableau,
            plan.ts[lo : hi + 1],
            plan.us[lo : hi + 1],
            plan.fs[lo : hi + 1],
            plan.kstore[lo : hi + 1],
            rows(plan.astore, lo, hi),
            hi - lo + 1,
            save_pos,
            dl_du,
            pbar,
            ubar,
            self.adjoint_stats,
            self._fail,
            plan.mass,
        )

    def stats(self) -> dict:
        s, a = self.plan.stats, self.adjoint_stats
        return {
            "steps": int(s[2]),
            "rejected": int(s[3]),
            "f_calls": int(s[1]),
            "jacobians": int(self.plan.carry[3]),
            "adjoint_steps": int(a[0]),
            "vjp_calls": int(a[1]),
        }


class CVODEMethod(EventGradients, SensitivityMethod):
    """CVODE forward (every step stored) and its :class:`InterpolatingAdjoint`, the adjoint
    integrated by CVODE too; with events (CVODE's root finding), backward in pieces between
    them with the discrete adjoint's jump at each (``adjoint/_events.py``)."""

    _events = None  # the EventPlan of use_events
    _found = None  # the CVODEEvents of the last solve

    def __init__(
        self, prob, loss, saveat, solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin
    ):
        if not isinstance(sensealg, InterpolatingAdjoint):
            raise TypeError(
                f"with {solver.name} the gradient comes from InterpolatingAdjoint (the "
                f"adjoint integrated by CVODE), not {sensealg!r}"
            )
        if not (rtol > 0 and atol >= 0):
            raise ValueError(f"tolerances must be positive, got rtol={rtol}, atol={atol}")
        self.prob = prob
        self.solver = solver
        self._tables = stop_tables(prob, saveat, tstops, jumps, cvode=True)
        self.saveat = self._tables[0]
        m, n = self.saveat.size, prob.u0.size
        loss.check(m, n)
        self._pos = np.zeros(m, dtype=np.int64)
        self._dl_du = np.zeros((m, n))
        self._cv = (float(rtol), float(atol), int(max_steps), dtmin)
        self._artol = self._cv[0] if sensealg.rtol is None else float(sensealg.rtol)
        self._aatol = self._cv[1] if sensealg.atol is None else float(sensealg.atol)
        self._steps = 0

    def use_events(self, events, max_events, event_loss=None) -> None:
        self._check_event_loss(events, event_loss)
        self._events = EventPlan(events, self.prob, max_events)
        self.event_loss = event_loss

    def _solve(self, p, u0):
        rtol, atol, max_steps, dtmin = self._cv
        found = None if self._events is None else CVODEEvents(self._events, self.prob, p)
        code, ts, us, fs, _, message, exc = solve_cvode(
            self.prob, self.solver, *self._tables, rtol, atol, None, max_steps, dtmin, u0, p,
            events=found,
        )  # fmt: skip
        if code != 0:
            raise_failure(FailedSolve(code, ts[-1], message=message, exception=exc))
        self._found = found
        if not find_save_positions(ts, ts.size, self.saveat, self._pos):
            if found is not None and any(e.terminal for e in found.events):
                cut_off(float(ts[-1]))
            raise RuntimeError("a save time is not among the stored steps")
        self._steps = ts.size
        return ts, us, fs

    def _event_time_loss(self):
        """``(value, dL/dtau per recorded event or None, times, which)``: the event-time
        loss (0 and None without one) and the records it was taken on (:func:`event_records`)."""
        times, which = event_records(self._found)
        if self.event_loss is None:
            return 0.0, None, times, which
        value, dl_dtau = records_time_loss(times, which, self.event_loss)
        return value, dl_dtau, times, which

    def forward(self, p, u0):
        return self._solve(p, u0)[1][self._pos]

    def value(self, loss, p, u0):
        value = loss.value_and_grad(self.saveat, self.forward(p, u0), self._dl_du)
        return value if self._found is None else value + self._event_time_loss()[0]

    def value_and_grad(self, loss, p, u0):
        ts, us, fs = self._solve(p, u0)
        value = loss.value_and_grad(self.saveat, us[self._pos], self._dl_du)
        cuts = jump = None
        if self._found is not None:
            extra, dl_dtau, times, which = self._event_time_loss()
            value += extra
            events = self._found.events
            # a terminal event ends the solve at its left limit: its affect is not applied
            has_affect = [e.affect is not None and not e.terminal for e in events]
            cuts = event_cuts(ts, times, which, has_affect, dl_dtau)

            def jump(i, L, R, lam_plus, dl_dt):
                return event_jump(events[i], i, ts[L], us[L], fs[L], fs[R], p, lam_plus, dl_dt)

        saved_p = self.prob.p
        try:
            self.prob.p = p
            dp, du0 = cvode_adjoint(
                self.prob,
                self.solver,
                ts,
                us,
                fs,
                self._pos,
                self._dl_du,
                self._artol,
                self._aatol,
                self._cv[2],
                cuts,
                jump,
            )
        finally:
            self.prob.p = saved_p
        return value, dp, du0

    def stats(self) -> dict:
        return {"stored_steps": self._steps}


def make_method(
    prob: ODEProblem, loss, saveat, solver, sensealg: SensitivityAlgorithm, *options
) -> SensitivityMethod:
    """The method object for ``solver`` x ``sensealg`` (``options``: rtol, atol, max_steps,
    tstops, jumps, dtmin)."""
    family = adjoint_family(solver)
    if not isinstance(sensealg, SensitivityAlgorithm):
        raise TypeError(f"unknown sensealg {sensealg!r}")
    table = _METHODS[family]
    kind = next((k for k in type(sensealg).__mro__ if k in table), None)
    cls = table.get(kind)
    if cls is None:
        raise TypeError(f"unknown sensealg {sensealg!r} for the {family} solver {solver.name}")
    if cls is ContinuousMethod and sensealg.checkpointing:
        cls = CheckpointedMethod
    if getattr(prob, "mass_matrix", None) is not None and not cls.takes_mass_matrix:
        raise TypeError(
            "gradients through a problem with a mass matrix (M du/dt = f) come from Rodas5P() "
            f"with DiscreteAdjoint() (through its steps), not {solver.name} with {sensealg!r}"
        )
    return cls(prob, loss, saveat, solver, sensealg, *options)


_METHODS = {
    # family -> {sensealg class (the most specific of its MRO found), or None for any: the
    # method class}; the method classes refuse the algorithms they do not implement, by name
    "cvode": {None: CVODEMethod},
    "rosenbrock": {DiscreteAdjoint: RosenbrockDiscreteMethod, None: RosenbrockMethod},
    "esdirk": {None: RosenbrockMethod},
    "radau": {None: RosenbrockMethod},
    "auto": {None: RosenbrockMethod},
    "explicit": {
        DiscreteAdjoint: DiscreteMethod,
        ForwardSensitivity: ForwardMethod,
        _Continuous: ContinuousMethod,
    },
}
"""The sensitivity method classes of each solver family (see ``ode._family``)."""


ADJOINT_FAMILIES = tuple(f for f in FAMILIES if f in _METHODS)
"""The solver families with an adjoint, in the order of ``ode._family.FAMILIES`` (all of
them today)."""


def adjoint_family(solver, what: str = "solver") -> str:
    """The family of ``solver`` (an instance) when it has an adjoint here; ``TypeError``
    naming the families that have one otherwise (a class, a non-solver, a family without
    an entry in ``_METHODS``). What the models and the discovery refits call instead of
    testing the solver's class."""
    return family_of(solver, what, accept=ADJOINT_FAMILIES)
