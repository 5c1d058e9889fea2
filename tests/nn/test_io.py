import numpy as np
import pytest

import scichains as sc
from scichains import nn


def test_save_load_roundtrip(tmp_path):
    chain = sc.SimpleChain(4, sc.Dense(8, "gelu"), sc.Dropout(0.1, seed=2), sc.Dense(3, bias=False))
    p = chain.init_params(seed=3, dtype=np.float64)
    path = tmp_path / "model.npz"
    nn.save(path, chain, p)
    chain2, p2 = nn.load(path)
    assert chain2 == chain
    np.testing.assert_array_equal(p2, p)
    assert p2.dtype == np.float64
    X = np.random.default_rng(0).standard_normal((5, 4))
    np.testing.assert_array_equal(chain2(X, p2), chain(X, p))
    _, p3 = nn.load(path, chain=chain)
    np.testing.assert_array_equal(p3, p)


def test_load_for_different_chain_raises(tmp_path):
    chain = sc.SimpleChain(4, sc.Dense(8, "tanh"), sc.Dense(3))
    nn.save(tmp_path / "m.npz", chain, chain.init_params())
    other = sc.SimpleChain(4, sc.Dense(8, "relu"), sc.Dense(3))
    with pytest.raises(ValueError, match="different chain"):
        nn.load(tmp_path / "m.npz", chain=other)
    np.savez(tmp_path / "junk.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a scichains parameter file"):
        nn.load(tmp_path / "junk.npz")
