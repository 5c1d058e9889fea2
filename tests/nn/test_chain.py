import numpy as np
import pytest

import scichains as sc
from scichains import nn


def test_param_count_and_offsets():
    chain = sc.SimpleChain(4, sc.Dense(32, "tanh"), sc.Dense(16, "tanh"), sc.Dense(4))
    assert chain.num_params == 756
    assert chain.offsets == [
        (0, "W", 0, (32, 4)),
        (0, "b", 128, (32,)),
        (1, "W", 160, (16, 32)),
        (1, "b", 672, (16,)),
        (2, "W", 688, (4, 16)),
        (2, "b", 752, (4,)),
    ]
    assert chain.output_shape(10) == (10, 4)
    assert chain.output_shape() == (4,)


def test_params_views_alias_and_layout():
    chain = sc.SimpleChain(3, sc.Dense(2, bias=False), sc.Dense(5, "relu"))
    assert chain.num_params == 3 * 2 + 2 * 5 + 5
    p = np.arange(chain.num_params, dtype=np.float64)
    v = chain.params(p)
    assert "b" not in v[0]
    np.testing.assert_array_equal(v[0]["W"], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(v[1]["b"], np.arange(16, 21))
    v[1]["W"][0, 1] = -7.0
    assert p[6 + 1] == -7.0


def test_inconsistent_shape_names_layer():
    with pytest.raises(ValueError, match="layer 0"):
        sc.SimpleChain((1, 4, 4), sc.Dense(3))
    chain = sc.SimpleChain((1, 4, 4), sc.Flatten(), sc.Dense(3))
    assert chain.num_params == 16 * 3 + 3


def test_glorot_statistics():
    chain = sc.SimpleChain(400, sc.Dense(600))
    p = chain.init_params(seed=3, dtype=np.float64)
    W = chain.params(p)[0]["W"]
    expected = np.sqrt(2.0 / (400 + 600))
    assert abs(W.std() / expected - 1) < 0.01
    assert abs(W.mean()) < 0.01 * expected
    assert np.all(chain.params(p)[0]["b"] == 0)


def test_init_dtype_and_seed():
    chain = sc.SimpleChain(4, sc.Dense(8, "tanh"), sc.Dense(2))
    p32 = chain.init_params(seed=1)
    assert p32.dtype == np.float32 and p32.flags.c_contiguous and p32.shape == (58,)
    p64 = chain.init_params(seed=1, dtype=np.float64)
    np.testing.assert_allclose(p32, p64, rtol=1e-6)
    assert not np.array_equal(chain.init_params(seed=2), p32)
    with pytest.raises(TypeError, match="float32 or float64"):
        chain.init_params(dtype=np.int32)


def test_forward_matches_numpy_and_owns_result():
    chain = sc.SimpleChain(3, sc.Dense(5, "tanh"), sc.Dense(2))
    p = chain.init_params(dtype=np.float64)
    X = np.random.default_rng(0).standard_normal((7, 3))
    v = chain.params(p)
    ref = np.tanh(X @ v[0]["W"].T + v[0]["b"]) @ v[1]["W"].T + v[1]["b"]
    out1 = chain(X, p)
    np.testing.assert_allclose(out1, ref, rtol=1e-12)
    keep = out1.copy()
    chain(2 * X, p)  # a later call must not overwrite the earlier result
    np.testing.assert_array_equal(out1, keep)
    np.testing.assert_allclose(chain(X[0], p), ref[0], rtol=1e-12)


def test_activation_layer_and_names():
    chain = sc.SimpleChain(3, sc.Dense(4), sc.Activation("silu"), sc.Activation(nn.cube))
    p = chain.init_params(dtype=np.float64)
    X = np.random.default_rng(1).standard_normal((5, 3))
    v = chain.params(p)
    z = X @ v[0]["W"].T + v[0]["b"]
    np.testing.assert_allclose(chain(X, p), (z / (1 + np.exp(-z))) ** 3, rtol=1e-12)
    with pytest.raises(ValueError, match="unknown activation"):
        sc.Dense(3, "swishy")


def test_large_batch_spans_tiles_and_threads():
    chain = sc.SimpleChain(2, sc.Dense(3, "relu"), sc.Dense(1))
    p = chain.init_params(dtype=np.float64)
    X = np.random.default_rng(2).standard_normal((1031, 2))
    v = chain.params(p)
    ref = np.maximum(X @ v[0]["W"].T + v[0]["b"], 0) @ v[1]["W"].T + v[1]["b"]
    for threads in (1, 2):
        np.testing.assert_allclose(chain(X, p, threads=threads), ref, rtol=1e-12)
