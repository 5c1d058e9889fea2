"""scichains.adjoint: gradients of losses on ODE solutions.

This version provides the discrete adjoint for neural ODEs (``DiscreteAdjoint``), used by
:class:`scichains.models.NeuralODE`.
"""

from ._discrete import (
    chain_discrete_adjoint,
    find_save_positions,
    squared_error,
)


class DiscreteAdjoint:
    """Back-propagate through the accepted Runge-Kutta steps: the exact gradient of the
    discretised solution (step sizes held fixed)."""

    def __repr__(self) -> str:
        return "DiscreteAdjoint()"


__all__ = [
    "DiscreteAdjoint",
    "chain_discrete_adjoint",
    "find_save_positions",
    "squared_error",
]
