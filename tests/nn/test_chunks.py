"""The batch of a training step split into chunks of whole tiles that the threads take one by
one: the chunks cover the batch exactly, their count follows the batch, and a step gives the
same bits whichever thread ran which chunk."""

import numpy as np
import pytest

import scichains as sc
from scichains.nn import _batch


@pytest.mark.parametrize(
    "count, threads, T, want",
    [(10_000, 2, 264, 8), (256, 2, 128, 2), (1000, 1, 264, 1), (600, 2, 264, 2), (2000, 2, 264, 4)],
)
def test_chunk_count(count, threads, T, want):
    assert _batch.chunk_count(count, threads, T) == want


@pytest.mark.parametrize(
    "count, chunks, T", [(10_000, 8, 264), (7, 4, 264), (530, 3, 264), (1, 2, 8)]
)
def test_chunks_are_whole_tiles_covering_the_batch(count, chunks, T):
    start = 5
    spans = [_batch._chunk_span(start, count, chunks, T, c) for c in range(chunks)]
    assert spans[0][0] == start and spans[-1][1] == start + count
    tiles = 0
    for (lo, hi, first), nxt in zip(spans, spans[1:] + [(start + count, None, None)]):
        assert hi == nxt[0] or lo == hi  # consecutive (an empty chunk when tiles run out)
        assert (lo - start) % T == 0 and first == (lo - start) // T
        tiles += -(-(hi - lo) // T)
    assert tiles == -(-count // T)  # every tile in one chunk, none split


def test_a_step_is_the_same_whichever_thread_takes_which_chunk():
    """Eight chunks over two threads: the order in which the threads claim them varies from
    call to call, the gradient (reduced over the chunks in order) does not."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4000, 4)).astype(np.float32)
    Y = np.tanh(X @ rng.standard_normal((4, 3))).astype(np.float32)
    chain = sc.SimpleChain(4, sc.Dense(16, "tanh"), sc.Dense(3))
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p = chain.init_params(seed=1)
    grads = []
    for _ in range(20):
        g = np.zeros_like(p)
        sc.valgrad(cwl, X, p, g, threads=2)
        grads.append(g.tobytes())
    assert len(set(grads)) == 1
    # float64: eight chunks on two threads against one chunk on one thread (other partial
    # sums, the same gradient to rounding)
    X64, Y64, p64 = X.astype(np.float64), Y.astype(np.float64), p.astype(np.float64)
    g2, g1 = np.zeros(p.size), np.zeros(p.size)
    loss2 = sc.valgrad(cwl, X64, p64, g2, targets=Y64, threads=2)
    loss1 = sc.valgrad(cwl, X64, p64, g1, targets=Y64, threads=1)
    np.testing.assert_allclose(g2, g1, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(loss2, loss1, rtol=1e-13)
