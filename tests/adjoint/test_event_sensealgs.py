"""Gradients through state-dependent events by forward sensitivities (the jump of
du/d(p, u0) at each event) and by the continuous adjoints (the adjoint's jump between pieces
integrated backward), against the closed form, central differences and the discrete
adjoint."""

import numba
import numpy as np
import pytest
from ode._ball import bounce, falling, ground

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

FWD = adjoint.ForwardSensitivity()
SENSEALGS = [
    FWD,
    adjoint.InterpolatingAdjoint(),
    adjoint.QuadratureAdjoint(),
    adjoint.BacksolveAdjoint(),
]


# the cases whose tests CVODE's adjoint shares (more of its own: test_cvode_events.py)
CASES = [(ode.Tsit5(), s) for s in SENSEALGS] + [(ode.CVODE_BDF(), adjoint.InterpolatingAdjoint())]
CASE_IDS = [type(s).__name__ for s in SENSEALGS] + ["CVODE_BDF"]


def _fired(obj):
    if isinstance(obj.solver, ode.CVODE_BDF):
        return obj.method._found.count
    plan = obj.method._aug if isinstance(obj.sensealg, adjoint.ForwardSensitivity) else obj.plan
    return int(plan.events.table.state[0])


@pytest.mark.parametrize("sensealg", SENSEALGS, ids=lambda s: type(s).__name__)
def test_bouncing_ball_gradient_matches_the_closed_form(sensealg):
    # the floor, for the other sensitivity methods: eleven landings, rtol 1e-10, the
    # gradient in the drop height, restitution and gravity within 1e-8 of the closed form
    prob, data, T, loss, want = ball_after_eleven_landings()
    obj = adjoint.Objective(
        prob, adjoint.SquaredError(data), [T], solver=ode.Tsit5(), sensealg=sensealg,
        rtol=1e-10, atol=1e-12, events=ode.Event(ground, bounce, direction=-1),
    )  # fmt: skip
    assert_ball_gradient(obj, loss, want)
    assert _fired(obj) == 11


@pytest.mark.parametrize("sensealg", SENSEALGS, ids=lambda s: type(s).__name__)
def test_through_events_against_differences_and_the_discrete_adjoint(sensealg):
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    event = ode.Event(prey_high, harvest, direction=1)
    data = ode.solve(prob, ode.Tsit5(), saveat=saveat, rtol=1e-6).u * 1.1
    kw = dict(solver=ode.Tsit5(), rtol=1e-12, atol=1e-14, events=event)
    obj = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, sensealg=sensealg, **kw)
    value, dp, du0 = obj.value_and_grad()
    assert _fired(obj) >= 3
    _assert_central_differences(obj, prob, value, dp, du0)
    disc = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, **kw)
    v2, dp2, du02 = disc.value_and_grad()
    assert value == pytest.approx(v2, rel=1e-9)
    np.testing.assert_allclose(dp, dp2, rtol=1e-7)
    np.testing.assert_allclose(du0, du02, rtol=1e-7)


@pytest.mark.parametrize(("solver", "sensealg"), CASES, ids=CASE_IDS)
def test_an_event_without_an_affect(solver, sensealg):
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    data = np.ones((24, 2))
    kw = dict(solver=solver, sensealg=sensealg, rtol=1e-10, atol=1e-12)
    plain = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, **kw)
    marked = adjoint.Objective(
        prob, adjoint.SquaredError(data), saveat, events=ode.Event(prey_high), **kw
    )
    v0, dp0, du00 = plain.value_and_grad()
    v1, dp1, du01 = marked.value_and_grad()
    assert _fired(marked) > 0
    # the event's landing changes the steps: equal at the tolerance's level (CVODE's steps
    # move more with it)
    cvode = isinstance(solver, ode.CVODE_BDF)
    assert v1 == pytest.approx(v0, rel=1e-7 if cvode else 1e-8)
    np.testing.assert_allclose(dp1, dp0, rtol=1e-5 if cvode else 1e-6)
    np.testing.assert_allclose(du01, du00, rtol=1e-5 if cvode else 1e-6)


@pytest.mark.parametrize("sensealg", SENSEALGS, ids=lambda s: type(s).__name__)
def test_a_terminal_event(sensealg):
    g, h = 9.81, 1.3
    prob = ode.ODEProblem(falling, np.array([h, 0.0]), (0.0, 5.0), np.array([g, 0.8]))
    data = np.array([[1.0, -2.0], [0.5, -4.0]])
    end = ode.Event(ground, bounce, direction=-1, terminal=True)
    kw = dict(solver=ode.Tsit5(), sensealg=sensealg, rtol=1e-10, atol=1e-12, events=end)
    obj = adjoint.Objective(prob, adjoint.SquaredError(data), [0.2, 0.4], **kw)
    _assert_central_differences(obj, prob, *obj.value_and_grad())
    late = adjoint.Objective(prob, adjoint.SquaredError(np.ones((1, 2))), [1.0], **kw)
    with pytest.raises(adjoint.UndefinedLoss, match="terminal event ended the solve"):
        late.value_and_grad()


@pytest.mark.parametrize("sensealg", SENSEALGS, ids=lambda s: type(s).__name__)
def test_a_loss_on_the_landing_time(sensealg):
    # the time the ball first lands, tau = sqrt(2 h / g): d tau / d g = -tau / (2 g),
    # d tau / d h = 1 / sqrt(2 h g), d tau / d v0 = 1 / g at v0 = 0
    g, h = 9.81, 1.3
    prob = ode.ODEProblem(falling, np.array([h, 0.0]), (0.0, 5.0), np.array([g, 0.8]))
    obj = adjoint.Objective(
        prob, None, None, solver=ode.Tsit5(), sensealg=sensealg, rtol=1e-10, atol=1e-12,
        events=ode.Event(ground, direction=-1, terminal=True),
        event_loss=adjoint.EventTimeLoss([0.5]),
    )  # fmt: skip
    assert_landing_time_gradient(obj, g, h)


STIFF = [ode.Rodas5P(), ode.KenCarp4(), ode.RadauIIA5()]


@pytest.mark.parametrize("solver", STIFF, ids=lambda s: s.name)
def test_the_stiff_interpolating_adjoint_through_events(solver):
    """The stiff methods' InterpolatingAdjoint (integrated backward by a Rosenbrock method)
    in pieces between the events: the harvest model against central differences and the
    discrete adjoint of Rodas5P."""
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    event = ode.Event(prey_high, harvest, direction=1)
    data = ode.solve(prob, ode.Tsit5(), saveat=saveat, rtol=1e-6).u * 1.1
    kw = dict(rtol=1e-11, atol=1e-13, events=event)
    obj = adjoint.Objective(
        prob, adjoint.SquaredError(data), saveat, solver=solver,
        sensealg=adjoint.InterpolatingAdjoint(), **kw,
    )  # fmt: skip
    value, dp, du0 = obj.value_and_grad()
    assert _fired(obj) >= 3
    _assert_central_differences(obj, prob, value, dp, du0)
    disc = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, solver=ode.Rodas5P(), **kw)
    v2, dp2, du02 = disc.value_and_grad()
    assert value == pytest.approx(v2, rel=1e-7)
    np.testing.assert_allclose(dp, dp2, rtol=1e-5)
    np.testing.assert_allclose(du0, du02, rtol=1e-5)


def test_forward_sensitivities_of_landing_times_and_states_against_differences():
    # a loss on the first three landing times and on the state at two save times, through
    # two bounces: forward sensitivities against central differences and the discrete adjoint
    prob = ode.ODEProblem(falling, np.array([1.2, 0.5]), (0.0, 2.0), np.array([9.81, 0.8]))
    kw = dict(
        solver=ode.Tsit5(), rtol=1e-11, atol=1e-13,
        events=ode.Event(ground, bounce, direction=-1),
        event_loss=adjoint.EventTimeLoss([0.5, 1.2, 1.7]),
    )  # fmt: skip
    data = np.array([[0.4, 1.0], [0.2, -1.0]])
    fwd = adjoint.Objective(prob, adjoint.SquaredError(data), [0.8, 1.5], sensealg=FWD, **kw)
    value, dp, du0 = fwd.value_and_grad()
    _assert_central_differences(fwd, prob, value, dp, du0)
    disc = adjoint.Objective(prob, adjoint.SquaredError(data), [0.8, 1.5], **kw)
    v2, dp2, du02 = disc.value_and_grad()
    assert value == pytest.approx(v2, rel=1e-9)
    np.testing.assert_allclose(dp, dp2, rtol=1e-7)
    np.testing.assert_allclose(du0, du02, rtol=1e-7)


@numba.njit
def fragile_condition(u, t, p):
    if t > 3.0:
        raise ValueError("no condition after t = 3")
    return u[0] - p[4]


@pytest.mark.parametrize(("solver", "sensealg"), CASES, ids=CASE_IDS)
def test_an_error_in_an_event_function_reaches_the_user(solver, sensealg):
    """The user's exception, named with its event, for every method (forward sensitivities
    wrap the user's functions: the error is reproduced with the user's own, at the state's
    first n entries; it crashed the process before)."""
    prob = _harvest_problem()
    for event, what in (
        (ode.Event(prey_high, fragile_affect, direction=1), "affect of events"),
        (ode.Event(fragile_condition), "condition of events"),
    ):
        obj = adjoint.Objective(
            prob, adjoint.SquaredError(np.ones((2, 2))), [5.0, 10.0], solver=solver,
            sensealg=sensealg, events=event,
        )  # fmt: skip
        with pytest.raises(ode.ODESolveError, match=what) as info:
            obj.value_and_grad()
        assert isinstance(info.value.__cause__, ValueError)
