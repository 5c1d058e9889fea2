"""scichains.models: neural ODEs (and, later, universal differential equations)."""

from ._neural_ode import NeuralODE

__all__ = ["NeuralODE"]
