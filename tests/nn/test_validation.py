"""Bad input gets a clear Python exception, never a numba traceback or a crash."""

import numpy as np
import pytest

import scichains as sc
from scichains import nn


@pytest.fixture
def setup():
    chain = sc.SimpleChain(4, sc.Dense(8, "tanh"), sc.Dense(3))
    X = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    y = np.zeros((10, 3), np.float32)
    return chain, chain.init_params(), X, y


def test_wrong_width(setup):
    chain, p, X, y = setup
    with pytest.raises(ValueError, match=r"X must have shape \(N, 4\), got \(10, 5\)"):
        chain(np.zeros((10, 5)), p)
    cwl = chain.add_loss(sc.SquaredLoss(y))
    with pytest.raises(ValueError, match="X must have shape"):
        sc.valgrad(cwl, np.zeros((10, 5)), p, np.zeros_like(p))
    with pytest.raises(ValueError, match="targets must have shape"):
        sc.valgrad(chain.add_loss(sc.SquaredLoss(np.zeros((10, 2)))), X, p, np.zeros_like(p))
    with pytest.raises(ValueError, match="targets must have shape"):
        sc.valgrad(chain.add_loss(sc.SquaredLoss(np.zeros((9, 3)))), X, p, np.zeros_like(p))


def test_wrong_dtype(setup):
    chain, p, X, y = setup
    with pytest.raises(TypeError, match="float32 or float64"):
        chain(X, p.astype(np.float16))
    with pytest.raises(TypeError, match="float32 or float64"):
        chain(X, p.astype(np.int64))
    with pytest.raises(TypeError, match="real numbers"):
        chain(X.astype(complex), p)
    with pytest.raises(TypeError, match="real numbers"):
        chain(np.array([["a"] * 4]), p)
    cwl = chain.add_loss(sc.SquaredLoss(y))
    with pytest.raises(TypeError, match="grad must have dtype float32"):
        sc.valgrad(cwl, X, p, np.zeros(p.shape, np.float64))
    with pytest.raises(TypeError, match="labels must be integers"):
        sc.LogitCrossEntropyLoss(np.array([0.5, 1.0]))


def test_nan_in_data(setup):
    chain, p, X, y = setup
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        chain(Xn, p)
    yn = y.copy()
    yn[0, 0] = np.inf
    with pytest.raises(ValueError, match="targets contain NaN"):
        sc.SquaredLoss(yn)


def test_labels_out_of_range(setup):
    chain, p, X, _ = setup
    cwl = chain.add_loss(sc.LogitCrossEntropyLoss(np.arange(10) % 4))
    with pytest.raises(ValueError, match=r"labels must lie in 0..2"):
        sc.valgrad(cwl, X, p, np.zeros_like(p))
    cwl = chain.add_loss(sc.LogitCrossEntropyLoss(-np.ones(10, int)))
    with pytest.raises(ValueError, match=r"labels must lie in 0..2"):
        sc.train_unbatched(p, cwl, X, sc.Adam(), 1)


def test_wrong_parameter_length(setup):
    chain, p, X, y = setup
    with pytest.raises(ValueError, match=r"parameters must have shape \(67,\)"):
        chain(X, p[:-1])
    with pytest.raises(ValueError, match="parameters must have shape"):
        chain.params(np.zeros((67, 1)))
    with pytest.raises(TypeError, match="numpy array"):
        chain(X, list(p))
    cwl = chain.add_loss(sc.SquaredLoss(y))
    with pytest.raises(ValueError, match="grad must have shape"):
        sc.valgrad(cwl, X, p, np.zeros(66, np.float32))


def test_unknown_activation_and_bad_layers():
    with pytest.raises(ValueError, match="unknown activation 'tanhh'"):
        sc.Dense(3, "tanhh")
    with pytest.raises(TypeError, match="activation must be a name"):
        sc.Dense(3, np.tanh)
    with pytest.raises(ValueError, match="positive integer"):
        sc.Dense(0)
    with pytest.raises(ValueError, match="rate must be in"):
        sc.Dropout(1.0)
    with pytest.raises(TypeError, match="not a scichains layer"):
        sc.SimpleChain(3, "Dense")
    with pytest.raises(ValueError, match="learning rate"):
        sc.Adam(-1)


def test_threads_argument(setup):
    chain, p, X, _ = setup
    with pytest.raises(ValueError, match="threads"):
        chain(X, p, threads=0)
    with pytest.raises(ValueError, match="exceeds"):
        chain(X, p, threads=10_000)


def test_training_needs_loss_and_optimizer(setup):
    chain, p, X, y = setup
    with pytest.raises(TypeError, match="chain with a loss"):
        sc.train_unbatched(p, chain, X, sc.Adam(), 1)
    with pytest.raises(TypeError, match="optimizer"):
        sc.train_unbatched(p, chain.add_loss(sc.SquaredLoss(y)), X, "adam", 1)
    with pytest.raises(ValueError, match="writeable"):
        q = p.copy()
        q.flags.writeable = False
        sc.train_unbatched(q, chain.add_loss(sc.SquaredLoss(y)), X, sc.Adam(), 1)
    assert isinstance(nn.NonFiniteLossError("x"), FloatingPointError)


def test_class_instead_of_instance_says_what_to_pass(setup):
    # issue 11.6: a class where an instance is expected
    chain, p, X, y = setup
    with pytest.raises(
        TypeError, match=r"layer 1 is the class Dense, not an inst.*Dense\(\.\.\.\)"
    ):
        sc.SimpleChain(3, sc.Dense(4), sc.Dense)
    with pytest.raises(TypeError, match=r"layer 0 is the class Flatten.*pass Flatten\(\)"):
        sc.SimpleChain((2, 2), sc.Flatten, sc.Dense(2))
    with pytest.raises(TypeError, match=r"loss is the class SquaredLoss.*SquaredLoss\(\.\.\.\)"):
        chain.add_loss(sc.SquaredLoss)
    with pytest.raises(TypeError, match=r"penalty is the class L2Penalty"):
        chain.add_loss(sc.SquaredLoss(y), sc.L2Penalty)
    cwl = chain.add_loss(sc.SquaredLoss(y))
    for opt in (sc.Adam, sc.AdamW):
        with pytest.raises(
            TypeError, match=rf"opt is the class {opt.__name__}.*pass {opt.__name__}\(\)"
        ):
            sc.train_unbatched(p, cwl, X, opt, 1)
        with pytest.raises(TypeError, match=rf"pass {opt.__name__}\(\)"):
            sc.train_batched(p, cwl, X, opt, 1, 5)
    with pytest.raises(TypeError, match=r"opt is the class SGD.*pass SGD\(\.\.\.\)"):
        sc.train_unbatched(p, cwl, X, sc.SGD, 1)
