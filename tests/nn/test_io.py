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


# ------------------------------------------------- every layer kind round-trips (issue 11.5)
def _chains_by_kind():
    """One chain per registered layer kind (Dense once per activation)."""
    from scichains.nn._activations import ACTIVATIONS

    img = (2, 6, 6)
    chains = {
        f"Dense-{name}": sc.SimpleChain(3, sc.Dense(5, name), sc.Dense(2, bias=False))
        for name in sorted(ACTIVATIONS)
    }
    chains["Activation"] = sc.SimpleChain(3, sc.Dense(4), sc.Activation("softplus"), sc.Dense(2))
    chains["Dropout"] = sc.SimpleChain(3, sc.Dense(6, "tanh"), sc.Dropout(0.3, seed=7), sc.Dense(2))
    chains["Flatten"] = sc.SimpleChain((2, 3), sc.Flatten(), sc.Dense(2, "relu"))
    chains["Conv"] = sc.SimpleChain(
        img,
        sc.Conv(3, (3, 2), "tanh", padding=(1, 0), stride=(2, 1)),
        sc.Conv(2, 2, bias=False),
        sc.Flatten(),
        sc.Dense(2),
    )
    chains["MaxPool"] = sc.SimpleChain(
        img, sc.Conv(3, 3, "relu", padding=1), sc.MaxPool((2, 3)), sc.Flatten(), sc.Dense(2)
    )
    return chains


def test_every_layer_kind_is_covered_here():
    from scichains.nn.layers import LAYERS

    kinds = {layer.name for c in _chains_by_kind().values() for layer in c.layers}
    assert kinds == set(LAYERS), "add a chain for the new layer kind to _chains_by_kind"


@pytest.mark.parametrize("kind", sorted(_chains_by_kind()))
def test_every_layer_kind_round_trips_bit_for_bit(tmp_path, kind):
    chain = _chains_by_kind()[kind]
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        p = chain.init_params(seed=2, dtype=dtype)
        p += (0.1 * rng.standard_normal(p.size)).astype(dtype)  # non-zero biases too
        path = tmp_path / f"{kind}-{np.dtype(dtype).name}.npz"
        nn.save(path, chain, p)
        chain2, p2 = nn.load(path)
        assert chain2 == chain and chain2 is not chain
        assert p2.dtype == p.dtype
        np.testing.assert_array_equal(p2, p)
        X = rng.standard_normal((7, *chain.input_shape)).astype(dtype)
        Y = rng.standard_normal((7, *chain.output_shape())).astype(dtype)
        np.testing.assert_array_equal(chain2(X, p2, threads=1), chain(X, p, threads=1))
        results = []
        for c, q in ((chain, p), (chain2, p2)):
            g = np.zeros_like(q)
            gx = np.zeros_like(X)
            cwl = c.add_loss(sc.SquaredLoss(Y))
            loss = sc.valgrad(cwl, X, q, g, gx, threads=1, step=3)
            results.append((loss, g, gx))
        assert results[0][0] == results[1][0]
        np.testing.assert_array_equal(results[1][1], results[0][1])
        np.testing.assert_array_equal(results[1][2], results[0][2])
        assert np.abs(results[0][1]).max() > 0  # the gradient is not trivially zero


class _Scaled(nn.Layer):
    """A user layer: multiply by a constant it does not put in its config."""

    name = "Scaled"

    def __init__(self, factor=1.0):
        self.factor = float(factor)

    def output_shape(self, in_shape):
        return tuple(in_shape)

    def encode(self, in_shape):
        return nn.LayerCode(nn._layout.ACTIVATION)


def test_layer_that_cannot_be_loaded_fails_at_save(tmp_path):
    from scichains.nn.layers import LAYERS

    chain = sc.SimpleChain(3, sc.Dense(2), _Scaled(2.0))
    p = chain.init_params()
    with pytest.raises(ValueError, match=r"cannot be saved: layer 1 .*not registered"):
        nn.save(tmp_path / "a.npz", chain, p)
    assert not (tmp_path / "a.npz").exists()

    class NeedsArgs(_Scaled):
        name = "NeedsArgs"

        def __init__(self, factor):
            super().__init__(factor)

    class Unnamed(_Scaled):
        name = "Unnamed"

        def encode(self, in_shape):
            # an activation by code that config() does not record
            return nn.LayerCode(nn._layout.ACTIVATION, act=int(self.factor))

    nn.register_layer(NeedsArgs)
    nn.register_layer(Unnamed)
    try:
        chain = sc.SimpleChain(3, sc.Dense(2), NeedsArgs(2.0))
        with pytest.raises(ValueError, match=r"layer 1 .*config\(\)\) fails"):
            nn.save(tmp_path / "b.npz", chain, p)
        chain = sc.SimpleChain(3, sc.Dense(2), Unnamed(2.0))
        with pytest.raises(ValueError, match=r"layer 1 .*does not describe it fully"):
            nn.save(tmp_path / "c.npz", chain, p)
        assert not (tmp_path / "b.npz").exists() and not (tmp_path / "c.npz").exists()
    finally:
        del LAYERS["NeedsArgs"], LAYERS["Unnamed"]
