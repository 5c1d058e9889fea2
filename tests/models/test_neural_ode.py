"""NeuralODE: predictions against an independent integration, discrete-adjoint gradients
against central finite differences, allocation-free reverse sweep."""

import numba
import numpy as np
import pytest
from numba.core.runtime import rtsys
from scipy.integrate import solve_ivp

import scichains as sc
from scichains import nn, ode
from scichains.adjoint import (
    BacksolveAdjoint,
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    QuadratureAdjoint,
    Trajectory,
)
from scichains.models import NeuralODE


def _spiral_model(seed=0):
    chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(16, "tanh"), sc.Dense(2))
    p = chain.init_params(seed=seed, dtype=np.float64)
    return chain, p


def test_predict_matches_scipy_on_the_same_network():
    chain, p = _spiral_model()
    ts = np.linspace(0, 1.5, 30)
    node = NeuralODE(chain, (0.0, 1.5), ts, rtol=1e-10, atol=1e-12)
    u0 = np.array([2.0, 0.0])
    pred = node.predict(u0, p)
    ref = solve_ivp(
        lambda t, u: chain(u, p), (0, 1.5), u0, method="DOP853", rtol=1e-12, atol=1e-12, t_eval=ts
    ).y.T
    np.testing.assert_allclose(pred, ref, rtol=1e-7, atol=1e-9)
    assert pred is not node.predict(u0, p)  # a new array each call


def _fd(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])


@pytest.mark.parametrize(
    "sensealg",
    [
        DiscreteAdjoint(),
        InterpolatingAdjoint(),
        QuadratureAdjoint(),
        BacksolveAdjoint(),
        ForwardSensitivity(),
    ],
    ids=repr,
)
def test_adjoints_match_finite_differences(sensealg):
    chain, p = _spiral_model(seed=1)
    ts = np.linspace(0, 1.5, 30)
    # tight tolerances: the finite differences then see (almost) the same step sequence
    node = NeuralODE(chain, (0.0, 1.5), ts, rtol=1e-9, atol=1e-11, sensealg=sensealg)
    u0 = np.array([2.0, 0.0])
    data = node.predict(u0, p) * 0.9 + 0.05
    loss, g = node.loss_and_grad(u0, p, data)
    assert loss == pytest.approx(np.sum((node.predict(u0, p) - data) ** 2), rel=1e-12)
    fd = _fd(lambda q: node.loss_and_grad(u0, q, data)[0], p)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
    fd_u0 = _fd(lambda v: node.loss_and_grad(v, p, data)[0], u0)
    node.loss_and_grad(u0, p, data)
    np.testing.assert_allclose(node.last_du0, fd_u0, rtol=1e-5)


def test_backward_in_time_and_dp5():
    chain, p = _spiral_model(seed=2)
    ts = np.linspace(1.0, 0.0, 11)
    node = NeuralODE(chain, (1.0, 0.0), ts, solver=ode.DP5(), rtol=1e-9, atol=1e-11)
    u0 = np.array([0.5, -1.0])
    data = np.zeros((11, 2))
    _, g = node.loss_and_grad(u0, p, data)
    fd = _fd(lambda q: node.loss_and_grad(u0, q, data)[0], p)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


# white-box: reads the NeuralODE's objective and plan, calls the private sweep kernel
@pytest.mark.whitebox
def test_reverse_sweep_does_not_allocate():
    from scichains.adjoint import discrete_adjoint

    chain, p = _spiral_model()
    u0 = np.array([2.0, 0.0])

    def count(t1):
        node = NeuralODE(
            chain,
            (0.0, t1),
            np.linspace(0, t1, 3),
            rtol=1e-9,
            atol=1e-11,
            sensealg=DiscreteAdjoint(),
        )
        node.loss_and_grad(u0, p, np.zeros((3, 2)))
        o, pl = node._obj, node._obj.plan
        m = int(pl.stats[0])
        dp, du0 = np.zeros(p.size), np.zeros(2)
        args = o.discrete_args(p, dp, du0, astore=np.zeros((0, pl.b.size, 0)))
        before = rtsys.get_allocation_stats()
        discrete_adjoint(*args)
        after = rtsys.get_allocation_stats()
        return (after.alloc - before.alloc) + (after.mi_alloc - before.mi_alloc), m

    short, steps_short = count(0.1)
    long, steps_long = count(3.0)
    assert steps_long > 2 * steps_short
    # the same count (handing the arrays to the kernel) however many steps are swept
    assert short == long


def test_training_reduces_the_loss():
    chain, p = _spiral_model(seed=3)
    ts = np.linspace(0, 1.5, 30)
    node = NeuralODE(chain, (0.0, 1.5), ts)
    u0 = np.array([2.0, 0.0])
    true_chain, q = _spiral_model(seed=4)
    data = NeuralODE(true_chain, (0.0, 1.5), ts).predict(u0, q)
    opt = sc.Adam(0.01)
    l0 = node.loss_and_grad(u0, p, data)[0]
    for _ in range(100):
        _, g = node.loss_and_grad(u0, p, data)
        opt.step(p, g)
    assert node.loss_and_grad(u0, p, data)[0] < 0.25 * l0


def test_bad_input():
    chain, p = _spiral_model()
    with pytest.raises(ValueError, match="outside tspan"):
        NeuralODE(chain, (0.0, 1.0), [0.5, 2.0])
    with pytest.raises(ValueError, match="map the state"):
        NeuralODE(sc.SimpleChain(3, sc.Dense(2)), (0.0, 1.0), [1.0])
    node = NeuralODE(chain, (0.0, 1.0), [0.5, 1.0])
    with pytest.raises(ValueError, match="u0 must have shape"):
        node.predict(np.zeros(3), p)
    with pytest.raises(ValueError, match="data must have shape"):
        node.loss_and_grad(np.zeros(2), p, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="parameters"):
        node.predict(np.zeros(2), p[:-1])


# white-box: reads the NeuralODE's objective and plan, calls the private sweep kernel
@pytest.mark.whitebox
def test_stored_activations_give_the_same_gradient_without_allocating():
    from scichains.adjoint import discrete_adjoint

    chain, p = _spiral_model(seed=4)
    u0 = np.array([2.0, 0.0])
    counts = []
    for t1 in (0.1, 3.0):
        ts = np.linspace(0, t1, 5)
        node = NeuralODE(chain, (0.0, t1), ts, rtol=1e-9, atol=1e-11, sensealg=DiscreteAdjoint())
        data = np.ones((5, 2))
        _, g = node.loss_and_grad(u0, p, data)  # the stored-activation sweep
        o, pl = node._obj, node._obj.plan
        assert o.method.stored
        m = int(pl.stats[0])
        dp, du0 = np.zeros(p.size), np.zeros(2)
        discrete_adjoint(*o.discrete_args(p, dp, du0, astore=np.zeros((0, pl.b.size, 0))))
        np.testing.assert_allclose(g, dp, rtol=1e-12, atol=1e-14)  # recomputing the forward
        np.testing.assert_allclose(node.last_du0, du0, rtol=1e-12)
        args = o.discrete_args(p, dp, du0)
        before = rtsys.get_allocation_stats()
        discrete_adjoint(*args)
        after = rtsys.get_allocation_stats()
        counts.append(((after.alloc - before.alloc) + (after.mi_alloc - before.mi_alloc), m))
    assert counts[1][1] > 5 * counts[0][1]
    assert counts[0][0] == counts[1][0]


# ------------------------------------------------------------------- many trajectories


def _many(m=5, seed=2):
    """``m`` initial states around the spiral's [2, 0] (scaled, rotated) and noisy data."""
    rng = np.random.default_rng(seed)
    angles = np.linspace(0.0, 2 * np.pi, m, endpoint=False)
    scale = np.linspace(0.6, 1.2, m)
    u0 = 2.0 * scale[:, None] * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return u0, rng


@pytest.mark.parametrize("sensealg", [DiscreteAdjoint(), InterpolatingAdjoint()], ids=repr)
def test_many_trajectories_are_the_ordered_sum_of_single_ones(sensealg):
    chain, p = _spiral_model(seed=3)
    ts = np.linspace(0.1, 1.0, 8)
    # lockstep=None: each trajectory solved alone, with its own steps
    node = NeuralODE(chain, (0.0, 1.0), ts, sensealg=sensealg, lockstep=None)
    u0, rng = _many(5)
    data = 0.5 * rng.standard_normal((5, ts.size, 2))
    # reference: single-trajectory calls, summed in trajectory order
    singles = [node.loss_and_grad(u0[i], p, data[i]) for i in range(5)]
    du0s = []
    for i in range(5):
        node.loss_and_grad(u0[i], p, data[i])
        du0s.append(node.last_du0)
    ref_loss, ref_dp = singles[0][0], singles[0][1].copy()
    for loss_i, dp_i in singles[1:]:
        ref_loss += loss_i
        ref_dp += dp_i
    loss1, dp1 = node.loss_and_grad(u0, p, data, threads=1)
    du0_1 = node.last_du0
    assert loss1 == ref_loss  # exactly: same per-trajectory computations, same order
    np.testing.assert_array_equal(dp1, ref_dp)
    np.testing.assert_array_equal(du0_1, np.stack(du0s))
    assert du0_1.shape == (5, 2)
    # two threads: the same bits
    loss2, dp2 = node.loss_and_grad(u0, p, data, threads=2)
    assert np.float64(loss2).tobytes() == np.float64(loss1).tobytes()
    assert dp2.tobytes() == dp1.tobytes()
    assert node.last_du0.tobytes() == du0_1.tobytes()
    # predict: (m, len(saveat), n), each row the single-trajectory prediction
    pred = node.predict(u0, p, threads=2)
    assert pred.shape == (5, ts.size, 2)
    for i in range(5):
        np.testing.assert_array_equal(pred[i], node.predict(u0[i], p))
    np.testing.assert_array_equal(pred, node.predict(u0, p, threads=1))
    # the single-trajectory path keeps its shapes
    node.loss_and_grad(u0[0], p, data[0])
    assert node.last_du0.shape == (2,)


def test_many_trajectories_gradient_against_central_differences():
    chain = sc.SimpleChain(2, sc.Dense(4, "tanh"), sc.Dense(2))
    p = chain.init_params(seed=4, dtype=np.float64)
    ts = np.linspace(0.2, 1.0, 5)
    node = NeuralODE(
        chain, (0.0, 1.0), ts, rtol=1e-10, atol=1e-12, sensealg=DiscreteAdjoint(), lockstep=None
    )
    u0, rng = _many(3, seed=5)
    data = rng.standard_normal((3, ts.size, 2))
    loss, dp = node.loss_and_grad(u0, p, data, threads=2)
    du0 = node.last_du0

    def total(q, v):
        return sum(float(np.sum((node.predict(v[i], q) - data[i]) ** 2)) for i in range(3))

    np.testing.assert_allclose(loss, total(p, u0), rtol=1e-12)
    np.testing.assert_allclose(dp, _fd(lambda q: total(q, u0), p), rtol=1e-5, atol=1e-7)
    fd_u0 = _fd(lambda v: total(p, v.reshape(3, 2)), u0.ravel()).reshape(3, 2)
    np.testing.assert_allclose(du0, fd_u0, rtol=1e-5, atol=1e-7)


def test_many_trajectories_bad_shapes():
    chain, p = _spiral_model()
    ts = np.array([0.5, 1.0])
    node = NeuralODE(chain, (0.0, 1.0), ts)
    u0 = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"data must have shape \(3, 2, 2\)"):
        node.loss_and_grad(u0, p, np.zeros((4, 2, 2)))  # m != m'
    with pytest.raises(ValueError, match=r"data must have shape \(3, 2, 2\)"):
        node.loss_and_grad(u0, p, np.zeros((2, 2)))  # one trajectory's data
    with pytest.raises(ValueError, match="data must have shape"):
        node.loss_and_grad(u0[0], p, np.zeros((3, 2, 2)))  # one u0, data of three
    with pytest.raises(ValueError, match="u0 must have shape"):
        node.loss_and_grad(np.ones((3, 2, 1)), p, np.zeros((3, 2, 2)))  # 3-D u0
    with pytest.raises(ValueError, match="u0 must have shape"):
        node.loss_and_grad(np.ones((3, 3)), p, np.zeros((3, 2, 3)))  # wrong state size
    with pytest.raises(ValueError, match="u0 must have shape"):
        node.predict(np.ones((0, 2)), p)  # no trajectories
    with pytest.raises(ValueError, match="u0 must have shape"):
        node.predict(np.ones((2, 2, 2)), p)
    bad = u0.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="trajectory 1"):
        node.loss_and_grad(bad, p, np.zeros((3, 2, 2)))
    data = np.zeros((3, 2, 2))
    data[2, 0, 1] = np.inf
    with pytest.raises(ValueError, match="trajectory 2"):
        node.loss_and_grad(u0, p, data)
    with pytest.raises(ValueError, match="threads"):
        node.loss_and_grad(u0, p, np.zeros((3, 2, 2)), threads=0)
    with pytest.raises(ValueError, match="parameters"):
        node.loss_and_grad(u0, p[:-1], np.zeros((3, 2, 2)))


def test_trajectories_with_own_times_and_batches():
    chain, p = _spiral_model(seed=6)
    node = NeuralODE(chain, (0.0, 1.0), np.linspace(0.1, 1.0, 4), lockstep=None)
    u0, rng = _many(4, seed=7)
    times = [np.linspace(0.1, 0.8, 5), np.linspace(0.2, 1.5, 9), np.array([0.4]), [0.3, 0.6]]
    specs = [Trajectory(u0[i], times[i], rng.standard_normal((len(times[i]), 2))) for i in range(4)]
    # reference: one single-trajectory model per trajectory, on (0, its last save time)
    singles, du0s = [], []
    for s in specs:
        one = NeuralODE(chain, (0.0, float(s.saveat[-1])), s.saveat)
        singles.append(one.loss_and_grad(s.u0, p, s.data))
        du0s.append(one.last_du0)
    ref_loss, ref_dp = singles[0][0], singles[0][1].copy()
    for loss_i, dp_i in singles[1:]:
        ref_loss += loss_i
        ref_dp += dp_i
    for threads in (1, 2):
        loss, dp = node.loss_and_grad(specs, p, threads=threads)
        assert loss == ref_loss and dp.tobytes() == ref_dp.tobytes()
        assert node.last_du0.tobytes() == np.stack(du0s).tobytes()
    tuples = [(s.u0, s.saveat, s.data) for s in specs]
    assert node.loss_and_grad(tuples, p, threads=2)[1].tobytes() == ref_dp.tobytes()
    obj = node.objective(specs)
    value, dp, du0 = obj.value_and_grad(p, threads=2, batch=[2, 0])
    assert value == singles[2][0] + singles[0][0]
    np.testing.assert_array_equal(du0, np.stack([du0s[2], du0s[0]]))
    with pytest.raises(ValueError, match="data=None"):
        node.loss_and_grad(specs, p, np.zeros((4, 4, 2)))
    with pytest.raises(ValueError, match="trajectory 1: u0 must have shape"):
        node.loss_and_grad([specs[0], Trajectory(np.ones(3), [0.5], np.ones((1, 2)))], p)
    # batches of trajectories with shared times: sums over the batch, in its order
    data = rng.standard_normal((4, node.saveat.size, 2))
    parts = [node.loss_and_grad(u0[i], p, data[i]) for i in range(4)]
    loss, dp = node.loss_and_grad(u0, p, data, threads=2, batch=np.array([3, 1]))
    assert loss == parts[3][0] + parts[1][0]
    np.testing.assert_array_equal(dp, parts[3][1] + parts[1][1])
    assert node.last_du0.shape == (2, 2)
    with pytest.raises(ValueError, match="repeats"):
        node.loss_and_grad(u0, p, data, batch=[1, 1])
    with pytest.raises(ValueError, match="batch"):
        node.loss_and_grad(u0[0], p, data[0], batch=[0])


def _lockstep_case(m=7, seed=3):
    chain, p = _spiral_model()
    rng = np.random.default_rng(seed)
    u0 = np.c_[rng.uniform(1.0, 2.5, m), rng.uniform(-0.5, 0.5, m)]
    ts = np.linspace(0.0, 1.0, 6)
    data = rng.standard_normal((m, ts.size, 2))
    return chain, p, u0, ts, data


def test_lockstep_solves_each_trajectory_within_tolerance():
    chain, p, u0, ts, _ = _lockstep_case()
    ref = NeuralODE(chain, (0.0, 1.0), ts, rtol=1e-10, atol=1e-12).predict(u0, p)
    for k in (7, 3, 1):
        node = NeuralODE(chain, (0.0, 1.0), ts, rtol=1e-6, atol=1e-8, lockstep=k)
        pred = node.predict(u0, p)
        assert pred.shape == (7, 6, 2)
        # each trajectory as accurate as a solo solve at this tolerance (per-trajectory norm)
        np.testing.assert_allclose(pred, ref, rtol=0, atol=2e-5)
    # lockstep=1 takes the solo solve's steps: the same solution up to the rounding of the
    # network (the tile kernels and the single-sample kernels sum in different orders; a
    # different step sequence would differ on the order of the tolerances)
    solo = NeuralODE(chain, (0.0, 1.0), ts, rtol=1e-6, atol=1e-8, lockstep=None).predict(u0, p)
    np.testing.assert_allclose(
        NeuralODE(chain, (0.0, 1.0), ts, rtol=1e-6, atol=1e-8, lockstep=1).predict(u0, p),
        solo,
        rtol=1e-10,
        atol=1e-10,
    )


def test_lockstep_gradient_is_exact_for_its_discretisation():
    chain, p, u0, ts, data = _lockstep_case(m=5)
    # tight tolerances: the discrete adjoint holds the step sizes fixed, while central
    # differences also see the steps move with p (a relative effect of the order of rtol)
    node = NeuralODE(chain, (0.0, 1.0), ts, rtol=1e-9, atol=1e-11, lockstep=3)
    _, g = node.loss_and_grad(u0, p, data)
    du0 = node.last_du0.copy()
    assert du0.shape == (5, 2)

    def loss(q, x):
        return node.loss_and_grad(x, q, data)[0]

    rng = np.random.default_rng(0)
    for j in rng.choice(p.size, 12, replace=False):
        h = 1e-6 * max(1.0, abs(p[j]))
        e = np.zeros(p.size)
        e[j] = h
        num = (loss(p + e, u0) - loss(p - e, u0)) / (2 * h)
        assert g[j] == pytest.approx(num, rel=2e-5, abs=1e-6)
    for i, c in ((0, 0), (4, 1), (2, 1)):
        e = np.zeros_like(u0)
        e[i, c] = 1e-6
        num = (loss(p, u0 + e) - loss(p, u0 - e)) / 2e-6
        assert du0[i, c] == pytest.approx(num, rel=2e-5, abs=1e-6)
    # close to the per-trajectory gradient (another discretisation) at a tight tolerance
    tight = dict(rtol=1e-10, atol=1e-12)
    g_solo = NeuralODE(chain, (0.0, 1.0), ts, **tight).loss_and_grad(u0, p, data)[1]
    g_lock = NeuralODE(chain, (0.0, 1.0), ts, lockstep=5, **tight).loss_and_grad(u0, p, data)[1]
    np.testing.assert_allclose(g_lock, g_solo, rtol=1e-6, atol=1e-8)


def test_lockstep_threads_and_batches_are_bit_identical():
    chain, p, u0, ts, data = _lockstep_case()
    node = NeuralODE(chain, (0.0, 1.0), ts, lockstep=3)
    base = node.loss_and_grad(u0, p, data, threads=1)
    du0 = node.last_du0.copy()
    for threads in (2, 3, 5):
        got = node.loss_and_grad(u0, p, data, threads=threads)
        assert got[0] == base[0]
        assert got[1].tobytes() == base[1].tobytes()
        assert node.last_du0.tobytes() == du0.tobytes()
    batch = np.array([5, 1, 6, 2])
    got = node.loss_and_grad(u0, p, data, batch=batch, threads=2)
    ref = node.loss_and_grad(u0[batch], p, data[batch], threads=1)
    assert got[0] == ref[0] and got[1].tobytes() == ref[1].tobytes()
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="lockstep"):
            NeuralODE(chain, (0.0, 1.0), ts, lockstep=bad)


def test_problem_serves_multiple_shooting():
    from scichains.adjoint import MultipleShooting

    chain, p = _spiral_model()
    ts = np.linspace(0.0, 1.0, 9)
    node = NeuralODE(chain, (0.0, 1.0), ts)
    data = node.predict(np.array([2.0, 0.0]), p) + 0.01
    ms = MultipleShooting(node.problem(), data, ts, group_size=4, continuity=10.0)
    theta = ms.join(p, ms.initial_states())
    value, g = ms.value_and_grad(theta)[:2]
    for j in (0, 5, p.size + 1):
        e = np.zeros(theta.size)
        e[j] = 1e-6
        num = (ms.value(theta + e) - ms.value(theta - e)) / 2e-6
        assert g[j] == pytest.approx(num, rel=1e-4, abs=1e-7)
    assert node.problem().kernel.work is not node.problem().kernel.work


def test_predict_at_other_times():
    chain, p = _spiral_model()
    node = NeuralODE(chain, (0.0, 1.5), np.linspace(0, 1.5, 4), rtol=1e-9, atol=1e-11)
    dense = np.linspace(0.0, 1.5, 31)
    u0 = np.array([2.0, 0.0])
    got = node.predict(u0, p, saveat=dense)
    ref = NeuralODE(chain, (0.0, 1.5), dense, rtol=1e-9, atol=1e-11).predict(u0, p)
    np.testing.assert_array_equal(got, ref)
    assert node.predict(np.stack([u0, u0 / 2]), p, saveat=dense).shape == (2, 31, 2)
    with pytest.raises(ValueError, match="before the start t0 = 0.0"):
        node.predict(u0, p, saveat=[-0.1, 1.0])


@numba.njit
def _network_rhs(du, u, p, t, k):
    nn.chain_forward(k, p, u, du)


def _direct_solve(chain, u0, p, tspan, saveat, **tols):
    """The same network right-hand side solved by scichains.ode.solve, independently of
    NeuralODE."""
    prob = ode.ODEProblem(_network_rhs, u0, tspan, p, kernel=chain.kernel(np.float64))
    sol = ode.solve(prob, ode.Tsit5, saveat=saveat, throw=True, **tols)
    return sol.u


def test_predict_beyond_tspan_extends_the_span():
    """Save times past tspan[1] (past the data) are integrated to, in the same direction, as
    diffrax does with a new t1; times before t0 are refused."""
    chain, p = _spiral_model()
    tols = dict(rtol=1e-9, atol=1e-11)
    node = NeuralODE(chain, (0.0, 1.5), np.linspace(0, 1.5, 4), lockstep=None, **tols)
    u0 = np.array([2.0, 0.0])
    far = np.linspace(0.0, 3.0, 31)
    ref = _direct_solve(chain, u0, p, (0.0, 3.0), far, **tols)
    np.testing.assert_allclose(node.predict(u0, p, saveat=far), ref, rtol=1e-12, atol=1e-14)
    # many trajectories, in lockstep too
    many = np.stack([u0, u0 / 2, -u0])
    refs = np.stack([_direct_solve(chain, v, p, (0.0, 3.0), far, **tols) for v in many])
    np.testing.assert_allclose(node.predict(many, p, saveat=far), refs, rtol=1e-12, atol=1e-14)
    lock = NeuralODE(chain, (0.0, 1.5), np.linspace(0, 1.5, 4), lockstep=2, **tols)
    np.testing.assert_allclose(lock.predict(many, p, saveat=far), refs, rtol=1e-6, atol=1e-8)
    # backward in time: beyond t1 = 0 means below it
    back = NeuralODE(chain, (1.0, 0.0), [1.0, 0.5, 0.0], **tols)
    below = np.linspace(1.0, -1.0, 9)
    ref = _direct_solve(chain, u0, p, (1.0, -1.0), below, **tols)
    np.testing.assert_allclose(back.predict(u0, p, saveat=below), ref, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="after the start t0 = 1.0 .* backward"):
        back.predict(u0, p, saveat=[1.5, 0.0])
    with pytest.raises(ValueError, match="before the start t0 = 0.0 .* forward"):
        node.predict(u0, p, saveat=[-0.5, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        node.predict(u0, p, saveat=[0.5, np.nan])


def test_lockstep_refuses_trajectories_with_times_of_their_own():
    """lockstep=k cannot apply to Trajectory specs (each solved alone on its own times):
    refused, where it used to be ignored (results bit-identical to no lockstep)."""
    chain, p = _spiral_model()
    node = NeuralODE(chain, (0.0, 1.0), [0.5, 1.0], lockstep=3)
    specs = [
        Trajectory(np.array([2.0, 0.0]), [0.5, 1.0], np.zeros((2, 2))),
        Trajectory(np.array([1.0, 0.5]), [0.3], np.zeros((1, 2))),
    ]
    with pytest.raises(ValueError, match="lockstep=3 .* Trajectory specs have times of their"):
        node.loss_and_grad(specs, p)
    with pytest.raises(ValueError, match="lockstep=3"):
        node.objective(specs)
    plain = NeuralODE(chain, (0.0, 1.0), [0.5, 1.0])  # what the message asks for
    assert np.isfinite(plain.loss_and_grad(specs, p)[0])


def test_threads_for_one_trajectory_are_refused():
    chain, p = _spiral_model()
    node = NeuralODE(chain, (0.0, 1.0), [0.5, 1.0])
    u0 = np.array([2.0, 0.0])
    with pytest.raises(ValueError, match="threads=2 .* one trajectory"):
        node.predict(u0, p, threads=2)
    with pytest.raises(ValueError, match="threads=4 .* one trajectory"):
        node.loss_and_grad(u0, p, np.zeros((2, 2)), threads=4)
    with pytest.raises(ValueError, match="threads=2 .* one trajectory"):
        node.predict(u0, p, threads=2, saveat=[0.5, 2.0])
    np.testing.assert_array_equal(node.predict(u0, p, threads=1), node.predict(u0, p))
    assert node.loss_and_grad(u0, p, np.zeros((2, 2)), threads=1)[0] > 0


def test_every_family_with_an_adjoint_is_taken_fixed_steps_are_refused():
    """The family is looked up (solver.family): the stiff families are taken (their
    gradients: tests/models/test_stiff_neural_ode.py), fixed-step methods refused naming the
    solvers that work."""
    chain, _ = _spiral_model()
    takes = ("BS3", "DP5", "Tsit5", "Vern7", "Rodas5P", "KenCarp4", "CVODE_BDF")
    for solver in (ode.Rodas5P(), ode.Rosenbrock23(), ode.Kvaerno5(), ode.CVODE_BDF()):
        assert NeuralODE(chain, (0.0, 1.0), [1.0], solver=solver).solver is solver
    for solver in (ode.RK4, ode.Euler):
        with pytest.raises(ValueError, match=f"fixed-step method {solver.name}") as e:
            NeuralODE(chain, (0.0, 1.0), [1.0], solver=solver)
        assert all(name in str(e.value) for name in takes)
    for solver in (ode.BS3, ode.DP5(), ode.Vern7):
        assert NeuralODE(chain, (0.0, 1.0), [1.0], solver=solver).solver is solver
