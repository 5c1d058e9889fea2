"""The automatic method (AutoTsit5Rodas5P: Tsit5 with a stiffness watch, Rodas5P while stiff):
the explicit method's results bit for bit where nothing is stiff, the stiff test set solved
where Tsit5 stops at MAX_STEPS, both switches on a problem with a closed form (and dense output
across them), a resume after GROW identical to one run, its gradient against central
differences, and the methods it refuses."""

import math

import numba
import numpy as np
import pytest

from scichains import ode
from scichains.adjoint import Objective, SquaredError
from scichains.adjoint._check import check_gradient
from scichains.ode._plan import plan_solve, run_plan
from scichains.ode._testset import PROBLEMS, significant_digits

AUTO = ode.AutoTsit5Rodas5P


@numba.njit
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = -p[2] * u[1] + p[3] * u[0] * u[1]


@numba.njit
def fading(du, u, p, t):
    # u' = -lam(t) (u - a cos t) - a sin t with lam(t) = p0 exp(-p1 t) + 1, a = p2: stiff
    # (lam ~ 1e5) until t ~ 1, then not; u = a cos t + (u0 - a) exp(-(p0 (1 - exp(-p1 t)) /
    # p1 + t))
    lam = p[0] * math.exp(-p[1] * t) + 1.0
    du[0] = -lam * (u[0] - p[2] * math.cos(t)) - p[2] * math.sin(t)


FADING_P = np.array([1e5, 10.0, 1.0])


def fading_exact(t, u0=2.0, p=FADING_P):
    decay = np.exp(-(p[0] * (1.0 - np.exp(-p[1] * t)) / p[1] + t))
    return p[2] * np.cos(t) + (u0 - p[2]) * decay


def test_a_problem_that_is_never_stiff_gets_tsit5_bit_for_bit():
    prob = ode.ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 30.0), [1.5, 1.0, 3.0, 1.0])
    for saveat in (np.linspace(0.0, 30.0, 61), None):
        a = ode.solve(prob, AUTO, saveat=saveat, rtol=1e-8, atol=1e-10)
        b = ode.solve(prob, ode.Tsit5(), saveat=saveat, rtol=1e-8, atol=1e-10)
        assert a.success and a.stats["nswitch"] == 0 and a.stats["njac"] == 0
        np.testing.assert_array_equal(a.t, b.t)
        np.testing.assert_array_equal(a.u, b.u)
        assert {k: a.stats[k] for k in b.stats} == b.stats
    tq = np.linspace(0.0, 30.0, 97)  # dense output too
    np.testing.assert_array_equal(a(tq), b(tq))


@pytest.mark.parametrize("name", ["HIRES", "OREGO", "VDPOL", "ROBER", "POLLU"])
def test_the_stiff_test_set_with_the_automatic_method(name):
    """Measured at rtol 1e-8 (2026-12-04): 8.5-9.8 significant digits, 1-23 switches; Tsit5
    alone stops at MAX_STEPS on all but HIRES."""
    tp = PROBLEMS[name]
    sol = ode.solve(tp.problem(), AUTO, rtol=1e-8, atol=1e-12, saveat=[tp.tspan[1]])
    assert sol.success, sol.message
    assert significant_digits(sol.u[-1], tp.reference) >= 7.0
    assert sol.stats["nswitch"] >= 1 and sol.stats["njac"] > 0


def test_robertson_with_the_defaults_of_tsit5_stops_and_auto_answers():
    tp = PROBLEMS["ROBER"]
    assert ode.solve(tp.problem(), ode.Tsit5(), saveat=[1e5]).status == ode.ReturnCode.MAX_STEPS
    sol = ode.solve(tp.problem(), AUTO, saveat=[1e5])
    assert sol.success and significant_digits(sol.u[-1], tp.reference) >= 4.0


def test_both_switches_and_dense_output_across_them():
    """Stiff until t ~ 1, then not: Tsit5 -> Rodas5P -> Tsit5, the saved and interpolated
    values within the tolerance of the closed form in both phases."""
    prob = ode.ODEProblem(fading, [2.0], (0.0, 4.0), FADING_P)
    ts = np.linspace(0.0, 4.0, 81)
    sol = ode.solve(prob, AUTO, saveat=ts, rtol=1e-8, atol=1e-10)
    assert sol.success and sol.stats["nswitch"] >= 2
    np.testing.assert_allclose(sol.u[:, 0], fading_exact(ts), atol=1e-7)
    dense = ode.solve(prob, AUTO, rtol=1e-8, atol=1e-10)  # every step, then sol(t)
    tq = np.linspace(0.0, 4.0, 401)
    np.testing.assert_allclose(dense(tq)[:, 0], fading_exact(tq), atol=1e-7)
    only_tsit5 = ode.solve(prob, ode.Tsit5(), rtol=1e-8, atol=1e-10)
    assert only_tsit5.stats["naccept"] > 5 * dense.stats["naccept"]


def test_a_resume_after_grow_takes_the_steps_of_one_run():
    prob = ode.ODEProblem(fading, [2.0], (0.0, 40.0), FADING_P)

    def plan():
        return plan_solve(prob, AUTO, None, 1e-10, 1e-12, None, 10**6, None, None, None, None)

    grown, roomy = plan(), plan()
    assert run_plan(grown, prob.u0, prob.p) == 0
    while roomy.ts.shape[0] < 4 * grown.stats[0]:
        roomy.grow()
    assert run_plan(roomy, prob.u0, prob.p) == 0
    assert grown.ts.shape[0] > 300  # the first buffers (256 steps) did grow
    m = int(grown.stats[0])
    np.testing.assert_array_equal(grown.stats[:6], roomy.stats[:6])
    np.testing.assert_array_equal(grown.ts[:m], roomy.ts[:m])
    np.testing.assert_array_equal(grown.us[:m], roomy.us[:m])
    assert grown.stepper.stats(grown.carry) == roomy.stepper.stats(roomy.carry)


def test_its_gradient_against_central_differences():
    """The interpolating adjoint integrated backward by Rodas5P (reading the forward solve's
    steps of both methods): against Ridders-extrapolated central differences."""
    prob = ode.ODEProblem(fading, [2.0], (0.0, 3.0), FADING_P)
    ts = np.concatenate([[1e-5, 3e-5, 1e-4], np.linspace(0.1, 3.0, 9)])  # in the transient too
    data = (fading_exact(ts) * 1.05)[:, None]
    obj = Objective(prob, SquaredError(data), ts, solver=AUTO, rtol=1e-10, atol=1e-12)
    check = check_gradient(obj.value_and_grad, FADING_P, rtol=1e-5)
    assert check.ok, check


def test_methods_it_cannot_pair_are_refused():
    with pytest.raises(ValueError, match="two stages at the step's end"):
        ode.AutoSwitch(ode.BS3(), ode.Rosenbrock23())
    with pytest.raises(ValueError, match="two stages at the step's end"):
        ode.AutoSwitch(ode.Vern7(), ode.Rodas5P())
    with pytest.raises(ValueError, match="the same controller order"):
        ode.AutoSwitch(ode.Tsit5(), ode.Rosenbrock23())
    with pytest.raises(TypeError, match="Rosenbrock method"):
        ode.AutoSwitch(ode.Tsit5(), ode.KenCarp4())
    with pytest.raises(ValueError, match="must be positive"):
        ode.AutoSwitch(max_stiff_steps=0)
    assert AUTO() is AUTO
    fd = AUTO(jacobian="finite difference")
    assert fd.jacobian == "finite difference" and fd.stiff.jacobian == "finite difference"
    assert "Tsit5" in repr(AUTO) and AUTO.boundary == pytest.approx(3.5068, abs=1e-4)


@numba.njit
def rober_again(du, u, p, t):  # a function of its own: no vjp made for it by other tests
    du[0] = -0.04 * u[0] + 1e4 * u[1] * u[2]
    du[2] = 3e7 * u[1] * u[1]
    du[1] = -du[0] - du[2]


def test_the_default_solver_makes_a_jacobian_only_when_it_turns_stiff():
    plain = ode.ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 10.0), [1.5, 1.0, 3.0, 1.0])
    sol = ode.solve(plain)  # the default: AutoTsit5Rodas5P
    assert sol.success and sol.stats["nswitch"] == 0 and plain.vjp_address == 0
    stiff = ode.ODEProblem(rober_again, [1.0, 0.0, 0.0], (0.0, 1e5))
    sol = ode.solve(stiff, saveat=[1e5])
    assert sol.success and sol.stats["nswitch"] >= 1 and stiff.derivatives == "traced"


def test_without_a_vjp_it_goes_on_with_finite_differences(monkeypatch):
    prob = ode.ODEProblem(rober_again, [1.0, 0.0, 0.0], (0.0, 1e5))

    def cannot(*args, **kwargs):
        raise TypeError("no derivatives for this right-hand side")

    monkeypatch.setattr(prob, "ensure_vjp", cannot)
    sol = ode.solve(prob, saveat=[1e5], rtol=1e-8, atol=1e-12)
    ref = ode.solve(prob, AUTO(jacobian="finite difference"), saveat=[1e5], rtol=1e-8, atol=1e-12)
    assert sol.success and sol.stats["njac"] > 0
    np.testing.assert_array_equal(sol.u, ref.u)  # the steps of the finite-difference solver


@numba.njit
def rober_threads(du, u, p, t):  # its own function: its vjp is made during the solves below
    du[0] = -0.04 * u[0] + 1e4 * u[1] * u[2]
    du[2] = 3e7 * u[1] * u[1]
    du[1] = -du[0] - du[2]


def test_two_threads_turning_stiff_on_one_new_problem():
    """Both threads reach the first switch and ask for the vjp: it is made once (under a
    lock) and both solves match a serial one bit for bit."""
    from concurrent.futures import ThreadPoolExecutor

    prob = ode.ODEProblem(rober_threads, [1.0, 0.0, 0.0], (0.0, 1e5))
    with ThreadPoolExecutor(2) as pool:
        sols = list(pool.map(lambda _: ode.solve(prob, saveat=[1e5]), range(2)))
    serial = ode.solve(prob, saveat=[1e5])
    for sol in sols:
        assert sol.success and sol.stats["nswitch"] >= 1
        np.testing.assert_array_equal(sol.u, serial.u)
