"""Conv and MaxPool against plain-numpy loops and central finite differences."""

import numpy as np
import pytest

import scichains as sc
from scichains import nn

from .reference import central_differences, squared_loss_input_differences


def conv_ref(x, W, b, stride, pad):
    """(N, C, H, W) cross-correlation by explicit loops."""
    N, C, H, Wd = x.shape
    OC, _, kh, kw = W.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    OH = (H + 2 * pad[0] - kh) // stride[0] + 1
    OW = (Wd + 2 * pad[1] - kw) // stride[1] + 1
    out = np.zeros((N, OC, OH, OW))
    for n in range(N):
        for o in range(OC):
            for i in range(OH):
                for j in range(OW):
                    patch = xp[
                        n, :, i * stride[0] : i * stride[0] + kh, j * stride[1] : j * stride[1] + kw
                    ]
                    out[n, o, i, j] = np.sum(patch * W[o]) + b[o]
    return out


def maxpool_ref(x, ph, pw):
    N, C, H, W = x.shape
    OH, OW = H // ph, W // pw
    v = x[:, :, : OH * ph, : OW * pw].reshape(N, C, OH, ph, OW, pw)
    return v.max(axis=(3, 5))


_fd = central_differences


@pytest.mark.parametrize(
    "stride,pad,oc",
    [((1, 1), (0, 0), 3), ((1, 1), (0, 0), 6), ((2, 1), (1, 2), 3), ((2, 2), (2, 2), 6)],
)
def test_conv_forward_and_gradients(stride, pad, oc):
    # valgrad on 5 samples with 2 threads runs tiles of 3 and 2 samples, 3 wide: the full tile
    # takes the row-wise kernels (unpadded, stride 1), the other the general ones
    rng = np.random.default_rng(0)
    chain = sc.SimpleChain((2, 7, 6), sc.Conv(oc, (3, 2), padding=pad, stride=stride), sc.Flatten())
    p = chain.init_params(seed=1, dtype=np.float64)
    p += 0.1 * rng.standard_normal(p.shape)
    v = chain.params(p)[0]
    X = rng.standard_normal((5, 2, 7, 6))
    ref = conv_ref(X, v["W"], v["b"], stride, pad)
    out = chain(X, p)
    np.testing.assert_allclose(out.reshape(ref.shape), ref, rtol=1e-12, atol=1e-12)
    y = rng.standard_normal(out.shape)
    cwl = chain.add_loss(sc.SquaredLoss(y))
    g = np.zeros_like(p)
    gx = np.zeros_like(X)
    sc.valgrad(cwl, X, p, g, gx, threads=2)
    np.testing.assert_allclose(
        g, _fd(lambda q: nn.evaluate_loss(cwl, X, q), p), rtol=1e-6, atol=1e-8
    )
    g1 = np.zeros_like(p)
    gx1 = np.zeros_like(X)
    sc.valgrad(cwl, X, p, g1, gx1, threads=1)  # one full tile of 5
    np.testing.assert_allclose(g1, g, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(gx1, gx, rtol=1e-10, atol=1e-13)
    # dL/dX exactly: the conv is linear in X, so unit steps of <v, conv(X)> are exact
    v_out = 2 * (ref - y.reshape(ref.shape)) / X.shape[0]
    zero_b = np.zeros_like(v["b"])

    def lin(x):
        return np.sum(v_out * conv_ref(x, v["W"], zero_b, stride, pad))

    base = lin(np.zeros_like(X))
    exact = np.array([lin(e.reshape(X.shape)) - base for e in np.eye(X.size)]).reshape(X.shape)
    np.testing.assert_allclose(gx, exact, rtol=1e-10, atol=1e-12)
    fdx = _fd(lambda x: nn.evaluate_loss(cwl, x, p), X)
    np.testing.assert_allclose(gx, fdx, rtol=1e-6, atol=1e-7 * np.abs(fdx).max())


def test_maxpool_forward_gradient_and_ties():
    rng = np.random.default_rng(2)
    chain = sc.SimpleChain((2, 5, 6), sc.MaxPool((2, 3)), sc.Flatten(), sc.Dense(2))
    p = chain.init_params(seed=0, dtype=np.float64)
    X = rng.standard_normal((4, 2, 5, 6))
    pooled = maxpool_ref(X, 2, 3).reshape(4, -1)
    v = chain.params(p)[2]
    np.testing.assert_allclose(chain(X, p), pooled @ v["W"].T + v["b"], rtol=1e-12)
    cwl = chain.add_loss(sc.SquaredLoss(rng.standard_normal((4, 2))))
    gx = np.zeros_like(X)
    g = np.zeros_like(p)
    sc.valgrad(cwl, X, p, g, gx)
    np.testing.assert_allclose(
        gx, _fd(lambda x: nn.evaluate_loss(cwl, x, p), X), rtol=1e-6, atol=1e-9
    )
    # ties: every element of the window equal, the gradient goes to the first one
    Xt = np.ones((1, 2, 5, 6))
    gx = np.zeros_like(Xt)
    sc.valgrad(chain.add_loss(sc.SquaredLoss(np.zeros((1, 2)))), Xt, p, g, gx)
    win = gx[0, 0, :2, :3]
    assert win[0, 0] != 0 and np.count_nonzero(win) == 1
    assert np.all(gx[0, :, 4, :] == 0)  # the row that fills no window


def lenet():
    return sc.SimpleChain(
        (1, 28, 28),
        sc.Conv(6, (5, 5), "relu"),
        sc.MaxPool((2, 2)),
        sc.Conv(16, (5, 5), "relu"),
        sc.MaxPool((2, 2)),
        sc.Flatten(),
        sc.Dense(120, "relu"),
        sc.Dense(84, "relu"),
        sc.Dense(10),
    )


def test_lenet_shapes_and_parameter_count():
    chain = lenet()
    assert chain.num_params == 44_426
    assert chain.shapes[1] == (6, 24, 24) and chain.shapes[4] == (16, 4, 4)
    X = np.random.default_rng(0).random((3, 28, 28)).astype(np.float32)  # (N, H, W) accepted
    assert chain(X, chain.init_params()).shape == (3, 10)
    W = chain.params(chain.init_params(seed=3, dtype=np.float64))[0]["W"]
    assert W.shape == (6, 1, 5, 5)
    limit = np.sqrt(6 / (25 + 150))
    assert np.abs(W).max() <= limit and np.abs(W).max() > 0.8 * limit


def test_single_vector_kernels_through_conv():
    chain = sc.SimpleChain(
        (1, 6, 6), sc.Conv(2, 3, "tanh", padding=1), sc.MaxPool(2), sc.Flatten(), sc.Dense(3)
    )
    p = chain.init_params(seed=0, dtype=np.float64)
    k = chain.kernel(np.float64)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(36)
    out = np.zeros(3)
    nn.chain_forward(k, p, x, out)
    np.testing.assert_allclose(out, chain(x.reshape(1, 6, 6), p), rtol=1e-12)
    v = rng.standard_normal(3)
    xb = np.zeros(36)
    pb = np.zeros_like(p)
    nn.chain_vjp(k, p, x, v, xb, pb)
    f = lambda q: v @ chain(x.reshape(1, 6, 6), q)  # noqa: E731
    np.testing.assert_allclose(pb, _fd(f, p), rtol=1e-6, atol=1e-9)


def test_bad_image_input():
    with pytest.raises(ValueError, match="layer 0.*channels, height, width"):
        sc.SimpleChain(16, sc.Conv(2, 3))
    with pytest.raises(ValueError, match="does not fit"):
        sc.SimpleChain((1, 4, 4), sc.Conv(2, 5))
    chain = sc.SimpleChain((1, 8, 8), sc.Conv(2, 3), sc.Flatten(), sc.Dense(2))
    with pytest.raises(ValueError, match=r"X must have shape \(N, 1, 8, 8\)"):
        chain(np.zeros((3, 1, 8, 7)), chain.init_params())


def _synthetic_images(n, seed):
    """Ten classes: a bright bar whose place on a 2 x 5 grid is the label, jittered, on noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    X = 0.3 * rng.random((n, 28, 28)).astype(np.float32)
    for i, k in enumerate(labels):
        r, c = divmod(int(k), 5)
        dr, dc = rng.integers(-2, 3, 2)
        X[i, 4 + 12 * r + dr : 12 + 12 * r + dr, 2 + 5 * c + dc : 5 + 5 * c + dc] += 0.7
    return X, labels


def test_lenet_learns_synthetic_images():
    X, y = _synthetic_images(600, 0)
    chain = lenet()
    cwl = chain.add_loss(sc.LogitCrossEntropyLoss(y))
    p = chain.init_params(seed=0)
    acc0, loss0 = sc.accuracy_and_loss(cwl, X, y, p)
    sc.train_batched(p, cwl, X, sc.Adam(3e-3), epochs=4, batch_size=32, seed=1)
    acc, loss = sc.accuracy_and_loss(cwl, X, y, p)
    Xt, yt = _synthetic_images(300, 1)
    acc_test, _ = sc.accuracy_and_loss(cwl, Xt, yt, p)
    assert acc0 < 0.3
    assert acc > 0.95 and loss < 0.2 * loss0
    assert acc_test > 0.9


@pytest.mark.parametrize("dtype,n,threads", [(np.float64, 11, 1), (np.float32, 37, 2)])
def test_two_conv_chain_on_wide_tiles(dtype, n, threads):
    # tiles of 11 (float64: 2 vectors of 4 and a tail of 3) and of 19/18 (float32): the
    # vectorised row kernels, max pooling and bias sums, and the input gradient's copy of the
    # output gradient, with channel (6 = 4 + 2, 5 = 4 + 1) and term (C*kh = 6*3 = 4 + 2)
    # blocks that do not divide evenly
    rng = np.random.default_rng(3)
    chain = sc.SimpleChain(
        (2, 12, 11),
        sc.Conv(6, (3, 3), "relu"),
        sc.MaxPool((2, 2)),
        sc.Conv(5, (3, 2)),
        sc.Flatten(),
        sc.Dense(3),
    )
    p64 = chain.init_params(seed=2, dtype=np.float64)
    p64 += 0.05 * rng.standard_normal(p64.shape)
    X = rng.standard_normal((n, 2, 12, 11))
    v = chain.params(p64)
    h = np.maximum(conv_ref(X, v[0]["W"], v[0]["b"], (1, 1), (0, 0)), 0)
    h = conv_ref(maxpool_ref(h, 2, 2), v[2]["W"], v[2]["b"], (1, 1), (0, 0))
    ref = h.reshape(n, -1) @ v[4]["W"].T + v[4]["b"]
    p = p64.astype(dtype)
    Xd = X.astype(dtype)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(chain(Xd, p, threads=threads), ref, **tol)
    y = rng.standard_normal(ref.shape)
    cwl = chain.add_loss(sc.SquaredLoss(y.astype(dtype)))
    g = np.zeros_like(p)
    gx = np.zeros_like(Xd)
    sc.valgrad(cwl, Xd, p, g, gx, threads=threads)
    cwl64 = chain.add_loss(sc.SquaredLoss(y))
    gp_fd = _fd(lambda q: nn.evaluate_loss(cwl64, X, q), p64)
    gx_fd = squared_loss_input_differences(lambda x: chain(x, p64), X, y)
    if dtype == np.float64:
        np.testing.assert_allclose(g, gp_fd, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gx, gx_fd, rtol=1e-6, atol=1e-8)
    else:  # float32 arithmetic against the float64 differences
        np.testing.assert_allclose(g, gp_fd, rtol=2e-3, atol=2e-4 * np.abs(gp_fd).max())
        np.testing.assert_allclose(gx, gx_fd, rtol=2e-3, atol=2e-4 * np.abs(gx_fd).max())
