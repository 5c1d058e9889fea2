"""scichains.models: NeuralODE, and population (mixed-effects) objectives for UDEs."""

from ._neural_ode import NeuralODE
from ._population import Population, SubjectData

__all__ = ["NeuralODE", "Population", "SubjectData"]
