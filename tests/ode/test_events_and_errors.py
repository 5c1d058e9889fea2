"""Doses as jumps, tstops, failures as data, bad input."""

import numba
import numpy as np
import pytest

from scichains import ode


@numba.njit
def one_compartment(du, u, p, t):
    # depot -> central -> out
    du[0] = -p[0] * u[0]
    du[1] = p[0] * u[0] - p[1] * u[1]


def one_compartment_exact(t, doses, ka, ke):
    """Central amount for bolus doses (time, amount) into the depot (closed form)."""
    c = np.zeros_like(t)
    for td, amt in doses:
        dt = np.clip(t - td, 0, None)
        c += np.where(t >= td, amt * ka / (ka - ke) * (np.exp(-ke * dt) - np.exp(-ka * dt)), 0)
    return c


def test_doses_as_jumps_match_closed_form():
    ka, ke = 1.3, 0.4
    doses = [(0.0, 1.0), (5.0, 2.0), (7.5, 0.5)]
    prob = ode.ODEProblem(one_compartment, [0.0, 0.0], (0.0, 15.0), [ka, ke])
    ts = np.linspace(0, 15, 61)
    sol = ode.solve(prob, saveat=ts, rtol=1e-10, atol=1e-12, jumps=[(t, 0, a) for t, a in doses])
    assert sol.success
    np.testing.assert_allclose(sol.u[:, 1], one_compartment_exact(ts, doses, ka, ke), atol=1e-9)
    # saved values at a dose time are the values after the dose (right limits)
    i5 = np.searchsorted(ts, 5.0)
    assert sol.u[i5, 0] == pytest.approx(2.0 + np.exp(-ka * 5.0), rel=1e-8)
    # dense output does not smear the discontinuity
    assert sol(5.0)[0] == pytest.approx(sol.u[i5, 0], rel=1e-12)
    assert sol(5.0 - 1e-9)[0] == pytest.approx(np.exp(-ka * 5.0), rel=1e-6)


def test_tstops_are_hit():
    prob = ode.ODEProblem(one_compartment, [1.0, 0.0], (0.0, 3.0), [1.3, 0.4])
    sol = ode.solve(prob, tstops=[0.123, 2.5])
    assert 0.123 in sol.t and 2.5 in sol.t


def test_max_steps_and_throw():
    prob = ode.ODEProblem(one_compartment, [1.0, 0.0], (0.0, 100.0), [1.3, 0.4])
    sol = ode.solve(prob, max_steps=5)
    assert not sol.success and sol.status == ode.ReturnCode.MAX_STEPS
    assert "max_steps" in sol.message
    assert sol.t_reached < 100.0
    with pytest.raises(ode.ODESolveError, match="MAX_STEPS") as e:
        ode.solve(prob, max_steps=5, throw=True)
    assert e.value.solution.status == ode.ReturnCode.MAX_STEPS


@numba.njit
def blowup(du, u, p, t):
    du[0] = u[0] * u[0]  # u = 1 / (1 - t): singular at t = 1


def test_singularity_reports_failure_not_hang():
    prob = ode.ODEProblem(blowup, [1.0], (0.0, 2.0))
    sol = ode.solve(prob)
    assert sol.status in (
        ode.ReturnCode.DT_UNDERFLOW,
        ode.ReturnCode.NONFINITE,
        ode.ReturnCode.MAX_STEPS,
    )
    assert 0.99 < sol.t_reached < 1.01
    fixed = ode.solve(prob, solver=ode.RK4(), dt0=0.3)
    assert fixed.status == ode.ReturnCode.NONFINITE


def test_bad_input():
    p = [1.3, 0.4]
    with pytest.raises(ValueError, match="zero length"):
        ode.ODEProblem(one_compartment, [1.0, 0.0], (1.0, 1.0), p)
    with pytest.raises(ValueError, match="NaN"):
        ode.ODEProblem(one_compartment, [np.nan, 0.0], (0.0, 1.0), p)
    with pytest.raises(TypeError, match="compiled with numba"):
        ode.solve(ode.ODEProblem(lambda du, u, p, t: du.fill(0.0), [1.0, 0.0], (0.0, 1.0), p))
    prob = ode.ODEProblem(one_compartment, [1.0, 0.0], (0.0, 1.0), p)
    with pytest.raises(ValueError, match="outside tspan"):
        ode.solve(prob, saveat=[0.5, 1.5])
    with pytest.raises(ValueError, match="strictly increasing"):
        ode.solve(prob, saveat=[0.5, 0.2])
    with pytest.raises(ValueError, match="fixed-step"):
        ode.solve(prob, solver=ode.RK4())
    with pytest.raises(ValueError, match="state indices"):
        ode.solve(prob, jumps=[(0.5, 2, 1.0)])


@numba.njit
def wrong_rhs(du, u):
    du[0] = u[0]


def test_rhs_with_wrong_signature_is_a_clear_error():
    with pytest.raises(TypeError, match=r"could not be compiled as f\(du, u, p, t\)"):
        ode.ODEProblem(wrong_rhs, [1.0], (0.0, 1.0))


def test_wrong_u0_length_is_a_clear_error():
    # the right-hand side writes du[1]: a 1-vector u0 must not reach it unchecked
    with pytest.raises(ValueError, match="u0 has length 1"):
        ode.ODEProblem(one_compartment, [1.0], (0.0, 1.0), [1.3, 0.4])
    # too long: du[2] is never written
    with pytest.raises(ValueError, match="did not set du"):
        ode.ODEProblem(one_compartment, [1.0, 0.0, 0.0], (0.0, 1.0), [1.3, 0.4])
