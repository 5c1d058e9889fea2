"""The base classes of the sensitivity methods (:mod:`scichains.adjoint._methods`): what a
method answers, a method whose forward pass is one stored solve plan, the explicit
Runge-Kutta one, and an adjoint swept backward over the stored steps (in pieces between
events)."""

from __future__ import annotations

import numpy as np

from ..ode._family import family_of
from ..ode._plan import check_run, plan_solve, run_plan
from ..ode._solution import raise_sweep_failure
from ._events import EventGradients, cut_off


class SensitivityMethod:
    """Base of the per-method objects (see the module's docstring)."""

    saveat: np.ndarray
    _dl_du: np.ndarray
    takes_mass_matrix = False
    """Differentiates ``M du/dt = f`` (a problem with a mass matrix)."""

    def forward(self, p: np.ndarray, u0: np.ndarray) -> np.ndarray:
        """Solve at ``(p, u0)``; the states at the save times, shape ``(len(saveat), n)``
        (a view of a buffer the next call overwrites)."""
        raise NotImplementedError

    def value_and_grad(self, loss, p: np.ndarray, u0: np.ndarray):
        """``(L, dL/dp, dL/du0)`` of ``loss`` on the solution at ``(p, u0)``."""
        raise NotImplementedError

    def value(self, loss, p: np.ndarray, u0: np.ndarray) -> float:
        return loss.value_and_grad(self.saveat, self.forward(p, u0), self._dl_du)

    def stats(self) -> dict:
        """Counters of the last call (forward steps; adjoint steps where it has its own)."""
        return {}


class _Planned(SensitivityMethod):
    """A method whose forward pass is one compiled solve plan (``self.plan``) that stores its
    steps and reads the saved states from them."""

    plan: object

    def forward(self, p, u0):
        plan = self.plan
        check_run(plan, run_plan(plan, u0, p), p)
        if not plan.locate_saves():
            if plan.events is not None and any(e.terminal for e in plan.events.events):
                cut_off(float(plan.ts[int(plan.stats[0]) - 1]))
            raise RuntimeError("a save time is not among the stored steps")
        return plan.save_u


class _RK(_Planned):
    """A method on the compiled explicit Runge-Kutta stepper: the solve plan and the loss
    gradient buffer."""

    interpolate = False  # the discrete adjoint reads saves from the continuous extension

    def __init__(
        self, prob, loss, saveat, solver, sensealg, rtol, atol, max_steps, tstops, jumps, dtmin
    ):
        if family_of(solver) != "explicit":
            raise TypeError(f"{type(self).__name__} needs an explicit RK solver, got {solver!r}")
        if not solver.adaptive:
            raise TypeError(
                f"the adjoints differentiate adaptive solves: {solver.name} takes fixed steps "
                "(no error estimate); use an adaptive one (Tsit5, DP5, BS3, Vern7, or a stiff "
                "solver: Rodas5P, KenCarp4, CVODE_BDF)"
            )
        self.prob = prob
        self.sensealg = sensealg
        # the continuous adjoints restart at each save time, which must be a step
        self.plan = plan_solve(
            prob,
            solver,
            saveat,
            rtol,
            atol,
            None,
            max_steps,
            tstops,
            jumps,
            dtmin,
            None,
            interpolate=self.interpolate,
        )
        self.saveat = self.plan.save
        m, n = self.saveat.size, prob.u0.size
        loss.check(m, n)
        self._dl_du = np.zeros((m, n))

    def stats(self) -> dict:
        s = self.plan.stats
        return {"steps": int(s[2]), "rejected": int(s[3]), "f_calls": int(s[1])}


class _SweptAdjoint(EventGradients):
    """An adjoint integrated backward over the stored forward steps by ``_sweep(p, lo, hi,
    save_pos, dl_du, pbar, ubar) -> code`` (entries ``lo..hi``, save positions relative to
    ``lo``): the whole solve in one sweep, or with events in pieces between them
    (:meth:`EventGradients.event_sweep`)."""

    _failure = "adjoint solve: "  # how a failed sweep's message starts

    def sweep_all(self, value, p, dp, du0):
        """The sweep after the forward solve (``value``: the loss on its saves): writes
        dL/dp and dL/du0; returns ``value`` plus any event-time loss."""
        plan = self.plan
        self.adjoint_stats[:] = 0
        if plan.events is not None:

            def piece(lo, hi, spos, sin, sw, sdl, pbar, ubar):
                return self._sweep(p, lo, hi, spos, sdl, pbar, ubar)

            return self.event_sweep(value, p, dp, du0, piece)
        code = self._sweep(p, 0, int(plan.stats[0]) - 1, plan.save_pos, self._dl_du, dp, du0)
        raise_sweep_failure(code, self.prob, p, self._fail, self._failure)
        return value

    def value_and_grad(self, loss, p, u0):
        saved = self.forward(p, u0)
        value = loss.value_and_grad(self.saveat, saved, self._dl_du)
        dp = np.empty(p.size)
        du0 = np.empty(u0.size)
        return self.sweep_all(value, p, dp, du0), dp, du0
