"""Layers: stateless descriptors (configuration only) that the chain composes.

The protocol every layer implements (``Conv``, ``MaxPool`` and friends follow it too):

- ``output_shape(in_shape)``: the per-sample output shape, raising ``ValueError`` when the input
  shape does not fit the layer;
- ``param_shapes(in_shape)``: ``[(name, shape), ...]`` in the order they sit in the flat vector;
- ``init(views, in_shape, rng)``: fill this layer's named parameter views in place;
- ``encode(in_shape)``: a :class:`LayerCode` telling the compiled kernels what to run (kind,
  activation, a real option, whether derivative rows are stored, up to six layer-specific ints
  such as a convolution's geometry);
- ``config()``: a JSON-serialisable description, and ``LAYERS[name](**config)`` rebuilds it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ._activations import IDENTITY, ActivationFunction, get_activation
from ._kernels import ACTIVATION, CONV, DENSE, DROPOUT, MAXPOOL, RESHAPE


class LayerCode(NamedTuple):
    """A layer as the kernels see it (one row of the chain's ``spec``)."""

    kind: int
    act: int = IDENTITY
    rate: float = 0.0
    needs_derivative: bool = False
    extra: tuple[int, ...] = ()
    #: an index table for the kernels (appended to the chain's ``meta``; its offset there
    #: goes to the first extra field)
    table: np.ndarray | None = None


class Layer:
    """Base class of the layer descriptors."""

    name = "layer"

    def output_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def param_shapes(self, in_shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
        return []

    def init(self, views: dict, in_shape: tuple[int, ...], rng: np.random.Generator) -> None:
        return None

    def encode(self, in_shape: tuple[int, ...]) -> LayerCode:
        raise NotImplementedError

    def config(self) -> dict:
        return {}

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.config() == other.config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(sorted(self.config().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"


def _flat_size(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


class Dense(Layer):
    """A fully connected layer ``y = f(W x + b)``.

    Parameters
    ----------
    out : int
        Number of output features.
    activation : str or ActivationFunction
        Applied elementwise, fused with the affine map (default ``"identity"``).
    bias : bool
        Whether to add a bias vector ``b`` of shape ``(out,)``.

    Input is a vector of shape ``(in,)``; the parameters are ``W`` of shape ``(out, in)``
    (row-major: ``W[o, i]`` sits at offset ``o * in + i`` of the layer's slice, as in
    ``torch.nn.Linear.weight``), then ``b``. ``W`` is initialised Glorot-normal
    (std ``sqrt(2 / (in + out))``), ``b`` with zeros.
    """

    name = "Dense"

    def __init__(self, out: int, activation="identity", bias: bool = True):
        if isinstance(out, bool) or not isinstance(out, (int, np.integer)) or out < 1:
            raise ValueError(f"Dense: out must be a positive integer, got {out!r}")
        self.out = int(out)
        self.activation: ActivationFunction = get_activation(activation)
        self.bias = bool(bias)

    def output_shape(self, in_shape):
        if len(in_shape) != 1:
            raise ValueError(
                f"Dense({self.out}) expects a vector input, got per-sample shape {in_shape}; "
                "add Flatten() before it"
            )
        return (self.out,)

    def param_shapes(self, in_shape):
        shapes = [("W", (self.out, in_shape[0]))]
        if self.bias:
            shapes.append(("b", (self.out,)))
        return shapes

    def init(self, views, in_shape, rng):
        fan_in, fan_out = in_shape[0], self.out
        std = math.sqrt(2.0 / (fan_in + fan_out))
        views["W"][...] = rng.standard_normal(views["W"].shape) * std
        if self.bias:
            views["b"][...] = 0

    def encode(self, in_shape):
        return LayerCode(DENSE, self.activation.code, 0.0, self.activation.code != IDENTITY)

    def config(self):
        return {"out": self.out, "activation": self.activation.name, "bias": self.bias}


class Activation(Layer):
    """Apply an activation elementwise; the shape is unchanged and there are no parameters."""

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


def _pair(v, what):
    if isinstance(v, (int, np.integer)):
        v = (int(v), int(v))
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise ValueError(f"{what} must be an int or a pair of ints, got {v!r}")
    return v


def _image_shape(layer, in_shape):
    if len(in_shape) != 3:
        raise ValueError(
            f"{layer.name} expects images of shape (channels, height, width), got per-sample "
            f"shape {in_shape}"
        )
    return in_shape


class Conv(Layer):
    """2-D cross-correlation with bias and a fused activation, as ``torch.nn.Conv2d``.

    Parameters
    ----------
    out_channels : int
    kernel : int or (kh, kw), default (5, 5)
    activation : str or ActivationFunction
    padding : int or (ph, pw): zeros added on each side (default 0, "valid")
    stride : int or (sh, sw), default 1
    bias : bool

    Input ``(C, H, W)``, output ``(out_channels, OH, OW)`` with
    ``OH = (H + 2 ph - kh) // sh + 1``. Parameters: ``W`` of shape
    ``(out_channels, C, kh, kw)`` (row-major, as ``Conv2d.weight``), then ``b``.
    Initialisation: Glorot uniform with fan_in = C kh kw and fan_out = out_channels kh kw; zero
    bias.
    """

    name = "Conv"

    def __init__(
        self,
        out_channels: int,
        kernel=(5, 5),
        activation="identity",
        padding=0,
        stride=1,
        bias: bool = True,
    ):
        if (
            isinstance(out_channels, bool)
            or not isinstance(out_channels, (int, np.integer))
            or out_channels < 1
        ):
            raise ValueError(f"Conv: out_channels must be a positive integer, got {out_channels!r}")
        self.out_channels = int(out_channels)
        self.kernel = _pair(kernel, "Conv: kernel")
        self.padding = _pair(padding, "Conv: padding")
        self.stride = _pair(stride, "Conv: stride")
        if min(self.kernel) < 1 or min(self.stride) < 1 or min(self.padding) < 0:
            raise ValueError("Conv: kernel and stride must be positive, padding non-negative")
        self.activation = get_activation(activation)
        self.bias = bool(bias)

    def _geometry(self, in_shape):
        C, H, W = _image_shape(self, in_shape)
        (kh, kw), (ph, pw), (sh, sw) = self.kernel, self.padding, self.stride
        OH = (H + 2 * ph - kh) // sh + 1
        OW = (W + 2 * pw - kw) // sw + 1
        if OH < 1 or OW < 1:
            raise ValueError(
                f"Conv: a {kh}x{kw} kernel does not fit input {H}x{W} with padding {ph}x{pw}"
            )
        return C, H, W, OH, OW

    def output_shape(self, in_shape):
        _, _, _, OH, OW = self._geometry(in_shape)
        return (self.out_channels, OH, OW)

    def param_shapes(self, in_shape):
        C = _image_shape(self, in_shape)[0]
        shapes = [("W", (self.out_channels, C) + self.kernel)]
        if self.bias:
            shapes.append(("b", (self.out_channels,)))
        return shapes

    def init(self, views, in_shape, rng):
        C = in_shape[0]
        kh, kw = self.kernel
        limit = math.sqrt(6.0 / (C * kh * kw + self.out_channels * kh * kw))
        views["W"][...] = rng.uniform(-limit, limit, views["W"].shape)
        if self.bias:
            views["b"][...] = 0

    def encode(self, in_shape):
        C, H, W, OH, OW = self._geometry(in_shape)
        (kh, kw), (ph, pw), (sh, sw) = self.kernel, self.padding, self.stride
        oh, ow, c, i, j = np.meshgrid(
            np.arange(OH),
            np.arange(OW),
            np.arange(C),
            np.arange(kh),
            np.arange(kw),
            indexing="ij",
        )
        ih = oh * sh + i - ph
        iw = ow * sw + j - pw
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        rows = np.where(inside, (c * H + ih) * W + iw, -1).reshape(OH * OW, C * kh * kw)
        return LayerCode(
            CONV,
            self.activation.code,
            0.0,
            self.activation.code != IDENTITY,
            extra=(
                0,
                OH * OW,
                C * kh * kw,
                self.out_channels,
                C,
                H,
                W,
                OH,
                OW,
                kh,
                kw,
                int(self.padding == (0, 0) and self.stride == (1, 1)),
            ),
            table=rows.astype(np.int64).ravel(),
        )

    def config(self):
        return {
            "out_channels": self.out_channels,
            "kernel": list(self.kernel),
            "activation": self.activation.name,
            "padding": list(self.padding),
            "stride": list(self.stride),
            "bias": self.bias,
        }


class MaxPool(Layer):
    """Non-overlapping max pooling over ``(ph, pw)`` windows (stride = window).

    Input ``(C, H, W)``, output ``(C, H // ph, W // pw)`` (rows and columns that do not fill a
    window are dropped, as in PyTorch). The gradient of a window goes to its maximum; on ties,
    to the first maximum in row-major order within the window.
    """

    name = "MaxPool"

    def __init__(self, window=(2, 2)):
        self.window = _pair(window, "MaxPool: window")
        if min(self.window) < 1:
            raise ValueError("MaxPool: window must be positive")

    def output_shape(self, in_shape):
        C, H, W = _image_shape(self, in_shape)
        ph, pw = self.window
        if H < ph or W < pw:
            raise ValueError(f"MaxPool: window {ph}x{pw} larger than input {H}x{W}")
        return (C, H // ph, W // pw)

    def encode(self, in_shape):
        C, H, W = in_shape
        ph, pw = self.window
        OH, OW = H // ph, W // pw
        c, oh, ow, i, j = np.meshgrid(
            np.arange(C),
            np.arange(OH),
            np.arange(OW),
            np.arange(ph),
            np.arange(pw),
            indexing="ij",
        )
        rows = (c * H + oh * ph + i) * W + ow * pw + j
        return LayerCode(
            MAXPOOL, IDENTITY, 0.0, True, extra=(0, ph * pw), table=rows.astype(np.int64).ravel()
        )

    def config(self):
        return {"window": list(self.window)}


#: every layer kind that :func:`scichains.nn.load` can rebuild, by ``Layer.name``
LAYERS: dict[str, type[Layer]] = {
    cls.name: cls for cls in (Dense, Activation, Dropout, Flatten, Conv, MaxPool)
}


def register_layer(cls: type[Layer]) -> type[Layer]:
    """Make a layer class known to :func:`scichains.nn.load` under ``cls.name`` (a decorator).

    A chain with such a layer can be saved only when ``cls(**layer.config())`` rebuilds a layer
    the kernels see as the same (:func:`scichains.nn.save` checks this).
    """
    LAYERS[cls.name] = cls
    return cls
