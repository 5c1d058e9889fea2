"""scichains.adjoint: gradients of losses on ODE solutions.

``value, dp, du0 = gradient(prob, SquaredError(data), saveat=ts)``, or an :class:`Objective`
built once and evaluated at new parameters. The problem needs a vjp of its right-hand side:
generated exactly by :class:`scichains.ode.SymbolicModel`, or written by hand.
"""

from ._continuous import continuous_adjoint
from ._discrete import discrete_adjoint, find_save_positions, squared_error
from ._gradient import Objective, ScipyFun, gradient
from ._loss import PointwiseLoss, SolutionLoss, SquaredError
from ._sensealg import (
    BacksolveAdjoint,
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    QuadratureAdjoint,
    SensitivityAlgorithm,
)

__all__ = [
    "BacksolveAdjoint",
    "DiscreteAdjoint",
    "ForwardSensitivity",
    "InterpolatingAdjoint",
    "Objective",
    "PointwiseLoss",
    "QuadratureAdjoint",
    "ScipyFun",
    "SensitivityAlgorithm",
    "SolutionLoss",
    "SquaredError",
    "discrete_adjoint",
    "find_save_positions",
    "gradient",
    "continuous_adjoint",
    "squared_error",
]
