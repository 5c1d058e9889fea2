"""NeuralODE(inputs=): a neural ODE driven by measured signals, du/dt = chain([u, x(t)]; p).
Predictions against SciPy's DOP853 on the same network evaluated from Python with the same
interpolant; gradients against central differences; bad input named."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import scichains as sc
from scichains import adjoint, ode
from scichains.models import NeuralODE

TS = np.linspace(0.0, 2.0, 21)


def _forced(kind="cubic", seed=1):
    signal = np.stack([np.sin(3 * TS), np.cos(TS)], 1)
    interp = ode.Interpolation(TS, signal, kind=kind)
    chain = sc.SimpleChain(4, sc.Dense(8, "tanh"), sc.Dense(2))
    return interp, chain, chain.init_params(seed=seed, dtype=np.float64)


def _reference(chain, p, interp, u0, saveat):
    def f(t, u):
        z = np.concatenate([u, interp(t).ravel()])[None, :]
        return chain(z, p)[0]

    tstops = interp.ts[(interp.ts > 0) & (interp.ts < saveat[-1])]
    # the signal's knots split the integration (a cubic spline's derivatives jump there)
    out, t, u = [], 0.0, u0
    for stop in [*tstops, saveat[-1]]:
        keep = saveat[(saveat > t) & (saveat <= stop)]
        sol = solve_ivp(
            f,
            (t, stop),
            u,
            t_eval=np.unique(np.append(keep, stop)),
            rtol=1e-12,
            atol=1e-14,
            method="DOP853",
        )
        out.extend(sol.y.T[: keep.size])
        t, u = stop, sol.y.T[-1]
    return np.array(out)


@pytest.mark.parametrize("kind", ["linear", "cubic"])
def test_a_forced_neural_ode_follows_the_signal(kind):
    interp, chain, p = _forced(kind)
    saveat = np.linspace(0.1, 2.0, 10)
    node = NeuralODE(chain, (0.0, 2.0), saveat, rtol=1e-11, atol=1e-13, inputs=interp)
    u0 = np.array([0.5, -0.3])
    pred = node.predict(u0, p)
    ref = _reference(chain, p, interp, u0, saveat)
    np.testing.assert_allclose(pred, ref, rtol=0, atol=1e-9)  # measured 1.4e-12, 2.6e-11
    # the input matters: another signal, another solution
    other = ode.Interpolation(TS, np.zeros((TS.size, 2)), kind=kind)
    still = NeuralODE(chain, (0.0, 2.0), saveat, rtol=1e-11, atol=1e-13, inputs=other)
    assert np.abs(still.predict(u0, p) - pred).max() > 1e-2


def test_gradients_with_inputs_against_central_differences():
    interp, chain, p = _forced("linear")
    saveat = np.linspace(0.2, 2.0, 10)
    node = NeuralODE(chain, (0.0, 2.0), saveat, rtol=1e-10, atol=1e-12, inputs=interp)
    u0 = np.array([0.5, -0.3])
    data = node.predict(u0, p) + 0.1
    loss, g = node.loss_and_grad(u0, p, data)
    du0 = node.last_du0.copy()
    h = 1e-6
    fd = np.empty_like(p)
    for i in range(p.size):
        a, b = p.copy(), p.copy()
        a[i] += h
        b[i] -= h
        fd[i] = (node.loss_and_grad(u0, a, data)[0] - node.loss_and_grad(u0, b, data)[0]) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=0, atol=1e-6 * np.abs(fd).max())
    fd_u0 = np.empty(2)
    for i in range(2):
        a, b = u0.copy(), u0.copy()
        a[i] += h
        b[i] -= h
        fd_u0[i] = (node.loss_and_grad(a, p, data)[0] - node.loss_and_grad(b, p, data)[0]) / (2 * h)
    np.testing.assert_allclose(du0, fd_u0, rtol=1e-6, atol=1e-9)
    # many trajectories: the sum of the single ones, on any thread count
    U0 = np.array([[0.5, -0.3], [0.1, 0.2], [-0.4, 0.0]])
    D = np.stack([data] * 3)
    singles = [node.loss_and_grad(U0[i], p, D[i]) for i in range(3)]
    for threads in (1, 2):
        total, gsum = node.loss_and_grad(U0, p, D, threads=threads)
        assert total == singles[0][0] + singles[1][0] + singles[2][0]
        np.testing.assert_array_equal(gsum, singles[0][1] + singles[1][1] + singles[2][1])


def test_bad_input_with_inputs_is_named():
    interp, chain, p = _forced()
    with pytest.raises(ValueError, match="input must have size n \\+ 2 = 4"):
        NeuralODE(sc.SimpleChain(2, sc.Dense(2)), (0.0, 2.0), [1.0], inputs=interp)
    with pytest.raises(TypeError, match="Interpolation"):
        NeuralODE(chain, (0.0, 2.0), [1.0], inputs=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="lockstep"):
        NeuralODE(chain, (0.0, 2.0), [1.0], inputs=interp, lockstep=4)
    with pytest.raises(ValueError, match="leaves the range"):
        NeuralODE(chain, (0.0, 3.0), [1.0], inputs=interp)
    # a network right-hand side with inputs needs its vjp
    from scichains.models._node_inputs import _rhs_inputs_jit

    with pytest.raises(ValueError, match="needs its vjp"):
        ode.ODEProblem(
            _rhs_inputs_jit,
            np.zeros(2),
            (0.0, 1.0),
            p,
            kernel=chain.kernel(np.float64),
            inputs=interp,
        )


@pytest.mark.parametrize("kind", ["constant", "linear", "cubic"])
def test_gradients_with_respect_to_the_input_samples_of_a_trained_model(kind):
    # optimal control through a learned model: the problem of a NeuralODE with inputs, its
    # samples made parameters; the gradient's tail against central differences of the loss
    # in each sample, for the discrete adjoint and forward sensitivities
    interp, chain, w = _forced(kind)
    saveat = np.linspace(0.2, 2.0, 10)
    node = NeuralODE(chain, (0.0, 2.0), saveat, rtol=1e-11, atol=1e-13, inputs=interp)
    u0 = np.array([0.5, -0.3])
    prob = node.problem(u0, w).with_input_parameters()
    np.testing.assert_array_equal(prob.p[prob.input_slice], interp.values.ravel())
    target = np.full((saveat.size, 2), 0.2)
    for sensealg in (adjoint.DiscreteAdjoint(), adjoint.ForwardSensitivity()):
        obj = adjoint.Objective(
            prob, adjoint.SquaredError(target), saveat, rtol=1e-11, atol=1e-13, sensealg=sensealg
        )
        value, dp, _ = obj.value_and_grad(prob.p, u0)
        pred = node.predict(u0, w)
        assert value == pytest.approx(np.sum((pred - target) ** 2), rel=1e-9)
        for r in [0, 3, 17, 40 - 1]:
            e = np.zeros(prob.p.size)
            e[prob.input_slice.start + r] = 1e-4  # (1e-6 is lost in the solves' noise)
            fd = (obj.value(prob.p + e, u0) - obj.value(prob.p - e, u0)) / 2e-4
            assert dp[prob.input_slice.start + r] == pytest.approx(fd, rel=1e-5, abs=1e-8), r
        # the weights' part is the model's own gradient
        np.testing.assert_allclose(
            dp[: w.size], node.loss_and_grad(u0, w, target)[1], rtol=1e-8, atol=1e-10
        )


def test_a_network_problem_without_its_models_vjp_is_refused_input_parameters():
    interp, chain, w = _forced("linear")
    node = NeuralODE(chain, (0.0, 2.0), np.array([1.0]), inputs=interp)
    prob = node.problem(np.zeros(2), w)
    del prob.input_split_vjp  # a network right-hand side made by hand has none
    with pytest.raises(TypeError, match="network kernels needs the vjp"):
        prob.with_input_parameters()
