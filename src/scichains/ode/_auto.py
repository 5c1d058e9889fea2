"""Automatic stiffness switching: an explicit Runge-Kutta method that hands over to a
Rosenbrock method where the problem turns stiff, and back where it stops being stiff (as
LSODA switches between Adams and BDF, and OrdinaryDiffEq's ``AutoTsit5(Rodas5P())``).

While explicit, each accepted step estimates the dominant eigenvalue of ``df/du`` from the
two stages that both sit at the step's end (Shampine's estimate, no extra calls of ``f``):
``|lambda| ~ ||f(u_new) - f(Y)|| / ||u_new - Y||`` with ``Y`` the last stage point before
``u_new``. A step whose ``h |lambda|`` exceeds ``stiff_tol`` times the explicit method's
stability boundary on the negative real axis is held by stability, not accuracy; after
``max_stiff_steps`` such steps in a row the solve continues with the Rosenbrock method. While
stiff, each accepted step estimates ``|lambda|`` by power iteration on the Jacobian the step
made; after ``max_nonstiff_steps`` steps in a row where the explicit method would be stable
at the current step size (``h |lambda|`` below ``nonstiff_tol`` times its boundary) it goes
back, with ``h`` capped there.

The switch changes nothing else: one error norm, one PI controller (both methods have the
same controller order), one step store. Each method runs in its own compiled kernel with a
switch watch (``StepControl.watch``), which stops it with the internal code SWITCH after the
step where the test is met; :func:`auto_run` resumes the solve there with the other kernel
(as after GROW: the stored point, the proposed step and the controller's memory carry over).
A solve that never turns stiff is the explicit method's, bit for bit, plus the estimate
(a few operations per state and step). Dense output: the stages of each step are stored in
one block of ``s_explicit + s_rosenbrock`` rows (``StepControl.row0``), the other method's
rows zero, and the continuous extension is the two methods' stacked, so each step
interpolates with its own method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ._codes import NEED_JACOBIAN, SWITCH
from ._family import register
from .explicit._kernels import (
    Tableau,
    WatchedTableau,
    ensure_watched_integrate,
    integrate_watched,
)
from .explicit._tableaus import ExplicitRK, Tsit5
from .stiff._jacobian import JAC_EXACT
from .stiff._rosenbrock import Rodas5P, Rosenbrock
from .stiff._rosenbrock_kernel import CARRY_SIZE as ROS_CARRY
from .stiff._rosenbrock_kernel import RosenbrockTableau, rosenbrock_integrate


def real_stability_boundary(A, b) -> float:
    """The largest ``r`` with ``|R(-x)| <= 1`` on ``[0, r]``, ``R(z) = 1 + z b^T (I - z A)^-1
    1`` the explicit method's stability function, a polynomial for an explicit method
    (``A`` nilpotent): ``1 + sum_k z^k b^T A^(k-1) 1`` (3.51 for Tsit5, 3.31 for DP5, 2.79 for
    RK4)."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    coef = [1.0]
    v = np.ones(b.size)
    for _ in range(b.size):
        coef.append(float(b @ v))
        v = A @ v
    poly = np.polynomial.Polynomial(coef)

    def amp(x):
        return np.abs(poly(-x))

    xs = np.linspace(0.0, 20.0, 20_001)
    bad = int(np.argmax((amp(xs) > 1.0 + 1e-12) & (xs > 0.0)))
    lo, hi = xs[bad - 1], xs[bad]
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if amp(mid) <= 1.0 + 1e-12 else (lo, mid)
    return float(lo)


@dataclass(frozen=True)
class AutoSwitch:
    """An explicit method that switches to a Rosenbrock method where the problem is stiff,
    and back (see the module's docstring). ``ode.AutoTsit5Rodas5P`` is
    ``AutoSwitch(Tsit5(), Rodas5P())``.

    Parameters
    ----------
    nonstiff : ExplicitRK
        An adaptive explicit method whose last two stages both sit at the step's end (FSAL,
        ``c[-2] == 1``): Tsit5 (default) or DP5.
    stiff : Rosenbrock
        A Rosenbrock method with the same controller order (``error_order + 1``): Rodas5P
        (default). Its ``jacobian`` setting is the auto method's.
    max_stiff_steps, max_nonstiff_steps : int
        Steps in a row that must look stiff (non-stiff) before the switch (10 and 3, as
        OrdinaryDiffEq's AutoSwitch).
    stiff_tol, nonstiff_tol : float
        Fractions of the explicit method's stability boundary for the two tests (0.9 each).
    """

    nonstiff: ExplicitRK = Tsit5
    stiff: Rosenbrock = Rodas5P
    max_stiff_steps: int = 10
    max_nonstiff_steps: int = 3
    stiff_tol: float = 0.9
    nonstiff_tol: float = 0.9
    boundary: float = field(init=False, repr=False, compare=False)
    interp: np.ndarray = field(init=False, repr=False, compare=False)

    family = "auto"
    adaptive = True
    default_sensealg = "interpolating"  # integrated backward by Rodas5P
    dae = False
    fsal = False

    def __post_init__(self):
        e, r = self.nonstiff, self.stiff
        if getattr(type(e), "family", None) != "explicit" or not e.adaptive:
            raise TypeError(f"nonstiff must be an adaptive explicit method, got {e!r}")
        if not (e.fsal and e.c[-2] == 1.0 and e.interp is not None):
            raise ValueError(
                f"{e.name}: the stiffness estimate needs two stages at the step's end (FSAL with "
                "c[-2] == 1) and a continuous extension: use Tsit5() or DP5()"
            )
        if getattr(type(r), "family", None) != "rosenbrock":
            raise TypeError(f"stiff must be a Rosenbrock method (Rodas5P()), got {r!r}")
        if r.ctrl_order != e.error_order + 1:
            raise ValueError(
                f"{e.name} and {r.name} need the same controller order (one PI controller): "
                f"{e.error_order + 1} and {r.ctrl_order}"
            )
        if int(self.max_stiff_steps) < 1 or int(self.max_nonstiff_steps) < 1:
            raise ValueError("max_stiff_steps and max_nonstiff_steps must be positive")
        if not (0.0 < self.stiff_tol and 0.0 < self.nonstiff_tol):
            raise ValueError("stiff_tol and nonstiff_tol must be positive")
        A, b, _, _ = e.arrays()
        object.__setattr__(self, "boundary", real_stability_boundary(A, b))
        object.__setattr__(
            self, "interp", np.ascontiguousarray(np.vstack([e.interp, r.interp]), dtype=float)
        )

    @property
    def name(self) -> str:
        return f"Auto{self.nonstiff.name}{self.stiff.name}"

    @property
    def jacobian(self) -> str:
        return self.stiff.jacobian

    @property
    def stages(self) -> int:
        """The rows of a stored step: the explicit method's, then the Rosenbrock method's."""
        return self.nonstiff.stages + self.stiff.stages

    @property
    def order(self) -> int:
        return min(self.nonstiff.order, self.stiff.order)

    @property
    def error_order(self) -> int:
        return self.nonstiff.error_order

    @property
    def interp_order(self) -> int:
        return min(self.nonstiff.interp_order, self.stiff.interp_order)

    def arrays(self):
        """``(A, b, c, btilde)`` of the explicit method, padded to :attr:`stages` (the plan's;
        only the explicit discrete adjoint reads them, and it does not serve this family)."""
        A, b, c, bt = self.nonstiff.arrays()
        s, se = self.stages, b.size
        Ap = np.zeros((s, s))
        Ap[:se, :se] = A
        pad = lambda x: np.concatenate([x, np.zeros(s - se)])  # noqa: E731
        return Ap, pad(b), pad(c), pad(bt)

    def __call__(self, jacobian: str | None = None) -> AutoSwitch:
        """The same with the Rosenbrock method's Jacobian changed (``"exact"`` or ``"finite
        difference"``)."""
        from dataclasses import replace

        stiff = self.stiff(jacobian)
        return self if stiff is self.stiff else replace(self, stiff=stiff)

    def __repr__(self) -> str:
        return f"AutoSwitch({self.nonstiff.name}, {self.stiff!r})"


AutoTsit5Rodas5P = AutoSwitch()
register(AutoTsit5Rodas5P)
"""Tsit5 while the problem is not stiff, Rodas5P (exact Jacobian) while it is: the
automatic method (see :class:`AutoSwitch`)."""


PHASE, SWITCHES, JACOBIANS, FACTORISATIONS = ROS_CARRY, ROS_CARRY + 1, ROS_CARRY + 2, ROS_CARRY + 3
"""The driver's entries of ``store.carry``, after the families' own (the Rosenbrock family's
is the longer): the running method (0 explicit, 1 Rosenbrock), the switches made, and the
Jacobians and LU factorisations of the Rosenbrock phases already ended."""


def carry_size(n: int) -> int:
    return ROS_CARRY + 4


class AutoTables(NamedTuple):
    """The automatic method as :func:`auto_run` takes it."""

    explicit: WatchedTableau  # the explicit method, compiled with the switch watch
    stiff: RosenbrockTableau
    to_stiff: float  # the explicit watch: h |lambda| above this is stiff
    to_nonstiff: float  # the Rosenbrock watch: h |lambda| below this is not
    max_stiff: int
    max_nonstiff: int


def auto_tables(solver: AutoSwitch, explicit: Tableau, stiff: RosenbrockTableau) -> AutoTables:
    return AutoTables(
        WatchedTableau(*explicit),
        stiff,
        solver.stiff_tol * solver.boundary,
        solver.nonstiff_tol * solver.boundary,
        int(solver.max_stiff_steps),
        int(solver.max_nonstiff_steps),
    )


def auto_run(faddr, vaddr, k, u0, p, t0, t1, tables: AutoTables, control, stops, store) -> int:
    """Run the automatic method: the explicit kernel with its switch watch, then, at each
    SWITCH, the other kernel resumed at the last stored point, until a code other than SWITCH
    (GROW included: the caller grows the buffers and calls again to resume the phase that
    stopped, ``stats[6] = 1``). At the first switch to the Rosenbrock method with an exact
    Jacobian and no vjp yet (``vaddr == 0``) it returns NEED_JACOBIAN, ready to resume in
    that phase once the caller has made one. See :func:`scichains.ode._loop.run_loop` for the
    arguments."""
    ensure_watched_integrate()
    carry, stats = store.carry, store.stats
    if stats[6] == 0:
        carry[PHASE:] = 0.0
    se = tables.explicit.b.shape[0]
    while True:
        if carry[PHASE] == 0.0:
            ctl = control._replace(watch=tables.to_stiff, watch_steps=tables.max_stiff, row0=0)
            code = int(
                integrate_watched(faddr, k, u0, p, t0, t1, tables.explicit, ctl, stops, store)
            )
        else:
            ctl = control._replace(
                watch=tables.to_nonstiff, watch_steps=tables.max_nonstiff, row0=se
            )
            code = int(
                rosenbrock_integrate(
                    faddr, vaddr, k, u0, p, t0, t1, tables.stiff, ctl, stops, store
                )
            )
        if code != SWITCH:
            return code
        if carry[PHASE] != 0.0:
            carry[JACOBIANS] += carry[3]
            carry[FACTORISATIONS] += carry[4]
            lam = carry[6]
            if lam > 0.0:  # the explicit method's first step within its stability region
                carry[0] = min(carry[0], tables.to_nonstiff / lam)
        carry[3:PHASE] = 0.0  # the next family starts its own part afresh
        carry[PHASE] = 1.0 - carry[PHASE]
        carry[SWITCHES] += 1.0
        stats[6] = 1  # resume at the last stored point
        if carry[PHASE] != 0.0 and vaddr == 0 and tables.stiff.jacobian == JAC_EXACT:
            return NEED_JACOBIAN


def auto_stats(carry) -> dict:
    """The automatic method's statistics after a solve: switches, and the Jacobians and LU
    factorisations of its Rosenbrock phases."""
    running = carry[PHASE] != 0.0
    return {
        "nswitch": int(carry[SWITCHES]),
        "njac": int(carry[JACOBIANS] + (carry[3] if running else 0.0)),
        "nlu": int(carry[FACTORISATIONS] + (carry[4] if running else 0.0)),
    }
