"""Dynamics that turn NaN or infinite mid-solve (square roots and logarithms of negative
states, finite-time blow-up, NaN at the initial point) end every solver family, ensemble,
sensitivity method and neural ODE in a non-success status or an ``ODESolveError``: never
SUCCESS with non-finite output.

numba's ``max(0.0, nan)`` is ``0.0`` and comparisons with NaN are false, so an error norm built
from them once read a NaN step as accurate: ``u' = -sqrt(u) - 0.5`` came back SUCCESS with
``u = [1.0, 0.349, nan, ...]`` from every explicit method.
"""

import math

import numba
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from scichains import ode  # noqa: E402
from scichains.adjoint import (  # noqa: E402
    BacksolveAdjoint,
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    Objective,
    QuadratureAdjoint,
    SquaredError,
)
from scichains.ode import (  # noqa: E402
    EnsembleProblem,
    ODEProblem,
    ODESolveError,
    ReturnCode,
)
from scichains.ode._control import error_norm  # noqa: E402

SQRT, LOG, BLOWUP, AT_START = 0.0, 1.0, 2.0, 3.0


@numba.njit
def bad(du, u, p, t):
    """One right-hand side for every case (one compile): ``p = [a, kind]``."""
    kind = p[1]
    if kind == 0.0:
        du[0] = -math.sqrt(u[0]) - p[0]  # NaN once u < 0 (reached in finite time)
    elif kind == 1.0:
        du[0] = math.log(u[0]) - p[0]  # -inf at u = 0, NaN below
    elif kind == 2.0:
        du[0] = p[0] * u[0] * u[0]  # u0 / (1 - a u0 t): infinite at t = 1 / (a u0)
    else:
        du[0] = math.sqrt(u[0] - p[0])  # NaN at t0 when a > u0


@numba.njit
def bad_vjp(v, u, p, t, ubar, pbar):
    kind = p[1]
    pbar[1] = 0.0
    if kind == 0.0:
        ubar[0] = -0.5 * v[0] / math.sqrt(u[0])
        pbar[0] = -v[0]
    elif kind == 1.0:
        ubar[0] = v[0] / u[0]
        pbar[0] = -v[0]
    elif kind == 2.0:
        ubar[0] = 2.0 * p[0] * u[0] * v[0]
        pbar[0] = u[0] * u[0] * v[0]
    else:
        r = math.sqrt(u[0] - p[0])
        ubar[0] = 0.5 * v[0] / r
        pbar[0] = -0.5 * v[0] / r


def _problem(kind, a=0.5, u0=1.0, t1=5.0):
    return ODEProblem(bad, [u0], (0.0, t1), [a, kind], vjp=bad_vjp)


ADAPTIVE = [
    ode.Tsit5(),
    ode.DP5(),
    ode.Vern7(),
    ode.BS3(),
    ode.Rodas5P(),
    ode.Rosenbrock23(),
    ode.KenCarp4(),
    ode.Kvaerno5(),
    ode.RadauIIA5(),
]
CVODE = [ode.CVODE_BDF(), ode.CVODE_Adams()]


def _assert_not_silent(sol):
    if sol.success:
        assert np.all(np.isfinite(sol.u)), f"SUCCESS with non-finite states: {sol.u}"
    else:
        assert sol.message


@pytest.mark.parametrize("solver", ADAPTIVE, ids=lambda s: s.name)
def test_sqrt_of_a_negative_state_is_nonfinite(solver):
    # u' = -sqrt(u) - 1/2, u(0) = 1 reaches 0 at t* = 2 - ln 3 and has no real solution after
    sol = ode.solve(_problem(SQRT), solver, saveat=np.linspace(0.0, 5.0, 11))
    assert sol.status == ReturnCode.NONFINITE, sol.message
    t_star = 2.0 - math.log(3.0)
    assert abs(sol.t_reached - t_star) < 1e-3, sol.t_reached
    assert np.all(np.isfinite(sol.u)) and sol.t.size == 2  # t = 0 and 0.5 reached
    with pytest.raises(ODESolveError, match="NONFINITE"):
        ode.solve(_problem(SQRT), solver, saveat=np.linspace(0.0, 5.0, 11), throw=True)


@pytest.mark.parametrize("solver", [ode.RK4(), ode.Euler()], ids=lambda s: s.name)
def test_fixed_step_methods_stop_at_the_first_nonfinite_step(solver):
    sol = ode.solve(_problem(LOG), solver, dt0=0.01)
    assert sol.status == ReturnCode.NONFINITE
    assert np.all(np.isfinite(sol.u)) and 0.8 < sol.t_reached < 1.0  # u = 0 near t = 0.93


@pytest.mark.parametrize("solver", ADAPTIVE[:2] + ADAPTIVE[4:6], ids=lambda s: s.name)
def test_nan_at_the_initial_point(solver):
    sol = ode.solve(_problem(AT_START, a=2.0), solver)
    assert not sol.success and sol.t_reached == 0.0


def test_error_norm_never_reads_nan_or_inf_as_accurate():
    u = np.ones(3)
    unew = np.ones(3)
    for group in (0, 1, 3):
        err = np.array([1e-9, np.nan, 1e-9])
        assert math.isnan(error_norm(err, u, unew, 1e-6, 1e-8, group))
        err = np.array([1e-9, 1e-9, np.inf])
        assert not math.isfinite(error_norm(err, u, unew, 1e-6, 1e-8, group))
        # an infinite state: its scale is infinite and its error term zero
        assert math.isnan(error_norm(np.zeros(3), u, np.array([1.0, np.inf, 1.0]), 1e-6, 1e-8, 0))
    assert error_norm(np.full(3, 1e-8), u, unew, 1e-6, 1e-8, 0) > 0.0


SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@SETTINGS
@given(
    kind=st.sampled_from([SQRT, LOG, BLOWUP, AT_START]),
    a=st.floats(0.05, 3.0),
    u0=st.floats(0.1, 2.0),
    solver=st.sampled_from(ADAPTIVE),
    rtol=st.sampled_from([1e-3, 1e-6, 1e-9]),
)
def test_no_family_returns_success_with_nonfinite_states(kind, a, u0, solver, rtol):
    sol = ode.solve(_problem(kind, a, u0, t1=4.0), solver, saveat=np.linspace(0, 4, 9), rtol=rtol)
    _assert_not_silent(sol)
    if kind in (SQRT, LOG) or (kind == AT_START and a > u0):
        assert not sol.success  # no real solution over [0, 4] (SQRT and LOG reach u = 0)
    if kind == BLOWUP and 1.0 / (a * u0) < 3.9:
        assert not sol.success


@pytest.mark.parametrize("solver", CVODE, ids=lambda s: s.name)
def test_cvode_reports_a_failure(solver, capfd):
    sol = ode.solve(_problem(SQRT), solver, saveat=np.linspace(0.0, 5.0, 11))
    capfd.readouterr()  # CVODE's own warnings
    assert not sol.success and np.all(np.isfinite(sol.u))


# a dose (0.1 at t = 0.25: the same outcomes) takes the scalar stepper instead of the lane
# loop, as solve_ensemble's docstring says: both paths
@pytest.mark.parametrize("jumps", [None, [(0.25, 0, 0.1)]], ids=["lanes", "scalar"])
def test_ensembles_flag_the_nonfinite_trajectories_only(jumps):
    # a in p[0]: with kind SQRT every trajectory reaches u = 0 but the a = -2 ones, whose
    # derivative -sqrt(u) + 2 keeps u near 4 (no NaN): those succeed
    m = 21
    a = np.where(np.arange(m) % 3 == 0, -2.0, 0.5)
    ps = np.column_stack([a, np.full(m, SQRT)])
    eprob = EnsembleProblem(_problem(SQRT), u0s=np.ones((m, 1)), ps=ps)
    saveat = np.linspace(0, 5, 11)
    sol = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=saveat, threads=2, jumps=jumps)
    ok = a < 0
    assert np.all(sol.status[ok] == ReturnCode.SUCCESS)
    assert np.all(sol.status[~ok] == ReturnCode.NONFINITE)
    assert np.all(np.isfinite(sol.u[ok]))
    assert not np.any(np.isnan(sol.u[~ok][:, :2]))  # t = 0, 0.5 reached before u = 0


SENSEALGS = [
    (ode.Tsit5(), InterpolatingAdjoint()),
    (ode.Tsit5(), QuadratureAdjoint()),
    (ode.Tsit5(), BacksolveAdjoint()),
    (ode.Tsit5(), DiscreteAdjoint()),
    (ode.Tsit5(), ForwardSensitivity()),
    (ode.Rodas5P(), InterpolatingAdjoint()),
    (ode.Rodas5P(), DiscreteAdjoint()),
    (ode.Kvaerno5(), InterpolatingAdjoint()),
]


@pytest.mark.parametrize(
    "solver, sensealg", SENSEALGS, ids=lambda x: getattr(x, "name", type(x).__name__)
)
def test_gradients_through_a_nonfinite_solve_raise(solver, sensealg):
    ts = np.linspace(0.0, 3.0, 7)
    obj = Objective(
        _problem(SQRT), SquaredError(np.zeros((7, 1))), ts, solver=solver, sensealg=sensealg
    )
    with pytest.raises(ODESolveError, match="NONFINITE") as info:
        obj.value_and_grad()
    assert info.value.solution.status == ReturnCode.NONFINITE


@numba.njit
def nan_vjp(v, u, p, t, ubar, pbar):
    # the exact vjp of -p[0] u ... but NaN for t < 1: the forward solve is fine, the
    # backward sweep is not
    bad = math.nan if t < 1.0 else 0.0
    ubar[0] = -p[0] * v[0] + bad
    pbar[0] = -u[0] * v[0]


@numba.njit
def decay(du, u, p, t):
    du[0] = -p[0] * u[0]


@pytest.mark.parametrize(
    "sensealg",
    [InterpolatingAdjoint(), QuadratureAdjoint(), BacksolveAdjoint(), DiscreteAdjoint()],
    ids=lambda s: type(s).__name__,
)
def test_a_nonfinite_adjoint_sweep_raises(sensealg):
    prob = ODEProblem(decay, [1.0], (0.0, 2.0), [0.7], vjp=nan_vjp)
    ts = np.linspace(0.0, 2.0, 5)
    obj = Objective(prob, SquaredError(np.zeros((5, 1))), ts, sensealg=sensealg)
    with pytest.raises(ODESolveError, match="NONFINITE"):
        obj.value_and_grad()


@pytest.mark.parametrize("batched", [False, True], ids=["one", "lockstep"])
def test_a_neural_ode_that_blows_up_raises(batched):
    import scichains as sc
    from scichains.models import NeuralODE

    chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(8, "tanh"), sc.Dense(2))
    p = chain.init_params(seed=0, dtype=np.float64)
    ts = np.linspace(0.0, 2.0, 5)
    node = NeuralODE(chain, (0.0, 2.0), ts)
    # u' = W2 tanh(W1 u^3 + b1) + b2, with the output weights and bias scaled by 1e300: the
    # states overflow within the first step sizes the controller tries
    q = p.copy()
    q[-(8 * 2 + 2) :] *= 1e300
    u0 = np.array([1.0, 0.5])
    data = np.zeros((5, 2))
    if batched:
        u0 = np.stack([u0, -u0, 0.3 * u0])
        data = np.zeros((3, 5, 2))
    for call in (lambda: node.predict(u0, q), lambda: node.loss_and_grad(u0, q, data)):
        try:
            out = call()
        except ODESolveError as e:
            assert e.solution.status != ReturnCode.SUCCESS
            continue
        values = out if isinstance(out, np.ndarray) else np.concatenate([[out[0]], out[1]])
        assert np.all(np.isfinite(values)), "a result with NaN or inf and no error"
