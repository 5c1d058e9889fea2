"""Gradients through the compiled stiff solvers (Rodas5P, Rosenbrock23, Kvaerno5, KenCarp4):
the interpolating adjoint integrated backward by a Rosenbrock method (the same one; Rodas5P
for the ESDIRK methods), against a closed form, float64 central differences and the CVODE
adjoint."""

import numpy as np
import pytest
import sympy as sp

from scichains import Dense, SimpleChain
from scichains.adjoint import DiscreteAdjoint, InterpolatingAdjoint, Objective, SquaredError
from scichains.adjoint._check import check_gradient
from scichains.ode import (
    CVODE_BDF,
    KenCarp4,
    Kvaerno5,
    NetworkTerm,
    Rodas5P,
    Rosenbrock23,
    SymbolicModel,
)

TIGHT = dict(rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("solver", [Rodas5P(), Rosenbrock23(), Kvaerno5(), KenCarp4()])
def test_stiff_gradient_against_the_closed_form(solver):
    """u' = -a (u - cos(b t)) - b sin(b t), u(0) = u0, stiff for a = 1e3, has the solution
    u = cos(b t) + (u0 - 1) exp(-a t): its exact derivatives are the reference."""
    u, a, b, t, u0s = sp.symbols("u a b t u0")
    model = SymbolicModel([u], [a, b], [-a * (u - sp.cos(b * t)) - b * sp.sin(b * t)], t=t)
    ts = np.array([0.001, 0.002, 0.005, 0.5, 1.0, 2.0, 3.0])
    data = np.linspace(0.2, -0.4, ts.size)
    exact = sp.cos(b * t) + (u0s - 1) * sp.exp(-a * t)
    L = sum((exact.subs(t, ti) - di) ** 2 for ti, di in zip(ts, data))
    at = {a: 1e3, b: 2.0, u0s: 3.0}
    ref = [float(sp.diff(L, s).subs(at)) for s in (a, b, u0s)]
    prob = model.problem([3.0], (0.0, 3.0), model.pack(a=1e3, b=2.0))
    tol = TIGHT if solver.order > 2 else dict(rtol=1e-8, atol=1e-10)
    obj = Objective(prob, SquaredError(data[:, None]), ts, solver=solver, **tol)
    assert isinstance(obj.sensealg, InterpolatingAdjoint)  # the default with a stiff solver
    value, dp, du0 = obj.value_and_grad()
    want = 1e-5 if solver.order > 2 else 1e-3
    assert value == pytest.approx(float(L.subs(at)), rel=want)
    np.testing.assert_allclose(dp, ref[:2], rtol=want)
    np.testing.assert_allclose(du0, ref[2:], rtol=want)
    st = obj.stats()
    assert st["adjoint_steps"] > 0 and st["vjp_calls"] > st["adjoint_steps"]
    with pytest.raises(TypeError, match="InterpolatingAdjoint"):
        Objective(prob, SquaredError(data[:, None]), ts, solver=solver, sensealg=DiscreteAdjoint())


def _tmdd_model():
    """Target-mediated drug disposition (Mager & Jusko 2001) with a depot, fast binding
    (kon R ~ 1e3: stiff), and a network term scaling the linear elimination."""
    A, L, R, P = sp.symbols("A L R P")
    ka, kel, kon, koff, kint, ksyn, kdeg = sp.symbols("ka kel kon koff kint ksyn kdeg")
    chain = SimpleChain(1, Dense(5, "tanh"), Dense(1))
    U = NetworkTerm(chain, [L])
    eqs = [
        -ka * A,
        ka * A - kel * (1 + U[0] ** 2) * L - kon * L * R + koff * P,
        ksyn - kdeg * R - kon * L * R + koff * P,
        kon * L * R - (koff + kint) * P,
    ]
    model = SymbolicModel([A, L, R, P], [ka, kel, kon, koff, kint, ksyn, kdeg], eqs, network=U)
    w = chain.init_params(seed=3, dtype=np.float64) * 0.5
    p = model.pack(ka=1.0, kel=0.1, kon=100.0, koff=1.0, kint=0.5, ksyn=1.0, kdeg=0.1, network=w)
    return model, p


def test_tmdd_with_network_and_doses_against_differences_and_cvode():
    model, p = _tmdd_model()
    u0 = [0.0, 0.0, 10.0, 0.0]
    prob = model.problem(u0, (0.0, 24.0), p)
    ts = np.linspace(0.5, 24.0, 16)
    doses = [(0.0, 0, 5.0), (12.0, 0, 5.0)]
    rng = np.random.default_rng(0)
    data = np.abs(rng.normal(1.0, 0.5, (ts.size, 4)))
    obj = Objective(prob, SquaredError(data), ts, solver=Rodas5P(), jumps=doses, **TIGHT)
    value, dp, du0 = obj.value_and_grad(p)
    check = check_gradient(obj.value_and_grad, p, rtol=1e-5)
    assert check.ok, check
    # dL/du0 by central differences too
    num = np.empty(4)
    for j in range(4):
        up, um = np.array(u0, float), np.array(u0, float)
        h = 1e-6 * max(1.0, abs(u0[j]))
        up[j] += h
        um[j] -= h
        num[j] = (obj.value(p, up) - obj.value(p, um)) / (2 * h)
    np.testing.assert_allclose(du0, num, rtol=1e-5, atol=1e-7)
    # the CVODE adjoint on the same problem agrees
    cv = Objective(prob, SquaredError(data), ts, solver=CVODE_BDF(), jumps=doses, **TIGHT)
    v2, dp2, du02 = cv.value_and_grad(p)
    assert value == pytest.approx(v2, rel=1e-7)
    np.testing.assert_allclose(dp, dp2, rtol=1e-4, atol=1e-8 * np.abs(dp).max())
    np.testing.assert_allclose(du0, du02, rtol=1e-4, atol=1e-8 * np.abs(du0).max())


def test_kvaerno5_gradient_with_network_and_doses_against_differences():
    """Kvaerno5 forward (landing on the save times), the adjoint by Rodas5P: dL/dp and dL/du0
    against float64 central differences of the Kvaerno5 loss."""
    model, p = _tmdd_model()
    u0 = np.array([0.0, 0.0, 10.0, 0.0])
    prob = model.problem(u0, (0.0, 24.0), p)
    ts = np.linspace(0.5, 24.0, 16)
    doses = [(0.0, 0, 5.0), (12.0, 0, 5.0)]
    data = np.abs(np.random.default_rng(0).normal(1.0, 0.5, (ts.size, 4)))
    obj = Objective(prob, SquaredError(data), ts, solver=Kvaerno5(), jumps=doses, **TIGHT)
    assert isinstance(obj.sensealg, InterpolatingAdjoint)
    value, dp, du0 = obj.value_and_grad(p)
    check = check_gradient(obj.value_and_grad, p, rtol=1e-5)
    assert check.ok, check
    num = np.empty(4)
    for j in range(4):
        up, um = u0.copy(), u0.copy()
        h = 1e-6 * max(1.0, abs(u0[j]))
        up[j] += h
        um[j] -= h
        num[j] = (obj.value(p, up) - obj.value(p, um)) / (2 * h)
    np.testing.assert_allclose(du0, num, rtol=1e-5, atol=1e-7)
    # the same loss as Rodas5P's at this tolerance
    ref = Objective(prob, SquaredError(data), ts, solver=Rodas5P(), jumps=doses, **TIGHT)
    assert value == pytest.approx(ref.value(p), rel=1e-7)
    st = obj.stats()
    assert st["jacobians"] < st["steps"]  # the forward pass reused its Jacobians
    with pytest.raises(TypeError, match="InterpolatingAdjoint.*backward by Rodas5P"):
        Objective(prob, SquaredError(data), ts, solver=Kvaerno5(), sensealg=DiscreteAdjoint())
