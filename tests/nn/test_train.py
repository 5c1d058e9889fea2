import numpy as np
import pytest
import scipy.optimize
from numba.core.runtime import rtsys

import scichains as sc
from scichains import nn
from scichains._workers import wait_idle


def _teacher(n=512, seed=0, act="tanh"):
    rng = np.random.default_rng(seed)
    chain = sc.SimpleChain(4, sc.Dense(16, act), sc.Dense(8, act), sc.Dense(3))
    X = rng.standard_normal((n, 4)).astype(np.float32)
    p_true = chain.init_params(seed=100)
    Y = chain(X, p_true)
    return chain, X, Y


@pytest.mark.parametrize(
    "opt", [sc.Adam(3e-3), sc.AdamW(3e-3, weight_decay=1e-4), sc.SGD(0.05, momentum=0.9)]
)
def test_teacher_student_unbatched(opt):
    chain, X, Y = _teacher()
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p = chain.init_params(seed=1)
    l0 = nn.evaluate_loss(cwl, X, p)
    losses = sc.train_unbatched(p, cwl, X, opt, 1500)
    l1 = nn.evaluate_loss(cwl, X, p)
    assert losses.shape == (1500,)
    assert abs(losses[0] - l0) < 1e-5 * l0
    assert l1 < 0.25 * l0, (l0, l1)


@pytest.mark.parametrize("threads", [1, 2])
def test_full_batch_pre_tiled_data_gives_the_same_steps(threads):
    """train_unbatched lays the data out as the tiles read them, once per call (uneven
    tiles: 1000 samples over 1-2 threads in tiles of TILE); the steps are bit-identical to
    gathering every tile at every step."""
    from scichains.nn._train import _Trainer

    chain, X, Y = _teacher(n=1000)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    runs = []
    for pretile in (False, True):
        p = chain.init_params(seed=1)
        tr = _Trainer(p, cwl, X, sc.Adam(1e-2), threads, None, pretile=pretile)
        assert (tr.XYt.shape[0] > 0) == pretile
        losses = np.zeros(20)
        assert tr.run(20, losses) == 20
        runs.append((p, losses))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_teacher_student_batched_and_resume():
    chain, X, Y = _teacher(n=1000)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p = chain.init_params(seed=1)
    l0 = nn.evaluate_loss(cwl, X, p)
    opt = sc.Adam(3e-3)
    losses = sc.train_batched(p, cwl, X, opt, epochs=15, batch_size=100, seed=3)
    assert losses.shape == (150,)
    assert opt.steps == 150
    assert nn.evaluate_loss(cwl, X, p) < 0.25 * l0


def test_optimizer_state_persists_across_calls():
    chain, X, Y = _teacher(n=200)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p1 = chain.init_params(seed=1)
    p2 = p1.copy()
    o1, o2 = sc.Adam(1e-2), sc.Adam(1e-2)
    sc.train_unbatched(p1, cwl, X, o1, 100, threads=1)
    sc.train_unbatched(p2, cwl, X, o2, 40, threads=1)
    sc.train_unbatched(p2, cwl, X, o2, 60, threads=1)
    np.testing.assert_array_equal(p1, p2)


def test_adam_matches_reference_formula():
    rng = np.random.default_rng(0)
    p = rng.standard_normal(10)
    opt = sc.Adam(0.01, betas=(0.8, 0.9), eps=1e-6)
    m = np.zeros(10)
    v = np.zeros(10)
    q = p.copy()
    for t in range(1, 6):
        g = rng.standard_normal(10)
        opt.step(p, g)
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        q = q - 0.01 * (m / (1 - 0.8**t)) / (np.sqrt(v / (1 - 0.9**t)) + 1e-6)
    np.testing.assert_allclose(p, q, rtol=1e-12)
    # AdamW decays first, SGD with momentum keeps a velocity
    w = np.ones(3)
    sc.AdamW(0.1, weight_decay=0.5).step(w, np.zeros(3))
    np.testing.assert_allclose(w, 0.95)
    s = np.zeros(2)
    sgd = sc.SGD(0.1, momentum=0.5)
    sgd.step(s, np.ones(2))
    sgd.step(s, np.ones(2))
    np.testing.assert_allclose(s, -0.1 - 0.1 * 1.5)


def test_callback_and_progress(capsys):
    chain, X, Y = _teacher(n=64)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p = chain.init_params(seed=1)
    seen = []
    losses = sc.train_unbatched(
        p,
        cwl,
        X,
        sc.Adam(),
        25,
        progress=True,
        callback=lambda i, loss, q: seen.append((i, loss, q.copy())),
        callback_every=10,
    )
    assert [s[0] for s in seen] == [10, 20, 25]
    assert seen[-1][1] == losses[-1]
    np.testing.assert_array_equal(seen[-1][2], p)
    assert "25/25" in capsys.readouterr().err


@pytest.mark.parametrize("batched", [False, True])
def test_callback_exception_reaches_the_user(batched):
    chain, X, Y = _teacher(n=64)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p = chain.init_params(seed=1)

    def callback(i, loss, q):
        if i >= 20:
            raise LookupError(f"stop at {i}")

    with pytest.raises(LookupError, match="stop at 20"):
        if batched:
            sc.train_batched(p, cwl, X, sc.Adam(), 50, 16, callback=callback, callback_every=10)
        else:
            sc.train_unbatched(p, cwl, X, sc.Adam(), 50, callback=callback, callback_every=10)


def test_non_finite_loss_stops_with_last_finite_params():
    rng = np.random.default_rng(0)
    chain = sc.SimpleChain(2, sc.Dense(8, "cube"), sc.Dense(1, "cube"))
    X = 3 * rng.standard_normal((64, 2)).astype(np.float32)
    cwl = chain.add_loss(sc.SquaredLoss(np.ones((64, 1), np.float32)))
    p = chain.init_params(seed=0)
    seen = []
    with pytest.raises(nn.NonFiniteLossError, match="loss is"):
        sc.train_unbatched(
            p,
            cwl,
            X,
            sc.SGD(1.0),
            100,
            callback=lambda i, loss, q: seen.append(i),
            callback_every=1,
        )
    assert np.all(np.isfinite(p))
    assert np.isfinite(nn.evaluate_loss(cwl, X, p))


def test_scipy_lbfgs_on_flat_parameters():
    chain, X, Y = _teacher(n=256)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    fun = sc.loss_and_grad(cwl, X)
    p0 = chain.init_params(seed=1, dtype=np.float64)
    # the gradient scipy sees is the finite-difference gradient of the value it sees
    v, g = fun(p0)
    e = np.zeros_like(p0)
    e[3] = 1e-6
    assert abs((fun(p0 + e)[0] - fun(p0 - e)[0]) / 2e-6 - g[3]) < 1e-6 * max(1, abs(g[3]))
    res = scipy.optimize.minimize(fun, p0, jac=True, method="L-BFGS-B", options={"maxiter": 300})
    assert res.fun < 0.05 * v


def test_classification_accuracy():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 2)).astype(np.float32)
    labels = (X[:, 0] * X[:, 1] > 0).astype(np.int64) + 2 * (X[:, 0] > 1)
    chain = sc.SimpleChain(2, sc.Dense(32, "relu"), sc.Dense(32, "relu"), sc.Dense(4))
    cwl = chain.add_loss(sc.LogitCrossEntropyLoss(labels))
    p = chain.init_params(seed=2)
    acc0, loss0 = sc.accuracy_and_loss(cwl, X, labels, p)
    sc.train_batched(p, cwl, X, sc.Adam(1e-2), epochs=60, batch_size=64)
    acc, loss = sc.accuracy_and_loss(cwl, X, labels, p)
    assert acc > 0.93 and acc > acc0 and loss < loss0


def test_training_step_does_not_allocate():
    chain, X, Y = _teacher(n=3000)
    cwl = chain.add_loss(sc.SquaredLoss(Y), penalty=sc.L2Penalty(1e-4))
    p = chain.init_params(seed=1)
    opt = sc.Adam()
    sc.train_unbatched(p, cwl, X, opt, 2)  # warm-up: compile and create buffers

    def count(iters):
        wait_idle()  # the helper threads' calls are counted too
        s = rtsys.get_allocation_stats()
        sc.train_unbatched(p, cwl, X, opt, iters)
        wait_idle()
        e = rtsys.get_allocation_stats()
        return (e.alloc - s.alloc) + (e.mi_alloc - s.mi_alloc)

    # the Python wrapper hands arrays to the kernel once per call; steps add nothing
    assert count(5) == count(300)
    opt2 = sc.Adam()

    def count_batched(epochs):
        wait_idle()
        s = rtsys.get_allocation_stats()
        sc.train_batched(p, cwl, X, opt2, epochs, batch_size=3000)
        wait_idle()
        e = rtsys.get_allocation_stats()
        return (e.alloc - s.alloc) + (e.mi_alloc - s.mi_alloc)

    count_batched(1)
    assert count_batched(2) == count_batched(2)
