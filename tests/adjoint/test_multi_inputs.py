"""Per-trajectory measured inputs: Trajectory(..., inputs=) in MultiObjective (each experiment
solved with its own Interpolation, ODEProblem.with_inputs) and in NeuralODE.objective. Values
against the closed-form convolution, gradients against central differences, the sums against
single Objectives, bad input named by trajectory."""

import numba
import numpy as np
import pytest
from ode._forced import TS, convolution, forced

import scichains as sc
from scichains import ode
from scichains.adjoint import MultiObjective, Objective, SquaredError, Trajectory
from scichains.models import NeuralODE

SIGNALS = [np.sin(1.3 * TS) + 0.2 * TS, np.cos(0.7 * TS), 1.0 + 0.1 * TS**2]
STARTS = [np.array([1.0]), np.array([0.2]), np.array([-0.5])]
SAVES = [np.linspace(1.0, 9.0, 9), np.linspace(0.5, 6.0, 12), np.array([2.0, 5.0, 7.5, 10.0])]
TOL = dict(rtol=1e-10, atol=1e-12)


def _experiments(k=0.8):
    interps = [ode.Interpolation(TS, s[:, None], kind="linear") for s in SIGNALS]
    data = [
        convolution(k, u0[0], TS, s, "linear", T)[:, None] + 0.05
        for u0, s, T in zip(STARTS, SIGNALS, SAVES)
    ]
    specs = [
        Trajectory(u0, T, d, inputs=interp)
        for u0, T, d, interp in zip(STARTS, SAVES, data, interps)
    ]
    prob = ode.ODEProblem(forced, STARTS[0], (0.0, 10.0), np.array([0.8]), inputs=interps[0])
    return prob, specs, interps, data


def test_each_trajectory_runs_on_its_own_inputs():
    prob, specs, interps, data = _experiments()
    multi = MultiObjective(prob, specs, solver=ode.Tsit5(), **TOL)
    p = np.array([0.6])
    value, gp, gu0 = multi.value_and_grad(p)
    total, grad = 0.0, np.zeros(1)
    for u0, T, d, interp in zip(STARTS, SAVES, data, interps):
        one = ode.ODEProblem(forced, u0, (0.0, float(T[-1])), p, inputs=interp)
        v, g, _ = Objective(one, SquaredError(d), T, solver=ode.Tsit5(), **TOL).value_and_grad(p)
        total += v
        grad += g
    assert value == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(gp, grad, rtol=1e-10)
    # against the closed form: the loss of the exact solutions
    exact = sum(
        float(np.sum((convolution(0.6, u0[0], TS, s, "linear", T)[:, None] - d) ** 2))
        for u0, s, T, d in zip(STARTS, SIGNALS, SAVES, data)
    )
    assert value == pytest.approx(exact, rel=1e-7)
    # gradients against central differences, in p and in each trajectory's u0
    u0 = np.stack(STARTS)
    h = 1e-6
    fd = (multi.value(p + h, u0) - multi.value(p - h, u0)) / (2 * h)
    assert gp[0] == pytest.approx(fd, rel=1e-6)
    for i in range(3):
        e = np.zeros_like(u0)
        e[i, 0] = h
        fd = (multi.value(p, u0 + e) - multi.value(p, u0 - e)) / (2 * h)
        assert gu0[i, 0] == pytest.approx(fd, rel=1e-6)
    # the inputs matter: with the problem's own inputs everywhere the loss is another
    shared = [Trajectory(s.u0, s.saveat, s.data) for s in specs]
    assert abs(MultiObjective(prob, shared, solver=ode.Tsit5(), **TOL).value(p) - value) > 1e-3


def test_bad_inputs_are_named_by_trajectory():
    prob, specs, interps, data = _experiments()
    two = ode.Interpolation(TS, np.zeros((TS.size, 2)))
    bad = [specs[0], Trajectory(STARTS[1], SAVES[1], data[1], inputs=two)]
    with pytest.raises(ValueError, match=r"trajectory 1: inputs must have the problem's 1"):
        MultiObjective(prob, bad)
    short = ode.Interpolation(TS[:5], SIGNALS[0][:5, None])
    with pytest.raises(ValueError, match=r"trajectory 0: .*tspan"):
        MultiObjective(prob, [Trajectory(STARTS[0], SAVES[0], data[0], inputs=short)])
    with pytest.raises(TypeError, match="trajectory 0: inputs must be a scichains.ode.Interp"):
        MultiObjective(prob, [Trajectory(STARTS[0], SAVES[0], data[0], inputs=SIGNALS[0])])

    @numba.njit
    def plain(du, u, p, t):
        du[0] = -p[0] * u[0]

    unforced = ode.ODEProblem(plain, STARTS[0], (0.0, 10.0), np.array([0.8]))
    with pytest.raises(TypeError, match="trajectory 0: this problem's right-hand side takes no"):
        MultiObjective(unforced, specs[:1])


def test_a_neural_ode_fits_experiments_with_inputs_of_their_own():
    ts = np.linspace(0.0, 2.0, 21)
    interps = [
        ode.Interpolation(ts, np.stack([np.sin(w * ts), np.cos(ts)], 1), kind="cubic")
        for w in (1.0, 3.0)
    ]
    chain = sc.SimpleChain(4, sc.Dense(8, "tanh"), sc.Dense(2))
    p = chain.init_params(seed=1, dtype=np.float64)
    saveat = np.linspace(0.2, 2.0, 10)
    node = NeuralODE(chain, (0.0, 2.0), saveat, inputs=interps[0], **TOL)
    u0 = np.array([0.5, -0.3])
    data = [np.zeros((saveat.size, 2)) + 0.1 * j for j in range(2)]
    specs = [Trajectory(u0, saveat, d, inputs=interp) for d, interp in zip(data, interps)]
    obj = node.objective(specs)
    assert isinstance(obj, MultiObjective)
    value, gp, _ = obj.value_and_grad(p)
    # each experiment's loss is that of the model built on its inputs
    want = 0.0
    for d, interp in zip(data, interps):
        alone = NeuralODE(chain, (0.0, 2.0), saveat, inputs=interp, **TOL)
        want += float(np.sum((alone.predict(u0, p) - d) ** 2))
    assert value == pytest.approx(want, rel=1e-9)
    h = 1e-6
    for j in (0, 7, p.size - 1):
        e = np.zeros_like(p)
        e[j] = h
        fd = (obj.value(p + e) - obj.value(p - e)) / (2 * h)
        assert gp[j] == pytest.approx(fd, rel=1e-5, abs=1e-8)
