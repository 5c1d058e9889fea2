"""The ESDIRK solvers' own checks (Kvaerno5, KenCarp4): the tableau, Jacobian and LU reuse,
stiff problems backward in time, the Newton iteration's status codes. What every stiff solver
must do (orders, dense output, the Bari test set, doses, status codes) is in test_stiff.py."""

import numba
import numpy as np
import pytest

from scichains import ode
from scichains.ode._testset import PROBLEMS, relative_error

from ._stiff_problems import ESDIRKS, prothero_robinson


def test_tableau_and_api():
    k5 = ode.Kvaerno5
    assert k5.stages == 7 and k5.order == 5 and k5.error_order == 4
    A = k5.butcher()
    # stiffly accurate: u_new is the last stage; the error estimate is Y_7 - Y_6
    np.testing.assert_allclose(A[-1].sum(), 1.0, atol=1e-15)
    np.testing.assert_allclose(k5.btilde, A[-1] - A[-2], atol=1e-16)
    # the three fifth-order conditions of the deepest trees, independent of the ones asserted
    # when the method is made
    b, c = A[-1], k5.c
    assert abs(b @ (A @ (A @ (A @ c))) - 1 / 120) < 1e-14
    assert abs(b @ (c * (A @ (A @ c))) - 1 / 30) < 1e-14
    assert abs(b @ ((A @ c) ** 2) - 1 / 20) < 1e-14
    assert repr(ode.Kvaerno5()) == "Kvaerno5(jacobian='exact')"
    assert ode.Kvaerno5(jacobian="finite difference").jacobian == "finite difference"
    with pytest.raises(ValueError, match="jacobian must be one of"):
        ode.Kvaerno5(jacobian="numerical")


@pytest.mark.parametrize("name", ["HIRES", "VDPOL"])
def test_finite_difference_jacobian_and_reuse(name):
    tp = PROBLEMS[name]
    prob = tp.problem()
    a = ode.solve(prob, ode.Kvaerno5(jacobian="finite difference"), rtol=1e-8, atol=1e-12)
    b = ode.solve(prob, ode.Kvaerno5(), rtol=1e-8, atol=1e-12)
    assert a.success and b.success
    assert relative_error(a.u[-1], tp.reference) < 1e-6
    assert relative_error(b.u[-1], tp.reference) < 1e-6
    st = b.stats
    # the Jacobian is kept across steps, the LU while the step size is
    assert st["njac"] < 0.5 * st["naccept"]
    assert st["nlu"] < st["naccept"] + st["nreject"]
    # f is called once per Newton iteration (plus the first f and the initial step's guess)
    assert st["nf"] == st["nnewton"] + 2


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_backward_in_time_stiff(solver):
    # Prothero-Robinson with lam = +1e4 is stiff and stable backward in time: u = phi exactly
    phi = lambda t: np.sin(t) + 0.25 * t**2  # noqa: E731
    prob = ode.ODEProblem(prothero_robinson, [phi(3.0)], (3.0, 0.0), [1e4])
    sol = ode.solve(prob, solver(), rtol=1e-9, atol=1e-12, saveat=[2.0, 1.5, 0.0],
                    tstops=[1.5])  # fmt: skip
    assert sol.success and sol.stats["naccept"] < 2_000
    np.testing.assert_allclose(sol.u[:, 0], phi(np.array([2.0, 1.5, 0.0])), rtol=1e-7, atol=1e-9)
    assert 1.5 in sol.step_times


# ---- status codes and bad input


@numba.njit
def fast_decay(du, u, p, t):
    du[0] = -1e12 * u[0]


@numba.njit
def wrong_sign_vjp(v, u, p, t, ubar, pbar):
    ubar[0] = 1e12 * v[0]  # the true derivative is -1e12: simplified Newton diverges


@pytest.mark.parametrize("solver", ESDIRKS, ids=lambda m: m.name)
def test_newton_failure_is_a_status(solver):
    prob = ode.ODEProblem(fast_decay, [1.0], (0.0, 1.0), vjp=wrong_sign_vjp)
    sol = ode.solve(prob, solver(), dt0=0.1)
    assert sol.status == ode.ReturnCode.NEWTON_FAILURE
    assert "Newton iteration" in sol.message and "failed to converge" in sol.message
    assert sol.stats["nnewton_fail"] == 10 and sol.stats["naccept"] == 0
    with pytest.raises(ode.ODESolveError, match="NEWTON_FAILURE"):
        ode.solve(prob, solver(), dt0=0.1, throw=True)
    # the right Jacobian: the same problem is easy
    good = ode.ODEProblem(fast_decay, [1.0], (0.0, 1.0))
    assert ode.solve(good, solver(), dt0=0.1).success
