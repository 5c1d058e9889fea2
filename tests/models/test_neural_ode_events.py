"""NeuralODE(events=...): a network's dynamics run through state-dependent events, predicted
and differentiated through them. The network here is linear with weights that make it the
falling ball exactly (du0 = u1, du1 = -g), so the closed form of a bouncing ball checks it."""

import numba
import numpy as np
import pytest

import scichains as sc
from scichains import adjoint, ode
from scichains.models import NeuralODE

G, E, X0 = 9.81, 0.8, 1.0


@numba.njit
def ground(u, t, p):  # p: the network's weights (unused)
    return u[0]


@numba.njit
def bounce(u, t, p):
    u[1] = -0.8 * u[1]


def ball_chain():
    """``u -> W u + b`` with W = [[0, 1], [0, 0]], b = [0, -g] (Dense: W row-major, then b)."""
    chain = sc.SimpleChain(2, sc.Dense(2))
    p = np.array([0.0, 1.0, 0.0, 0.0, 0.0, -G])
    np.testing.assert_allclose(chain(np.array([[0.3, -0.5]]), p)[0], [-0.5, -G])
    return chain, p


def landings(k):
    v = np.sqrt(2 * G * X0)
    times = [np.sqrt(2 * X0 / G)]
    for _ in range(k - 1):
        v *= E
        times.append(times[-1] + 2 * v / G)
    return np.array(times)


def height(t):
    """The closed-form height of the ball at times ``t``."""
    tl = landings(20)
    out = np.empty_like(t)
    for i, s in enumerate(t):
        k = np.searchsorted(tl, s)
        if k == 0:
            out[i] = X0 - G * s**2 / 2
        else:
            v0 = E**k * np.sqrt(2 * G * X0)
            d = s - tl[k - 1]
            out[i] = v0 * d - G * d**2 / 2
    return out


def test_predictions_and_gradients_run_through_the_events():
    chain, p = ball_chain()
    saveat = np.linspace(0.1, 2.5, 25)
    node = NeuralODE(chain, (0.0, 2.5), saveat, rtol=1e-10, atol=1e-12,
                     events=ode.Event(ground, bounce, direction=-1))  # fmt: skip
    u0 = np.array([X0, 0.0])
    pred = node.predict(u0, p)
    np.testing.assert_allclose(pred[:, 0], height(saveat), atol=1e-9)
    # the gradient moves the bounce times with the weights and u0: central differences
    rng = np.random.default_rng(0)
    data = pred + 0.05 * rng.standard_normal(pred.shape)
    value, grad = node.loss_and_grad(u0, p, data)
    du0 = node.last_du0
    h = 1e-6
    for i in range(p.size):
        a, b = p.copy(), p.copy()
        a[i] += h
        b[i] -= h
        fd = (node.loss_and_grad(u0, a, data)[0] - node.loss_and_grad(u0, b, data)[0]) / (2 * h)
        assert grad[i] == pytest.approx(fd, rel=1e-5, abs=1e-6), i
    a, b = u0.copy(), u0.copy()
    a[0] += h
    b[0] -= h
    fd = (node.loss_and_grad(a, p, data)[0] - node.loss_and_grad(b, p, data)[0]) / (2 * h)
    assert du0[0] == pytest.approx(fd, rel=1e-5)
    # without the event the ball falls through the floor: the events did act
    plain = NeuralODE(chain, (0.0, 2.5), saveat, rtol=1e-10, atol=1e-12)
    assert plain.predict(u0, p)[-1, 0] < -20.0


def test_batches_are_solved_alone_with_their_events_and_lockstep_is_refused():
    chain, p = ball_chain()
    saveat = np.linspace(0.1, 2.0, 20)
    ev = ode.Event(ground, bounce, direction=-1)
    node = NeuralODE(chain, (0.0, 2.0), saveat, rtol=1e-10, atol=1e-12, events=ev)
    assert node.lockstep_size(16) is None
    u0 = np.array([[X0, 0.0], [X0, 0.0], [0.5, 1.0]])
    pred = node.predict(u0, p, threads=2)
    np.testing.assert_array_equal(pred[0], node.predict(u0[0], p))
    np.testing.assert_array_equal(pred[0], pred[1])
    assert pred[2, :, 0].min() > -1e-9  # every trajectory bounces
    data = np.zeros_like(pred)
    one = node.loss_and_grad(u0, p, data, threads=1)
    two = node.loss_and_grad(u0, p, data, threads=2)
    assert one[0] == two[0] and np.array_equal(one[1], two[1])
    with pytest.raises(ValueError, match="lockstep= with events="):
        NeuralODE(chain, (0.0, 2.0), saveat, events=ev, lockstep=4)
    with pytest.raises(TypeError, match="ode.Event"):
        NeuralODE(chain, (0.0, 2.0), saveat, events=[ground])


def tsit5_reference():
    """The ball network, its save times, u0, the event, noisy data, and Tsit5's discrete
    adjoint ``(loss, gradient, du0)`` at rtol 1e-10."""
    chain, p = ball_chain()
    saveat = np.linspace(0.1, 2.5, 25)
    u0 = np.array([X0, 0.0])
    event = ode.Event(ground, bounce, direction=-1)
    ref = NeuralODE(chain, (0.0, 2.5), saveat, rtol=1e-10, atol=1e-12, events=event)
    data = ref.predict(u0, p) + 0.05 * np.random.default_rng(0).standard_normal((25, 2))
    value, grad = ref.loss_and_grad(u0, p, data)
    return chain, p, saveat, u0, event, data, (value, grad, ref.last_du0.copy())


@pytest.mark.parametrize("solver", [ode.Rodas5P(), ode.CVODE_BDF()], ids=lambda s: s.name)
def test_the_stiff_solvers_and_cvode_agree_with_tsit5_through_the_events(solver):
    # Rodas5P by its discrete adjoint, CVODE by its adjoint integrated in pieces between the
    # events (measured: 8e-12 and 3e-10 of Tsit5's gradient)
    chain, p, saveat, u0, event, data, (want, want_grad, _) = tsit5_reference()
    node = NeuralODE(chain, (0.0, 2.5), saveat, rtol=1e-12, atol=1e-14, solver=solver, events=event)
    np.testing.assert_allclose(node.predict(u0, p)[:, 0], height(saveat), atol=1e-10)
    value, grad = node.loss_and_grad(u0, p, data)
    assert value == pytest.approx(want, rel=1e-8)
    np.testing.assert_allclose(grad, want_grad, rtol=0, atol=1e-7 * np.abs(want_grad).max())


@pytest.mark.parametrize(
    "sensealg",
    [adjoint.ForwardSensitivity(), adjoint.InterpolatingAdjoint(), adjoint.BacksolveAdjoint()],
    ids=lambda s: type(s).__name__,
)
def test_forward_and_continuous_sensitivities_agree_with_the_discrete_adjoint(sensealg):
    # forward sensitivities jump at each event through an affect that hands the network its
    # kernel (measured: 5.6e-12 of the discrete adjoint's gradient, each of the three)
    chain, p, saveat, u0, event, data, (want, want_grad, want_du0) = tsit5_reference()
    node = NeuralODE(
        chain, (0.0, 2.5), saveat, rtol=1e-10, atol=1e-12, events=event, sensealg=sensealg
    )
    value, grad = node.loss_and_grad(u0, p, data)
    assert value == pytest.approx(want, rel=1e-10)
    np.testing.assert_allclose(grad, want_grad, rtol=0, atol=1e-9 * np.abs(want_grad).max())
    np.testing.assert_allclose(node.last_du0, want_du0, rtol=1e-9)
