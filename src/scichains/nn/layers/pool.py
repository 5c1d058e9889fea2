"""Max pooling: the descriptor and its kernels."""

from __future__ import annotations

import numpy as np

from ..._jit import kernel
from .._activations import IDENTITY
from .._layout import B_SWAPPED, MAXPOOL, P_K, P_TABLE, S_D, S_IN, S_NIN, S_NOUT, S_OUT
from .._simd import borrow
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
    output ``o``'s window."""
    for o in range(nout):
        base = toff + o * k
        zo = w[(out_row + o) * T : (out_row + o) * T + T]
        do = w[(d_row + o) * T : (d_row + o) * T + T]
        r = in_row + meta[base]
        x0 = w[r * T : r * T + T]
        for b in range(m):
            zo[b] = x0[b]
            do[b] = 0
        for e in range(1, k):
            r = in_row + meta[base + e]
            xe = w[r * T : r * T + T]
            fe = w.dtype.type(e)
            for b in range(m):
                v = xe[b]
                better = v > zo[b]
                zo[b] = v if better else zo[b]
                do[b] = fe if better else do[b]


@kernel
def _maxpool_backward(w, gz_row, gx_row, d_row, meta, toff, nout, k, n_in, T, m):
    """dL/dx: each output's gradient goes to the element that was the maximum.

    The windows do not overlap, so every input row of a window is *written* once: element
    ``e`` gets the gradient where the stored index equals ``e`` and 0 elsewhere, a select
    along the batch that vectorises (a scatter through the stored index would not). Inputs
    outside every window (rows and columns that do not fill one) are zeroed first."""
    zero = w.dtype.type(0.0)
    if nout * k != n_in:
        for j in range(n_in * T):
            w[gx_row * T + j] = zero
    for o in range(nout):
        base = toff + o * k
        g = w[(gz_row + o) * T : (gz_row + o) * T + T]
        d = w[(d_row + o) * T : (d_row + o) * T + T]
        for e in range(k):
            r = gx_row + meta[base + e]
            h = w[r * T : r * T + T]
            fe = w.dtype.type(e)
            for b in range(T):
                h[b] = g[b] if d[b] == fe else zero


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
    if need_in:
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
        )
    return B_SWAPPED
