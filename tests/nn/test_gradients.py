"""Gradients against central finite differences (float64) and a plain-numpy reference."""

import numpy as np
import pytest

import scichains as sc
from scichains import nn
from scichains.nn._activations import ACTIVATIONS

from . import reference as ref

SIZES = [3, 6, 5, 2]


def _setup(act, loss_kind, n, seed=0):
    rng = np.random.default_rng(seed)
    chain = sc.SimpleChain(3, sc.Dense(6, act), sc.Dense(5, act), sc.Dense(2))
    p = chain.init_params(seed=seed, dtype=np.float64)
    p += 0.1 * rng.standard_normal(p.shape)  # non-zero biases
    X = rng.standard_normal((n, 3))
    if loss_kind == "logitce":
        target = rng.integers(0, 2, n)
        loss = sc.LogitCrossEntropyLoss(target)
    else:
        target = rng.standard_normal((n, 2))
        loss = sc.SquaredLoss(target) if loss_kind == "squared" else sc.AbsoluteLoss(target)
    return chain.add_loss(loss), p, X, target


_fd = ref.central_differences


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
@pytest.mark.parametrize("loss_kind", ["squared", "absolute", "logitce"])
def test_gradient_against_finite_differences_and_numpy(act, loss_kind):
    n = 9
    cwl, p, X, target = _setup(act, loss_kind, n)
    g = np.zeros_like(p)
    gx = np.zeros_like(X)
    val = sc.valgrad(cwl, X, p, g, gx, threads=1)
    rval, rg, rgx = ref.valgrad(p, X, SIZES, [act, act, "identity"], loss_kind, target)
    np.testing.assert_allclose(val, rval, rtol=1e-12)
    np.testing.assert_allclose(g, rg, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(gx, rgx, rtol=1e-10, atol=1e-13)
    # (relu and the absolute loss have kinks; no sample sits within h of one for this seed)
    fdp = _fd(lambda q: nn.evaluate_loss(cwl, X, q), p)
    fdx = _fd(lambda x: nn.evaluate_loss(cwl, x, p), X)
    np.testing.assert_allclose(g, fdp, rtol=1e-6, atol=1e-7 * np.abs(fdp).max())
    np.testing.assert_allclose(gx, fdx, rtol=1e-6, atol=1e-7 * np.abs(fdx).max())


# 300: one tile per thread (weight gradients summed per tile); 1000, 1001: several tiles
# per thread (vector partial sums across tiles), 1001 with a tile that ends mid-vector
@pytest.mark.parametrize("n", [1, 300, 1000, 1001])
def test_gradient_single_sample_and_batches(n):
    cwl, p, X, target = _setup("tanh", "squared", n, seed=n)
    g = np.zeros_like(p)
    gx = np.zeros_like(X)
    val = sc.valgrad(cwl, X, p, g, gx)
    rval, rg, rgx = ref.valgrad(p, X, SIZES, ["tanh", "tanh", "identity"], "squared", target)
    np.testing.assert_allclose(val, rval, rtol=1e-12)
    np.testing.assert_allclose(g, rg, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gx, rgx, rtol=1e-10, atol=1e-14)


def test_float32_gradient_close_to_float64():
    cwl, p, X, target = _setup("tanh", "squared", 777)
    g64 = np.zeros_like(p)
    v64 = sc.valgrad(cwl, X, p, g64)
    p32 = p.astype(np.float32)
    g32 = np.zeros_like(p32)
    v32 = sc.valgrad(cwl, X, p32, g32)
    assert abs(v32 - v64) < 1e-5 * abs(v64)
    np.testing.assert_allclose(g32, g64, rtol=1e-3, atol=1e-5 * np.abs(g64).max())


def test_threads_agree_and_calls_repeat():
    cwl, p, X, _ = _setup("tanh", "squared", 2000)
    p = p.astype(np.float32)
    g1 = np.zeros_like(p)
    g2 = np.zeros_like(p)
    g2b = np.zeros_like(p)
    v1 = sc.valgrad(cwl, X, p, g1, threads=1)
    v2 = sc.valgrad(cwl, X, p, g2, threads=2)
    sc.valgrad(cwl, 2 * X, p, np.zeros_like(p), threads=2)  # something else in between
    v2b = sc.valgrad(cwl, X, p, g2b, threads=2)
    assert v2 == v2b
    np.testing.assert_array_equal(g2, g2b)
    assert abs(v1 - v2) < 1e-6 * abs(v1)
    np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-6 * np.abs(g1).max())


def test_penalties():
    cwl, p, X, target = _setup("tanh", "squared", 20)
    chain = cwl.chain
    lam = 0.03
    last = chain.offsets[-2][2]  # start of the last layer's W
    cases = {
        "l2": (sc.L2Penalty(lam), lam * np.sum(p**2), 2 * lam * p),
        "l1": (sc.L1Penalty(lam), lam * np.sum(np.abs(p)), lam * np.sign(p)),
        "frontlast": (
            sc.FrontLastPenalty(sc.L2Penalty(lam), sc.L1Penalty(2 * lam)),
            lam * np.sum(p[:last] ** 2) + 2 * lam * np.sum(np.abs(p[last:])),
            np.concatenate([2 * lam * p[:last], 2 * lam * np.sign(p[last:])]),
        ),
    }
    g0 = np.zeros_like(p)
    v0 = sc.valgrad(cwl, X, p, g0)
    for name, (pen, value, grad) in cases.items():
        pcwl = chain.add_loss(sc.SquaredLoss(target), penalty=pen)
        g = np.zeros_like(p)
        v = sc.valgrad(pcwl, X, p, g)
        np.testing.assert_allclose(v, v0 + value, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(g, g0 + grad, rtol=1e-12, atol=1e-15, err_msg=name)


def test_dropout_training_and_inference():
    rng = np.random.default_rng(5)
    chain = sc.SimpleChain(4, sc.Dense(64, "tanh"), sc.Dropout(0.25, seed=3), sc.Dense(2))
    p = chain.init_params(dtype=np.float64)
    X = rng.standard_normal((50, 4))
    y = rng.standard_normal((50, 2))
    cwl = chain.add_loss(sc.SquaredLoss(y))
    # inference: dropout is the identity
    nodrop = sc.SimpleChain(4, sc.Dense(64, "tanh"), sc.Dense(2))
    np.testing.assert_allclose(chain(X, p), nodrop(X, p), rtol=1e-14)
    g = np.zeros_like(p)
    v = sc.valgrad(cwl, X, p, g, step=7)
    # the mask is fixed by (seed, step): finite differences through it are exact
    fd = _fd(lambda q: _train_loss(cwl, X, q, 7), p)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    assert v != nn.evaluate_loss(cwl, X, p)
    # another step draws another mask; about a quarter of the units are dropped
    g2 = np.zeros_like(p)
    assert sc.valgrad(cwl, X, p, g2, step=8) != v


def test_dropout_mask_rate_and_scale():
    chain = sc.SimpleChain(4000, sc.Dropout(0.25, seed=1), sc.Dense(1, bias=False))
    p = np.ones(chain.num_params)
    X = np.ones((2, 4000))
    cwl = chain.add_loss(sc.SquaredLoss(np.zeros((2, 1))))
    gx = np.zeros_like(X)
    sc.valgrad(cwl, X, p, np.zeros_like(p), gx)
    out = chain(X, p)  # inference: the plain sum
    np.testing.assert_allclose(out, 4000.0)
    # dL/dx = 2 * out_train / N * mask / (1 - rate): zero for about a quarter of the inputs
    nz = gx[gx != 0]
    assert abs(1 - nz.size / gx.size - 0.25) < 0.02
    for row in gx:
        kept = np.count_nonzero(row)
        out_train = kept / 0.75
        np.testing.assert_allclose(row[row != 0], 2 * out_train / 2 / 0.75, rtol=1e-12)
    # the two samples get different masks
    assert not np.array_equal(gx[0] != 0, gx[1] != 0)


def _train_loss(cwl, X, q, step):
    return sc.valgrad(cwl, X, q, np.zeros_like(q), step=step)
