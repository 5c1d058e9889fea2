"""Population objective: gradient against float64 central differences, with doses and a
parameter-dependent initial state."""

import numpy as np
import pytest
import sympy as sp

from scichains.models import Population, SubjectData
from scichains.ode import SymbolicModel


def _model():
    a, c, r, lka, lke, lkin = sp.symbols("a c r lka lke lkin")
    ka, ke, kin = sp.exp(lka), sp.exp(lke), sp.exp(lkin)
    # one compartment plus a response with baseline r(0) = kin (depends on the parameters)
    return SymbolicModel([a, c, r], [lka, lke, lkin], [-ka * a, ka * a - ke * c, kin - r + c])


def _population():
    model = _model()
    rng = np.random.default_rng(0)
    subjects = []
    for dose in (1.0, 2.0, 0.5):
        t = np.linspace(0.5, 8.0, 12)
        y = np.stack([np.zeros(12), rng.uniform(0.1, 1, 12), rng.uniform(0.5, 2, 12)], 1)
        w = np.array([0.0, 1.0, 0.5])

        def u0(p):
            J = np.zeros((3, 3))
            J[2, 2] = np.exp(p[2])
            return np.array([0.0, 0.0, np.exp(p[2])]), J

        subjects.append(
            SubjectData(
                t=t,
                y=y,
                weights=np.broadcast_to(w, y.shape),
                u0=u0,
                jumps=[(0.0, 0, dose), (4.0, 0, dose)],
                tspan=(0.0, 8.0),
            )
        )
    return Population(model, subjects, eta_index=[0, 1], omega=[0.3, 0.2], rtol=1e-10, atol=1e-12)


def test_population_gradient_against_differences():
    pop = _population()
    rng = np.random.default_rng(1)
    z = pop.pack(np.log([0.8, 0.3, 1.2]), 0.2 * rng.standard_normal((3, 2)))
    value, g = pop.value_and_grad(z)
    h = 1e-6
    fd = np.array(
        [
            (pop.value_and_grad(z + h * e)[0] - pop.value_and_grad(z - h * e)[0]) / (2 * h)
            for e in np.eye(z.size)
        ]
    )
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
    # the prior term alone, by hand
    _, etas = pop.split(z)
    assert value > np.sum(etas**2 / np.array([0.3, 0.2]) ** 2)
    assert pop.individual(z, 1)[0] == pytest.approx(z[0] + etas[1, 0])


def test_bad_population_input():
    pop = _population()
    with pytest.raises(ValueError, match="z must have shape"):
        pop.value_and_grad(np.zeros(3))
    with pytest.raises(ValueError, match="one omega"):
        Population(_model(), pop.subjects, eta_index=[0, 1], omega=[0.3])
