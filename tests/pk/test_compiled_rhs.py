"""A plain compiled right-hand side in a PKModel: traced to SymPy, the same objective."""

import numba
import numpy as np
import pytest

from scichains import pk

from .models import oral_model, theoph_subset


@numba.njit
def one_compartment(du, u, p, t):
    # u: depot, center; p: ka, cl, v (the order of the model's individual parameters)
    du[0] = -p[0] * u[0]
    du[1] = p[0] * u[0] - p[1] / p[2] * u[1]


@numba.njit
def with_a_branch(du, u, p, t):
    du[0] = -p[0] * u[0] if u[0] > 1.0 else 0.0
    du[1] = p[0] * u[0] - p[1] / p[2] * u[1]


def test_compiled_rhs_gives_the_sympy_model_s_objective_and_gradient():
    data = theoph_subset(3)
    a = oral_model()
    b = oral_model(odes=one_compartment)
    x = a.pack(theta=[0.4, 1.0, 3.5])
    fa, ga = pk.PopulationObjective(a, data).value_and_grad(x)
    fb, gb = pk.PopulationObjective(b, data).value_and_grad(x)
    assert fb == pytest.approx(fa, rel=1e-12)
    np.testing.assert_allclose(gb, ga, rtol=1e-9, atol=1e-10)


def test_untraceable_rhs_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="cannot be traced to SymPy"):
        oral_model(odes=with_a_branch)
