"""scichains.adjoint: gradients of losses on ODE solutions.

``value, dp, du0 = gradient(prob, SquaredError(data), saveat=ts)``, or an :class:`Objective`
built once and evaluated at new parameters; :class:`MultiObjective` sums a loss over many
trajectories (initial states, each with its own times: :class:`Trajectory`; mini-batches:
:func:`minibatches`), on several threads; :class:`EnsembleObjective` sums it over an
ensemble on any executor (Dask); :class:`MultipleShooting` fits long series in
segments. The problem needs a vjp of its right-hand side:
generated exactly by :class:`scichains.ode.SymbolicModel`, or written by hand (check it with
:func:`check_vjp`; a gradient with :func:`check_gradient`).
"""

from ._check import DerivativeCheck, check_gradient, check_vjp
from ._continuous import continuous_adjoint
from ._discrete import discrete_adjoint, find_save_positions, squared_error
from ._ensemble import EnsembleObjective
from ._gradient import Objective, ScipyFun, gradient
from ._loss import (
    EventTimeLoss,
    HuberLoss,
    LogNormalLoss,
    PointwiseLoss,
    SolutionLoss,
    SquaredError,
    TooFewEvents,
    UndefinedLoss,
)
from ._multi import MultiObjective, Trajectory, minibatches
from ._sensealg import (
    BacksolveAdjoint,
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    QuadratureAdjoint,
    SensitivityAlgorithm,
)
from ._shooting import MultipleShooting

__all__ = [
    "BacksolveAdjoint",
    "DerivativeCheck",
    "DiscreteAdjoint",
    "EnsembleObjective",
    "EventTimeLoss",
    "ForwardSensitivity",
    "HuberLoss",
    "InterpolatingAdjoint",
    "LogNormalLoss",
    "MultiObjective",
    "MultipleShooting",
    "Objective",
    "PointwiseLoss",
    "QuadratureAdjoint",
    "ScipyFun",
    "SensitivityAlgorithm",
    "SolutionLoss",
    "SquaredError",
    "TooFewEvents",
    "Trajectory",
    "UndefinedLoss",
    "check_gradient",
    "check_vjp",
    "discrete_adjoint",
    "find_save_positions",
    "gradient",
    "minibatches",
    "continuous_adjoint",
    "squared_error",
]
