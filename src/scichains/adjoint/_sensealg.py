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


class InterpolatingAdjoint(SensitivityAlgorithm):
    """Integrate the continuous adjoint ODE backward with the forward method's tableau and
    step-size control, reading ``u(t)`` from the forward solve's stored steps (cubic Hermite).
    The default. Its gradient approximates the exact one to the tolerances; ``rtol``/``atol``
    of the backward solve default to the forward solve's.
    """

    def __init__(self, rtol: float | None = None, atol: float | None = None):
        self.rtol = rtol
        self.atol = atol

    def __repr__(self) -> str:
        return f"InterpolatingAdjoint(rtol={self.rtol}, atol={self.atol})"
