"""The sensitivity algorithms: how :func:`scichains.adjoint.gradient` differentiates a solve."""

from __future__ import annotations


class SensitivityAlgorithm:
    """Base class of the ``sensealg`` choices."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class DiscreteAdjoint(SensitivityAlgorithm):
    """Back-propagate through the accepted Runge-Kutta steps: the exact gradient of the
    discretised solution (step sizes held fixed), what an optimiser actually sees. Keeps the
    stages of every step (memory ``steps x stages x n``)."""
