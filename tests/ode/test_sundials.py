"""The CVODE solvers (scikit-sundae) behind solve(): published references, doses, failures."""

import numba
import numpy as np
import pytest
import sympy as sp

from scichains.ode import CVODE_BDF, CVODE_Adams, ODEProblem, ReturnCode, SymbolicModel, solve
from scichains.ode.cvode import _direct as cvode_direct


def robertson(du, u, p, t):
    du[0] = -p[0] * u[0] + p[1] * u[1] * u[2]
    du[2] = p[2] * u[1] ** 2
    du[1] = -du[0] - du[2]


K = [0.04, 1e4, 3e7]
# Hairer & Wanner, Solving ODEs II (IV.1): y(40)
Y40 = [0.7158270687193, 0.9185534764529e-05, 0.2841637457462]
# Mazzia & Magherini, Test Set for IVP Solvers (ROBER): y(1e11)
Y1E11 = [0.2083340149701255e-07, 0.8333360770334713e-13, 0.9999999791665050]


@pytest.mark.parametrize("compiled", [True, False], ids=["njit", "python"])
def test_robertson_against_published_values(compiled):
    f = numba.njit(robertson) if compiled else robertson
    prob = ODEProblem(f, [1.0, 0.0, 0.0], (0.0, 1e11), K)
    sol = solve(prob, CVODE_BDF(), saveat=[40.0, 4e10, 1e11], rtol=1e-10, atol=1e-16, throw=True)
    np.testing.assert_allclose(sol.u[0], Y40, rtol=1e-7)
    np.testing.assert_allclose(sol.u[2], Y1E11, rtol=1e-4)
    # t = 4e10: SUNDIALS' cvRoberts_dns prints y = (5.2083e-08, 2.0833e-13, 1.0000e+00)
    np.testing.assert_allclose(sol.u[1], [5.2083e-08, 2.0833e-13, 1.0], rtol=1e-4)
    assert sol.stats["nf"] > 100
    # one-step mode (every step kept) reaches the same values and counts its steps
    dense = solve(prob, CVODE_BDF(dense=True), saveat=[40.0, 4e10, 1e11], rtol=1e-10, atol=1e-16)
    np.testing.assert_allclose(dense.u, sol.u, rtol=1e-6, atol=1e-20)
    assert dense.stats["naccept"] > 100 and dense.t.size == 3


def test_exact_jacobian_from_the_generated_vjp():
    y1, y2, y3, k1, k2, k3 = sp.symbols("y1 y2 y3 k1 k2 k3")
    model = SymbolicModel(
        [y1, y2, y3],
        [k1, k2, k3],
        [-k1 * y1 + k2 * y2 * y3, k1 * y1 - k2 * y2 * y3 - k3 * y2**2, k3 * y2**2],
    )
    prob = model.problem([1.0, 0.0, 0.0], (0.0, 40.0), model.pack(k1=K[0], k2=K[1], k3=K[2]))
    for jac in ("auto", False):
        sol = solve(prob, CVODE_BDF(jacobian=jac), saveat=[40.0], rtol=1e-10, atol=1e-16)
        np.testing.assert_allclose(sol.u[0], Y40, rtol=1e-7)


@numba.njit
def one_compartment(du, u, p, t):
    du[0] = -p[0] * u[0]
    du[1] = p[0] * u[0] - p[1] * u[1]


def test_adams_with_doses_against_the_closed_form():
    ka, ke = 1.3, 0.4
    prob = ODEProblem(one_compartment, [0.0, 0.0], (0.0, 10.0), [ka, ke])
    ts = np.linspace(0.5, 10.0, 20)
    sol = solve(
        prob, CVODE_Adams(), saveat=ts, jumps=[(0.0, 0, 1.0), (4.0, 0, 2.0)], rtol=1e-10, atol=1e-12
    )

    def central(t, tau, dose):
        s = np.clip(t - tau, 0.0, None)
        return np.where(t >= tau, dose * ka / (ka - ke) * (np.exp(-ke * s) - np.exp(-ka * s)), 0)

    exact = central(ts, 0.0, 1.0) + central(ts, 4.0, 2.0)
    np.testing.assert_allclose(sol.u[:, 1], exact, rtol=1e-7, atol=1e-10)
    # normal mode (the default with saveat): only t0, the saves and the dose are stored
    assert sol.step_times.size == 1 + ts.size + 1
    # dense=True keeps every step: dense output between the steps, never across the dose
    dense = solve(
        prob,
        CVODE_Adams(dense=True),
        saveat=ts,
        jumps=[(0.0, 0, 1.0), (4.0, 0, 2.0)],
        rtol=1e-10,
        atol=1e-12,
    )
    np.testing.assert_allclose(dense.u[:, 1], exact, rtol=1e-7, atol=1e-10)
    assert dense.step_times.size > 3 * ts.size
    np.testing.assert_allclose(dense(3.7)[1], central(3.7, 0, 1.0), rtol=1e-4)
    # without saveat every step is kept too
    free = solve(prob, CVODE_Adams(), jumps=[(0.0, 0, 1.0), (4.0, 0, 2.0)], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(free(3.7)[1], central(3.7, 0, 1.0), rtol=1e-4)


def test_normal_mode_lands_on_tstops_and_doses_not_on_saves():
    @numba.njit
    def decay(du, u, p, t):
        du[0] = -p[0] * u[0]

    prob = ODEProblem(decay, [1.0], (0.0, 3.0), [2.0])
    sol = solve(
        prob,
        CVODE_BDF(),
        saveat=[0.5, 1.0, 2.5],
        tstops=[0.75],
        jumps=[(1.0, 0, 1.0)],
        rtol=1e-10,
        atol=1e-14,
    )
    exact = np.exp(-2.0 * np.array([0.5, 1.0, 2.5]))
    exact[1:] += np.exp(-2.0 * (np.array([1.0, 2.5]) - 1.0))  # the dose at t = 1, saved after
    np.testing.assert_allclose(sol.u[:, 0], exact, rtol=1e-7)
    # stored: t0, 0.5, 0.75 (tstop), 1 (left and right limits), 2.5, t1
    np.testing.assert_array_equal(sol.step_times, [0.0, 0.5, 0.75, 1.0, 1.0, 2.5, 3.0])
    assert sol.stats["naccept"] > 5 and sol.stats["nf"] > 10  # CVODE's counts (direct path)


# white-box: the same compiled problem on both CVODE drivers (the private availability check
# replaced); a Python right-hand side takes the wrapped driver publicly, but with another
# Jacobian, so not the same steps
@pytest.mark.whitebox
@pytest.mark.parametrize("dense", [False, True])
def test_direct_path_matches_scikit_sundae(monkeypatch, dense):
    """A compiled problem runs CVODE through ctypes with compiled callbacks; the same CVODE
    through scikit-sundae's Python callbacks takes the same steps to the same values."""
    prob = ODEProblem(numba.njit(robertson), [1.0, 0.0, 0.0], (0.0, 1e5), K)
    kw = dict(saveat=[1.0, 10.0, 1e5], jumps=[(10.0, 0, 0.5)], rtol=1e-8, atol=1e-12)
    direct = solve(prob, CVODE_BDF(dense=dense), **kw)
    assert cvode_direct.available(prob)
    monkeypatch.setattr(cvode_direct, "available", lambda prob: False)
    wrapped = solve(prob, CVODE_BDF(dense=dense), **kw)
    assert direct.success and wrapped.success
    np.testing.assert_allclose(direct.u, wrapped.u, rtol=1e-12, atol=1e-20)
    np.testing.assert_allclose(direct.step_times, wrapped.step_times, rtol=1e-12)
    if dense:
        assert direct.stats["naccept"] == wrapped.stats["naccept"] > 50
    else:  # scikit-sundae does not report CVODE's step count
        assert wrapped.stats["naccept"] is None and direct.stats["naccept"] > 50


def test_normal_mode_max_steps_is_a_status():
    prob = ODEProblem(numba.njit(robertson), [1.0, 0.0, 0.0], (0.0, 1e5), K)
    sol = solve(prob, CVODE_BDF(), saveat=[1e5], max_steps=20)
    assert sol.status == ReturnCode.MAX_STEPS and not sol.success
    assert "max_steps" in sol.message
    with pytest.raises(TypeError, match="dense"):
        CVODE_BDF(dense=1)
    with pytest.raises(ValueError, match="max_order"):
        solve(prob, CVODE_BDF(max_order=9), saveat=[1.0])


def test_failures_are_data():
    prob = ODEProblem(numba.njit(robertson), [1.0, 0.0, 0.0], (0.0, 1e5), K)
    sol = solve(prob, CVODE_BDF(), max_steps=20)
    assert sol.status == ReturnCode.MAX_STEPS and not sol.success

    def blowup(du, u, p, t):
        du[0] = u[0] ** 2

    sol = solve(ODEProblem(blowup, [1.0], (0.0, 2.0)), CVODE_Adams())
    assert not sol.success
    assert "CVODE" in sol.message or sol.status == ReturnCode.NONFINITE


def test_plain_python_rhs_needs_cvode():
    def f(du, u, p, t):
        du[0] = -u[0]

    prob = ODEProblem(f, [1.0], (0.0, 1.0))
    with pytest.raises(TypeError, match="compiled with numba"):
        solve(prob)
    assert solve(prob, CVODE_BDF(), saveat=[1.0], rtol=1e-10, atol=1e-12).u[0, 0] == (
        pytest.approx(np.exp(-1.0), rel=1e-7)
    )
