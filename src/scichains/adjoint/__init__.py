"""scichains.adjoint: gradients of losses on ODE solutions.

``value, dp, du0 = gradient(prob, SquaredError(data), saveat=ts)``, or an :class:`Objective`
built once and evaluated at new parameters; :class:`MultiObjective` sums a loss over many
trajectories (initial states), on several threads. The problem needs a vjp of its right-hand side:
generated exactly by :class:`scichains.ode.SymbolicModel`, or written by hand (check it with
:func:`check_vjp`; a gradient with :func:`check_gradient`).
"""

from ._check import DerivativeCheck, check_gradient, check_vjp
from ._continuous import continuous_adjoint
from ._discrete import discrete_adjoint, find_save_positions, squared_error
from ._gradient import Objective, ScipyFun, gradient
from ._loss import HuberLoss, PointwiseLoss, SolutionLoss, SquaredError
from ._multi import MultiObjective
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
    "DerivativeCheck",
    "DiscreteAdjoint",
    "ForwardSensitivity",
    "HuberLoss",
    "InterpolatingAdjoint",
    "MultiObjective",
    "Objective",
    "PointwiseLoss",
    "QuadratureAdjoint",
    "ScipyFun",
    "SensitivityAlgorithm",
    "SolutionLoss",
    "SquaredError",
    "check_gradient",
    "check_vjp",
    "discrete_adjoint",
    "find_save_positions",
    "gradient",
    "continuous_adjoint",
    "squared_error",
]
