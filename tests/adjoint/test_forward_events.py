"""Forward sensitivities through state-dependent events (ForwardSensitivity with events=):
the jump of du/d(p, u0) at each event, against the closed form, central differences and the
discrete adjoint."""

import numpy as np
import pytest
import sympy as sp
from ode._ball import bounce, falling, ground

from adjoint.test_events import (
    _assert_central_differences,
    _ball_closed_form,
    _harvest_problem,
    harvest,
    prey_high,
)
from scichains import adjoint, ode

FWD = adjoint.ForwardSensitivity()


def test_bouncing_ball_forward_sensitivities_match_the_closed_form():
    # the floor for the discrete adjoint, here for forward sensitivities: eleven
    # landings, rtol 1e-10, the gradient in the drop height, restitution and gravity within
    # 1e-8 of the closed form
    x0, e, g = 1.0, 0.8, 9.81
    v1 = np.sqrt(2 * g * x0)
    tau = [np.sqrt(2 * x0 / g)]
    for k in range(1, 12):
        tau.append(tau[-1] + 2 * e**k * v1 / g)
    T = 0.5 * (tau[10] + tau[11])
    data = np.array([[0.3, -0.2]])
    X0, E, G = sp.symbols("x0 e g", positive=True)
    state = _ball_closed_form(X0, E, G, T, 11)
    loss = sum((state[k] - data[0, k]) ** 2 for k in range(2))
    at = {X0: x0, E: e, G: g}
    want = {s: float(sp.diff(loss, s).subs(at)) for s in (X0, E, G)}
    prob = ode.ODEProblem(falling, np.array([x0, 0.0]), (0.0, T), np.array([g, e]))
    obj = adjoint.Objective(
        prob, adjoint.SquaredError(data), [T], solver=ode.Tsit5(), sensealg=FWD,
        rtol=1e-10, atol=1e-12, events=ode.Event(ground, bounce, direction=-1),
    )  # fmt: skip
    value, dp, du0 = obj.value_and_grad()
    assert value == pytest.approx(float(loss.subs(at)), rel=1e-10)
    assert du0[0] == pytest.approx(want[X0], rel=1e-8)
    assert dp[1] == pytest.approx(want[E], rel=1e-8)
    assert dp[0] == pytest.approx(want[G], rel=1e-8)


def test_forward_sensitivities_through_events_match_differences_and_the_adjoint():
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    event = ode.Event(prey_high, harvest, direction=1)
    data = ode.solve(prob, ode.Tsit5(), saveat=saveat, rtol=1e-6).u * 1.1
    kw = dict(solver=ode.Tsit5(), rtol=1e-12, atol=1e-14, events=event)
    fwd = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, sensealg=FWD, **kw)
    value, dp, du0 = fwd.value_and_grad()
    assert int(fwd.method._aug.events.table.state[0]) >= 3
    _assert_central_differences(fwd, prob, value, dp, du0)
    disc = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, **kw)
    v2, dp2, du02 = disc.value_and_grad()
    assert value == pytest.approx(v2, rel=1e-9)
    np.testing.assert_allclose(dp, dp2, rtol=1e-7)
    np.testing.assert_allclose(du0, du02, rtol=1e-7)


def test_forward_sensitivities_with_an_event_without_an_affect():
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    data = np.ones((24, 2))
    kw = dict(solver=ode.Tsit5(), sensealg=FWD, rtol=1e-10, atol=1e-12)
    plain = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, **kw)
    marked = adjoint.Objective(
        prob, adjoint.SquaredError(data), saveat, events=ode.Event(prey_high), **kw
    )
    v0, dp0, du00 = plain.value_and_grad()
    v1, dp1, du01 = marked.value_and_grad()
    assert marked.method._aug.events.table.state[0] > 0
    assert v1 == pytest.approx(v0, rel=1e-8)
    np.testing.assert_allclose(dp1, dp0, rtol=1e-6)
    np.testing.assert_allclose(du01, du00, rtol=1e-6)


def test_forward_sensitivities_and_a_terminal_event():
    g, h = 9.81, 1.3
    prob = ode.ODEProblem(falling, np.array([h, 0.0]), (0.0, 5.0), np.array([g, 0.8]))
    data = np.array([[1.0, -2.0], [0.5, -4.0]])
    end = ode.Event(ground, bounce, direction=-1, terminal=True)
    kw = dict(solver=ode.Tsit5(), sensealg=FWD, rtol=1e-10, atol=1e-12, events=end)
    obj = adjoint.Objective(prob, adjoint.SquaredError(data), [0.2, 0.4], **kw)
    _assert_central_differences(obj, prob, *obj.value_and_grad())
    late = adjoint.Objective(prob, adjoint.SquaredError(np.ones((1, 2))), [1.0], **kw)
    with pytest.raises(adjoint.UndefinedLoss, match="terminal event ended the solve"):
        late.value_and_grad()


def test_forward_sensitivities_refuse_a_loss_on_event_times():
    prob = ode.ODEProblem(falling, np.array([1.0, 0.0]), (0.0, 5.0), np.array([9.81, 0.8]))
    with pytest.raises(TypeError, match="event_loss.*DiscreteAdjoint"):
        adjoint.Objective(
            prob, None, None, solver=ode.Tsit5(), sensealg=FWD,
            events=ode.Event(ground, direction=-1, terminal=True),
            event_loss=adjoint.EventTimeLoss([0.5]),
        )  # fmt: skip
