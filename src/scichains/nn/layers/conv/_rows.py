"""Row kernels of the forward pass: whole output rows for stride-1 convolutions, vectorised over
the batch tile (the layer's hot path in LeNet5), with the activation fused in."""

from __future__ import annotations

from ...._jit import inline_kernel, kernel
from ..._simd import (
    lanes,
    vfill,
    vfma,
    vload,
    vselect_gt,
    vsplat,
    vstore,
)


@inline_kernel
def _put(w, i, s, relu, doff):
    """Store the vector ``s`` at ``w[i:]``; with ``relu``, max(s, 0) there and the derivative
    (1 where s > 0, else 0) at ``w[i + doff:]``."""
    if relu:
        z = vfill(w, 0.0)
        vstore(w, i, vselect_gt(s, z, s, z))
        vstore(w, i + doff, vselect_gt(s, z, vfill(w, 1.0), z))
    else:
        vstore(w, i, s)


@inline_kernel
def _put1(w, i, x, relu, doff):
    """:func:`_put` for one number."""
    if relu:
        zero = w.dtype.type(0.0)
        pos = x > zero
        w[i] = x if pos else zero
        w[i + doff] = w.dtype.type(1.0) if pos else zero
    else:
        w[i] = x


@kernel
def _conv_forward_rows(Wc, bias, has_bias, w, meta, toff, in_row, z_row, geo, T, relu, doff):
    """Unpadded, stride-1 convolution on a full tile (``m == T``), along whole image rows.

    Rows of consecutive output columns are contiguous, and so are the input rows a term reads
    for them: for output row ``oh`` the convolution is a matrix product over runs of
    ``L = OW * T`` elements, z[oc, :L] = b[oc] + sum_t Wc[oc, t] x_t[:L], with x_t the run of
    term ``t`` (channel, kernel row, kernel column) starting at row ``meta[toff + t] + oh * W``
    of the input. Register-blocked as the dense kernels: 4 output channels x 3 vectors (12
    accumulators) stay in registers over all terms. ``geo`` = (OC, C, H, W, OH, OW, kh, kw).
    ``relu``: store max(z, 0) and its derivative (``doff`` numbers further) instead of z.
    """
    OC, C, _H, W, OH, OW, kh, kw = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7]
    nterms = C * kh * kw
    qs = OH * OW * T  # between output channels
    L = OW * T
    nl = lanes(w)
    blk = 3 * nl
    L3 = L - L % blk
    L1 = L - L % nl
    o4 = OC - OC % 4
    zero = w.dtype.type(0.0)
    for oh in range(OH):
        xo = (in_row + oh * W) * T
        zo = (z_row + oh * OW) * T
        for oc in range(0, o4, 4):
            e0 = bias[oc] if has_bias else zero
            e1 = bias[oc + 1] if has_bias else zero
            e2 = bias[oc + 2] if has_bias else zero
            e3 = bias[oc + 3] if has_bias else zero
            f0 = vfill(w, e0)
            f1 = vfill(w, e1)
            f2 = vfill(w, e2)
            f3 = vfill(w, e3)
            k0 = oc * nterms
            q = zo + oc * qs
            for b0 in range(0, L3, blk):
                s00, s01, s02 = f0, f0, f0
                s10, s11, s12 = f1, f1, f1
                s20, s21, s22 = f2, f2, f2
                s30, s31, s32 = f3, f3, f3
                for t in range(nterms):
                    xb = xo + meta[toff + t] * T + b0
                    v0 = vload(w, xb)
                    v1 = vload(w, xb + nl)
                    v2 = vload(w, xb + 2 * nl)
                    a = vsplat(Wc, k0 + t)
                    s00 = vfma(a, v0, s00)
                    s01 = vfma(a, v1, s01)
                    s02 = vfma(a, v2, s02)
                    a = vsplat(Wc, k0 + nterms + t)
                    s10 = vfma(a, v0, s10)
                    s11 = vfma(a, v1, s11)
                    s12 = vfma(a, v2, s12)
                    a = vsplat(Wc, k0 + 2 * nterms + t)
                    s20 = vfma(a, v0, s20)
                    s21 = vfma(a, v1, s21)
                    s22 = vfma(a, v2, s22)
                    a = vsplat(Wc, k0 + 3 * nterms + t)
                    s30 = vfma(a, v0, s30)
                    s31 = vfma(a, v1, s31)
                    s32 = vfma(a, v2, s32)
                zb = q + b0
                _put(w, zb, s00, relu, doff)
                _put(w, zb + nl, s01, relu, doff)
                _put(w, zb + 2 * nl, s02, relu, doff)
                zb += qs
                _put(w, zb, s10, relu, doff)
                _put(w, zb + nl, s11, relu, doff)
                _put(w, zb + 2 * nl, s12, relu, doff)
                zb += qs
                _put(w, zb, s20, relu, doff)
                _put(w, zb + nl, s21, relu, doff)
                _put(w, zb + 2 * nl, s22, relu, doff)
                zb += qs
                _put(w, zb, s30, relu, doff)
                _put(w, zb + nl, s31, relu, doff)
                _put(w, zb + 2 * nl, s32, relu, doff)
            for b0 in range(L3, L1, nl):
                s0, s1, s2, s3 = f0, f1, f2, f3
                for t in range(nterms):
                    v = vload(w, xo + meta[toff + t] * T + b0)
                    s0 = vfma(vsplat(Wc, k0 + t), v, s0)
                    s1 = vfma(vsplat(Wc, k0 + nterms + t), v, s1)
                    s2 = vfma(vsplat(Wc, k0 + 2 * nterms + t), v, s2)
                    s3 = vfma(vsplat(Wc, k0 + 3 * nterms + t), v, s3)
                _put(w, q + b0, s0, relu, doff)
                _put(w, q + qs + b0, s1, relu, doff)
                _put(w, q + 2 * qs + b0, s2, relu, doff)
                _put(w, q + 3 * qs + b0, s3, relu, doff)
            for r in range(4):
                for b in range(L1, L):
                    acc = bias[oc + r] if has_bias else zero
                    for t in range(nterms):
                        acc += Wc[k0 + r * nterms + t] * w[xo + meta[toff + t] * T + b]
                    _put1(w, q + r * qs + b, acc, relu, doff)
        for oc in range(o4, OC - 1, 2):
            # two channels left (6 = 4 + 2 in LeNet5's first layer): 2 x 3 vectors
            e0 = bias[oc] if has_bias else zero
            e1 = bias[oc + 1] if has_bias else zero
            f0 = vfill(w, e0)
            f1 = vfill(w, e1)
            k0 = oc * nterms
            q = zo + oc * qs
            for b0 in range(0, L3, blk):
                s00, s01, s02 = f0, f0, f0
                s10, s11, s12 = f1, f1, f1
                for t in range(nterms):
                    xb = xo + meta[toff + t] * T + b0
                    v0 = vload(w, xb)
                    v1 = vload(w, xb + nl)
                    v2 = vload(w, xb + 2 * nl)
                    a = vsplat(Wc, k0 + t)
                    s00 = vfma(a, v0, s00)
                    s01 = vfma(a, v1, s01)
                    s02 = vfma(a, v2, s02)
                    a = vsplat(Wc, k0 + nterms + t)
                    s10 = vfma(a, v0, s10)
                    s11 = vfma(a, v1, s11)
                    s12 = vfma(a, v2, s12)
                zb = q + b0
                _put(w, zb, s00, relu, doff)
                _put(w, zb + nl, s01, relu, doff)
                _put(w, zb + 2 * nl, s02, relu, doff)
                zb += qs
                _put(w, zb, s10, relu, doff)
                _put(w, zb + nl, s11, relu, doff)
                _put(w, zb + 2 * nl, s12, relu, doff)
            for r in range(2):
                kr = k0 + r * nterms
                er = bias[oc + r] if has_bias else zero
                for b0 in range(L3, L1, nl):
                    s0 = vfill(w, er)
                    for t in range(nterms):
                        s0 = vfma(vsplat(Wc, kr + t), vload(w, xo + meta[toff + t] * T + b0), s0)
                    _put(w, q + r * qs + b0, s0, relu, doff)
                for b in range(L1, L):
                    acc = er
                    for t in range(nterms):
                        acc += Wc[kr + t] * w[xo + meta[toff + t] * T + b]
                    _put1(w, q + r * qs + b, acc, relu, doff)
        for oc in range(o4 + (OC - o4) // 2 * 2, OC):
            e = bias[oc] if has_bias else zero
            f = vfill(w, e)
            k0 = oc * nterms
            q = zo + oc * qs
            for b0 in range(0, L1, nl):
                s0 = f
                for t in range(nterms):
                    s0 = vfma(vsplat(Wc, k0 + t), vload(w, xo + meta[toff + t] * T + b0), s0)
                _put(w, q + b0, s0, relu, doff)
            for b in range(L1, L):
                acc = e
                for t in range(nterms):
                    acc += Wc[k0 + t] * w[xo + meta[toff + t] * T + b]
                _put1(w, q + b, acc, relu, doff)
