"""The compiled kernels' status codes: the values of :class:`~scichains.ode.ReturnCode`, the
only numbering, as module constants that numba compiles in (``GROW`` is internal: the step
buffers are full, the caller grows them and resumes). Every stepper, the ensemble loops and
the adjoint sweeps return these."""

from __future__ import annotations

from ._solution import ReturnCode

SUCCESS = int(ReturnCode.SUCCESS)
MAX_STEPS = int(ReturnCode.MAX_STEPS)
DT_UNDERFLOW = int(ReturnCode.DT_UNDERFLOW)
NONFINITE = int(ReturnCode.NONFINITE)
SOLVER_FAILURE = int(ReturnCode.SOLVER_FAILURE)
RHS_ERROR = int(ReturnCode.RHS_ERROR)
SINGULAR = int(ReturnCode.SINGULAR)
JACOBIAN_NONFINITE = int(ReturnCode.JACOBIAN_NONFINITE)
NEWTON_FAILURE = int(ReturnCode.NEWTON_FAILURE)
NOT_RUN = int(ReturnCode.NOT_RUN)
MAX_EVENTS = int(ReturnCode.MAX_EVENTS)
EVENT_FAILURE = int(ReturnCode.EVENT_FAILURE)
GROW = 100
"""Internal, never a solution's status: the step buffers are full (see ``integrate``)."""
SWITCH = 101
"""Internal, never a solution's status: the family's switch watch fired (``StepControl.watch``)
after the last stored step; the automatic method resumes there with the other family."""

NEED_JACOBIAN = 102
"""Internal, never a solution's status: the automatic method switched to its Rosenbrock
method for the first time and the problem has no vjp yet; the caller makes it (or falls back
to finite differences) and resumes. A solve that never turns stiff never builds one."""

assert not {GROW, SWITCH, NEED_JACOBIAN} & {int(c) for c in ReturnCode}
