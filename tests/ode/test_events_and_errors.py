"""Doses as jumps, tstops, failures as data, bad input."""

import numba
import numpy as np
import pytest

import scichains as sc
from scichains import nn, ode
from scichains.adjoint import DiscreteAdjoint, Objective, SquaredError
from scichains.models import NeuralODE


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


@numba.njit
def nan_mid_span(du, u, p, t):
    a = p[0] * u[0] * t * 1e3  # overflows to inf for t > ~0.01: du[0] = inf - inf = NaN
    du[0] = a - a
    du[1] = -u[1]


@pytest.mark.parametrize("solver", [ode.Tsit5, ode.Rodas5P])
def test_a_nan_the_step_control_accepts_is_never_success(solver):
    # the stepper accepted steps into NaN and reported SUCCESS with a NaN solution
    prob = ode.ODEProblem(nan_mid_span, [1e7, 1.0], (0.0, 1.0), [1e300])
    sol = ode.solve(prob, solver=solver, saveat=[0.5, 1.0])
    assert sol.status == ode.ReturnCode.NONFINITE
    assert "NaN or infinite" in sol.message
    assert not sol.success
    with pytest.raises(ode.ODESolveError, match="NONFINITE"):
        ode.solve(prob, solver=solver, throw=True)
    ok = ode.solve(ode.ODEProblem(nan_mid_span, [1.0, 1.0], (0.0, 1.0), [1.0]), solver=solver)
    assert ok.status == ode.ReturnCode.SUCCESS


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
    with pytest.raises(ValueError, match=r"jumps\[0\].*state index must lie in 0\.\.1"):
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


# ------------------------------------------------------------ issue 11.3 and 11.6: messages
@pytest.mark.parametrize(
    "jumps, match",
    [
        ([(0.5, 0, 1.0), (0.6, 0, 0.0)], r"jumps\[1\] = \(0\.6, 0, 0\.0\): .*positive"),
        ([(0.5, 0, -1.0)], r"jumps\[0\] = \(0\.5, 0, -1\.0\): .*positive.*got -1\.0"),
        ([(0.5, 0, np.inf)], r"jumps\[0\] .*positive and finite"),
        ([(0.2, 0, 1.0), (0.5, 0)], r"jumps\[1\] = \(0\.5, 0\) has 2 fields"),
        ([(0.5, 0, None)], r"jumps\[0\] = \(0\.5, 0, None\): .*real numbers"),
        ([(0.5, 0, 1.0, 2.0)], r"jumps\[0\] = \(0\.5, 0, 1\.0, 2\.0\) has 4 fields.*rate"),
        ([(0.5, 0.5, 1.0)], r"jumps\[0\] .*state index must be an integer"),
        ([0.5], r"jumps\[0\] = 0\.5: a jump is a \(time, state_index, amount\) triple"),
    ],
)
def test_bad_jumps_are_rejected_naming_the_entry(jumps, match):
    prob = ode.ODEProblem(one_compartment, [1.0, 0.0], (0.0, 1.0), [1.3, 0.4])
    with pytest.raises(ValueError, match=match):
        ode.solve(prob, jumps=jumps)


def test_jump_state_index_given_as_whole_float_is_accepted():
    prob = ode.ODEProblem(one_compartment, [0.0, 0.0], (0.0, 1.0), [1.3, 0.4])
    a = ode.solve(prob, saveat=[1.0], jumps=np.array([[0.5, 0.0, 2.0]]))
    b = ode.solve(prob, saveat=[1.0], jumps=[(0.5, 0, 2.0)])
    np.testing.assert_array_equal(a.u, b.u)
    assert a.u[0, 0] > 1.0


def test_non_finite_p_is_rejected_by_index():
    # it used to be solved and reported as DT_UNDERFLOW ("the problem may be stiff")
    with pytest.raises(ValueError, match=r"p contains NaN or infinite values at index 1 "):
        ode.ODEProblem(one_compartment, [1.0, 0.0], (0.0, 1.0), [1.3, np.inf])
    prob = ode.ODEProblem(one_compartment, [1.0, 0.0], (0.0, 1.0), [1.3, 0.4])
    with pytest.raises(ValueError, match=r"at index 0, 1 \(p\[0\] = nan\)"):
        prob.p = np.array([np.nan, -np.inf])
    np.testing.assert_array_equal(prob.p, [1.3, 0.4])  # left as it was
    assert ode.solve(prob).success


def test_short_p_is_blamed_not_u0():
    with pytest.raises(ValueError, match=r"^p has length 1, but the right-hand side indexes past"):
        ode.ODEProblem(one_compartment, [1.0, 0.0], (0.0, 1.0), [1.3])
    with pytest.raises(ValueError, match=r"^p has length 0"):
        ode.ODEProblem(one_compartment, [1.0, 0.0], (0.0, 1.0))
    with pytest.raises(ValueError, match=r"^u0 has length 1"):
        ode.ODEProblem(one_compartment, [1.0], (0.0, 1.0), [1.3, 0.4])


@numba.njit
def net_rhs(du, u, p, t, k):
    nn.chain_forward(k, p, u, du)


def test_network_length_errors_surface_at_problem_construction():
    # a chain with input 3 for a 2-entry state used to be silently wrong
    chain = sc.SimpleChain(3, sc.Dense(4, "tanh"), sc.Dense(2))
    k = chain.kernel(np.float64)
    p = chain.init_params(dtype=np.float64)
    with pytest.raises(ValueError, match=r"network call failed.*chain_forward: x has length 2"):
        ode.ODEProblem(net_rhs, [1.0, 0.0], (0.0, 1.0), p, kernel=k)
    chain = sc.SimpleChain(2, sc.Dense(4, "tanh"), sc.Dense(2))
    k = chain.kernel(np.float64)
    p = chain.init_params(dtype=np.float64)
    with pytest.raises(ValueError, match=r"chain_forward: p has length 11, .* has 22 entries"):
        ode.ODEProblem(net_rhs, [1.0, 0.0], (0.0, 1.0), p[:11], kernel=k)
    prob = ode.ODEProblem(net_rhs, [1.0, 0.0], (0.0, 1.0), p, kernel=k)
    assert ode.solve(prob).success


@numba.njit
def one_compartment_vjp(v, u, p, t, ubar, pbar):
    ubar[0] = -p[0] * v[0] + p[0] * v[1]
    ubar[1] = -p[1] * v[1]
    pbar[0] = -u[0] * v[0] + u[0] * v[1]
    pbar[1] = -u[1] * v[1]


def test_class_instead_of_instance_in_the_ode_layer():
    prob = ode.ODEProblem(
        one_compartment, [1.0, 0.0], (0.0, 1.0), [1.3, 0.4], vjp=one_compartment_vjp
    )
    loss = SquaredError(np.zeros((2, 2)))
    ts = [0.5, 1.0]
    with pytest.raises(
        TypeError, match=r"sensealg is the class DiscreteAdjoint.*DiscreteAdjoint\(\)"
    ):
        Objective(prob, loss, ts, sensealg=DiscreteAdjoint)
    with pytest.raises(TypeError, match=r"solver is the class CVODE_BDF.*pass CVODE_BDF\(\)"):
        Objective(prob, loss, ts, solver=ode.CVODE_BDF)
    with pytest.raises(TypeError, match=r"loss is the class SquaredError.*SquaredError\(\.\.\.\)"):
        Objective(prob, SquaredError, ts)
    chain = sc.SimpleChain(2, sc.Dense(4, "tanh"), sc.Dense(2))
    with pytest.raises(TypeError, match=r"solver is the class CVODE_BDF"):
        NeuralODE(chain, (0.0, 1.0), ts, solver=ode.CVODE_BDF)
    # the index of a non-finite entry of a new p is named by the adjoint entry points too
    obj = Objective(prob, loss, ts)
    with pytest.raises(ValueError, match=r"p contains NaN or infinite values at index 1"):
        obj.value(np.array([1.3, np.inf]))
