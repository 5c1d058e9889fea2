"""adjoint.gradient / Objective against independent references: closed-form solutions with
doses, float64 central differences, hand-written vjps."""

import numba
import numpy as np
import pytest
import sympy as sp
from numba.core.runtime import rtsys

from scichains import Dense, SimpleChain
from scichains.adjoint import (
    BacksolveAdjoint,
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    MultiObjective,
    Objective,
    PointwiseLoss,
    QuadratureAdjoint,
    SquaredError,
    gradient,
)
from scichains.ode import (
    CVODE_BDF,
    RK4,
    NetworkTerm,
    ODEProblem,
    ODESolveError,
    SymbolicModel,
    Tsit5,
    solve,
)

x, y = sp.symbols("x y")
alpha, beta, gamma, delta = sp.symbols("alpha beta gamma delta")
TS = np.linspace(0.0, 3.0, 31)
U0 = np.array([0.44249296, 4.6280594])
TIGHT = dict(rtol=1e-10, atol=1e-12)
METHODS = pytest.mark.parametrize(
    "sensealg",
    [
        DiscreteAdjoint(),
        InterpolatingAdjoint(),
        QuadratureAdjoint(),
        BacksolveAdjoint(),
        ForwardSensitivity(),
        InterpolatingAdjoint(checkpointing=True),
        QuadratureAdjoint(checkpointing=True),
    ],
    ids=[
        "discrete",
        "interpolating",
        "quadrature",
        "backsolve",
        "forward",
        "interpolating-checkpointed",
        "quadrature-checkpointed",
    ],
)


def _lv_model():
    return SymbolicModel(
        [x, y], [alpha, beta, gamma, delta], [alpha * x - beta * x * y, gamma * x * y - delta * y]
    )


def _loss_by_solving(model, p, u0, data, ts, tspan, jumps=None):
    prob = model.problem(u0, tspan, p)
    sol = solve(prob, saveat=ts, rtol=1e-12, atol=1e-14, jumps=jumps)
    return float(np.sum((sol.u - data) ** 2))


def _fd(fun, z, h=1e-6):
    g = np.zeros(z.size)
    for j in range(z.size):
        e = np.zeros(z.size)
        e[j] = h
        g[j] = (fun(z + e) - fun(z - e)) / (2 * h)
    return g


@METHODS
def test_lotka_volterra_parameters_and_initial_condition_against_differences(sensealg):
    model = _lv_model()
    p = model.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
    prob = model.problem(U0, (0.0, 3.0), p)
    rng = np.random.default_rng(0)
    data = solve(prob, saveat=TS, **TIGHT).u + 0.1 * rng.standard_normal((31, 2))
    value, dp, du0 = gradient(prob, SquaredError(data), TS, sensealg=sensealg, **TIGHT)
    assert value == pytest.approx(_loss_by_solving(model, p, U0, data, TS, (0, 3)), rel=1e-8)
    fd_p = _fd(lambda q: _loss_by_solving(model, q, U0, data, TS, (0, 3)), p)
    fd_u = _fd(lambda u: _loss_by_solving(model, p, u, data, TS, (0, 3)), U0)
    np.testing.assert_allclose(dp, fd_p, rtol=1e-5)
    np.testing.assert_allclose(du0, fd_u, rtol=1e-5)


def test_all_methods_agree_with_forward_sensitivities():
    model = _lv_model()
    p = model.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
    prob = model.problem(U0, (0.0, 3.0), p)
    data = np.full((31, 2), 1.5)
    ref = gradient(prob, SquaredError(data), TS, sensealg=ForwardSensitivity(), **TIGHT)
    for sensealg in (
        DiscreteAdjoint(),
        InterpolatingAdjoint(),
        QuadratureAdjoint(),
        BacksolveAdjoint(),
        InterpolatingAdjoint(checkpointing=True),
        BacksolveAdjoint(checkpointing=True),
    ):
        got = gradient(prob, SquaredError(data), TS, sensealg=sensealg, **TIGHT)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-7, err_msg=repr(sensealg))
        np.testing.assert_allclose(got[2], ref[2], rtol=1e-7, err_msg=repr(sensealg))


def test_a_hand_written_vjp_gives_the_same_gradient():
    @numba.njit
    def f(du, u, p, t):
        du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
        du[1] = p[2] * u[0] * u[1] - p[3] * u[1]

    @numba.njit
    def vjp(v, u, p, t, ubar, pbar):
        ubar[0] = v[0] * (p[0] - p[1] * u[1]) + v[1] * p[2] * u[1]
        ubar[1] = -v[0] * p[1] * u[0] + v[1] * (p[2] * u[0] - p[3])
        pbar[0] = v[0] * u[0]
        pbar[1] = -v[0] * u[0] * u[1]
        pbar[2] = v[1] * u[0] * u[1]
        pbar[3] = -v[1] * u[1]

    p = np.array([1.3, 0.9, 0.8, 1.8])
    data = np.ones((31, 2))
    hand = gradient(ODEProblem(f, U0, (0, 3), p, vjp=vjp), SquaredError(data), TS)
    model = _lv_model()
    sym = gradient(model.problem(U0, (0, 3), p), SquaredError(data), TS)
    assert hand[0] == pytest.approx(sym[0], rel=1e-13)
    np.testing.assert_allclose(hand[1], sym[1], rtol=1e-12)
    np.testing.assert_allclose(hand[2], sym[2], rtol=1e-12)


def _one_compartment():
    ad, ac, ka, ke = sp.symbols("ad ac ka ke")
    return SymbolicModel([ad, ac], [ka, ke], [-ka * ad, ka * ad - ke * ac])


DOSE_CASES = pytest.mark.parametrize(
    "sensealg, solver",
    [(m, Tsit5()) for m in METHODS.args[1]] + [(InterpolatingAdjoint(), CVODE_BDF())],
    ids=METHODS.kwargs["ids"] + ["cvode-bdf"],
)


@DOSE_CASES
def test_doses_against_the_closed_form_one_compartment_model(sensealg, solver):
    """Doses into the depot at t = 0 and t = 5; the central amount has a closed form, whose
    exact derivatives (SymPy) are the reference for dL/d(ka, ke) and dL/du0."""
    model = _one_compartment()
    p = model.pack(ka=0.9, ke=0.25)
    ts = np.linspace(0.5, 12.0, 24)
    doses = [(0.0, 0, 1.0), (5.0, 0, 2.0)]
    ka, ke, t, a0, c0 = sp.symbols("ka ke t a0 c0")

    def central(tau, amount):  # amount in the depot at tau, nothing in the central
        return sp.Piecewise(
            (
                amount * ka / (ka - ke) * (sp.exp(-ke * (t - tau)) - sp.exp(-ka * (t - tau))),
                t >= tau,
            ),
            (0, True),
        )

    # initial depot a0 and central c0 add to the first dose
    ac = central(0, 1.0 + a0) + central(5, 2.0) + c0 * sp.exp(-ke * t)
    rng = np.random.default_rng(1)
    data = rng.uniform(0.2, 1.5, ts.size)
    syms = (ka, ke, a0, c0)
    L = sum((ac.subs(t, ti) - di) ** 2 for ti, di in zip(ts, data))
    at = {ka: 0.9, ke: 0.25, a0: 0.0, c0: 0.0}
    grads = [float(sp.diff(L, s).subs(at)) for s in syms]
    value_ref = float(L.subs(at))
    prob = model.problem([0.0, 0.0], (0.0, 12.0), p)
    weights = np.array([0.0, 1.0])  # only the central amount is observed
    data2 = np.stack([np.zeros(ts.size), data], axis=1)
    value, dp, du0 = gradient(
        prob,
        SquaredError(data2, weights),
        ts,
        jumps=doses,
        sensealg=sensealg,
        solver=solver,
        **TIGHT,
    )
    assert value == pytest.approx(value_ref, rel=1e-8)
    np.testing.assert_allclose(dp, grads[:2], rtol=1e-6)
    np.testing.assert_allclose(du0, grads[2:], rtol=1e-6)


def test_discrete_adjoint_through_the_continuous_extension():
    """With Tsit5 the discrete adjoint's forward solve does not land on the save times: it
    interpolates (as solve() does) and differentiates through the interpolant. Save times at a
    dose are still landed on (the dose is a stop)."""
    model = _one_compartment()
    p = model.pack(ka=0.9, ke=0.25)
    ts = np.linspace(0.5, 12.0, 24)  # 5.0, a dose time, is one of them
    doses = [(0.0, 0, 1.0), (5.0, 0, 2.0)]
    prob = model.problem([0.0, 0.0], (0.0, 12.0), p)
    data = np.random.default_rng(2).uniform(0.2, 1.5, (ts.size, 2))
    kw = dict(jumps=doses, rtol=1e-9, atol=1e-11)
    obj = Objective(prob, SquaredError(data), ts, sensealg=DiscreteAdjoint(), **kw)
    value, dp, du0 = obj.value_and_grad()
    inner = obj.plan.save_inner
    assert inner.sum() >= 20 and not inner[ts == 5.0].any()
    sol = solve(prob, saveat=ts, **kw)
    assert value == pytest.approx(float(np.sum((sol.u - data) ** 2)), rel=1e-14)
    fd_p = _fd(lambda q: obj.value(q), p, h=1e-5)
    fd_u = _fd(lambda u: obj.value(p, u), np.zeros(2), h=1e-5)
    np.testing.assert_allclose(dp, fd_p, rtol=1e-6)
    np.testing.assert_allclose(du0, fd_u, rtol=1e-6)
    landing = gradient(prob, SquaredError(data), ts, sensealg=InterpolatingAdjoint(), **kw)
    np.testing.assert_allclose(dp, landing[1], rtol=1e-6)


def test_checkpointing_keeps_one_segment_of_steps():
    model = _lv_model()
    p = model.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
    prob = model.problem(U0, (0.0, 3.0), p)
    ts = np.linspace(0.0, 3.0, 7)
    data = np.full((7, 2), 1.5)
    full = Objective(prob, SquaredError(data), ts, sensealg=InterpolatingAdjoint(), **TIGHT)
    ckpt = Objective(
        prob, SquaredError(data), ts, sensealg=InterpolatingAdjoint(checkpointing=True), **TIGHT
    )
    ref = full.value_and_grad()
    m_full = int(full.plan.stats[0])
    got = ckpt.value_and_grad()
    # the backward pass ends with segment 0 in the step buffers: one of six segments
    m_seg = int(ckpt.plan.stats[0])
    assert m_seg < m_full / 3
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-8)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-7)
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-7)
    np.testing.assert_allclose(ckpt.plan.save_u, full.plan.save_u, rtol=1e-8)


def test_scipy_fun_turns_failed_solves_into_a_rejected_value():
    from scichains.adjoint import ScipyFun

    model = _lv_model()
    p = model.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
    prob = model.problem(U0, (0.0, 3.0), p)
    obj = Objective(prob, SquaredError(np.ones((31, 2))), TS, max_steps=200)
    fun = ScipyFun(lambda q: obj.value_and_grad(q)[:2])
    value, g = fun(p)
    assert np.isfinite(value) and fun.last_value == value
    np.testing.assert_array_equal(g, obj.value_and_grad(p)[1])
    bad, g_bad = fun(p * 50.0)  # stiff enough to exhaust max_steps
    # above the last finite value by ten times its size plus one: finite, since SciPy's
    # L-BFGS-B stops at its start when a line search's first trial point gets inf
    assert bad == value + 10.0 * (abs(value) + 1.0)
    assert np.all(g_bad == 0.0) and g_bad.shape == p.shape
    assert fun.last_value == value


def test_stiff_problem_with_cvode_against_the_closed_form():
    """u' = -a (u - cos(b t)) - b sin(b t), u(0) = u0 (stiff for a = 1e3) has the solution
    u = cos(b t) + (u0 - 1) exp(-a t); its exact derivatives are the reference."""
    u, a, b, t, u0s = sp.symbols("u a b t u0")
    model = SymbolicModel([u], [a, b], [-a * (u - sp.cos(b * t)) - b * sp.sin(b * t)], t=t)
    ts = np.array([0.001, 0.002, 0.005, 0.5, 1.0, 2.0, 3.0])
    data = np.linspace(0.2, -0.4, ts.size)
    exact = sp.cos(b * t) + (u0s - 1) * sp.exp(-a * t)
    L = sum((exact.subs(t, ti) - di) ** 2 for ti, di in zip(ts, data))
    at = {a: 1e3, b: 2.0, u0s: 3.0}
    ref = [float(sp.diff(L, s).subs(at)) for s in (a, b, u0s)]
    prob = model.problem([3.0], (0.0, 3.0), model.pack(a=1e3, b=2.0))
    obj = Objective(prob, SquaredError(data[:, None]), ts, solver=CVODE_BDF(), **TIGHT)
    value, dp, du0 = obj.value_and_grad()
    assert value == pytest.approx(float(L.subs(at)), rel=1e-7)
    np.testing.assert_allclose(dp, ref[:2], rtol=1e-5)
    np.testing.assert_allclose(du0, ref[2:], rtol=1e-5)
    with pytest.raises(TypeError, match="InterpolatingAdjoint"):
        Objective(
            prob, SquaredError(data[:, None]), ts, solver=CVODE_BDF(), sensealg=DiscreteAdjoint()
        )
    # fixed-step methods have no adjoint here; a non-solver names the families that have one
    with pytest.raises(TypeError, match="RK4 takes fixed steps.*Rodas5P"):
        Objective(prob, SquaredError(data[:, None]), ts, solver=RK4)
    with pytest.raises(TypeError, match="explicit .*Rosenbrock .*ESDIRK .*CVODE"):
        Objective(prob, SquaredError(data[:, None]), ts, solver=object())


@METHODS
def test_ude_with_network_and_doses_against_differences(sensealg):
    chain = SimpleChain(1, Dense(6, "tanh"), Dense(1))
    ad, ac, ka, ke, vc = sp.symbols("ad ac ka ke vc")
    cp = sp.Max(ac / vc, 0)
    U = NetworkTerm(chain, [cp])
    model = SymbolicModel(
        [ad, ac], [ka, ke, vc], [-ka * ad, ka * ad - ke * ac * (1 + U[0] ** 2)], network=U
    )
    w = chain.init_params(seed=2, dtype=np.float64) * 0.5
    p = model.pack(ka=0.5, ke=0.3, vc=1.2, network=w)
    ts = np.linspace(0.5, 10.0, 20)
    doses = [(0.0, 0, 1.0), (4.0, 0, 1.0)]
    prob = model.problem([0.0, 0.0], (0.0, 10.0), p)
    data = np.full((ts.size, 2), 0.3)
    obj = Objective(prob, SquaredError(data), ts, jumps=doses, sensealg=sensealg, **TIGHT)
    value, dp, du0 = obj.value_and_grad(p)
    fd_p = _fd(lambda q: _loss_by_solving(model, q, [0.0, 0.0], data, ts, (0, 10), doses), p)
    np.testing.assert_allclose(dp, fd_p, rtol=1e-5, atol=1e-8 * np.abs(fd_p).max())
    # ForwardSensitivity steps on [u, S]: its solve differs from the plain one within tolerance
    assert obj.value(p) == pytest.approx(value, rel=1e-8)


def test_pointwise_loss_equals_squared_error():
    model = _lv_model()
    p = model.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
    prob = model.problem(U0, (0.0, 3.0), p)
    data = np.full((31, 2), 2.0)

    @numba.njit
    def term(i, t, u, g):
        total = 0.0
        for j in range(u.shape[0]):
            r = u[j] - 2.0
            g[j] = 2.0 * r
            total += r * r
        return total

    a = gradient(prob, SquaredError(data), TS)
    b = gradient(prob, PointwiseLoss(term), TS)
    assert a[0] == pytest.approx(b[0], rel=1e-14)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-14)


# white-box: calls the sweep kernel with the method's private buffers
@pytest.mark.whitebox
def test_adjoint_sweep_does_not_allocate():
    from scichains.adjoint import discrete_adjoint

    chain = SimpleChain(2, Dense(5, "rbf"), Dense(2))
    U = NetworkTerm(chain, [x, y])
    model = SymbolicModel([x, y], [alpha, delta], [alpha * x + U[0], -delta * y + U[1]], network=U)
    p = model.pack(alpha=1.3, delta=1.8, network=chain.init_params(seed=0, dtype=np.float64))

    def count(t1, rtol):
        ts = np.linspace(0, t1, 5)
        obj = Objective(
            model.problem(U0, (0, t1), p),
            SquaredError(np.zeros((5, 2))),
            ts,
            rtol=rtol,
            sensealg=DiscreteAdjoint(),
        )
        obj.value_and_grad(p)
        m = int(obj.plan.stats[0])
        dp, du0 = np.zeros(p.size), np.zeros(2)
        args = obj.discrete_args(p, dp, du0)
        before = rtsys.get_allocation_stats()
        discrete_adjoint(*args)
        after = rtsys.get_allocation_stats()
        return (after.alloc - before.alloc) + (after.mi_alloc - before.mi_alloc), m

    short, m_short = count(0.3, 1e-4)
    long, m_long = count(3.0, 1e-10)
    assert m_long > 5 * m_short
    assert short == long


# white-box: calls the sweep kernels with the methods' private buffers
@pytest.mark.whitebox
def test_interpolating_adjoint_agrees_with_discrete_and_does_not_allocate():
    from scichains.adjoint import continuous_adjoint

    chain = SimpleChain(2, Dense(5, "rbf"), Dense(2))
    U = NetworkTerm(chain, [x, y])
    model = SymbolicModel([x, y], [alpha, delta], [alpha * x + U[0], -delta * y + U[1]], network=U)
    p = model.pack(alpha=1.3, delta=1.8, network=chain.init_params(seed=0, dtype=np.float64))
    data = np.ones((31, 2))
    counts = []
    for t1, rtol in [(0.3, 1e-4), (3.0, 1e-10)]:
        ts = np.linspace(0, t1, 31)
        prob = model.problem(U0, (0, t1), p)
        obj = Objective(
            prob,
            SquaredError(data),
            ts,
            rtol=rtol,
            atol=rtol * 1e-2,
            sensealg=InterpolatingAdjoint(),
        )
        _, dp, du0 = obj.value_and_grad(p)
        ref = Objective(
            prob, SquaredError(data), ts, rtol=rtol, atol=rtol * 1e-2, sensealg=DiscreteAdjoint()
        ).value_and_grad(p)
        np.testing.assert_allclose(dp, ref[1], rtol=1e-3 if rtol > 1e-6 else 1e-7, atol=1e-12)
        pl = obj.plan
        args = (
            0,
            obj.prob.f_address,
            obj.prob.vjp_address,
            obj.prob.kernel,
            p,
            pl.tableau,
            rtol,
            rtol * 1e-2,
            pl.max_steps,
            pl.ts,
            pl.us,
            pl.fs,
            int(pl.stats[0]),
            pl.save_pos,
            obj.method._dl_du,
            dp,
            du0,
            obj.method._ws,
            obj.method._K,
            obj.adjoint_stats,
            False,
            np.zeros(5),  # where a user function failed: [t, lam, u]
        )
        obj.adjoint_stats[:] = 0
        before = rtsys.get_allocation_stats()
        continuous_adjoint(*args)
        after = rtsys.get_allocation_stats()
        counts.append(
            (
                (after.alloc - before.alloc) + (after.mi_alloc - before.mi_alloc),
                int(obj.adjoint_stats[0]),
            )
        )
    assert counts[1][1] > 5 * counts[0][1]  # many more steps...
    assert counts[0][0] == counts[1][0]  # ...and not one allocation more


def test_bad_input():
    def f(du, u, p, t):  # plain Python: no automatic derivative
        du[0] = -p[0] * u[0]

    prob = ODEProblem(f, [1.0], (0, 1), [1.0])
    with pytest.raises(ValueError, match="no vjp"):
        gradient(prob, SquaredError(np.zeros((2, 1))), [0.5, 1.0])
    model = _lv_model()
    prob = model.problem(U0, (0.0, 3.0), model.pack(alpha=1, beta=1, gamma=1, delta=1))
    with pytest.raises(ValueError, match="data has shape"):
        gradient(prob, SquaredError(np.zeros((3, 2))), TS)
    bad = np.zeros((31, 2))
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SquaredError(bad)
    SquaredError(bad, weights=np.where(np.isnan(bad), 0.0, 1.0))  # left out: fine
    with pytest.raises(ValueError, match="outside tspan"):
        gradient(prob, SquaredError(np.zeros((2, 2))), [1.0, 4.0])
    with pytest.raises(ValueError, match="p must have shape"):
        Objective(prob, SquaredError(np.zeros((31, 2))), TS).value_and_grad(np.zeros(3))


# ------------------------------------------------------------------- many trajectories


def _lv_trajectories(m=4):
    model = _lv_model()
    p = model.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
    u0 = U0 * np.linspace(0.7, 1.3, m)[:, None] + np.linspace(0.0, 0.3, m)[:, None]
    rng = np.random.default_rng(7)
    data = np.stack([solve(model.problem(u, (0.0, 3.0), p), saveat=TS, **TIGHT).u for u in u0])
    data += 0.1 * rng.standard_normal(data.shape)
    return model, p, u0, data


@pytest.mark.parametrize(
    "sensealg", [DiscreteAdjoint(), InterpolatingAdjoint(), ForwardSensitivity()], ids=repr
)
def test_multi_objective_is_the_ordered_sum_of_single_objectives(sensealg):
    model, p, u0, data = _lv_trajectories(4)
    prob = model.problem(U0, (0.0, 3.0), p)
    w = np.array([1.0, 0.5])  # broadcast to (m, len(TS), n)
    multi = MultiObjective(prob, SquaredError(data, w), TS, sensealg=sensealg)
    singles = [
        Objective(prob, SquaredError(data[i], w), TS, sensealg=sensealg).value_and_grad(p, u0[i])
        for i in range(4)
    ]
    ref_value, ref_dp = singles[0][0], singles[0][1].copy()
    for value_i, dp_i, _ in singles[1:]:
        ref_value += value_i
        ref_dp += dp_i
    value1, dp1, du0_1 = multi.value_and_grad(p, u0, threads=1)
    assert value1 == ref_value  # exactly: fixed trajectory order
    np.testing.assert_array_equal(dp1, ref_dp)
    np.testing.assert_array_equal(du0_1, np.stack([s[2] for s in singles]))
    value2, dp2, du0_2 = multi(p, u0, threads=2)
    assert np.float64(value2).tobytes() == np.float64(value1).tobytes()
    assert dp2.tobytes() == dp1.tobytes() and du0_2.tobytes() == du0_1.tobytes()
    # value: the ordered sum of single Objective.value calls (for ForwardSensitivity a plain
    # solve, not the augmented one of value_and_grad)
    ref_values = [
        Objective(prob, SquaredError(data[i], w), TS, sensealg=sensealg).value(p, u0[i])
        for i in range(4)
    ]
    assert multi.value(p, u0, threads=2) == sum(ref_values[1:], ref_values[0])
    # a list of per-trajectory losses gives the same
    listed = MultiObjective(prob, [SquaredError(d, w) for d in data], TS, sensealg=sensealg)
    assert listed.value_and_grad(p, u0, threads=2)[1].tobytes() == dp1.tobytes()


def test_multi_objective_against_central_differences():
    model, p, u0, data = _lv_trajectories(3)
    prob = model.problem(U0, (0.0, 3.0), p)
    multi = MultiObjective(prob, SquaredError(data), TS, sensealg=DiscreteAdjoint(), **TIGHT)
    value, dp, du0 = multi.value_and_grad(p, u0, threads=2)

    def total(q, v):
        return sum(_loss_by_solving(model, q, v[i], data[i], TS, (0, 3)) for i in range(3))

    assert value == pytest.approx(total(p, u0), rel=1e-8)
    np.testing.assert_allclose(dp, _fd(lambda q: total(q, u0), p), rtol=1e-5)
    fd_u0 = _fd(lambda v: total(p, v.reshape(3, 2)), u0.ravel()).reshape(3, 2)
    np.testing.assert_allclose(du0, fd_u0, rtol=1e-5)


def test_multi_objective_bad_input():
    model, p, u0, data = _lv_trajectories(3)
    prob = model.problem(U0, (0.0, 3.0), p)
    with pytest.raises(ValueError, match="trajectories, save points, states"):
        MultiObjective(prob, SquaredError(data[0]), TS)  # one trajectory's data
    with pytest.raises(ValueError, match="save points"):
        MultiObjective(prob, SquaredError(data[:, :-1]), TS)  # wrong number of save points
    with pytest.raises(TypeError, match="sequence"):
        MultiObjective(prob, data, TS)
    with pytest.raises(ValueError, match="m = 0"):
        MultiObjective(prob, [], TS)
    nan = data.copy()
    nan[1, 0, 1] = np.nan
    with pytest.raises(ValueError, match=r"first at \[1, 0, 1\]"):
        SquaredError(nan)
    with pytest.raises(ValueError, match="trajectories, save points, states"):
        SquaredError(data[None])
    multi = MultiObjective(prob, SquaredError(data), TS)
    with pytest.raises(ValueError, match=r"u0 must have shape \(3, 2\)"):
        multi.value_and_grad(p, u0[:2])  # m != m'
    with pytest.raises(ValueError, match=r"u0 must have shape \(3, 2\)"):
        multi.value_and_grad(p, u0[None])  # 3-D
    with pytest.raises(ValueError, match=r"u0 must have shape \(3, 2\)"):
        multi.value_and_grad(p, u0[0])
    with pytest.raises(ValueError, match="give u0"):
        multi.value_and_grad(p, None)
    bad = u0.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="trajectory 2"):
        multi.value_and_grad(p, bad)
    with pytest.raises(ValueError, match="threads"):
        multi.value_and_grad(p, u0, threads=-1)
    with pytest.raises(ValueError, match="parameters"):
        multi.value_and_grad(p[:-1], u0)
    # the single-trajectory Objective points to MultiObjective
    with pytest.raises(ValueError, match="MultiObjective"):
        Objective(prob, SquaredError(data), TS)
    with pytest.raises(ValueError, match="MultiObjective"):
        Objective(prob, SquaredError(data[0]), TS).value_and_grad(p, u0)


def test_multi_objective_names_the_failing_trajectory():
    model, p, u0, data = _lv_trajectories(3)
    prob = model.problem(U0, (0.0, 3.0), p)
    multi = MultiObjective(
        prob, SquaredError(data), TS, max_steps=90, sensealg=InterpolatingAdjoint()
    )
    v = u0.copy()
    v[1] *= 10.0  # faster oscillations: more steps than max_steps in trajectory 1 only
    multi.value_and_grad(p, u0, threads=1)  # the others are fine
    with pytest.raises(ODESolveError, match="max_steps") as info:
        multi.value_and_grad(p, v, threads=2)
    assert "trajectory 1 of 3" in "".join(getattr(info.value, "__notes__", []))


def test_a_loss_that_overflows_is_an_error_not_a_value():
    """y' = -1.8 y + c x^2 y with x = x0 e^{1.3 t}: at c = 2 the solve succeeds on a solution
    too large for the squared error (inf) and its gradient (NaN)."""
    import sympy as sp

    from scichains.adjoint import ScipyFun
    from scichains.ode import ODESolveError, ReturnCode, SymbolicModel

    x, y, c = sp.symbols("x y c")
    model = SymbolicModel([x, y], [c], [1.3 * x, -1.8 * y + c * x**2 * y])
    ts = np.linspace(0.0, 3.0, 31)
    prob = model.problem([0.44249296, 4.6280594], (0.0, 3.0), [2.0])
    for sa in (DiscreteAdjoint(), InterpolatingAdjoint(), ForwardSensitivity()):
        obj = Objective(prob, SquaredError(np.ones((31, 2))), ts, sensealg=sa, max_steps=20000)
        with pytest.raises(ODESolveError) as info:
            obj.value_and_grad([2.0])
        assert info.value.solution.status in (ReturnCode.NONFINITE, ReturnCode.MAX_STEPS)
        value, g = ScipyFun(lambda q, o=obj: o.value_and_grad(q)[:2])(np.array([2.0]))
        assert value == 1e100 and np.all(g == 0.0)  # (no finite value seen yet)
    obj = Objective(prob, SquaredError(np.ones((31, 2))), ts)
    with pytest.raises(ODESolveError, match="the loss is inf"):
        obj.value([2.0])
    assert np.isfinite(obj.value([0.1]))
