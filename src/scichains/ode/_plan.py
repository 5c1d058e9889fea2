"""Planning a compiled solve: validated options, the stop/jump tables, the output buffers that
repeated solves (the adjoints) reuse, running the plan with storage growth and the automatic
method's hand-overs, and the failure a run ended with."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..nn._validate import as_real
from ._abi import StepControl, StepStore, Stops
from ._codes import GROW, NEED_JACOBIAN
from ._dae import check_consistent, mass_of
from ._problem import ODEProblem
from ._solution import (
    FailedSolve,
    ReturnCode,
    raise_failure,
    user_error_failure,
)
from ._steppers import STATS_SIZE, STEPPERS
from ._stiffness import stiffness_hint
from .explicit._kernels import find_save_positions, interpolate_saves
from .explicit._tableaus import ExplicitRK
from .stiff._esdirk import ESDIRK
from .stiff._rosenbrock import Rosenbrock


def _times(name, x, t0, t1):
    x = np.atleast_1d(as_real(x, name))
    if x.ndim != 1:
        raise ValueError(f"{name} must be a vector of times")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    lo, hi = min(t0, t1), max(t0, t1)
    if np.any((x < lo) | (x > hi)):
        raise ValueError(f"{name} has times outside tspan ({t0}, {t1})")
    return x


@dataclass
class SolvePlan:
    """Everything the compiled stepper needs besides ``(u0, p)``: validated options, the
    stop/jump tables and the output buffers (reused by repeated solves, e.g. in adjoints)."""

    prob: ODEProblem
    solver: ExplicitRK | Rosenbrock | ESDIRK
    save: np.ndarray | None
    A: np.ndarray
    b: np.ndarray
    c: np.ndarray
    btilde: np.ndarray
    ctrl: int
    rtol: float
    atol: float
    dt0: float
    dtmin: float
    max_steps: int
    stops: np.ndarray
    jump_index: np.ndarray
    jump_count: np.ndarray
    jump_state: np.ndarray
    jump_amount: np.ndarray
    ts: np.ndarray
    us: np.ndarray
    fs: np.ndarray
    stats: np.ndarray
    kstore: np.ndarray
    astore: np.ndarray | None = None
    astore_follows_steps: bool = False
    """True: ``astore`` has a row per stored step and grows with the step buffers (the
    Rosenbrock Jacobians); False: it has a size of its own (a network's activations: the
    stepper fills the rows it has, and the discrete adjoint grows it and solves again)."""
    interpolate: bool = False
    """True: ``save`` is not among the stops; the saved states come from the method's
    continuous extension (:meth:`interpolate_saves`), and the stages are kept."""
    vjp_address: int = 0
    """The vjp the stiff steppers build their Jacobians from (0: none needed)."""
    events: object = None
    """The state-dependent events (``scichains.ode._events.EventPlan``) of a :func:`solve`, or
    None."""
    fail: np.ndarray | None = None
    """After RHS_ERROR: ``[t, state]`` where the right-hand side raised (and, after
    JACOBIAN_NONFINITE, ``[t, state, i, j]``: the entry ``df_i/du_j``)."""

    def __post_init__(self):
        if self.astore is None:
            self.astore = np.zeros((0, self.solver.stages, 0))
        n = self.us.shape[1]
        self.fail = np.zeros(3 + n)
        self.family = self.solver.family
        self.mass = mass_of(self.prob)
        """``StepControl.mass``: the problem's mass matrix, or ``(0, 0)`` for ``M = I``."""
        stepper = STEPPERS[self.family]
        self.stepper = stepper
        self.stiff = stepper.implicit
        """The family makes Jacobians (``J`` from the vjp or by differences)."""
        self.carry = np.zeros(stepper.carry_size(n) + self.astore.shape[2])
        self.tableau = stepper.tableau(self.solver, int(self.ctrl))
        if self.interpolate:
            self.keep_stages()
        # the saved states and where they lie (made by save_buffers: solve() needs none)
        self.save_u = np.zeros((0, n))
        self.save_pos = np.zeros(0, dtype=np.int64)
        self.save_inner = np.zeros(0, dtype=np.bool_)
        self.save_w = np.zeros((0, self.solver.stages))

    def store(self) -> StepStore:
        """The step buffers as the stepper takes them (new after :meth:`grow`)."""
        return StepStore(
            self.ts, self.us, self.fs, self.stats, self.kstore, self.astore, self.carry, self.fail
        )

    def save_buffers(self) -> None:
        """Make ``save_u``, ``save_pos``, ``save_inner`` and ``save_w`` (the interpolation
        weights of each save point, for the discrete adjoint) if not made yet."""
        nsave = 0 if self.save is None else self.save.size
        if self.save_u.shape[0] != nsave:
            self.save_u = np.zeros((nsave, self.us.shape[1]))
            self.save_pos = np.zeros(nsave, dtype=np.int64)
            self.save_inner = np.zeros(nsave, dtype=np.bool_)
            self.save_w = np.zeros((nsave, self.solver.stages))

    def keep_stages(self) -> None:
        """Make the stepper store the stages of every step (for the discrete adjoint)."""
        cap, n = self.us.shape
        if self.kstore.shape[0] != cap:
            self.kstore = np.empty((cap, self.solver.stages, n))

    def keep_jacobians(self) -> None:
        """Make the Rosenbrock stepper store each step's Jacobian (for the discrete adjoint)
        in ``astore``, shape ``(capacity, n + 1, max(n, 2))``."""
        cap, n = self.us.shape
        if self.family != "rosenbrock":
            raise TypeError("only the Rosenbrock solvers store Jacobians")
        if self.astore.shape[0] != cap:
            self.astore = np.empty((cap, n + 1, max(n, 2)))
        self.astore_follows_steps = True

    def set_activation_store(self, astore: np.ndarray) -> None:
        """Keep each stage's network work buffer in ``astore`` (shape ``(capacity, s, R)``)."""
        self.astore = astore
        self.astore_follows_steps = False
        self.carry = np.zeros(self.stepper.carry_size(self.us.shape[1]) + astore.shape[2])

    def grow(self, capacity: int | None = None) -> None:
        """Double the step buffers (the stepper returned GROW), keeping what they hold; with
        ``capacity``, give them at least that many entries instead (new arrays either way).

        Storage follows the steps actually taken: a solve starts with room for a few hundred
        steps (or its stops) and doubles, so ``max_steps`` is only a limit, never an
        allocation."""
        m = int(self.stats[0])
        cap, n = self.us.shape
        new = 2 * cap if capacity is None else max(cap, int(capacity))
        ts = np.empty(new)
        ts[:m] = self.ts[:m]
        us = np.empty((new, n))
        us[:m] = self.us[:m]
        fs = np.empty((new, n))
        fs[:m] = self.fs[:m]
        self.ts, self.us, self.fs = ts, us, fs
        if self.kstore.shape[0] > 0:
            ks = np.empty((new,) + self.kstore.shape[1:])
            ks[:m] = self.kstore[:m]
            self.kstore = ks
        if self.astore_follows_steps:
            js = np.empty((new,) + self.astore.shape[1:])
            js[:m] = self.astore[:m]
            self.astore = js
        if self.events is not None:
            self.events.grow()

    def provide_jacobian(self) -> None:
        """The problem's exact vjp for a stepper that asked for it (NEED_JACOBIAN), made as
        :meth:`ODEProblem.ensure_vjp` makes it; where none can be made, the solver's
        finite-difference Jacobian instead (the same steps a solver made with
        ``jacobian="finite difference"`` takes from here)."""
        try:
            self.prob.ensure_vjp()
            self.vjp_address = self.prob.vjp_address
        except (TypeError, ValueError):
            self.solver = self.solver(jacobian="finite difference")
            self.tableau = self.stepper.tableau(self.solver, int(self.ctrl))

    def locate_saves(self) -> bool:
        """After a solve: fill ``save_u`` (the states at ``save``), ``save_pos``,
        ``save_inner`` and ``save_w`` (see ``interpolate_saves``; without interpolation every
        save is a stored step). False if a save time was not reached."""
        m = int(self.stats[0])
        self.save_buffers()
        if not self.interpolate:
            if not find_save_positions(self.ts, m, self.save, self.save_pos):
                return False
            self.save_u[...] = self.us[self.save_pos]
            return True
        return interpolate_saves(
            self.ts,
            self.us,
            self.kstore,
            m,
            self.solver.interp,
            self.save,
            self.save_u,
            self.save_pos,
            self.save_inner,
            self.save_w,
        )


def run_plan(
    plan: SolvePlan,
    u0: np.ndarray,
    p: np.ndarray,
    f_address: int = 0,
    span=None,
    dt0: float | None = None,
    tables=None,
) -> int:
    """One call of the compiled stepper; returns its code (see ReturnCode). ``f_address``
    replaces the problem's right-hand side (an augmented system, with ``u0``/``p`` and the
    plan's buffers sized for it). ``span`` ``(t0, t1)``, ``dt0`` and ``tables`` (stops and
    jumps, as :func:`stop_tables` returns them after ``save``) replace the plan's, to solve
    one piece of the time span into the plan's buffers."""
    prob = plan.prob
    t0, t1 = prob.tspan if span is None else span
    part = prob.algebraic
    if part is not None and span is None and not f_address:
        check_consistent(prob, part, u0, p, t0, plan.rtol, plan.atol)
    own = tables is None
    if own:
        tables = (plan.stops, plan.jump_index, plan.jump_count, plan.jump_state, plan.jump_amount)
    with_events = plan.events is not None and own
    if with_events and plan.stepper.prepare_events is not None:
        plan.stepper.prepare_events()
    plan.stats[6] = 0
    while True:
        control = StepControl(
            plan.rtol,
            plan.atol,
            plan.dt0 if dt0 is None else dt0,
            plan.dtmin,
            plan.max_steps,
            0 if f_address else prob.error_group,  # an augmented system: the whole norm
            plan.mass,
        )
        code = int(
            plan.stepper.run(
                f_address or prob.f_address,
                plan.vjp_address,
                prob.kernel,
                u0,
                p,
                t0,
                t1,
                plan.tableau,
                control,
                Stops(*tables, plan.events.table if with_events else None),
                plan.store(),
            )
        )
        if code == NEED_JACOBIAN:
            plan.provide_jacobian()  # and resume where the stepper stopped (stats[6] = 1)
            continue
        if code != GROW:
            return code
        plan.grow()
        plan.stats[6] = 1


def _parse_jumps(jumps, n):
    """``(times, state indices, amounts)`` of ``jumps``, each a ``(time, state_index, amount)``
    triple: a dose of a positive, finite amount into state ``0 <= state_index < n``. Anything
    else (a missing, zero or negative amount, a fourth field such as an infusion rate) raises
    ``ValueError`` naming the entry."""
    jt = np.empty(len(jumps))
    js = np.empty(len(jumps), dtype=np.int64)
    ja = np.empty(len(jumps))
    form = "a jump is a (time, state_index, amount) triple"
    for e, jump in enumerate(jumps):
        try:
            fields = tuple(jump)
        except TypeError:
            raise ValueError(f"jumps[{e}] = {jump!r}: {form}") from None
        if len(fields) != 3:
            rate = " (infusions with a rate are not supported)" if len(fields) == 4 else ""
            raise ValueError(f"jumps[{e}] = {jump!r} has {len(fields)} fields: {form}{rate}")
        t, i, a = fields
        if isinstance(i, bool) or not (isinstance(i, numbers.Real) and float(i).is_integer()):
            raise ValueError(f"jumps[{e}] = {jump!r}: the state index must be an integer")
        if not 0 <= int(i) < n:
            raise ValueError(f"jumps[{e}] = {jump!r}: the state index must lie in 0..{n - 1}")
        try:
            jt[e] = float(t)
            ja[e] = float(a)
        except (TypeError, ValueError):
            raise ValueError(
                f"jumps[{e}] = {jump!r}: the time and the amount must be real numbers"
            ) from None
        js[e] = int(i)
        if not (np.isfinite(ja[e]) and ja[e] > 0):
            raise ValueError(
                f"jumps[{e}] = {jump!r}: the dose amount must be positive and finite, got {a!r}"
            )
    return jt, js, ja


def stop_tables(prob, saveat, tstops, jumps, land_on_saves=True, cvode=False):
    """Validate ``saveat``/``tstops``/``jumps``; return ``(save, stops, jump_index, jump_count,
    jump_state, jump_amount)``: the times to land on (ordered in the direction of
    integration, ending with t1; the save times too unless ``land_on_saves`` is False; the
    samples of the problem's constant or linear inputs) and the jumps grouped by stop. Jumps
    are doses: see :func:`_parse_jumps`. ``cvode=True``: for CVODE, whose multistep history
    cannot cross the jump of a constant input, its samples are restarts (doses of nothing),
    not the pairs of stops a float apart of ``Interpolation.stops``."""
    t0, t1 = prob.tspan
    direction = 1.0 if t1 > t0 else -1.0
    save = None
    if saveat is not None:
        save = _times("saveat", saveat, t0, t1)
        if np.any(direction * np.diff(save) <= 0):
            raise ValueError("saveat must be strictly increasing in the direction of integration")
    stop_times = [np.array([t1])]
    if save is not None and land_on_saves:
        stop_times.append(save)
    if tstops is not None:
        stop_times.append(_times("tstops", tstops, t0, t1))
    inputs = getattr(prob, "inputs", None)
    if inputs is not None:  # the samples where a constant or linear input has a kink
        knots = inputs.ts if cvode and inputs.kind == "constant" else inputs.stops
        stop_times.append(knots[(knots > min(t0, t1)) & (knots < max(t0, t1))])
    jt = np.zeros(0)
    js = np.zeros(0, dtype=np.int64)
    ja = np.zeros(0)
    if jumps is not None:
        jumps = list(jumps)
        if jumps:
            jt, js, ja = _parse_jumps(jumps, prob.u0.size)
            _times("jump times", jt, t0, t1)
            stop_times.append(jt)
    stops = np.unique(np.concatenate(stop_times))
    if direction < 0:
        stops = stops[::-1].copy()
    # jumps grouped by stop
    order = np.argsort(jt, kind="stable")
    jt, js, ja = jt[order], js[order], ja[order]
    jump_index = np.full(stops.size, -1, dtype=np.int64)
    jump_count = np.zeros(stops.size, dtype=np.int64)
    for i, ts_ in enumerate(stops):
        hit = np.nonzero(jt == ts_)[0]
        if hit.size:
            jump_index[i] = hit[0]
            jump_count[i] = hit.size
    if cvode and inputs is not None and inputs.kind == "constant":
        restart = np.isin(stops, inputs.ts) & (jump_index < 0) & (stops != t1)
        jump_index[restart] = 0  # with jump_count 0: a restart, no dose
    stops = np.ascontiguousarray(stops)

    return save, stops, jump_index, jump_count, js, ja


def check_mass_solver(prob, solver, jumps=None) -> None:
    """Refuse a solver (``TypeError``) or option (``ValueError``) that cannot solve ``prob``'s
    ``M du/dt = f``."""
    takes = "Rodas5P() or RadauIIA5() (Rosenbrock23() too for a non-singular M)"
    if isinstance(solver, type):
        raise TypeError(f"pass a solver instance, e.g. solver={solver.__name__}()")
    stepper = STEPPERS.get(getattr(type(solver), "family", None))
    if stepper is None or not stepper.mass_matrix:
        why = (
            "CVODE solves ODEs only (M = I)"
            if getattr(type(solver), "family", None) == "cvode"
            else f"{getattr(solver, 'name', solver)} does not take one"
        )
        raise TypeError(f"a problem with a mass matrix (M du/dt = f): {why}; solve it with {takes}")
    if prob.algebraic is not None:
        if not solver.dae:
            raise TypeError(
                f"{solver.name} takes a non-singular mass matrix only; this one is singular (a "
                "differential-algebraic system): solve it with Rodas5P() or RadauIIA5()"
            )
        if jumps is not None and len(list(jumps)) > 0:
            raise ValueError(
                "jumps (doses) are not supported with a singular mass matrix: a jump would "
                "leave the algebraic equations unsatisfied"
            )


def plan_solve(
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
    interpolate=False,
) -> SolvePlan:
    """Validate the options of :func:`solve` and prepare the stepper's tables and buffers.

    ``interpolate``: save by the method's continuous extension instead of landing on the save
    times (only for methods that have one; ignored otherwise)."""
    if isinstance(solver, type):
        raise TypeError("pass a solver instance, e.g. solver=Tsit5()")
    if getattr(type(solver), "family", None) not in STEPPERS:
        raise TypeError(f"unknown solver {solver!r}")
    if not isinstance(prob, ODEProblem):
        raise TypeError("solve needs an ODEProblem")
    if prob.mass_matrix is not None:
        check_mass_solver(prob, solver, jumps)
    t0, t1 = prob.tspan
    if not (rtol > 0 and atol >= 0):
        raise ValueError(f"tolerances must be positive, got rtol={rtol}, atol={atol}")
    adaptive = solver.adaptive if adaptive is None else bool(adaptive)
    if adaptive and not solver.adaptive:
        raise ValueError(f"{solver.name} has no error estimate: it cannot adapt its steps")
    if adaptive:
        dt = 0.0 if dt0 is None else abs(float(dt0))
    else:
        if dt0 is None or not dt0 > 0:
            raise ValueError(f"{solver.name} with fixed steps (a fixed-step method): give dt0 > 0")
        dt = abs(float(dt0))
    if int(max_steps) < 1:
        raise ValueError("max_steps must be positive")
    dtmin = 1e-14 * max(1.0, abs(t1 - t0)) if dtmin is None else float(dtmin)

    if prob.f_address == 0:
        raise TypeError(
            f"{solver.name} needs a right-hand side compiled with numba (@numba.njit); a plain "
            "Python function runs only with the SUNDIALS solvers (CVODE_BDF(), CVODE_Adams())"
        )
    vjp_address = 0
    stepper = STEPPERS[solver.family]
    if stepper.implicit and solver.jacobian == "exact" and stepper.jacobian_on_demand:
        vjp_address = prob.vjp_address  # 0: made when first needed (SolvePlan.provide_jacobian)
    elif stepper.implicit and solver.jacobian == "exact":
        if prob.vjp_address == 0:
            try:  # a plain compiled right-hand side: its exact derivatives, made once
                prob.ensure_vjp()
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"{solver.name} needs the Jacobian of the right-hand side, and none could be "
                    f"made automatically ({e}); pass vjp= to ODEProblem, build the model with "
                    f"SymbolicModel, or use {solver.name}(jacobian='finite difference')"
                ) from e
        vjp_address = prob.vjp_address
    interpolate = bool(interpolate) and solver.interp is not None and saveat is not None
    save, stops, jump_index, jump_count, js, ja = stop_tables(
        prob, saveat, tstops, jumps, land_on_saves=not interpolate
    )
    n = prob.u0.size
    # room to start with: a few hundred steps, or as many as the last solve of this problem
    # stored (a fit solves one problem again and again: each GROW costs a return to Python
    # and a call of the kernel, ~10-20 us); the buffers double as the solve needs
    # (SolvePlan.grow)
    hint = getattr(prob, "_steps_hint", 0)
    cap = min(int(max_steps), max(256, hint)) + 2 * stops.size + 4
    A, b, c, bt = solver.arrays()
    return SolvePlan(
        prob=prob,
        solver=solver,
        save=save,
        A=A,
        b=b,
        c=c,
        btilde=bt,
        ctrl=(solver.error_order + 1) if adaptive else 0,
        rtol=float(rtol),
        atol=float(atol),
        dt0=dt,
        dtmin=dtmin,
        max_steps=int(max_steps),
        stops=stops,
        jump_index=jump_index,
        jump_count=jump_count,
        jump_state=js,
        jump_amount=ja,
        ts=np.empty(cap),
        us=np.empty((cap, n)),
        fs=np.empty((cap, n)),
        stats=np.zeros(STATS_SIZE, dtype=np.int64),
        kstore=np.zeros((0, solver.stages, n)),
        interpolate=interpolate,
        vjp_address=vjp_address,
    )


def plan_failure(plan: SolvePlan, code: int, p, what: str = ""):
    """The :class:`FailedSolve` for a failed run of ``plan`` (code from :func:`run_plan`); for
    RHS_ERROR it names the exception the user's function raised."""
    if code == ReturnCode.RHS_ERROR and plan.events is not None:
        from_event = plan.events.failure(plan.fail, p)  # a condition or an affect raised
        if from_event is not None:
            return FailedSolve(code, plan.fail[0], what, *from_event)
    if code == ReturnCode.RHS_ERROR:
        return user_error_failure(plan.prob, p, plan.fail[0], plan.fail[1:], what=what)
    if code == ReturnCode.JACOBIAN_NONFINITE:
        n = plan.us.shape[1]
        t, u = plan.fail[0], plan.fail[1 : 1 + n]
        i, j = int(plan.fail[1 + n]), int(plan.fail[2 + n])
        message = (
            f"the Jacobian entry df[{i}]/du[{j}] (equation of state {i}, derivative with "
            f"respect to state {j}) is not finite at t = {float(t)!r}, u = {u.tolist()!r}, "
            f"p = {np.asarray(p).tolist()!r}"
        )
        return FailedSolve(code, t, what, message)
    m = int(plan.stats[0])
    if code == ReturnCode.MAX_STEPS and not plan.stiff and plan.ctrl > 0:
        hint = stiffness_hint(plan.prob, p, plan.ts[:m], plan.us[:m])
        return FailedSolve(code, plan.ts[m - 1], what, ReturnCode.MAX_STEPS.message + hint)
    return FailedSolve(code, plan.ts[m - 1], what)


def check_run(plan: SolvePlan, code: int, p, what: str = "") -> None:
    """Raise :class:`ODESolveError` (chained to a user function's exception) unless ``code``
    is SUCCESS: gradients and fits never use a failed or truncated solve."""
    if code != ReturnCode.SUCCESS:
        raise_failure(plan_failure(plan, code, p, what))
