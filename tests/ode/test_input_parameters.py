"""Gradients with respect to the input samples (``ODEProblem.with_input_parameters``):
against the closed form of a forced linear ODE (its solution a convolution of the input with
the decay, computed by quadrature), against central differences on a nonlinear forced model,
for every sensitivity method; the same solution as the problem with the inputs as data; and
what is refused."""

import functools

import numba
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.interpolate import CubicSpline

from scichains import adjoint, ode

TS = np.linspace(0.0, 2.0, 9)
Y = np.c_[np.sin(2 * TS) + 0.5]  # one channel
K, X0, T = 0.8, 0.3, 1.7


@numba.njit
def decay(du, u, p, t, x):
    du[0] = -p[0] * u[0] + x[0]


@numba.njit
def forced(du, u, p, t, x):
    du[0] = -p[0] * u[0] + x[0]
    du[1] = -p[1] * u[1] + x[0] * x[1]


METHODS = [
    (ode.Tsit5(), adjoint.DiscreteAdjoint()),
    (ode.Tsit5(), adjoint.InterpolatingAdjoint()),
    (ode.Tsit5(), adjoint.ForwardSensitivity()),
    (ode.Rodas5P(), None),
    (ode.CVODE_BDF(), None),
]
IDS = ["Tsit5-discrete", "Tsit5-interpolating", "Tsit5-forward", "Rodas5P", "CVODE_BDF"]


def _basis(kind, i):
    """The weight of sample ``i`` in the interpolant at ``s``."""

    if kind == "cubic":  # SciPy's natural spline through the unit samples
        return CubicSpline(TS, np.eye(TS.size)[i], bc_type="natural")

    def phi(s):
        if kind == "constant":
            j = min(np.searchsorted(TS, s, side="right") - 1, TS.size - 1)
            return float(j == i)
        return float(np.interp(s, TS, np.eye(TS.size)[i]))

    return phi


def _closed_form(kind):
    """``x(T)`` of ``x' = -k x + u(s)`` and its derivatives with respect to each sample and
    to ``k``: ``x(T) = e^(-kT) x0 + sum_i y_i int_0^T e^(-k(T-s)) phi_i(s) ds``."""
    g = np.array(
        [
            quad(lambda s, i=i: np.exp(-K * (T - s)) * _basis(kind, i)(s), 0.0, T,
                 points=TS[TS < T], epsabs=1e-14, epsrel=1e-13, limit=200)[0]
            for i in range(TS.size)
        ]
    )  # fmt: skip
    # d/dk of the convolution: -(T - s) e^(-k(T-s))
    gk = np.array(
        [
            quad(lambda s, i=i: -(T - s) * np.exp(-K * (T - s)) * _basis(kind, i)(s), 0.0, T,
                 points=TS[TS < T], epsabs=1e-14, epsrel=1e-13, limit=200)[0]
            for i in range(TS.size)
        ]
    )  # fmt: skip
    x = np.exp(-K * T) * X0 + g @ Y[:, 0]
    dx_dk = -T * np.exp(-K * T) * X0 + gk @ Y[:, 0]
    return x, g, dx_dk


@functools.cache
def _decay_controls(kind):
    """The forced decay with its samples as parameters (made once per kind: each compiles
    its adapters)."""
    prob = ode.ODEProblem(
        decay, [X0], (0.0, T), np.array([K]), inputs=ode.Interpolation(TS, Y, kind=kind)
    )
    return prob.with_input_parameters()


@pytest.mark.parametrize("kind", ["linear", "constant", "cubic"])
@pytest.mark.parametrize(("solver", "sensealg"), METHODS, ids=IDS)
def test_forced_decay_against_the_closed_form(kind, solver, sensealg):
    ctl = _decay_controls(kind)
    assert ctl.p.size == 1 + TS.size and ctl.input_slice == slice(1, 1 + TS.size)
    x, dx_dy, dx_dk = _closed_form(kind)
    target = 0.2
    obj = adjoint.Objective(
        ctl, adjoint.SquaredError([[target]]), [T], solver=solver, sensealg=sensealg,
        rtol=1e-12, atol=1e-14,
    )  # fmt: skip
    value, dp, du0 = obj.value_and_grad()
    r = x - target
    assert value == pytest.approx(r**2, rel=1e-9)
    np.testing.assert_allclose(dp[ctl.input_slice], 2 * r * dx_dy, rtol=1e-7, atol=1e-12)
    assert dp[0] == pytest.approx(2 * r * dx_dk, rel=1e-7)
    assert du0[0] == pytest.approx(2 * r * np.exp(-K * T), rel=1e-7)


@functools.cache
def _forced_controls():
    ts = np.linspace(0.0, 5.0, 11)
    values = np.c_[np.sin(ts), 1.0 + 0.3 * np.cos(ts)]
    interp = ode.Interpolation(ts, values)
    prob = ode.ODEProblem(forced, [1.0, 0.5], (0.0, 5.0), np.array([0.7, 1.3]), inputs=interp)
    return prob, prob.with_input_parameters(), ts, values


@pytest.mark.parametrize(("solver", "sensealg"), METHODS, ids=IDS)
def test_a_nonlinear_forced_model_against_central_differences(solver, sensealg):
    prob, ctl, ts, values = _forced_controls()
    saveat = np.linspace(0.5, 5.0, 10)
    kw = dict(saveat=saveat, rtol=1e-10, atol=1e-12)
    data = ode.solve(prob, ode.Tsit5(), **kw).u
    # the same solution as the problem with the inputs as data (to rounding: its slopes are
    # divided in compiled code, the table's by NumPy)
    np.testing.assert_allclose(ode.solve(ctl, ode.Tsit5(), **kw).u, data, rtol=1e-13)
    obj = adjoint.Objective(
        ctl, adjoint.SquaredError(1.1 * data + 0.05), saveat, solver=solver,
        sensealg=sensealg, rtol=1e-10, atol=1e-12,
    )  # fmt: skip
    _, dp, _ = obj.value_and_grad()
    # central differences of Tsit5's loss (CVODE's own values move by more than its
    # tolerance between nearby points, with its step choices)
    ref = adjoint.Objective(ctl, obj.loss, saveat, rtol=1e-10, atol=1e-12)
    h = 1e-6
    cd = np.empty_like(dp)
    for k in range(dp.size):
        e = np.zeros(dp.size)
        e[k] = h
        cd[k] = (ref.value(ctl.p + e) - ref.value(ctl.p - e)) / (2 * h)
    np.testing.assert_allclose(dp, cd, rtol=0, atol=2e-7 * np.abs(cd).max())
    # sample i, channel c at len(p) + i m + c
    assert dp[ctl.input_slice].reshape(ts.size, 2).shape == values.shape


def test_what_input_parameters_refuse():
    akima = ode.Interpolation(TS, Y, kind="akima")
    with pytest.raises(ValueError, match="'akima' inputs are not supported"):
        ode.ODEProblem(decay, [X0], (0.0, T), np.array([K]), inputs=akima).with_input_parameters()
    many = np.linspace(0.0, 2.0, 300)
    fine = ode.Interpolation(many, np.sin(many), kind="cubic")
    with pytest.raises(ValueError, match="more than 256 samples"):
        ode.ODEProblem(decay, [X0], (0.0, T), np.array([K]), inputs=fine).with_input_parameters()

    @numba.njit
    def decay_vjp(v, u, p, t, x, ubar, pbar):
        ubar[0] = -p[0] * v[0]
        pbar[0] = -u[0] * v[0]

    given = ode.ODEProblem(
        decay, [X0], (0.0, T), np.array([K]), vjp=decay_vjp, inputs=ode.Interpolation(TS, Y)
    )
    with pytest.raises(TypeError, match="automatic vjp"):
        given.with_input_parameters()

    @numba.njit
    def plain(du, u, p, t):
        du[0] = -p[0] * u[0]

    with pytest.raises(TypeError, match="takes no inputs"):
        ode.ODEProblem(plain, [X0], (0.0, T), np.array([K])).with_input_parameters()


def test_the_made_problem_refuses_to_be_made_again():
    inputs = ode.Interpolation(TS, Y)
    ctl = ode.ODEProblem(decay, [X0], (0.0, T), np.array([K]), inputs=inputs)
    ctl = ctl.with_input_parameters()
    with pytest.raises(TypeError, match="call with_inputs on the problem it was made from"):
        ctl.with_inputs(inputs)
    with pytest.raises(TypeError, match="parameters already"):
        ctl.with_input_parameters()
