"""Gradients through state-dependent events with CVODE (its own root finding; the adjoint
integrated backward by CVODE in pieces between the events, the adjoint's jump applied at
each): against the bouncing ball's closed form, central differences, the Rosenbrock discrete
adjoint, and with losses on the event times. A marker event and errors in event functions
with CVODE: ``test_event_sensealgs.py`` (its cases include CVODE)."""

import numpy as np
import pytest
from ode._ball import bounce, falling, ground

from adjoint.test_events import (
    _assert_central_differences,
    _harvest_problem,
    assert_ball_gradient,
    assert_landing_time_gradient,
    ball_after_eleven_landings,
    harvest,
    prey_high,
)
from scichains import adjoint, ode

CVODES = [ode.CVODE_BDF(), ode.CVODE_Adams()]


def _fired(obj) -> int:
    return obj.method._found.count


@pytest.mark.parametrize("solver", CVODES, ids=lambda s: s.name)
def test_bouncing_ball_gradient_matches_the_closed_form(solver):
    # the floor with CVODE: eleven landings, the gradient in the drop height,
    # restitution and gravity within 1e-8 of the closed form (measured 1.5e-10 for BDF and
    # 9e-12 for Adams at rtol 1e-12)
    prob, data, T, loss, want = ball_after_eleven_landings()
    obj = adjoint.Objective(
        prob, adjoint.SquaredError(data), [T], solver=solver, rtol=1e-12, atol=1e-14,
        events=ode.Event(ground, bounce, direction=-1),
    )  # fmt: skip
    assert_ball_gradient(obj, loss, want)
    assert _fired(obj) == 11


def test_through_events_against_differences_and_the_rosenbrock_discrete_adjoint():
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    event = ode.Event(prey_high, harvest, direction=1)
    data = ode.solve(prob, ode.Tsit5(), saveat=saveat, rtol=1e-6).u * 1.1
    kw = dict(rtol=1e-12, atol=1e-14, events=event)
    obj = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, solver=CVODES[0], **kw)
    value, dp, du0 = obj.value_and_grad()
    assert _fired(obj) >= 3
    # CVODE's value moves by more than its tolerance between nearby points (its own step
    # choices): differences of 1e-4 (1e-6 gave 3e-5 relative noise, 1e-4 below 1e-6)
    _assert_central_differences(obj, prob, value, dp, du0, h=1e-4)
    ros = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, solver=ode.Rodas5P(), **kw)
    v2, dp2, du02 = ros.value_and_grad()
    assert value == pytest.approx(v2, rel=1e-8)
    np.testing.assert_allclose(dp, dp2, rtol=1e-7, atol=1e-8 * np.abs(dp2).max())
    np.testing.assert_allclose(du0, du02, rtol=1e-7)


def test_a_terminal_event_and_a_loss_on_the_landing_time():
    g, h = 9.81, 1.3
    prob = ode.ODEProblem(falling, np.array([h, 0.0]), (0.0, 5.0), np.array([g, 0.8]))
    end = ode.Event(ground, bounce, direction=-1, terminal=True)
    kw = dict(solver=CVODES[0], rtol=1e-12, atol=1e-14, events=end)
    data = np.array([[1.0, -2.0], [0.5, -4.0]])
    obj = adjoint.Objective(prob, adjoint.SquaredError(data), [0.2, 0.4], **kw)
    _assert_central_differences(obj, prob, *obj.value_and_grad(), h=1e-4)
    late = adjoint.Objective(prob, adjoint.SquaredError(np.ones((1, 2))), [1.0], **kw)
    with pytest.raises(adjoint.UndefinedLoss, match="terminal event ended the solve"):
        late.value_and_grad()
    # the time the ball first lands, tau = sqrt(2 h / g), against its closed-form derivatives
    timed = adjoint.Objective(
        prob, None, None, solver=CVODES[0], rtol=1e-12, atol=1e-14,
        events=ode.Event(ground, direction=-1, terminal=True),
        event_loss=adjoint.EventTimeLoss([0.5]),
    )  # fmt: skip
    assert_landing_time_gradient(timed, g, h)
