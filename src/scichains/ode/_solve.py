"""solve(): the user-facing call: validation, the compiled stepper (through a plan) or CVODE, and
the solution."""

from __future__ import annotations

import contextlib
import copy

import numpy as np

from ._abi import NO_NETWORK
from ._auto import AutoSwitch, AutoTsit5Rodas5P
from ._events import EventPlan, check_events, event_plan
from ._plan import check_mass_solver, plan_failure, plan_solve, run_plan, stop_tables
from ._problem import ODEProblem
from ._solution import (
    ODESolveError,
    ReturnCode,
    Solution,
)
from .cvode._sundials import CVODEEvents, CVODESolver, solve_cvode
from .explicit._kernels import find_save_positions, interpolate_saves
from .explicit._tableaus import ExplicitRK
from .stiff._esdirk import ESDIRK
from .stiff._radau import RadauIIA
from .stiff._rosenbrock import Rodas5P, Rosenbrock


def solve(
    prob: ODEProblem,
    solver: ExplicitRK | Rosenbrock | ESDIRK | RadauIIA | AutoSwitch | CVODESolver | None = None,
    saveat=None,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    dt0: float | None = None,
    max_steps: int = 100_000,
    tstops=None,
    jumps=None,
    dtmin: float | None = None,
    throw: bool = False,
    adaptive: bool | None = None,
    init: str = "check",
    events=None,
    max_events: int = 10_000,
) -> Solution:
    """Solve an :class:`ODEProblem`.

    Parameters
    ----------
    prob : the problem (right-hand side, ``u0``, ``tspan``, ``p``); anything else raises
        ``TypeError``. A plain Python right-hand side runs with the CVODE solvers only
        (the others raise ``TypeError``)
    solver : None (default): AutoTsit5Rodas5P (Tsit5 while the problem is not stiff, Rodas5P while
        it is; on a problem that never turns stiff its results are Tsit5's bit for bit, and no
        Jacobian is made), or Rodas5P for a problem with a mass matrix; Tsit5, DP5, BS3, Vern7
        (adaptive), RK4, Euler (fixed step: ``dt0`` required), the compiled stiff solvers Rodas5P()
        and Rosenbrock23() (Rosenbrock methods with the exact Jacobian; ``Rodas5P(jacobian="finite
        difference")`` for forward differences), Kvaerno5() and KenCarp4() (ESDIRK methods:
        simplified Newton iterations, the Jacobian and its LU reused across steps), RadauIIA5(), or
        the SUNDIALS solvers CVODE_BDF() (large stiff problems) and CVODE_Adams()
    saveat : times at which to save, sorted in the direction of integration. Methods with a
        continuous extension of their own (Tsit5, DP5, Rodas5P: fourth order; BS3, Kvaerno5:
        cubic Hermite; Rosenbrock23: second order)
        interpolate there, as DifferentialEquations.jl and diffrax do, so the save times do
        not shorten the steps; the others (Vern7, RK4, Euler) land on each of them.
        ``None``: save every step.
    rtol, atol : tolerances of the embedded error estimate (RMS norm over components)
    dt0 : first step size (adaptive, default: Hairer's estimate) or the step (fixed)
    max_steps : limit on attempted steps (status ``MAX_STEPS`` when reached). Storage grows
        with the steps actually taken, so a huge limit costs nothing.
    tstops : extra times the stepper must land on
    jumps : ``[(t_i, state_index, amount), ...]`` added to ``u[state_index]`` exactly at
        ``t_i`` (doses); the integration restarts there. Saved values and ``sol(t_i)`` are
        the values after the jump; a jump at ``t0`` acts on ``u0``.
    dtmin : smallest allowed step (default ``1e-14 * max(1, |t1 - t0|)``)
    throw : raise :class:`ODESolveError` instead of returning a failed solution. When the
        right-hand side raised (status ``RHS_ERROR``), its exception is ``sol.exception`` and
        the ``__cause__`` of the ``ODESolveError``: the solve stops at the first one.
    adaptive : ``False`` runs an adaptive method with fixed steps ``dt0`` (default: adaptive
        when the method has an error estimate)
    init : with a singular mass matrix (``ODEProblem(..., mass_matrix=M)``, a DAE):
        ``"check"`` (default) raises ``ValueError`` unless ``u0`` satisfies the algebraic
        equations at ``t0`` to the tolerances; ``"algebraic"`` first solves them for the
        algebraic variables (the other components of ``u0`` kept: ``sol.u[0]`` shows the
        state used). Ignored without a singular mass matrix.
    events : an :class:`Event` or a list of them: state-dependent events (where a condition
        ``g(u, t, p)`` crosses zero), located on the method's own steps (CVODE: by its own
        root finding), with optional affects (changing ``u``) and terminal events; the
        solution's ``t_events`` and ``u_events`` list each event's times and states (see
        :class:`Event`).
    max_events : the most events one solve may have (default 10,000): past it the solve stops
        with status ``MAX_EVENTS``.
    """
    if init not in ("check", "algebraic"):
        raise ValueError(f"init must be 'check' or 'algebraic', got {init!r}")
    if solver is None:
        with_mass = getattr(prob, "mass_matrix", None) is not None
        solver = Rodas5P if with_mass else AutoTsit5Rodas5P
    caller = prob  # keeps the step hint (below) where the next solve will look for it
    if isinstance(prob, ODEProblem) and prob.kernel is not NO_NETWORK:
        # the network's scratch is per call, so threads may share one problem
        prob = copy.copy(prob)
        k = prob.kernel
        prob.kernel = k._replace(work=np.zeros_like(k.work), samples=k.samples.copy())
    if isinstance(prob, ODEProblem) and prob.mass_matrix is not None:
        check_mass_solver(prob, solver, jumps)
        if init == "algebraic" and prob.algebraic is not None:
            prob = copy.copy(prob)
            prob.u0 = prob.consistent_u0()
    events = check_events(events)
    if isinstance(solver, CVODESolver):
        if not isinstance(prob, ODEProblem):
            raise TypeError("solve needs an ODEProblem")
        if not (rtol > 0 and atol >= 0):
            raise ValueError(f"tolerances must be positive, got rtol={rtol}, atol={atol}")
        if int(max_steps) < 1:
            raise ValueError("max_steps must be positive")
        save, *tables = stop_tables(prob, saveat, tstops, jumps, cvode=True)
        # CVODE lands on t1, tstops and doses; the save times it interpolates (normal mode)
        hard = np.isin(tables[0], stop_tables(prob, None, tstops, jumps, cvode=True)[1])
        found = CVODEEvents(EventPlan(events, prob, max_events), prob, prob.p) if events else None
        code, st, su, sf, stats, message, exc = solve_cvode(
            prob,
            solver,
            save,
            *tables,
            rtol,
            atol,
            dt0,
            int(max_steps),
            dtmin,
            hard=hard,
            events=found,
        )
        sol = _solution(prob, save, code, st, su, sf, stats, message, False, exception=exc)
        if found is not None:
            sol.t_events, sol.u_events = found.results()
        if throw and not sol.success:
            raise ODESolveError(sol) from exc
        return sol
    plan = plan_solve(
        prob,
        solver,
        saveat,
        rtol,
        atol,
        dt0,
        max_steps,
        tstops,
        jumps,
        dtmin,
        adaptive,
        interpolate=True,
    )
    if solver.interp is not None:
        plan.keep_stages()  # dense output by the method's own continuous extension
    if events:
        if prob.algebraic is not None and any(e.affect is not None for e in events):
            raise ValueError(
                "events with an affect are not supported with a singular mass matrix: the "
                "affect would leave the algebraic equations unsatisfied"
            )
        plan.events = event_plan(events, prob, max_events)
    code = run_plan(plan, prob.u0, prob.p)
    message = exc = None
    if code in (ReturnCode.RHS_ERROR, ReturnCode.JACOBIAN_NONFINITE, ReturnCode.MAX_STEPS):
        failure = plan_failure(plan, code, prob.p)  # names an event's function that raised
        message, exc = failure.message, failure.exception
    m = int(plan.stats[0])
    if code == ReturnCode.SUCCESS:  # the next solve of this problem starts with that room
        with contextlib.suppress(AttributeError):  # (a problem object that takes no attribute)
            caller._steps_hint = m + m // 8
    save, stats = plan.save, _stats(plan.stats)
    stats.update(plan.stepper.stats(plan.carry))
    st, su, sf = plan.ts[:m].copy(), plan.us[:m].copy(), plan.fs[:m].copy()
    dense = None if solver.interp is None else (plan.kstore[:m].copy(), solver.interp)
    found = None if plan.events is None else plan.events.results()
    del plan  # its buffers, before the result is made: the solution keeps copies
    sol = _solution(prob, save, code, st, su, sf, stats, message, False, dense, exc)
    if found is not None:
        sol.t_events, sol.u_events = found
    if throw and not sol.success:
        raise ODESolveError(sol) from exc
    return sol


def _solution(prob, save, code, st, su, sf, stats, message, throw, dense=None, exception=None):
    t0, t1 = prob.tspan
    direction = 1.0 if t1 > t0 else -1.0
    n = prob.u0.size
    status = ReturnCode(int(code))
    if save is not None:
        reached = direction * (save - st[-1]) <= 0
        sol_t = save if reached.all() else save[reached]
        sol = Solution(sol_t, None, status, stats, st, su, sf, st[-1], message, dense, exception)
        sol.u = np.empty((sol_t.size, n))
        empty = np.zeros(0, dtype=np.int64)
        if dense is not None:
            # the method's continuous extension, compiled, straight into the result
            stages, P = dense
            interpolate_saves(
                st, su, stages, st.size, P, sol_t, sol.u, empty, empty.astype(bool), P[:0]
            )
        else:  # the steps landed on every save time
            pos = np.empty(sol_t.size, dtype=np.int64)
            find_save_positions(st, st.size, sol_t, pos)
            np.take(su, pos, axis=0, out=sol.u)
    else:
        # every step, right limits only (drop the left limits kept at jumps)
        keep = np.ones(st.size, dtype=bool)
        keep[:-1] = st[1:] != st[:-1]
        sol = Solution(
            st[keep], su[keep], status, stats, st, su, sf, st[-1], message, dense, exception
        )
    if throw and not sol.success:
        raise ODESolveError(sol) from exception
    return sol


def _stats(stats):
    return {"nf": int(stats[1]), "naccept": int(stats[2]), "nreject": int(stats[3])}
