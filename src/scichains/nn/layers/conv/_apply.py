"""The convolution layer's entries for the chain's dispatch: ``forward`` and ``backward`` pick
the row kernels where the geometry allows and the generic ones otherwise."""

from __future__ import annotations

from ..._activations import IDENTITY, RELU, activate
from ..._layout import (
    B_SWAPPED,
    C_GEO,
    C_NPOS,
    C_NTERMS,
    C_OC,
    C_ROWS,
    C_TABLE,
    M_GA,
    S_ACT,
    S_BOFF,
    S_D,
    S_IN,
    S_NIN,
    S_NOUT,
    S_OUT,
    S_SCRATCH,
    S_WOFF,
)
from ..._simd import (
    borrow,
)
from ._generic import _conv_backward, _conv_forward
from ._grad_rows import _conv_backward_rows
from ._rows import _conv_forward_rows


def forward(l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    """The layer's forward pass on a tile (see :mod:`scichains.nn._dispatch`)."""
    spec = borrow(spec)
    fspec = borrow(fspec)
    meta = borrow(meta)
    p = borrow(p)
    w = borrow(w)
    samples = borrow(samples)
    woff = spec[l, S_WOFF]
    boff = spec[l, S_BOFF]
    nterms = spec[l, C_NTERMS]
    OC = spec[l, C_OC]
    Wc = p[woff : woff + OC * nterms]
    bias = p[boff : boff + OC] if boff >= 0 else p[0:0]
    act = spec[l, S_ACT]
    z_row = spec[l, S_OUT] if act == IDENTITY else meta[M_GA]
    if T > 1 and m == T and spec[l, C_ROWS] == 1:
        # unpadded, stride 1, full tile: along whole image rows; a relu is applied as the
        # outputs are stored (no pass over pre-activations)
        relu = act == RELU
        _conv_forward_rows(
            Wc,
            bias,
            boff >= 0,
            w,
            meta,
            spec[l, C_TABLE],
            spec[l, S_IN],
            spec[l, S_OUT] if relu else z_row,
            spec[l, C_GEO : C_GEO + 8],
            T,
            relu,
            (spec[l, S_D] - spec[l, S_OUT]) * T,
        )
        if relu:
            return 0
    else:
        _conv_forward(
            Wc,
            bias,
            boff >= 0,
            w,
            spec[l, S_IN],
            z_row,
            meta,
            spec[l, C_TABLE],
            spec[l, C_NPOS],
            nterms,
            OC,
            T,
            m,
        )
    if act != IDENTITY:
        activate(act, w, z_row * T, spec[l, S_OUT] * T, spec[l, S_D] * T, spec[l, S_NOUT] * T)
    return 0


def backward(l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other):
    """Accumulate dL/dW, dL/db; write dL/dx into the ``other`` gradient rows (see
    :mod:`scichains.nn._dispatch`)."""
    spec = borrow(spec)
    meta = borrow(meta)
    p = borrow(p)
    g = borrow(g)
    gv = borrow(gv)
    w = borrow(w)
    woff = spec[l, S_WOFF]
    boff = spec[l, S_BOFF]
    nterms = spec[l, C_NTERMS]
    OC = spec[l, C_OC]
    Wc = p[woff : woff + OC * nterms]
    gW = g[woff : woff + OC * nterms]
    gb = g[boff : boff + OC] if boff >= 0 else g[0:0]
    if T > 1 and m == T and spec[l, C_ROWS] == 1:
        _conv_backward_rows(
            Wc,
            gW,
            gb,
            boff >= 0,
            w,
            meta,
            spec[l, C_TABLE],
            spec[l, S_IN],
            cur,
            other,
            spec[l, S_SCRATCH],
            need_in,
            spec[l, C_GEO : C_GEO + 8],
            spec[l, S_NIN],
            T,
        )
    else:
        _conv_backward(
            Wc,
            gW,
            gb,
            boff >= 0,
            w,
            spec[l, S_IN],
            cur,
            other,
            need_in,
            meta,
            spec[l, C_TABLE],
            spec[l, C_NPOS],
            nterms,
            OC,
            spec[l, S_NIN],
            T,
            m,
        )
    return B_SWAPPED
