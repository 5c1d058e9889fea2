"""The compiled families as data: for each ``solver.family`` the stepper that runs it, how its
method becomes the tableau the stepper takes, its carry and its statistics. A new family is a
solver class and an entry in :data:`STEPPERS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ._auto import auto_run, auto_stats, auto_tables
from ._auto import carry_size as auto_carry_size
from .explicit._kernels import (
    Tableau,
    ensure_event_integrate,
    ensure_event_integrate_watched,
    integrate,
)
from .explicit._tableaus import ExplicitRK
from .stiff._esdirk import ESDIRK
from .stiff._esdirk_kernel import ESDIRKTableau, esdirk_integrate
from .stiff._esdirk_kernel import carry_size as esdirk_carry_size
from .stiff._jacobian import JAC_EXACT, JAC_FD
from .stiff._radau_kernel import carry_size as radau_carry_size
from .stiff._radau_kernel import radau_integrate, radau_tableau
from .stiff._rosenbrock import Rosenbrock
from .stiff._rosenbrock_kernel import CARRY_SIZE, RosenbrockTableau, rosenbrock_integrate

STATS_SIZE = 7
"""Length of the stepper's ``stats`` array (see ``integrate``)."""


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
    prepare_events: Callable | None = None
    """Called before a solve with events: compiles the stepper's variant for them where its
    signature is fixed at import (the explicit kernels); None: nothing to do."""


STEPPERS = {
    "explicit": Stepper(
        _explicit_run,
        _explicit_tableau,
        lambda n: 5,
        lambda carry: {},
        False,
        prepare_events=ensure_event_integrate,
    ),
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
        prepare_events=ensure_event_integrate_watched,
    ),
}
"""The compiled families by ``solver.family`` (CVODE runs through :func:`solve_cvode`)."""
