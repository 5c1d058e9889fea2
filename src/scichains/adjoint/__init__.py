"""scichains.adjoint: gradients of losses on ODE solutions.

``value, dp, du0 = gradient(prob, SquaredError(data), saveat=ts)``, or an :class:`Objective`
built once and evaluated at new parameters. The problem needs a vjp of its right-hand side:
generated exactly by :class:`scichains.ode.SymbolicModel`, or written by hand.
"""

from ._continuous import interpolating_adjoint
from ._discrete import discrete_adjoint, find_save_positions, squared_error
from ._gradient import Objective, gradient
from ._loss import PointwiseLoss, SolutionLoss, SquaredError
from ._sensealg import DiscreteAdjoint, InterpolatingAdjoint, SensitivityAlgorithm

__all__ = [
    "DiscreteAdjoint",
    "InterpolatingAdjoint",
    "Objective",
    "PointwiseLoss",
    "SensitivityAlgorithm",
    "SolutionLoss",
    "SquaredError",
    "discrete_adjoint",
    "find_save_positions",
    "gradient",
    "interpolating_adjoint",
    "squared_error",
]
