"""The chunked training steps (nn/_chunked.py): any thread may take a chunk, or compute one
that another thread holds; the bits depend on the chunking only."""

import numpy as np
import pytest

import scichains as sc
from scichains._jit import max_threads
from scichains._workers import wait_idle
from scichains.nn._train import _Trainer

needs_two = pytest.mark.skipif(max_threads() < 2, reason="needs two numba threads")


def _problem(n=1500, dtype=np.float32):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 3)).astype(dtype)
    Y = np.stack([np.sin(X[:, 0]) * X[:, 1], np.tanh(X[:, 2] - X[:, 0])], axis=1).astype(dtype)
    chain = sc.SimpleChain(3, sc.Dense(16, "tanh"), sc.Dense(8, "tanh"), sc.Dense(2))
    return chain.add_loss(sc.SquaredLoss(Y)), X


def _train(cwl, X, patience, steps=30, batch=None, dtype=np.float32):
    p = cwl.init_params(seed=2, dtype=dtype)
    tr = _Trainer(p, cwl, X, sc.Adam(1e-2), 2, batch, pretile=batch is None)
    tr.speed[1] = patience
    losses = np.zeros(steps)
    assert tr.run(steps, losses) == steps
    wait_idle()
    return p, losses, int(tr.ctl[2])


@needs_two
@pytest.mark.parametrize("batch", [None, 700])
def test_chunks_taken_over_give_the_same_bits(batch):
    """With no patience a waiting thread computes every chunk still open (the other thread's
    too): the published results are the same bits as a run where nothing is taken over."""
    cwl, X = _problem()
    p_ref, l_ref, _ = _train(cwl, X, 1 << 20, batch=batch)
    taken = 0
    for _ in range(5):
        p, losses, n = _train(cwl, X, 0, batch=batch)
        np.testing.assert_array_equal(p, p_ref)
        np.testing.assert_array_equal(losses, l_ref)
        taken += n
    assert taken > 0  # the test did exercise the takeover


@needs_two
def test_a_step_on_two_threads_is_the_gradient_step():
    """One SGD step in float64 on two threads equals p - lr * dL/dp from ``valgrad`` (a
    different split of the batch: equal to rounding), and reports the loss at p."""
    cwl, X = _problem(dtype=np.float64)
    p = cwl.init_params(seed=2, dtype=np.float64)
    g = np.zeros_like(p)
    loss = sc.nn.valgrad(cwl, X, p, g, threads=1)
    q = p.copy()
    losses = sc.train_unbatched(q, cwl, X, sc.SGD(0.1), 1, threads=2)
    assert losses[0] == pytest.approx(loss, rel=1e-13)
    np.testing.assert_allclose(q, p - 0.1 * g, rtol=1e-12, atol=1e-14)


@needs_two
def test_two_and_one_threads_agree_to_rounding():
    cwl, X = _problem(dtype=np.float64)
    runs = []
    for threads in (1, 2):
        p = cwl.init_params(seed=2, dtype=np.float64)
        runs.append(sc.train_unbatched(p, cwl, X, sc.Adam(1e-2), 40, threads=threads))
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-10)
