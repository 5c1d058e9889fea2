"""The convolution layer's descriptor: shapes, parameters, the layout of its weights and
work rows, and the choice between the generic and the row kernels."""

from __future__ import annotations

import math

import numpy as np

from ..._activations import IDENTITY, get_activation
from ..._layout import (
    CONV,
)
from ..base import Layer, LayerCode, _image_shape, _pair


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
            # the input-gradient kernel's copy of one output row of every channel
            scratch=self.out_channels * OW,
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
