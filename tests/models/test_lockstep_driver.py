"""The compiled driver over lockstep blocks (``models/_lockstep_driver.py``): the same bits for
any thread count and when waiting threads take blocks over, buffers grown on the way, each
block against the per-block objective, failures reported with the block's trajectories, and
no allocation in a steady-state call."""

import numpy as np
import pytest
from numba.core.runtime import rtsys

import scichains as sc
from scichains._workers import wait_idle
from scichains.models import NeuralODE
from scichains.models._lockstep import lockstep_problem
from scichains.models._lockstep_driver import BlockRunner, _Slot, compiled_blocks
from scichains.ode import ODESolveError


def _case(m, T=12, t1=1.0, seed=0, hidden=16):
    chain = sc.SimpleChain(2, sc.Dense(hidden, "tanh"), sc.Dense(2))
    p = chain.init_params(seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed + 1)
    u0 = np.c_[rng.uniform(0.5, 1.5, m), rng.uniform(-0.5, 0.5, m)]
    ts = np.linspace(t1 / T, t1, T)
    return chain, p, u0, ts, 0.3 * rng.standard_normal((m, T, 2))


def test_each_block_is_its_objective_and_the_sum_is_in_block_order():
    # blocks of 16, 16 and 8; the last is filled to 16 with copies of its last trajectory
    # weighted 0, which keep its steps: it equals the block of 8 solved alone
    chain, p, u0, ts, data = _case(40)
    node = NeuralODE(chain, (0.0, 1.0), ts)
    assert node.lockstep_size(40) == 16
    loss, dp = node.loss_and_grad(u0, p, data, threads=2)
    du0 = node.last_du0
    assert du0.shape == (40, 2) and sorted(node._runners) == [16]
    # reference: each block's own Objective (the per-block path), summed in block order
    want_loss, want_dp, want_du0 = 0.0, np.zeros(p.size), []
    for lo, hi in ((0, 16), (16, 32), (32, 40)):
        obj, sq = node._pair(lockstep_problem(chain, hi - lo, (0.0, 1.0)))
        assert compiled_blocks(obj)
        sq.data[...] = data[lo:hi].transpose(1, 0, 2).reshape(ts.size, -1)
        value, g, gu = obj.value_and_grad(p, u0[lo:hi].ravel())
        want_loss += value
        want_dp += g
        want_du0.append(gu.reshape(-1, 2))
    # the same steps; the filled block's tile of 16 columns rounds its sums otherwise than
    # the block of 8 (3e-12 relative on its loss, measured)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-11)
    np.testing.assert_allclose(dp, want_dp, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(du0, np.concatenate(want_du0), rtol=1e-9, atol=1e-11)


def test_blocks_taken_over_by_a_waiting_thread_give_the_same_bits():
    chain, p, u0, ts, data = _case(64)  # four blocks of 16
    node = NeuralODE(chain, (0.0, 1.0), ts)
    ref_loss, ref_dp = node.loss_and_grad(u0, p, data, threads=1)
    ref_du0 = node.last_du0.copy()
    runner = node._runners[16]
    runner.speed[1] = 0  # no patience: a waiting thread takes over any open block at once
    for _ in range(40):
        loss, dp = node.loss_and_grad(u0, p, data, threads=2)
        assert loss == ref_loss and dp.tobytes() == ref_dp.tobytes()
        assert node.last_du0.tobytes() == ref_du0.tobytes()
        if runner.takeovers >= 3:
            break
    assert runner.takeovers > 0
    for threads in (2, 3):
        runner.speed[1] = 2
        loss, dp = node.loss_and_grad(u0, p, data, threads=threads)
        assert loss == ref_loss and dp.tobytes() == ref_dp.tobytes()


def test_buffers_grow_once_and_every_thread_gets_the_room():
    # tight tolerances over a long span: more steps than a block's first buffers hold (steps
    # and the activation store), so the first call runs blocks again on the caller
    chain, p, u0, ts, data = _case(32, T=20, t1=60.0, seed=2)
    node = NeuralODE(chain, (0.0, 60.0), ts, rtol=1e-12, atol=1e-14)
    loss, dp = node.loss_and_grad(u0, p, data, threads=2)
    runner = node._runners[16]
    assert runner.again > 0
    again = runner.again
    steps = [int(c[16][0].method.plan.stats[0]) for c in node._driven._own]
    assert max(steps) > 256  # beyond the activation store's first size
    stores = [c[16][0].method.plan.astore.shape[0] for c in node._driven._own]
    assert min(stores) >= max(steps)
    for threads in (2, 1):
        loss2, dp2 = node.loss_and_grad(u0, p, data, threads=threads)
        assert loss2 == loss and dp2.tobytes() == dp.tobytes()
    assert runner.again == again  # nothing run again once grown
    fresh = NeuralODE(chain, (0.0, 60.0), ts, rtol=1e-12, atol=1e-14)
    loss3, dp3 = fresh.loss_and_grad(u0, p, data, threads=1)
    assert loss3 == loss and dp3.tobytes() == dp.tobytes()


def test_a_failing_block_raises_its_error_naming_its_trajectories():
    chain, p, u0, ts, data = _case(32, T=10, t1=10.0)
    short = NeuralODE(chain, (0.0, 10.0), ts, max_steps=5)
    with pytest.raises(ODESolveError, match="MAX_STEPS") as info:
        short.loss_and_grad(u0, p, data, threads=2)
    first = ", ".join(str(i) for i in range(16))
    assert f"(in the lockstep block of trajectories {first})" in info.value.__notes__
    node = NeuralODE(chain, (0.0, 10.0), ts)
    huge = data.copy()
    huge[20] *= 1e200  # the loss overflows in the second block only
    with pytest.raises(ODESolveError, match="the loss is inf") as info:
        node.loss_and_grad(u0, p, huge, threads=2)
    second = ", ".join(str(i) for i in range(16, 32))
    assert f"(in the lockstep block of trajectories {second})" in info.value.__notes__
    loss, _ = node.loss_and_grad(u0, p, data, threads=2)  # and the next call is fine
    assert np.isfinite(loss)


def test_no_allocation_per_step_in_a_steady_state_call():
    """The compiled path allocates per block only the stepper's scratch of one solve (a dozen
    small arrays): the same count for a solve of many more steps."""

    def count(t1):
        chain, p, u0, ts, data = _case(32, t1=t1)
        node = NeuralODE(chain, (0.0, t1), ts)
        obj = node._block_pair({}, 16)[0]
        runner = BlockRunner()
        U0 = u0.reshape(2, 32)
        D = np.ascontiguousarray(data.reshape(2, 16, ts.size, 2).transpose(0, 2, 1, 3))
        D = D.reshape(2, ts.size, 32)
        W = np.ones_like(D)
        runner.run([obj], p, U0, D, W)  # compiles; the buffers settle
        assert runner.again == 0 and wait_idle()
        before = rtsys.get_allocation_stats()
        runner.run([obj], p, U0, D, W)
        after = rtsys.get_allocation_stats()
        assert _Slot.of(obj).obj is obj
        steps = int(obj.method.plan.stats[0])
        return (after.alloc - before.alloc) + (after.mi_alloc - before.mi_alloc), steps

    short, steps_short = count(1.0)
    long, steps_long = count(6.0)
    assert steps_long > 2 * steps_short
    assert short == long
