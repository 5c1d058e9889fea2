"""The default batch strategy of NeuralODE (``lockstep="auto"``): which block size it picks,
that it is exactly the explicit ``lockstep=k`` of that size, that it never depends on the
thread count, and that what cannot step together is solved one by one instead of refused."""

import numpy as np
import pytest

import scichains as sc
from scichains import ode
from scichains.adjoint import MultiObjective, Trajectory
from scichains.models import NeuralODE
from scichains.models._lockstep_lists import LockstepTrajectories

TS = np.linspace(0.1, 1.0, 6)


def _model(seed=0, n=2):
    chain = sc.SimpleChain(n, sc.Dense(8, "tanh"), sc.Dense(n))
    return chain, chain.init_params(seed=seed, dtype=np.float64)


def _batch(m, seed=1):
    rng = np.random.default_rng(seed)
    u0 = np.c_[rng.uniform(0.5, 1.5, m), rng.uniform(-0.5, 0.5, m)]
    return u0, 0.3 * rng.standard_normal((m, TS.size, 2))


def test_block_sizes_chosen_from_batch_size_family_and_state_size():
    chain, _ = _model()
    node = NeuralODE(chain, (0.0, 1.0), TS)
    assert node.lockstep == "auto"
    sizes = {m: node.lockstep_size(m) for m in (1, 2, 5, 8, 9, 16, 24, 25, 64, 256)}
    assert sizes == {1: None, 2: 2, 5: 5, 8: 8, 9: 8, 16: 8, 24: 8, 25: 16, 64: 16, 256: 16}
    assert NeuralODE(chain, (0.0, 1.0), TS, lockstep=None).lockstep_size(64) is None
    assert NeuralODE(chain, (0.0, 1.0), TS, lockstep=3).lockstep_size(64) == 3
    ros = NeuralODE(chain, (0.0, 1.0), TS, solver=ode.Rodas5P())
    assert [ros.lockstep_size(m) for m in (3, 16)] == [3, 8]
    wide, _ = _model(n=9)  # 16 // 9 = 1: a block would gain nothing, each is solved alone
    assert NeuralODE(wide, (0.0, 1.0), TS, solver=ode.Rodas5P()).lockstep_size(16) is None
    assert NeuralODE(chain, (0.0, 1.0), TS, solver=ode.CVODE_BDF()).lockstep_size(16) is None
    forced = sc.SimpleChain(3, sc.Dense(8, "tanh"), sc.Dense(2))
    inputs = ode.Interpolation(np.linspace(0, 1, 5), np.zeros((5, 1)))
    assert NeuralODE(forced, (0.0, 1.0), TS, inputs=inputs).lockstep_size(16) is None


def test_default_is_the_chosen_lockstep_exactly_for_any_thread_count():
    chain, p = _model(seed=2)
    u0, data = _batch(11)  # blocks of 8 and 3
    auto = NeuralODE(chain, (0.0, 1.0), TS)
    fixed = NeuralODE(chain, (0.0, 1.0), TS, lockstep=8)
    alone = NeuralODE(chain, (0.0, 1.0), TS, lockstep=None)
    ref_loss, ref_dp = fixed.loss_and_grad(u0, p, data, threads=1)
    ref_du0 = fixed.last_du0
    for threads in (1, 2, 3):
        loss, dp = auto.loss_and_grad(u0, p, data, threads=threads)
        assert loss == ref_loss and dp.tobytes() == ref_dp.tobytes()
        assert auto.last_du0.tobytes() == ref_du0.tobytes()
    np.testing.assert_array_equal(auto.predict(u0, p, threads=2), fixed.predict(u0, p))
    # the same problem solved with other step sequences: equal to the tolerance's level
    solo_loss, solo_dp = alone.loss_and_grad(u0, p, data)
    assert loss != solo_loss  # a different discretisation, not the per-trajectory path
    np.testing.assert_allclose(loss, solo_loss, rtol=1e-6)
    np.testing.assert_allclose(dp, solo_dp, rtol=1e-4, atol=1e-6)
    # a mini-batch of 3 is one block of 3, in the batch's order
    batch = np.array([7, 2, 9])
    loss_b, dp_b = auto.loss_and_grad(u0, p, data, batch=batch)
    three = NeuralODE(chain, (0.0, 1.0), TS, lockstep=3)
    loss_3, dp_3 = three.loss_and_grad(u0[batch], p, data[batch])
    assert loss_b == loss_3 and dp_b.tobytes() == dp_3.tobytes()


def test_what_cannot_step_together_is_solved_alone_not_refused():
    chain, p = _model(seed=3)
    u0, data = _batch(3)
    # doses (jumps) differ per trajectory: these cannot step together
    specs = [
        Trajectory(u0[i], TS[: 3 + i], data[i, : 3 + i], jumps=[(0.05, 0, 0.1 * (i + 1))])
        for i in range(3)
    ]
    auto = NeuralODE(chain, (0.0, 1.0), TS)
    alone = NeuralODE(chain, (0.0, 1.0), TS, lockstep=None)
    assert isinstance(auto.objective(specs), MultiObjective)
    loss, dp = auto.loss_and_grad(specs, p, threads=2)
    ref_loss, ref_dp = alone.loss_and_grad(specs, p, threads=1)
    assert loss == ref_loss and dp.tobytes() == ref_dp.tobytes()
    with pytest.raises(ValueError, match="Trajectory specs"):
        NeuralODE(chain, (0.0, 1.0), TS, lockstep=2).loss_and_grad(specs, p)
    # CVODE cannot step a block: with the default it solves each alone
    cv = NeuralODE(chain, (0.0, 1.0), TS, solver=ode.CVODE_BDF())
    assert cv.predict(u0, p).shape == (3, TS.size, 2)


def test_trajectories_with_shared_times_match_the_batch_path_exactly():
    """Specs that all have the model's save times (and tspan ending at the last) are the
    u0/data batch: the same blocks, the same bits."""
    chain, p = _model(seed=4)
    u0, data = _batch(5)
    node = NeuralODE(chain, (0.0, TS[-1]), TS)
    specs = [Trajectory(u0[i], TS, data[i]) for i in range(5)]
    obj = node.objective(specs)
    assert isinstance(obj, LockstepTrajectories)
    loss, dp, du0 = obj.value_and_grad(p)
    ref_loss, ref_dp = node.loss_and_grad(u0, p, data)
    assert loss == ref_loss and dp.tobytes() == ref_dp.tobytes()
    assert du0.tobytes() == node.last_du0.tobytes()


def test_one_objective_shared_by_two_python_threads_gives_the_serial_results():
    # the README's threading contract: an objective used from several Python threads at once
    # gives the results of serial calls (per-thread solver buffers)
    import threading

    chain, p = _model(seed=8)
    rng = np.random.default_rng(9)
    u0, _ = _batch(10, seed=10)
    times = [np.sort(rng.uniform(0.05, 1.0, rng.integers(3, 9))) for _ in range(10)]
    specs = [
        Trajectory(u0[i], t, 0.3 * rng.standard_normal((t.size, 2))) for i, t in enumerate(times)
    ]
    obj = NeuralODE(chain, (0.0, 1.0), TS, rtol=1e-8, atol=1e-10).objective(specs)
    assert isinstance(obj, LockstepTrajectories)
    ps = [p, p + 0.01 * rng.standard_normal(p.size)]
    batches = [None, np.array([7, 2, 5])]
    want = {(i, j): obj.value_and_grad(ps[i], batch=batches[j]) for i in (0, 1) for j in (0, 1)}
    got, errors = {}, []

    def work(i):
        try:
            for _ in range(5):
                for j in (0, 1):
                    got.setdefault((i, j), []).append(obj.value_and_grad(ps[i], batch=batches[j]))
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for key, runs in got.items():
        for loss, dp, du0 in runs:
            assert loss == want[key][0]
            assert dp.tobytes() == want[key][1].tobytes()
            assert du0.tobytes() == want[key][2].tobytes()


def test_trajectories_with_own_times_step_together():
    chain, p = _model(seed=5)
    rng = np.random.default_rng(6)
    u0, _ = _batch(11, seed=7)
    times = [np.sort(rng.uniform(0.05, 1.0, rng.integers(3, 9))) for _ in range(11)]
    data = [0.3 * rng.standard_normal((t.size, 2)) for t in times]
    weights = [np.where(rng.random((t.size, 2)) < 0.2, 0.0, 1.0) for t in times]
    specs = [Trajectory(u0[i], times[i], data[i], weights[i]) for i in range(11)]
    node = NeuralODE(chain, (0.0, 1.0), TS, rtol=1e-9, atol=1e-11)
    alone = NeuralODE(chain, (0.0, 1.0), TS, rtol=1e-9, atol=1e-11, lockstep=None)
    obj = node.objective(specs)
    assert isinstance(obj, LockstepTrajectories) and obj.saveat.size == sum(map(len, times))
    loss, dp, du0 = obj.value_and_grad(p, threads=1)
    for threads in (2, 3):  # blocks of 8 and 3, summed in order
        again = obj.value_and_grad(p, threads=threads)
        assert again[0] == loss and again[1].tobytes() == dp.tobytes()
    # each trajectory's loss is the one it has alone, to the tolerance's level
    ref_loss, ref_dp, ref_du0 = alone.objective(specs).value_and_grad(p)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-7)
    np.testing.assert_allclose(dp, ref_dp, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(du0, ref_du0, rtol=1e-5, atol=1e-8)
    # a mini-batch: its trajectories in its order, one block of 3 (saved at the union of all
    # times and run to the last of them: close to, not the bits of, an objective on the 3)
    batch = np.array([9, 0, 4])
    lb, dpb, du0b = obj.value_and_grad(p, batch=batch)
    sub = alone.objective([specs[i] for i in batch]).value_and_grad(p)
    np.testing.assert_allclose(lb, sub[0], rtol=1e-7)
    np.testing.assert_allclose(dpb, sub[1], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(du0b, sub[2], rtol=1e-5, atol=1e-8)
    full = obj.value_and_grad(p, batch=np.arange(11))
    assert full[0] == loss and full[1].tobytes() == dp.tobytes()
    # and through loss_and_grad, the same objective
    assert node.loss_and_grad(specs, p)[0] == loss


@pytest.mark.parametrize("bad", ["fast", 0, -2, True, 2.5, "AUTO"])
def test_bad_lockstep_values_are_named(bad):
    chain, _ = _model()
    with pytest.raises(ValueError, match="lockstep must be 'auto', a positive integer or None"):
        NeuralODE(chain, (0.0, 1.0), TS, lockstep=bad)
