"""A SimpleChain inside the dynamics with a random effect as input (DeepPumas style): the
expansion against the chain, the two sensitivity systems against each other, the OFV
gradient against central differences."""

import numpy as np
import pytest
import sympy as sp

import scichains as sc
from scichains import pk

from .models import nn_model, theoph_subset


def test_network_terms_are_checked():
    x, y = sp.symbols("x y")
    with pytest.raises(ValueError, match="activation relu is not smooth"):
        pk.Network(sc.SimpleChain(2, sc.Dense(3, "relu"), sc.Dense(1)), [x, y])
    with pytest.raises(ValueError, match=r"input shape \(2,\), but 1 input"):
        pk.Network(sc.SimpleChain(2, sc.Dense(1)), [x])
    with pytest.raises(ValueError, match=r"weights must have shape \(3,\)"):
        pk.Network(sc.SimpleChain(2, sc.Dense(1)), [x, y], weights=np.zeros(4))
    net = pk.Network(sc.SimpleChain(2, sc.Dense(3, "softplus"), sc.Dense(2, "gelu")), [x, y])
    fn = sp.lambdify([x, y, *net.phi_symbols], net.expressions)
    X = np.array([[0.3, -1.2], [2.0, 0.1]])
    got = np.array([fn(*row, *net.weights0) for row in X])
    np.testing.assert_allclose(got, net.chain(X, net.weights0), rtol=1e-12)


def test_model_holds_the_weights_as_typical_values():
    model = nn_model()
    names = model.parameter_names()
    assert names[:3] == ["tka", "tcl", "tv"] and names[3:6] == [f"nn_w{k}" for k in range(3)]
    np.testing.assert_array_equal(model.theta0[3:6], model.networks[0].weights0)
    along_phi, along_z = model.system_sizes(2)
    assert along_z < along_phi  # 2 x 34 vs 2 x 36: the eta/theta system is used


@pytest.mark.slow  # two 70-equation systems to generate and compile (minutes when cold)
def test_both_systems_give_the_same_ofv_and_gradient():
    model = nn_model()
    data = theoph_subset(2)
    x = model.pack()
    a = pk.PopulationObjective(model, data, sensitivities="phi", rtol=1e-10, atol=1e-12)
    b = pk.PopulationObjective(model, data, sensitivities="directions", rtol=1e-10, atol=1e-12)
    fa, ga = a.value_and_grad(x)
    fb, gb = b.value_and_grad(x)
    assert fa == pytest.approx(fb, abs=1e-8)
    np.testing.assert_allclose(ga, gb, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_ofv_gradient_through_the_network_matches_central_differences():
    model = nn_model()
    data = theoph_subset(3)
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    assert obj.sensitivities == "directions"
    x = model.pack()
    f, g = obj.value_and_grad(x)
    fd = np.zeros_like(x)
    for k in range(x.size):
        e = np.eye(x.size)[k] * 1e-4
        fd[k] = (obj.value(x + e) - obj.value(x - e)) / 2e-4
    np.testing.assert_allclose(g, fd, rtol=2e-5, atol=2e-5)
    assert np.max(np.abs(g[3:6])) > 1e-2  # the weights matter
