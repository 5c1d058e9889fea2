"""Max pooling: the descriptor and its kernels."""

from __future__ import annotations

import numpy as np

from ..._jit import kernel
from .._activations import IDENTITY
from .._layout import (
    B_SCALED,
    B_SWAPPED,
    CONV,
    MAXPOOL,
    P_K,
    P_TABLE,
    S_ACT,
    S_D,
    S_IN,
    S_KIND,
    S_NIN,
    S_NOUT,
    S_OUT,
)
from .._simd import borrow, lanes, vfill, vload, vmul, vselect_eq, vselect_gt, vstore
from .base import Layer, LayerCode, _image_shape, _pair


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


@kernel
def _maxpool_forward(w, in_row, out_row, d_row, meta, toff, nout, k, T, m):
    """out = max over each window; the window index of the maximum (the first one on ties)
    goes to the derivative rows. ``meta[toff + o * k + e]``: input row of element ``e`` of
    output ``o``'s window. Whole rows (columns past ``m`` too: stale but finite), a vector of
    samples at a time with the running maximum and its index in registers."""
    nl = lanes(w)
    T1 = T - T % nl
    for o in range(nout):
        base = toff + o * k
        zo = (out_row + o) * T
        do = (d_row + o) * T
        for b0 in range(0, T1, nl):
            z = vload(w, (in_row + meta[base]) * T + b0)
            d = vfill(w, 0.0)
            for e in range(1, k):
                v = vload(w, (in_row + meta[base + e]) * T + b0)
                d = vselect_gt(v, z, vfill(w, e), d)
                z = vselect_gt(v, z, v, z)
            vstore(w, zo + b0, z)
            vstore(w, do + b0, d)
        for b in range(T1, T):
            z = w[(in_row + meta[base]) * T + b]
            d = 0
            for e in range(1, k):
                v = w[(in_row + meta[base + e]) * T + b]
                if v > z:
                    z = v
                    d = e
            w[zo + b] = z
            w[do + b] = d


@kernel
def _maxpool_backward(w, gz_row, gx_row, d_row, meta, toff, nout, k, n_in, T, m, dp_row, scale):
    """dL/dx: each output's gradient goes to the element that was the maximum.

    The windows do not overlap, so every input row of a window is *written* once: element
    ``e`` gets the gradient where the stored index equals ``e`` and 0 elsewhere, a select
    along the batch that vectorises (a scatter through the stored index would not). Inputs
    outside every window (rows and columns that do not fill one) are zeroed first. With
    ``scale``, the gradient is multiplied by the previous layer's stored activation
    derivative (rows ``dp_row..``) as it is written, saving that layer a pass."""
    zero = w.dtype.type(0.0)
    if nout * k != n_in:
        for j in range(n_in * T):
            w[gx_row * T + j] = zero
    nl = lanes(w)
    T1 = T - T % nl
    vz = vfill(w, 0.0)
    for o in range(nout):
        base = toff + o * k
        g = (gz_row + o) * T
        d = (d_row + o) * T
        for e in range(k):
            r = meta[base + e]
            h = (gx_row + r) * T
            dp = (dp_row + r) * T
            fe = vfill(w, e)
            for b0 in range(0, T1, nl):
                v = vload(w, g + b0)
                if scale:
                    v = vmul(v, vload(w, dp + b0))
                vstore(w, h + b0, vselect_eq(vload(w, d + b0), fe, v, vz))
            for b in range(T1, T):
                v = w[g + b] * w[dp + b] if scale else w[g + b]
                w[h + b] = v if w[d + b] == e else zero


def forward(l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    """The layer's forward pass on a tile (see :mod:`scichains.nn._dispatch`)."""
    spec = borrow(spec)
    fspec = borrow(fspec)
    meta = borrow(meta)
    p = borrow(p)
    w = borrow(w)
    samples = borrow(samples)
    _maxpool_forward(
        w,
        spec[l, S_IN],
        spec[l, S_OUT],
        spec[l, S_D],
        meta,
        spec[l, P_TABLE],
        spec[l, S_NOUT],
        spec[l, P_K],
        T,
        m,
    )
    return 0


def backward(l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other):
    """dL/dx into the ``other`` gradient rows (see :mod:`scichains.nn._dispatch`)."""
    spec = borrow(spec)
    meta = borrow(meta)
    p = borrow(p)
    g = borrow(g)
    gv = borrow(gv)
    w = borrow(w)
    if not need_in:
        return B_SWAPPED
    # the convolution before with an activation: its derivative is applied as dL/dx is written
    scale = l > 0 and spec[l - 1, S_KIND] == CONV and spec[l - 1, S_ACT] != IDENTITY
    _maxpool_backward(
        w,
        cur,
        other,
        spec[l, S_D],
        meta,
        spec[l, P_TABLE],
        spec[l, S_NOUT],
        spec[l, P_K],
        spec[l, S_NIN],
        T,
        m,
        spec[l - 1, S_D] if scale else 0,
        scale,
    )
    return B_SWAPPED | B_SCALED if scale else B_SWAPPED
