"""A SimpleChain inside the dynamics with a random effect as input (DeepPumas style): the
expansion against the chain, the two sensitivity systems against each other, the OFV
gradient against central differences. The systems build in seconds (no vjp, the right-hand
side's partial derivatives as intermediates, LLVM code generation), so these run by
default."""

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


def test_anchor_zeroes_the_term_at_the_anchor():
    t, z = sp.symbols("t z")
    chain = sc.SimpleChain(2, sc.Dense(3, "tanh"), sc.Dense(1, bias=False))
    net = pk.Network(chain, [t / 10, z], anchor={t: 0}, seed=3)
    fn = sp.lambdify([t, z, *net.phi_symbols], net.expressions[0])
    w = net.weights0
    for zv in (-1.0, 0.4):
        assert fn(0.0, zv, *w) == 0.0
        ref = net.chain(np.array([0.5, zv]), w)[0] - net.chain(np.array([0.0, zv]), w)[0]
        assert fn(5.0, zv, *w) == pytest.approx(ref, rel=1e-12)
    with pytest.raises(ValueError, match="anchor: x is not a symbol of the network's inputs"):
        pk.Network(chain, [t / 10, z], anchor={sp.Symbol("x"): 0})


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


# 2 -> 1 (tanh); 2 -> 4 (tanh) -> 1 (slow: another system to build)
@pytest.mark.parametrize("hidden", [0, pytest.param(4, marks=pytest.mark.slow)])
def test_ofv_gradient_through_the_network_matches_central_differences(hidden):
    model = nn_model(hidden)
    data = theoph_subset(3)
    obj = pk.PopulationObjective(model, data, rtol=1e-11, atol=1e-13)
    assert obj.sensitivities == "directions"
    # what keeps the build fast: no vjp, the LLVM code generation
    system = model.directional(2).model
    assert not system.has_vjp and system.rhs_codegen == "llvm"
    x = model.pack()
    f, g = obj.value_and_grad(x)
    assert np.max(np.abs(g[3 : model.p])) > 1e-2  # the weights matter
    if hidden == 0:  # every entry
        directions = np.eye(x.size)
    else:  # 17 weights: along random directions (each mixes every entry)
        directions = np.random.default_rng(1).standard_normal((3, x.size))
    h = 1e-4
    fd = np.array([(obj.value(x + h * d) - obj.value(x - h * d)) / (2 * h) for d in directions])
    np.testing.assert_allclose(directions @ g, fd, rtol=2e-5, atol=2e-5)
