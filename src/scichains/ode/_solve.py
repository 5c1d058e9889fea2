"""solve(): validation, buffers, and the call into the compiled stepper."""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..nn._validate import as_real
from ._abi import NO_NETWORK, StepControl, StepStore, Stops
from ._auto import AutoSwitch, AutoTsit5Rodas5P, auto_run, auto_stats, auto_tables
from ._auto import carry_size as auto_carry_size
from ._codes import GROW, NEED_JACOBIAN
from ._dae import check_consistent, mass_of
from ._esdirk import ESDIRK
from ._esdirk_kernel import ESDIRKTableau, esdirk_integrate
from ._esdirk_kernel import carry_size as esdirk_carry_size
from ._jacobian import JAC_EXACT, JAC_FD
from ._kernels import Tableau, find_save_positions, integrate, interpolate_saves
from ._problem import ODEProblem
from ._radau import RadauIIA
from ._radau_kernel import carry_size as radau_carry_size
from ._radau_kernel import radau_integrate, radau_tableau
from ._rosenbrock_kernel import CARRY_SIZE, RosenbrockTableau, rosenbrock_integrate
from ._solution import (
    FailedSolve,
    ODESolveError,
    ReturnCode,
    Solution,
    raise_failure,
    user_error_failure,
)
from ._stiff import Rodas5P, Rosenbrock
from ._stiffness import stiffness_hint
from ._sundials import CVODESolver, solve_cvode
from ._tableaus import ExplicitRK

STATS_SIZE = 7
"""Length of the stepper's ``stats`` array (see ``integrate``)."""


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


def rosenbrock_tableau(solver: Rosenbrock, ctrl: int) -> RosenbrockTableau:
    """The Rosenbrock method ``solver`` as its compiled stepper (and the stiff adjoint) take
    it; ``ctrl``: the controller's order (0: fixed steps)."""
    a, m, c, btilde = solver.arrays()
    return RosenbrockTableau(
        a,
        np.ascontiguousarray(solver.C, dtype=np.float64),
        c,
        np.ascontiguousarray(solver.d, dtype=np.float64),
        m,
        btilde,
        float(solver.gamma),
        int(ctrl),
        bool(solver.fsal),
        JAC_EXACT if solver.jacobian == "exact" else JAC_FD,
    )


def _esdirk_tableau(solver: ESDIRK, ctrl: int) -> ESDIRKTableau:
    a, _, c, btilde = solver.arrays()
    return ESDIRKTableau(
        a,
        np.ascontiguousarray(solver.alpha, dtype=np.float64),
        c,
        btilde,
        float(solver.gamma),
        int(ctrl),
        JAC_EXACT if solver.jacobian == "exact" else JAC_FD,
    )


def _explicit_tableau(solver: ExplicitRK, ctrl: int) -> Tableau:
    A, b, c, btilde = solver.arrays()
    return Tableau(A, b, c, btilde, int(ctrl), bool(solver.fsal))


def _explicit_run(faddr, vaddr, k, u0, p, t0, t1, tableau, control, stops, store):
    return integrate(faddr, k, u0, p, t0, t1, tableau, control, stops, store)


def _newton_stats(carry) -> dict:
    return {
        "njac": int(carry[3]),
        "nlu": int(carry[4]),
        "nnewton": int(carry[5]),
        "nnewton_fail": int(carry[6]),
    }


@dataclass(frozen=True)
class Stepper:
    """How :func:`solve` runs one family's compiled stepper: the family as data.

    A new family is a solver class with ``family``/``stages``/``arrays``/``interp``/
    ``error_order`` and an entry in :data:`STEPPERS`; ``solve``, the adjoint plans and the
    models then take it without a test of its class."""

    run: Callable
    """``run(faddr, vaddr, kernel, u0, p, t0, t1, tableau, control, stops, store) -> code``:
    the compiled stepper (see :func:`scichains.ode._loop.run_loop`)."""
    tableau: Callable
    """``tableau(solver, ctrl)``: the method as the stepper takes it (``ctrl``: the
    controller's order, 0: fixed steps)."""
    carry_size: Callable
    """``carry_size(n)``: the length of ``store.carry`` for ``n`` states (an explicit
    solve's network work buffers come on top)."""
    stats: Callable
    """``stats(carry)``: the family's own statistics (a dict) after a solve."""
    implicit: bool
    """Makes Jacobians: with ``jacobian="exact"`` the problem needs a vjp."""
    mass_matrix: bool = False
    """Takes a mass matrix (``M du/dt = f``; a singular one where the method's ``dae`` says
    so)."""
    jacobian_on_demand: bool = False
    """Asks for the problem's vjp (NEED_JACOBIAN) only when it first needs a Jacobian (the
    automatic method: a solve that never turns stiff never builds one)."""


STEPPERS = {
    "explicit": Stepper(_explicit_run, _explicit_tableau, lambda n: 5, lambda carry: {}, False),
    "rosenbrock": Stepper(
        rosenbrock_integrate,
        rosenbrock_tableau,
        lambda n: CARRY_SIZE,
        lambda carry: {"njac": int(carry[3]), "nlu": int(carry[4])},
        True,
        mass_matrix=True,
    ),
    "esdirk": Stepper(esdirk_integrate, _esdirk_tableau, esdirk_carry_size, _newton_stats, True),
    "radau": Stepper(
        radau_integrate, radau_tableau, radau_carry_size, _newton_stats, True, mass_matrix=True
    ),
    "auto": Stepper(
        auto_run,
        lambda solver, ctrl: auto_tables(
            solver, _explicit_tableau(solver.nonstiff, ctrl), rosenbrock_tableau(solver.stiff, ctrl)
        ),
        auto_carry_size,
        auto_stats,
        True,
        jacobian_on_demand=True,
    ),
}
"""The compiled families by ``solver.family`` (CVODE runs through :func:`solve_cvode`)."""


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

    def grow(self) -> None:
        """Double the step buffers (the stepper returned GROW), keeping what they hold.

        Storage follows the steps actually taken: a solve starts with room for a few hundred
        steps (or its stops) and doubles, so ``max_steps`` is only a limit, never an
        allocation."""
        m = int(self.stats[0])
        cap, n = self.us.shape
        new = 2 * cap
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
    if tables is None:
        tables = (plan.stops, plan.jump_index, plan.jump_count, plan.jump_state, plan.jump_amount)
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
                Stops(*tables),
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


def stop_tables(prob, saveat, tstops, jumps, land_on_saves=True):
    """Validate ``saveat``/``tstops``/``jumps``; return ``(save, stops, jump_index, jump_count,
    jump_state, jump_amount)``: the times to land on (ordered in the direction of
    integration, ending with t1; the save times too unless ``land_on_saves`` is False) and the
    jumps grouped by stop. Jumps are doses: see :func:`_parse_jumps`."""
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
    # room to start with; the buffers double as the solve needs (SolvePlan.grow)
    cap = min(int(max_steps), 256) + 2 * stops.size + 4
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
    """
    if init not in ("check", "algebraic"):
        raise ValueError(f"init must be 'check' or 'algebraic', got {init!r}")
    if solver is None:
        with_mass = getattr(prob, "mass_matrix", None) is not None
        solver = Rodas5P if with_mass else AutoTsit5Rodas5P
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
    if isinstance(solver, CVODESolver):
        if not isinstance(prob, ODEProblem):
            raise TypeError("solve needs an ODEProblem")
        if not (rtol > 0 and atol >= 0):
            raise ValueError(f"tolerances must be positive, got rtol={rtol}, atol={atol}")
        if int(max_steps) < 1:
            raise ValueError("max_steps must be positive")
        save, *tables = stop_tables(prob, saveat, tstops, jumps)
        # CVODE lands on t1, tstops and doses; the save times it interpolates (normal mode)
        hard = np.isin(tables[0], stop_tables(prob, None, tstops, jumps)[1])
        code, st, su, sf, stats, message, exc = solve_cvode(
            prob, solver, save, *tables, rtol, atol, dt0, int(max_steps), dtmin, hard=hard
        )
        return _solution(prob, save, code, st, su, sf, stats, message, throw, exception=exc)
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
    code = run_plan(plan, prob.u0, prob.p)
    message = exc = None
    if code in (ReturnCode.RHS_ERROR, ReturnCode.JACOBIAN_NONFINITE, ReturnCode.MAX_STEPS):
        failure = plan_failure(plan, code, prob.p)
        message, exc = failure.message, failure.exception
    m = int(plan.stats[0])
    save, stats = plan.save, _stats(plan.stats)
    stats.update(plan.stepper.stats(plan.carry))
    st, su, sf = plan.ts[:m].copy(), plan.us[:m].copy(), plan.fs[:m].copy()
    dense = None if solver.interp is None else (plan.kstore[:m].copy(), solver.interp)
    del plan  # its buffers, before the result is made: the solution keeps copies
    return _solution(prob, save, code, st, su, sf, stats, message, throw, dense, exc)


def plan_failure(plan: SolvePlan, code: int, p, what: str = ""):
    """The :class:`FailedSolve` for a failed run of ``plan`` (code from :func:`run_plan`); for
    RHS_ERROR it names the exception the user's function raised."""
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
