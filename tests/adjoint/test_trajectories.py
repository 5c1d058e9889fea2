"""Many trajectories with times of their own, mini-batches, multiple shooting and the losses'
masks, against independent references: single-trajectory Objectives summed in order, float64
central differences of losses computed from plain solves."""

import numpy as np
import pytest
import sympy as sp
from scipy.optimize import minimize

from scichains.adjoint import (
    DiscreteAdjoint,
    ForwardSensitivity,
    HuberLoss,
    InterpolatingAdjoint,
    LogNormalLoss,
    MultiObjective,
    MultipleShooting,
    Objective,
    QuadratureAdjoint,
    ScipyFun,
    SquaredError,
    Trajectory,
    minibatches,
)
from scichains.ode import ODESolveError, SymbolicModel, solve

x, y = sp.symbols("x y")
alpha, beta, gamma, delta = sp.symbols("alpha beta gamma delta")
TIGHT = dict(rtol=1e-10, atol=1e-12)
MODEL = SymbolicModel(
    [x, y], [alpha, beta, gamma, delta], [alpha * x - beta * x * y, gamma * x * y - delta * y]
)
P = MODEL.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)


def _fd(fun, z, h=1e-6):
    g = np.zeros(z.size)
    for j in range(z.size):
        e = np.zeros(z.size)
        e[j] = h
        g[j] = (fun(z + e) - fun(z - e)) / (2 * h)
    return g


def _specs():
    """Four trajectories: different save times (lengths 5, 9, 3, 12), start times, doses,
    weights with a masked NaN."""
    rng = np.random.default_rng(11)
    specs = []
    u0s = np.array([[0.44, 4.6], [1.0, 2.0], [0.7, 3.1], [2.0, 1.5]])
    times = [
        np.linspace(0.2, 1.5, 5),
        np.linspace(0.1, 3.0, 9),
        np.array([0.5, 0.9, 1.2]),
        np.linspace(0.6, 2.5, 12),
    ]
    t0s = [None, None, 0.3, 0.5]
    jumps = [None, [(1.0, 0, 0.5)], None, [(1.2, 1, 0.3), (2.0, 0, 0.2)]]
    for i in range(4):
        data = rng.uniform(0.5, 3.0, (times[i].size, 2))
        w = np.ones_like(data)
        if i == 1:
            w[3, 1] = 0.0
            data[3, 1] = np.nan  # missing
        if i == 3:
            w = np.array([1.0, 0.5])
        specs.append(Trajectory(u0s[i], times[i], data, w, jumps[i], t0=t0s[i]))
    return specs


def _single(spec, sensealg, **kw):
    t0 = 0.0 if spec.t0 is None else spec.t0
    prob = MODEL.problem(spec.u0, (t0, spec.saveat[-1]), P)
    loss = SquaredError(spec.data, spec.weights)
    return Objective(prob, loss, spec.saveat, sensealg=sensealg, jumps=spec.jumps, **kw)


def _summed(results):
    value, dp = results[0][0], results[0][1].copy()
    for r in results[1:]:
        value += r[0]
        dp += r[1]
    return value, dp, np.stack([r[2] for r in results])


SENSEALGS = pytest.mark.parametrize(
    "sensealg",
    [
        DiscreteAdjoint(),
        InterpolatingAdjoint(),
        ForwardSensitivity(),
        QuadratureAdjoint(checkpointing=True),
    ],
    ids=["discrete", "interpolating", "forward", "quadrature-checkpointed"],
)


@SENSEALGS
def test_trajectories_with_own_times_are_the_ordered_sum_of_single_objectives(sensealg):
    specs = _specs()
    prob = MODEL.problem(np.ones(2), (0.0, 1.0), P)  # its t1 is not used
    multi = MultiObjective(prob, specs, sensealg=sensealg)
    assert multi.u0.shape == (4, 2)
    ref = _summed([_single(s, sensealg).value_and_grad(P, s.u0) for s in specs])
    got1 = multi.value_and_grad(P, threads=1)
    assert got1[0] == ref[0]  # exactly: same computations, trajectory order
    np.testing.assert_array_equal(got1[1], ref[1])
    np.testing.assert_array_equal(got1[2], ref[2])
    got2 = multi.value_and_grad(P, multi.u0, threads=2)
    assert np.float64(got2[0]).tobytes() == np.float64(got1[0]).tobytes()
    assert got2[1].tobytes() == got1[1].tobytes() and got2[2].tobytes() == got1[2].tobytes()
    # the tuple form gives the same
    tuples = [(s.u0, s.saveat, s.data, s.weights, s.jumps) for s in specs]
    tuples = [t if s.t0 is None else Trajectory(*t, t0=s.t0) for t, s in zip(tuples, specs)]
    other = MultiObjective(prob, tuples, sensealg=sensealg)
    assert other.value_and_grad(P, threads=2)[1].tobytes() == got1[1].tobytes()
    # value alone
    values = [_single(s, sensealg).value(P, s.u0) for s in specs]
    assert multi.value(P, threads=2) == sum(values[1:], values[0])


def _loss_by_solving(spec, p, u0):
    t0 = 0.0 if spec.t0 is None else spec.t0
    prob = MODEL.problem(u0, (t0, spec.saveat[-1]), p)
    sol = solve(prob, saveat=spec.saveat, jumps=spec.jumps, rtol=1e-12, atol=1e-14)
    w = np.broadcast_to(1.0 if spec.weights is None else spec.weights, spec.data.shape)
    seen = w != 0
    return float(np.sum((w * (sol.u - spec.data) ** 2)[seen]))


def test_trajectories_with_own_times_against_central_differences():
    specs = _specs()
    prob = MODEL.problem(np.ones(2), (0.0, 1.0), P)
    multi = MultiObjective(prob, specs, sensealg=DiscreteAdjoint(), **TIGHT)
    value, dp, du0 = multi.value_and_grad(P, threads=2)
    u0 = multi.u0

    def total(q, v):
        return sum(_loss_by_solving(s, q, v[i]) for i, s in enumerate(specs))

    assert value == pytest.approx(total(P, u0), rel=1e-8)
    np.testing.assert_allclose(dp, _fd(lambda q: total(q, u0), P), rtol=1e-5)
    fd_u0 = _fd(lambda v: total(P, v.reshape(4, 2)), u0.ravel()).reshape(4, 2)
    np.testing.assert_allclose(du0, fd_u0, rtol=1e-5, atol=1e-7)


def test_bad_trajectory_specs_name_the_trajectory():
    specs = _specs()
    prob = MODEL.problem(np.ones(2), (0.0, 1.0), P)

    def with_(i, **change):
        out = list(specs)
        s = specs[i]
        fields = dict(u0=s.u0, saveat=s.saveat, data=s.data, weights=s.weights)
        fields.update(jumps=s.jumps, t0=s.t0)
        fields.update(change)
        out[i] = Trajectory(**fields)
        return out

    with pytest.raises(ValueError, match=r"trajectory 2: u0 must have shape \(2,\)"):
        MultiObjective(prob, with_(2, u0=np.ones(3)))
    with pytest.raises(ValueError, match="trajectory 1: data has shape"):
        MultiObjective(prob, with_(1, data=np.ones((8, 2)), weights=None))  # 9 save times
    with pytest.raises(ValueError, match=r"trajectory 0: .*NaN"):
        MultiObjective(prob, with_(0, data=np.full((5, 2), np.nan)))
    with pytest.raises(ValueError, match="trajectory 3: the last save time"):
        MultiObjective(prob, with_(3, t0=3.0))
    with pytest.raises(ValueError, match="trajectory 3: jump times"):
        MultiObjective(prob, with_(3, jumps=[(9.0, 0, 1.0)]))  # past the last save time
    with pytest.raises(ValueError, match="trajectory 1: saveat must be strictly"):
        MultiObjective(prob, with_(1, saveat=specs[1].saveat[::-1].copy()))
    with pytest.raises(ValueError, match="trajectory 0: weights go to the loss"):
        MultiObjective(prob, with_(0, data=SquaredError(specs[0].data), weights=np.ones(2)))
    with pytest.raises(TypeError, match="trajectory 1: expected a Trajectory"):
        MultiObjective(prob, [specs[0], "x"])
    with pytest.raises(ValueError, match="saveat is given per trajectory"):
        MultiObjective(prob, specs, np.linspace(0, 1, 3))
    with pytest.raises(ValueError, match="doses per trajectory"):
        MultiObjective(prob, specs, jumps=[(0.5, 0, 1.0)])
    multi = MultiObjective(prob, specs)
    with pytest.raises(ValueError, match=r"u0 must have shape \(4, 2\)"):
        multi.value_and_grad(P, np.ones((3, 2)))
    # a solver failure names its trajectory
    fast = specs[2].u0 * 40.0
    strict = MultiObjective(prob, specs, max_steps=30)
    u0 = strict.u0.copy()
    u0[2] = fast
    strict.value_and_grad(P, threads=1)
    with pytest.raises(ODESolveError) as info:
        strict.value_and_grad(P, u0, threads=2)
    assert "trajectory 2 of 4" in "".join(getattr(info.value, "__notes__", []))


def test_minibatches_are_sums_over_the_batch():
    specs = _specs()
    prob = MODEL.problem(np.ones(2), (0.0, 1.0), P)
    multi = MultiObjective(prob, specs)
    singles = [_single(s, DiscreteAdjoint()).value_and_grad(P, s.u0) for s in specs]
    batch = np.array([3, 0])
    ref = _summed([singles[i] for i in batch])
    for threads in (1, 2):
        value, dp, du0 = multi.value_and_grad(P, threads=threads, batch=batch)
        assert value == ref[0]
        assert dp.tobytes() == ref[1].tobytes()
        assert du0.shape == (2, 2) and du0.tobytes() == ref[2].tobytes()
    assert multi.value(P, batch=[1]) == singles[1][0]
    # the shared-times form takes batches too
    u0 = np.array([[0.44, 4.6], [1.0, 2.0], [0.7, 3.1]])
    ts = np.linspace(0.2, 1.5, 6)
    data = np.random.default_rng(0).uniform(0.5, 2, (3, ts.size, 2))
    sprob = MODEL.problem(u0[0], (0.0, 1.5), P)
    shared = MultiObjective(sprob, SquaredError(data), ts)
    one = [Objective(sprob, SquaredError(data[i]), ts).value_and_grad(P, u0[i]) for i in range(3)]
    got = shared.value_and_grad(P, u0, threads=2, batch=[2, 1])
    ref = _summed([one[2], one[1]])
    assert got[0] == ref[0] and got[1].tobytes() == ref[1].tobytes()
    for bad, match in (([], "non-empty"), ([0, 0], "repeats"), ([4], "outside"), ([0.5], "int")):
        with pytest.raises(ValueError, match=match):
            multi.value_and_grad(P, batch=bad)
    # an epoch of minibatches: a permutation, in batches of the size asked
    rng = np.random.default_rng(3)
    batches = list(minibatches(10, 4, rng))
    assert [b.size for b in batches] == [4, 4, 2]
    assert sorted(np.concatenate(batches).tolist()) == list(range(10))
    assert [b.size for b in minibatches(10, 4, 0, drop_last=True)] == [4, 4]
    with pytest.raises(ValueError, match="size"):
        list(minibatches(10, 0))


# ---------------------------------------------------------------- multiple shooting


def _lv_series(t1, T, noise, seed=0):
    p = MODEL.pack(alpha=1.5, beta=1.0, gamma=1.0, delta=3.0)
    ts = np.linspace(0.0, t1, T)
    prob = MODEL.problem(np.array([1.0, 1.0]), (0.0, t1), p)
    clean = solve(prob, saveat=ts, **TIGHT).u
    rng = np.random.default_rng(seed)
    return prob, p, ts, clean * (1 + noise * rng.standard_normal(clean.shape))


def test_multiple_shooting_gradient_against_central_differences():
    prob, p, ts, data = _lv_series(3.0, 11, 0.05)
    w = np.ones_like(data)
    w[4, 0] = 0.0
    data[4, 0] = np.nan  # missing, inside a segment
    ms = MultipleShooting(prob, data, ts, 4, continuity=10.0, weights=w, **TIGHT)
    assert ms.segments == [(0, 3), (3, 6), (6, 9), (9, 10)]
    theta = ms.initial(p * 0.9) + 0.05
    value, g = ms.value_and_grad(theta, threads=2)
    assert g.shape == theta.shape
    assert ms.value_and_grad(theta, threads=1)[1].tobytes() == g.tobytes()

    def reference(th):  # the definition, from plain solves
        q, U = ms.split(th)
        total = 0.0
        for k, (s, e) in enumerate(ms.segments):
            seg = MODEL.problem(U[k], (ts[s], ts[e]), q)
            u = solve(seg, saveat=ts[s : e + 1], rtol=1e-12, atol=1e-14).u
            r = (u - ms.data[s : e + 1]) * np.sqrt(w[s : e + 1])
            total += float(np.sum(r**2))
            if k + 1 < ms.K:
                total += 10.0 * float(np.sum((u[-1] - U[k + 1]) ** 2))
        return total

    assert value == pytest.approx(reference(theta), rel=1e-8)
    np.testing.assert_allclose(g, _fd(reference, theta), rtol=1e-5, atol=1e-6)
    p2, U2 = ms.split(ms.join(p, np.ones((4, 2))))
    np.testing.assert_array_equal(p2, p)
    # the initial states come from the data (the masked one interpolated)
    np.testing.assert_array_equal(ms.initial_states()[1], data[3])
    with pytest.raises(ValueError, match="theta must have shape"):
        ms.value_and_grad(theta[:-1])
    with pytest.raises(ValueError, match="group_size"):
        MultipleShooting(prob, data, ts, 1, weights=w)
    with pytest.raises(ValueError, match="continuity"):
        MultipleShooting(prob, data, ts, 3, continuity=0.0, weights=w)
    with pytest.raises(ValueError, match="data must have shape"):
        MultipleShooting(prob, data[:-1], ts, 3, weights=w)


def test_multiple_shooting_escapes_the_local_minimum_of_single_shooting():
    # Lotka-Volterra over ~7 periods, 3% noise, from a poor guess: single shooting stalls in
    # a local minimum with a wrong phase; multiple shooting (segments of 4 intervals) finds
    # the parameters
    prob, p_true, ts, data = _lv_series(30.0, 121, 0.03)
    p0 = np.array([1.0, 0.6, 0.6, 2.0])
    tol = dict(rtol=1e-7, atol=1e-9)
    single = Objective(prob, SquaredError(data), ts, **tol)

    def single_fun(q):
        value, dp, du0 = single.value_and_grad(q[:4], q[4:])
        return value, np.concatenate([dp, du0])

    bounds = [(0.05, 10.0)] * 4 + [(1e-3, 20.0)] * 2
    r1 = minimize(
        ScipyFun(single_fun), np.concatenate([p0, data[0]]), jac=True, method="L-BFGS-B",
        bounds=bounds, options=dict(maxiter=2000),
    )  # fmt: skip
    ms = MultipleShooting(prob, data, ts, 5, continuity=100.0, **tol)
    r2 = minimize(
        ScipyFun(ms.value_and_grad), ms.initial(p0), jac=True, method="L-BFGS-B",
        bounds=bounds[:4] + [(1e-3, 20.0)] * (2 * ms.K), options=dict(maxiter=2000),
    )  # fmt: skip
    p2, U2 = ms.split(r2.x)
    np.testing.assert_allclose(p2, p_true, rtol=0.03)
    fitted = single.value(p2, U2[0])  # the multiple-shooting answer, judged by single shooting
    noise_floor = float(np.sum((data - solve(prob, saveat=ts, **TIGHT).u) ** 2))
    assert fitted < 1.5 * noise_floor
    assert r1.fun > 50 * fitted  # single shooting stuck far away
    assert np.max(np.abs(r1.x[:4] / p_true - 1)) > 0.1


# --------------------------------------------------------------------------- losses


def test_log_normal_loss_gradient_against_central_differences():
    prob, p, ts, data = _lv_series(3.0, 9, 0.1)
    w = np.ones_like(data)
    w[2, 1] = 0.0
    data[2, 1] = np.nan
    loss = LogNormalLoss(data, eps=0.01, weights=w)
    obj = Objective(prob, loss, ts, **TIGHT)
    value, dp, du0 = obj.value_and_grad(p, prob.u0)

    def reference(q, v):
        u = solve(MODEL.problem(v, (0.0, 3.0), q), saveat=ts, rtol=1e-12, atol=1e-14).u
        r = np.log(u + 0.01) - np.log(data + 0.01)
        return float(np.sum((w * r**2)[w != 0]))

    assert value == pytest.approx(reference(p, prob.u0), rel=1e-8)
    np.testing.assert_allclose(dp, _fd(lambda q: reference(q, prob.u0), p), rtol=1e-5)
    np.testing.assert_allclose(du0, _fd(lambda v: reference(p, v), prob.u0), rtol=1e-5)
    with pytest.raises(ValueError, match=r"data \+ eps must be positive .* at \[0, 1\]"):
        LogNormalLoss(np.array([[1.0, -1.0]]))
    with pytest.raises(ValueError, match="eps"):
        LogNormalLoss(data, eps=-1.0, weights=w)
    with pytest.raises(ValueError, match="save point 1 .* state 0"):
        LogNormalLoss(np.ones((2, 2))).value_and_grad(
            np.zeros(2), np.array([[1.0, 1.0], [-0.5, 1.0]]), np.zeros((2, 2))
        )


def _huber(r, d=0.3):
    inside = np.abs(r) <= d
    return np.where(inside, r * r, 2 * d * np.abs(r) - d * d), np.where(
        inside, 2 * r, 2 * d * np.sign(r)
    )


@pytest.mark.parametrize(
    "make, term",
    [
        (lambda d, w: SquaredError(d, w), lambda u, d: ((u - d) ** 2, 2 * (u - d))),
        (lambda d, w: HuberLoss(d, 0.3, w), lambda u, d: _huber(u - d)),
        (
            lambda d, w: LogNormalLoss(d, 0.0, w),
            lambda u, d: ((np.log(u) - np.log(d)) ** 2, 2 * (np.log(u) - np.log(d)) / u),
        ),
    ],
    ids=["squared", "huber", "lognormal"],
)
def test_masked_nan_data_are_left_out_of_every_loss(make, term):
    rng = np.random.default_rng(5)
    data = rng.uniform(0.5, 2.0, (3, 6, 2))
    w = rng.uniform(0.5, 2.0, (3, 6, 2))
    w[0, 1, 0] = w[2, 5, 1] = w[1, 0, :] = 0.0
    data[w == 0] = np.nan
    u = rng.uniform(0.2, 2.5, (6, 2))
    u_bad = u.copy()
    u_bad[5, 1] = -3.0  # a state no log can take, where trajectory 2 is unobserved
    for i in range(3):
        keep = w[i] != 0
        loss = make(data, w).trajectory(i)
        state = u_bad if i == 2 else u
        g = np.full((6, 2), np.nan)
        value = loss.value_and_grad(np.zeros(6), state, g)
        # reference: the formula on the observed entries only
        rho, drho = term(state[keep], data[i][keep])
        assert value == pytest.approx(float(np.sum(w[i][keep] * rho)), rel=1e-13)
        assert np.all(g[~keep] == 0.0)
        np.testing.assert_allclose(g[keep], w[i][keep] * drho, rtol=1e-13)


def test_trajectories_go_to_whichever_thread_is_free():
    """run_trajectories hands trajectories out in order to free workers: a worker slowed by
    other work takes fewer; the results are in trajectory order, and a failure reported is
    the lowest failing trajectory, for any number of workers."""
    import threading
    import time

    from scichains.adjoint._multi import run_trajectories

    ran = {}

    def one(worker, i):
        ran[i] = worker
        time.sleep(0.05 if worker == "slow" else 0.005)  # "slow": a core shared with others
        return i * i

    workers = ["slow", "fast"]
    assert run_trajectories(workers, 12, one) == [i * i for i in range(12)]
    assert sorted(ran) == list(range(12))
    taken = list(ran.values())
    assert taken.count("fast") >= 2 * taken.count("slow")  # contiguous halves: 6 and 6

    lock = threading.Lock()
    started = []

    def failing(worker, i):
        with lock:
            started.append(i)
        if i in (3, 7):
            raise ZeroDivisionError(f"trajectory {i}")
        return i

    for k in (1, 2, 3):
        started.clear()
        with pytest.raises(ZeroDivisionError, match="trajectory 3") as info:
            run_trajectories([None] * k, 10, failing)
        assert "(in trajectory 3 of 10)" in info.value.__notes__
        assert set(range(4)) <= set(started)  # every trajectory below the failure ran
