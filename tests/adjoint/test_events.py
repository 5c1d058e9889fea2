"""Gradients through state-dependent events (the discrete adjoint with the event-time
correction): against a closed form and against central differences of the forward solve."""

import numba
import numpy as np
import pytest
import sympy as sp
from ode._ball import bounce, falling, ground

from scichains import adjoint, ode


def _ball_closed_form(x0, e, g, T, landings):
    """The ball's state at ``T``, after ``landings`` landings, dropped from rest at ``x0``."""
    v1 = sp.sqrt(2 * g * x0)
    tau = sp.sqrt(2 * x0 / g)
    for k in range(1, landings):
        tau = tau + 2 * e**k * v1 / g
    s = T - tau
    return [e**landings * v1 * s - g / 2 * s**2, e**landings * v1 - g * s]


def ball_after_eleven_landings():
    """``(prob, data, T, loss, want)``: the ball dropped from 1 m (restitution 0.8), the data
    at ``T`` between its 11th and 12th landings, the closed-form loss there and its
    derivatives ``want = (d/d x0, d/d e, d/d g)``."""
    x0, e, g = 1.0, 0.8, 9.81
    v1 = np.sqrt(2 * g * x0)
    tau = [np.sqrt(2 * x0 / g)]
    for k in range(1, 12):
        tau.append(tau[-1] + 2 * e**k * v1 / g)
    T = 0.5 * (tau[10] + tau[11])  # after the eleventh landing
    data = np.array([[0.3, -0.2]])
    X0, E, G = sp.symbols("x0 e g", positive=True)
    state = _ball_closed_form(X0, E, G, T, 11)
    loss = sum((state[k] - data[0, k]) ** 2 for k in range(2))
    at = {X0: x0, E: e, G: g}
    want = [float(sp.diff(loss, s).subs(at)) for s in (X0, E, G)]
    prob = ode.ODEProblem(falling, np.array([x0, 0.0]), (0.0, T), np.array([g, e]))
    return prob, data, T, float(loss.subs(at)), want


def assert_ball_gradient(obj, loss, want):
    """The objective's value and gradient against the closed form (1e-10, 1e-8)."""
    value, dp, du0 = obj.value_and_grad()
    assert value == pytest.approx(loss, rel=1e-10)
    assert du0[0] == pytest.approx(want[0], rel=1e-8)
    assert dp[1] == pytest.approx(want[1], rel=1e-8)
    assert dp[0] == pytest.approx(want[2], rel=1e-8)


def assert_landing_time_gradient(obj, g, h):
    """A loss ``(tau - 0.5)^2`` on the first landing time of a ball dropped from rest at
    ``h``, ``tau = sqrt(2 h / g)``: against d tau / d g = -tau / (2 g), d tau / d h =
    1 / sqrt(2 h g) and d tau / d v0 = 1 / g."""
    tau = np.sqrt(2 * h / g)
    value, dp, du0 = obj.value_and_grad()
    r = tau - 0.5
    assert value == pytest.approx(r**2, rel=1e-9)
    np.testing.assert_allclose(dp, [2 * r * (-tau / (2 * g)), 0.0], rtol=1e-7, atol=1e-14)
    np.testing.assert_allclose(du0, [2 * r / np.sqrt(2 * h * g), 2 * r / g], rtol=1e-7)


@pytest.mark.parametrize("solver", [ode.Tsit5(), ode.Rodas5P()], ids=lambda s: s.name)
def test_bouncing_ball_gradient_matches_the_closed_form(solver):
    # the floor: ten bounces after the first landing, rtol 1e-10, gradient with respect
    # to the drop height and the restitution within 1e-8 of the closed form
    prob, data, T, loss, want = ball_after_eleven_landings()
    event = ode.Event(ground, bounce, direction=-1)
    obj = adjoint.Objective(
        prob,
        adjoint.SquaredError(data),
        [T],
        solver=solver,
        rtol=1e-10,
        atol=1e-12,
        events=event,
    )
    assert_ball_gradient(obj, loss, want)
    assert obj.plan.events.table.state[0] == 11


@numba.njit
def lotka(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = -p[2] * u[1] + p[3] * u[0] * u[1]


@numba.njit
def prey_high(u, t, p):
    return u[0] - p[4] * (1.0 + 0.05 * t)  # depends on the state, the parameters and time


@numba.njit
def harvest(u, t, p):
    u[0] = p[5] * u[0]
    u[1] = u[1] + 0.1 * t * u[0]


def _harvest_problem():
    p = np.array([1.5, 1.0, 3.0, 1.0, 2.5, 0.6])
    return ode.ODEProblem(lotka, np.array([1.0, 1.0]), (0.0, 12.0), p)


def _assert_central_differences(obj, prob, value, dp, du0, h=1e-6):
    """The objective's gradient against central differences of its value (the forward solve
    with its events), in every parameter and initial state."""
    for j in range(prob.p.size):
        e = np.zeros(prob.p.size)
        e[j] = h
        cd = (obj.value(prob.p + e) - obj.value(prob.p - e)) / (2 * h)
        assert dp[j] == pytest.approx(cd, rel=2e-5, abs=1e-6 * abs(value)), j
    for j in range(prob.u0.size):
        e = np.zeros(prob.u0.size)
        e[j] = h
        cd = (obj.value(None, prob.u0 + e) - obj.value(None, prob.u0 - e)) / (2 * h)
        assert du0[j] == pytest.approx(cd, rel=2e-5), j


@pytest.mark.parametrize("solver", [ode.Tsit5(), ode.Rodas5P()], ids=lambda s: s.name)
def test_gradient_through_events_matches_central_differences(solver):
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    event = ode.Event(prey_high, harvest, direction=1)
    kw = dict(solver=solver, rtol=1e-12, atol=1e-14, events=event)
    data = ode.solve(prob, ode.Tsit5(), saveat=saveat, rtol=1e-6).u * 1.1
    obj = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, **kw)
    value, dp, du0 = obj.value_and_grad()
    fired = int(obj.plan.events.table.state[0])
    assert fired >= 3  # several harvests inside the span
    _assert_central_differences(obj, prob, value, dp, du0)
    # a thread's copy of the objective (made when two threads share it) has the events too
    again = obj._new_copy().value_and_grad()
    assert again[0] == value and np.array_equal(again[1], dp) and np.array_equal(again[2], du0)


def test_an_event_without_an_affect_leaves_the_gradient_unchanged():
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    data = np.ones((24, 2))
    kw = dict(solver=ode.Tsit5(), rtol=1e-10, atol=1e-12)
    plain = adjoint.Objective(prob, adjoint.SquaredError(data), saveat, **kw)
    marked = adjoint.Objective(
        prob, adjoint.SquaredError(data), saveat, events=ode.Event(prey_high), **kw
    )
    v0, dp0, du00 = plain.value_and_grad()
    v1, dp1, du01 = marked.value_and_grad()
    assert marked.plan.events.table.state[0] > 0
    # the event's landing adds steps, so the two discretisations differ at the tolerance
    assert v1 == pytest.approx(v0, rel=1e-8)
    np.testing.assert_allclose(dp1, dp0, rtol=1e-6)
    np.testing.assert_allclose(du01, du00, rtol=1e-6)


def test_what_events_gradients_refuse():
    prob = _harvest_problem()
    massed = ode.ODEProblem(lotka, prob.u0, prob.tspan, prob.p, mass_matrix=np.eye(2))
    saveat = [1.0, 2.0]
    loss = adjoint.SquaredError(np.ones((2, 2)))
    for solver in (ode.Rodas5P(), ode.CVODE_BDF()):
        with pytest.raises(TypeError, match="mass matrix"):
            adjoint.Objective(
                massed, loss, saveat, solver=solver, events=ode.Event(prey_high, harvest)
            )


@numba.njit
def fragile_affect(u, t, p):
    if t > 3.0:
        raise ValueError("no harvest after t = 3")
    u[0] = p[5] * u[0]


def test_an_error_in_an_affect_reaches_the_user():
    prob = _harvest_problem()
    obj = adjoint.Objective(
        prob,
        adjoint.SquaredError(np.ones((2, 2))),
        [5.0, 10.0],
        events=ode.Event(prey_high, fragile_affect, direction=1),
    )
    with pytest.raises(ode.ODESolveError, match="affect of events") as info:
        obj.value_and_grad()
    assert isinstance(info.value.__cause__, ValueError)


def test_a_loss_on_the_landing_times_matches_the_closed_form():
    # fit the times of the first three landings: through two bounces (affects) and the
    # landing times themselves (the third landing has no affect cut after it in the loss)
    x0, e, g = 1.2, 0.7, 9.81
    X0, E, G = sp.symbols("x0 e g", positive=True)
    v1 = sp.sqrt(2 * G * X0)
    taus = [sp.sqrt(2 * X0 / G)]
    for k in range(1, 3):
        taus.append(taus[-1] + 2 * E**k * v1 / G)
    observed = np.array([0.5, 1.3, 1.9])
    weights = np.array([1.0, 0.5, 2.0])
    loss = sum(w * (tau - o) ** 2 for tau, o, w in zip(taus, observed, weights))
    at = {X0: x0, E: e, G: g}
    want = {s: float(sp.diff(loss, s).subs(at)) for s in (X0, E, G)}
    prob = ode.ODEProblem(falling, np.array([x0, 0.0]), (0.0, 2.5), np.array([g, e]))
    obj = adjoint.Objective(
        prob,
        None,
        None,
        rtol=1e-10,
        atol=1e-12,
        events=ode.Event(ground, bounce, direction=-1),
        event_loss=adjoint.EventTimeLoss(observed, weights=weights),
    )
    value, dp, du0 = obj.value_and_grad()
    assert value == pytest.approx(float(loss.subs(at)), rel=1e-10)
    assert obj.value() == value
    assert du0[0] == pytest.approx(want[X0], rel=1e-8)
    assert dp[1] == pytest.approx(want[E], rel=1e-8)
    assert dp[0] == pytest.approx(want[G], rel=1e-8)


@numba.njit
def predator_level(u, t, p):
    return u[1] - 0.5 * p[0]


def test_an_event_time_loss_on_an_event_without_an_affect_and_a_state_loss():
    # the predator's crossings of a level (no affect) timed, plus states at save points
    prob = _harvest_problem()
    saveat = np.linspace(0.5, 12.0, 24)
    data = np.ones((24, 2))
    obj = adjoint.Objective(
        prob,
        adjoint.SquaredError(data),
        saveat,
        rtol=1e-12,
        atol=1e-14,
        events=[ode.Event(prey_high, harvest, direction=1), ode.Event(predator_level)],
        event_loss=adjoint.EventTimeLoss([2.0, 6.0], event=1),
    )
    value, dp, du0 = obj.value_and_grad()
    _assert_central_differences(obj, prob, value, dp, du0)


def test_an_event_time_loss_needs_the_event_to_happen():
    prob = ode.ODEProblem(falling, np.array([1.0, 0.0]), (0.0, 0.3), np.array([9.81, 0.8]))
    obj = adjoint.Objective(
        prob,
        None,
        None,
        events=ode.Event(ground, bounce, direction=-1),
        event_loss=adjoint.EventTimeLoss([0.45]),
    )
    with pytest.raises(adjoint.TooFewEvents, match="happened 0 times"):
        obj.value_and_grad()
    assert issubclass(adjoint.TooFewEvents, ValueError)
    # in a fit it is a rejected trial point, as a failed solve
    value, g = adjoint.ScipyFun(obj.value_and_grad)(prob.p)
    assert np.isfinite(value) and value >= 1e100 and np.array_equal(g, np.zeros(2))
    with pytest.raises(ValueError, match="names events\\[2\\]"):
        adjoint.Objective(
            prob, None, None, events=ode.Event(ground), event_loss=adjoint.EventTimeLoss([1.0], 2)
        )
    with pytest.raises(ValueError, match="needs the events"):
        adjoint.Objective(prob, None, None, event_loss=adjoint.EventTimeLoss([1.0]))


def test_multiobjective_sums_the_trajectories_gradients_through_events():
    # three balls dropped from different heights and speeds, on two threads
    prob = ode.ODEProblem(falling, np.array([1.0, 0.0]), (0.0, 2.0), np.array([9.81, 0.8]))
    u0s = np.array([[1.0, 0.0], [1.5, 0.2], [0.7, -0.1]])
    saveat = np.linspace(0.2, 2.0, 7)
    data = np.random.default_rng(0).normal(size=(3, 7, 2)) * 0.1
    kw = dict(rtol=1e-10, atol=1e-12, events=ode.Event(ground, bounce, direction=-1))
    multi = adjoint.MultiObjective(prob, adjoint.SquaredError(data), saveat, **kw)
    value, dp, du0 = multi.value_and_grad(prob.p, u0s, threads=2)
    total, dp_sum = 0.0, np.zeros(2)
    for i in range(3):
        one = adjoint.Objective(prob, adjoint.SquaredError(data[i]), saveat, **kw)
        v, g, gu = one.value_and_grad(prob.p, u0s[i])
        total, dp_sum = total + v, dp_sum + g
        np.testing.assert_array_equal(gu, du0[i])
    assert value == pytest.approx(total, rel=1e-14)
    np.testing.assert_allclose(dp, dp_sum, rtol=1e-13)


def test_a_fit_backs_off_from_trial_points_with_too_few_events():
    # six landings fitted from a first guess whose L-BFGS line search tries heights and
    # restitutions with fewer than six landings in the 4 s solved: those trial points are
    # rejected (infinite value), and the fit reaches the parameters that made the times
    import scichains as sc

    truth = ode.ODEProblem(falling, np.array([1.35, 0.0]), (0.0, 4.0), np.array([9.81, 0.78]))
    landing = ode.Event(ground, bounce, direction=-1)
    times = ode.solve(truth, rtol=1e-10, atol=1e-12, events=landing).t_events[0][:6]
    obj = adjoint.Objective(
        truth, None, None, rtol=1e-10, atol=1e-12, events=landing,
        event_loss=adjoint.EventTimeLoss(times),
    )  # fmt: skip
    rejected = []

    def loss(q):
        try:
            value, dp, du0 = obj.value_and_grad(np.array([9.81, q[1]]), np.array([q[0], 0.0]))
        except adjoint.TooFewEvents:
            rejected.append(q.copy())
            raise
        return value, np.array([du0[0], dp[1]])

    q = np.array([1.0, 0.6])
    res = sc.fit(loss, q, [sc.LBFGS(200)], progress=False)
    assert rejected  # the line search did meet such points
    assert "CONVERGENCE" in res.message
    np.testing.assert_allclose(q, [1.35, 0.78], rtol=1e-5)


@pytest.mark.parametrize("solver", [ode.Tsit5(), ode.Rodas5P()], ids=lambda s: s.name)
def test_gradients_through_a_terminal_event(solver):
    # the solve ends where the ball first lands, tau = sqrt(2 h / g) for a drop from rest:
    # a loss on tau alone against the closed form (d tau / d v0 = 1 / g at v0 = 0), then with
    # save times before it against central differences; an affect on the terminal event
    # changes nothing (no solution after it is read)
    g, h = 9.81, 1.3
    prob = ode.ODEProblem(falling, np.array([h, 0.0]), (0.0, 5.0), np.array([g, 0.8]))
    end = ode.Event(ground, direction=-1, terminal=True)
    obj = adjoint.Objective(
        prob, None, None, solver=solver, rtol=1e-10, atol=1e-12, events=end,
        event_loss=adjoint.EventTimeLoss([0.5]),
    )  # fmt: skip
    assert_landing_time_gradient(obj, g, h)
    data = np.array([[1.0, -2.0], [0.5, -4.0]])
    for affect in (None, bounce):
        both = adjoint.Objective(
            prob, adjoint.SquaredError(data), [0.2, 0.4], solver=solver, rtol=1e-10,
            atol=1e-12, events=ode.Event(ground, affect, direction=-1, terminal=True),
            event_loss=adjoint.EventTimeLoss([0.5]),
        )  # fmt: skip
        _assert_central_differences(both, prob, *both.value_and_grad())
    # a save time after the event: the loss is undefined there (a rejected point in a fit)
    late = adjoint.Objective(
        prob, adjoint.SquaredError(np.ones((1, 2))), [1.0], solver=solver, events=end
    )
    with pytest.raises(adjoint.UndefinedLoss, match="terminal event ended the solve"):
        late.value_and_grad()
