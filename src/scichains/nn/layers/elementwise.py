"""Layers without weights that act elementwise or on the shape: Activation, Dropout, Flatten."""

from __future__ import annotations

import numpy as np

from ..._jit import kernel
from .._activations import IDENTITY, ActivationFunction, activate, get_activation
from .._layout import ACTIVATION, DROPOUT, RESHAPE, S_ACT, S_D, S_IN, S_INDEX, S_NOUT, S_OUT
from .._simd import borrow
from .base import Layer, LayerCode, _flat_size


class Activation(Layer):
    """Apply an activation elementwise; the shape is unchanged and there are no parameters.

    Parameters
    ----------
    fn : str or ActivationFunction
        The activation (default ``"identity"``): a name such as ``"tanh"`` (case-insensitive;
        aliases ``"silu"``, ``"linear"``, ``"gaussian"``) or an object such as
        ``scichains.nn.tanh``. An unknown name raises ``ValueError`` (listing the known
        names), another type ``TypeError``; ``None`` means ``"identity"``.
    """

    name = "Activation"

    def __init__(self, fn="identity"):
        self.fn: ActivationFunction = get_activation(fn)

    def output_shape(self, in_shape):
        return tuple(in_shape)

    def encode(self, in_shape):
        return LayerCode(ACTIVATION, self.fn.code, 0.0, self.fn.code != IDENTITY)

    def config(self):
        return {"fn": self.fn.name}


class Dropout(Layer):
    """Inverted dropout: in training each feature is zeroed with probability ``rate`` and the
    rest scaled by ``1 / (1 - rate)``; in inference (``chain(X, p)``) it is the identity.

    The masks come from a counter-based generator keyed on (``seed``, training step, layer,
    sample index, feature), so a run is reproducible whatever the thread count.
    """

    name = "Dropout"

    def __init__(self, rate: float, seed: int = 0):
        rate = float(rate)
        if not (0.0 <= rate < 1.0):
            raise ValueError(f"Dropout: rate must be in [0, 1), got {rate}")
        self.rate = rate
        self.seed = int(seed)

    def output_shape(self, in_shape):
        return tuple(in_shape)

    def encode(self, in_shape):
        return LayerCode(DROPOUT, IDENTITY, self.rate, True)

    def config(self):
        return {"rate": self.rate, "seed": self.seed}


class Flatten(Layer):
    """Flatten the per-sample shape to a vector (free: the data is already contiguous)."""

    name = "Flatten"

    def output_shape(self, in_shape):
        return (_flat_size(in_shape),)

    def encode(self, in_shape):
        return LayerCode(RESHAPE)


@kernel
def _mix64(h):
    # splitmix64 finaliser: a counter-based generator, so dropout masks depend only on
    # (seed, step, layer, sample, feature) and not on threads or tile boundaries.
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@kernel
def dropout_uniform(seed, step, layer, sample, feature):
    """A uniform number in [0, 1) determined by its five integer arguments."""
    h = _mix64(np.uint64(seed) + np.uint64(0x9E3779B97F4A7C15))
    h = _mix64(h ^ np.uint64(step))
    h = _mix64(h ^ (np.uint64(layer) << np.uint64(40)) ^ np.uint64(feature))
    h = _mix64(h ^ np.uint64(sample))
    return np.float64(h >> np.uint64(11)) * (1.0 / 9007199254740992.0)


def activation_forward(l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    """An activation layer on a tile; its derivative goes to the layer's derivative rows."""
    spec = borrow(spec)
    fspec = borrow(fspec)
    meta = borrow(meta)
    p = borrow(p)
    w = borrow(w)
    samples = borrow(samples)
    act = spec[l, S_ACT]
    d_row = spec[l, S_D] if act != IDENTITY else spec[l, S_OUT]
    activate(act, w, spec[l, S_IN] * T, spec[l, S_OUT] * T, d_row * T, spec[l, S_NOUT] * T)
    return 0


def activation_forward_one(l, spec, meta, p, w):
    """:func:`activation_forward` on one sample (``T == 1``): the lean single-sample kernel."""
    spec = borrow(spec)
    w = borrow(w)
    act = spec[l, S_ACT]
    d_row = spec[l, S_D] if act != IDENTITY else spec[l, S_OUT]
    activate(act, w, spec[l, S_IN], spec[l, S_OUT], d_row, spec[l, S_NOUT])
    return 0


def dropout_forward(l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    """Dropout on a tile: in training the kept-and-scaled mask goes to the derivative rows
    (the backward pass multiplies by it); in inference a copy."""
    spec = borrow(spec)
    fspec = borrow(fspec)
    meta = borrow(meta)
    p = borrow(p)
    w = borrow(w)
    samples = borrow(samples)
    n_out = spec[l, S_NOUT]
    xin = w[spec[l, S_IN] * T : (spec[l, S_IN] + n_out) * T]
    out = w[spec[l, S_OUT] * T : (spec[l, S_OUT] + n_out) * T]
    if train:
        zero = w.dtype.type(0.0)
        rate = fspec[l, 0]
        scale = w.dtype.type(1.0 / (1.0 - rate))
        d = w[spec[l, S_D] * T : (spec[l, S_D] + n_out) * T]
        for f in range(n_out):
            for b in range(m):
                u = dropout_uniform(seed, step, spec[l, S_INDEX], samples[c0 + b], f)
                keep = scale if u >= rate else zero
                d[f * T + b] = keep
                out[f * T + b] = xin[f * T + b] * keep
    else:
        for j in range(n_out * T):
            out[j] = xin[j]
    return 0
