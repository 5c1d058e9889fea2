"""Gradients through state-dependent events with CVODE (its own root finding; the adjoint
integrated backward by CVODE in pieces between the events, the adjoint's jump applied at
each): against the bouncing ball's closed form, central differences, the Rosenbrock discrete
adjoint, and with losses on the event times."""

import numpy as np
import pytest
from ode._ball import bounce, falling, ground

from adjoint.test_event_sensealgs import fragile_condition
from adjoint.test_events import (
    _assert_central_differences,
    _harvest_problem,
    assert_ball_gradient,
    assert_landing_time_gradient,
    ball_after_eleven_landings,
    fragile_affect,
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


def test_an_event_without_an_affect_leaves_the_gradient_unchanged():
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    data = np.ones((24, 2))
    kw = dict(solver=CVODES[0], rtol=1e-10, atol=1e-12)
    plain = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, **kw)
    marked = adjoint.Objective(
        prob, adjoint.SquaredError(data), saveat, events=ode.Event(prey_high), **kw
    )
    v0, dp0, du00 = plain.value_and_grad()
    v1, dp1, du01 = marked.value_and_grad()
    assert _fired(marked) > 0
    assert v1 == pytest.approx(v0, rel=1e-7)
    np.testing.assert_allclose(dp1, dp0, rtol=1e-5)
    np.testing.assert_allclose(du01, du00, rtol=1e-5)


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


def test_an_error_in_an_event_function_reaches_the_user():
    prob = _harvest_problem()
    for event, what in (
        (ode.Event(prey_high, fragile_affect, direction=1), "affect of events"),
        (ode.Event(fragile_condition), "condition of events"),
    ):
        obj = adjoint.Objective(
            prob, adjoint.SquaredError(np.ones((2, 2))), [5.0, 10.0], solver=CVODES[0],
            events=event,
        )  # fmt: skip
        with pytest.raises(ode.ODESolveError, match=what) as info:
            obj.value_and_grad()
        assert isinstance(info.value.__cause__, ValueError)
