"""Row kernels of the backward pass: the weight gradient and the input gradient by rows for
stride-1 convolutions, vectorised over the batch tile."""

from __future__ import annotations

from ...._jit import inline_kernel, kernel
from ..._simd import (
    lanes,
    vadd,
    vfill,
    vfma,
    vload,
    vsplat,
    vstore,
    vsum,
)


@kernel
def _conv_weight_grad_rows(gW, w, meta, toff, in_row, gz_row, geo, T):
    """dL/dW of :func:`_conv_forward_rows`: gW[oc, t] += sum over output rows and the ``L``
    elements of each of gz[oc, :L] x_t[:L]. Register-blocked: 4 output channels x 3 terms of
    vector partial sums run over every output row, then fold into ``gW``."""
    OC, C, _H, W, OH, OW, kh, kw = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7]
    nterms = C * kh * kw
    qs = OH * OW * T
    L = OW * T
    nl = lanes(w)
    L1 = L - L % nl
    o4 = OC - OC % 4
    t3 = nterms - nterms % 3
    zero = w.dtype.type(0.0)
    for oc in range(0, o4, 4):
        for t in range(0, t3, 3):
            s00 = vfill(w, 0.0)
            s01, s02 = s00, s00
            s10, s11, s12 = s00, s00, s00
            s20, s21, s22 = s00, s00, s00
            s30, s31, s32 = s00, s00, s00
            for oh in range(OH):
                g0 = (gz_row + oh * OW) * T + oc * qs
                xo = (in_row + oh * W) * T
                x0 = xo + meta[toff + t] * T
                x1 = xo + meta[toff + t + 1] * T
                x2 = xo + meta[toff + t + 2] * T
                for b0 in range(0, L1, nl):
                    v0 = vload(w, x0 + b0)
                    v1 = vload(w, x1 + b0)
                    v2 = vload(w, x2 + b0)
                    e = vload(w, g0 + b0)
                    s00 = vfma(e, v0, s00)
                    s01 = vfma(e, v1, s01)
                    s02 = vfma(e, v2, s02)
                    e = vload(w, g0 + qs + b0)
                    s10 = vfma(e, v0, s10)
                    s11 = vfma(e, v1, s11)
                    s12 = vfma(e, v2, s12)
                    e = vload(w, g0 + 2 * qs + b0)
                    s20 = vfma(e, v0, s20)
                    s21 = vfma(e, v1, s21)
                    s22 = vfma(e, v2, s22)
                    e = vload(w, g0 + 3 * qs + b0)
                    s30 = vfma(e, v0, s30)
                    s31 = vfma(e, v1, s31)
                    s32 = vfma(e, v2, s32)
            k = oc * nterms + t
            gW[k] += vsum(s00)
            gW[k + 1] += vsum(s01)
            gW[k + 2] += vsum(s02)
            k += nterms
            gW[k] += vsum(s10)
            gW[k + 1] += vsum(s11)
            gW[k + 2] += vsum(s12)
            k += nterms
            gW[k] += vsum(s20)
            gW[k + 1] += vsum(s21)
            gW[k + 2] += vsum(s22)
            k += nterms
            gW[k] += vsum(s30)
            gW[k + 1] += vsum(s31)
            gW[k + 2] += vsum(s32)
    o2 = o4 + (OC - o4) // 2 * 2
    for oc in range(o4, o2, 2):
        # two channels left: 2 x 3 blocks
        for t in range(0, t3, 3):
            s00 = vfill(w, 0.0)
            s01, s02 = s00, s00
            s10, s11, s12 = s00, s00, s00
            for oh in range(OH):
                g0 = (gz_row + oh * OW) * T + oc * qs
                xo = (in_row + oh * W) * T
                x0 = xo + meta[toff + t] * T
                x1 = xo + meta[toff + t + 1] * T
                x2 = xo + meta[toff + t + 2] * T
                for b0 in range(0, L1, nl):
                    v0 = vload(w, x0 + b0)
                    v1 = vload(w, x1 + b0)
                    v2 = vload(w, x2 + b0)
                    e = vload(w, g0 + b0)
                    s00 = vfma(e, v0, s00)
                    s01 = vfma(e, v1, s01)
                    s02 = vfma(e, v2, s02)
                    e = vload(w, g0 + qs + b0)
                    s10 = vfma(e, v0, s10)
                    s11 = vfma(e, v1, s11)
                    s12 = vfma(e, v2, s12)
            k = oc * nterms + t
            gW[k] += vsum(s00)
            gW[k + 1] += vsum(s01)
            gW[k + 2] += vsum(s02)
            k += nterms
            gW[k] += vsum(s10)
            gW[k + 1] += vsum(s11)
            gW[k + 2] += vsum(s12)
    # the channels and terms outside the blocks, and the elements past the last full vector
    for oc in range(OC):
        for t in range(nterms):
            in_block = oc < o2 and t < t3
            s = vfill(w, 0.0)
            acc = zero
            for oh in range(OH):
                g0 = (gz_row + oh * OW) * T + oc * qs
                x0 = (in_row + oh * W + meta[toff + t]) * T
                if not in_block:
                    for b0 in range(0, L1, nl):
                        s = vfma(vload(w, g0 + b0), vload(w, x0 + b0), s)
                for b in range(L1, L):
                    acc += w[g0 + b] * w[x0 + b]
            gW[oc * nterms + t] += acc + vsum(s)


@inline_kernel
def _input_grad_term(Wc, w, h, go, t, nterms, OC, L, start):
    """One term of :func:`_conv_input_grad_rows` from element ``start`` (a multiple of the
    lanes) to ``L``: ``w[h + b] += sum_oc Wc[oc, t] w[go + oc * L + b]``, a vector at a time,
    then the elements past the last full vector."""
    nl = lanes(w)
    L1 = L - L % nl
    for b0 in range(start, L1, nl):
        s = vload(w, h + b0)
        for oc in range(OC):
            s = vfma(vsplat(Wc, oc * nterms + t), vload(w, go + oc * L + b0), s)
        vstore(w, h + b0, s)
    for b in range(L1, L):
        acc = w[h + b]
        for oc in range(OC):
            acc += Wc[oc * nterms + t] * w[go + oc * L + b]
        w[h + b] = acc


@kernel
def _conv_input_grad_rows(Wc, w, meta, toff, gz_row, gx_row, scr_row, geo, T):
    """dL/dx of :func:`_conv_forward_rows` (the gradient rows ``gx_row..`` zeroed first):
    gx_t[:L] += sum_oc Wc[oc, t] gz[oc, :L] for every term ``t`` and output row.

    The runs of terms that differ only in the kernel column overlap, so the terms are taken
    four at a time with the same kernel column and different (channel, kernel row): disjoint
    runs, held as 4 x 3 vectors in registers over all output channels.

    The output gradient of one output row is first copied, all channels, to the scratch rows
    ``scr_row..`` (``OC * OW`` rows): in place, channels sit ``OH * OW * T`` numbers apart, a
    multiple of 4 KiB for LeNet5's second layer (8 KiB), so the 16 channels read in the inner
    loop all fall into one set of the L1 cache and evict each other (measured: 19 GFLOP/s);
    the copy puts them ``OW * T`` apart.
    """
    OC, C, _H, W, OH, OW, kh, kw = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7]
    nterms = C * kh * kw
    qs = OH * OW * T
    L = OW * T
    nl = lanes(w)
    blk = 3 * nl
    L3 = L - L % blk
    L1 = L - L % nl
    CK = C * kh  # (channel, kernel row) pairs
    CK4 = CK - CK % 4
    gs = scr_row * T
    for oh in range(OH):
        ho = (gx_row + oh * W) * T
        go = (gz_row + oh * OW) * T
        for oc in range(OC):
            src = go + oc * qs
            dst = gs + oc * L
            for b0 in range(0, L1, nl):
                vstore(w, dst + b0, vload(w, src + b0))
            for b in range(L1, L):
                w[dst + b] = w[src + b]
        go = gs
        for j in range(kw):
            for ci in range(0, CK4, 4):
                t0 = ci * kw + j
                t1 = t0 + kw
                t2 = t1 + kw
                t3 = t2 + kw
                h0 = ho + meta[toff + t0] * T
                h1 = ho + meta[toff + t1] * T
                h2 = ho + meta[toff + t2] * T
                h3 = ho + meta[toff + t3] * T
                for b0 in range(0, L3, blk):
                    s00 = vload(w, h0 + b0)
                    s01 = vload(w, h0 + b0 + nl)
                    s02 = vload(w, h0 + b0 + 2 * nl)
                    s10 = vload(w, h1 + b0)
                    s11 = vload(w, h1 + b0 + nl)
                    s12 = vload(w, h1 + b0 + 2 * nl)
                    s20 = vload(w, h2 + b0)
                    s21 = vload(w, h2 + b0 + nl)
                    s22 = vload(w, h2 + b0 + 2 * nl)
                    s30 = vload(w, h3 + b0)
                    s31 = vload(w, h3 + b0 + nl)
                    s32 = vload(w, h3 + b0 + 2 * nl)
                    for oc in range(OC):
                        gb = go + oc * L + b0
                        v0 = vload(w, gb)
                        v1 = vload(w, gb + nl)
                        v2 = vload(w, gb + 2 * nl)
                        k = oc * nterms
                        a = vsplat(Wc, k + t0)
                        s00 = vfma(a, v0, s00)
                        s01 = vfma(a, v1, s01)
                        s02 = vfma(a, v2, s02)
                        a = vsplat(Wc, k + t1)
                        s10 = vfma(a, v0, s10)
                        s11 = vfma(a, v1, s11)
                        s12 = vfma(a, v2, s12)
                        a = vsplat(Wc, k + t2)
                        s20 = vfma(a, v0, s20)
                        s21 = vfma(a, v1, s21)
                        s22 = vfma(a, v2, s22)
                        a = vsplat(Wc, k + t3)
                        s30 = vfma(a, v0, s30)
                        s31 = vfma(a, v1, s31)
                        s32 = vfma(a, v2, s32)
                    vstore(w, h0 + b0, s00)
                    vstore(w, h0 + b0 + nl, s01)
                    vstore(w, h0 + b0 + 2 * nl, s02)
                    vstore(w, h1 + b0, s10)
                    vstore(w, h1 + b0 + nl, s11)
                    vstore(w, h1 + b0 + 2 * nl, s12)
                    vstore(w, h2 + b0, s20)
                    vstore(w, h2 + b0 + nl, s21)
                    vstore(w, h2 + b0 + 2 * nl, s22)
                    vstore(w, h3 + b0, s30)
                    vstore(w, h3 + b0 + nl, s31)
                    vstore(w, h3 + b0 + 2 * nl, s32)
                for b0 in range(L3, L1, nl):
                    s0 = vload(w, h0 + b0)
                    s1 = vload(w, h1 + b0)
                    s2 = vload(w, h2 + b0)
                    s3 = vload(w, h3 + b0)
                    for oc in range(OC):
                        v = vload(w, go + oc * L + b0)
                        k = oc * nterms
                        s0 = vfma(vsplat(Wc, k + t0), v, s0)
                        s1 = vfma(vsplat(Wc, k + t1), v, s1)
                        s2 = vfma(vsplat(Wc, k + t2), v, s2)
                        s3 = vfma(vsplat(Wc, k + t3), v, s3)
                    vstore(w, h0 + b0, s0)
                    vstore(w, h1 + b0, s1)
                    vstore(w, h2 + b0, s2)
                    vstore(w, h3 + b0, s3)
                for b in range(L1, L):
                    for oc in range(OC):
                        g = w[go + oc * L + b]
                        k = oc * nterms
                        w[h0 + b] += Wc[k + t0] * g
                        w[h1 + b] += Wc[k + t1] * g
                        w[h2 + b] += Wc[k + t2] * g
                        w[h3 + b] += Wc[k + t3] * g
            CK2 = CK4 + (CK - CK4) // 2 * 2
            for ci in range(CK4, CK2, 2):
                # two (channel, kernel row) pairs left (LeNet5's 30 = 7 * 4 + 2): 2 x 3 vectors
                t0 = ci * kw + j
                t1 = t0 + kw
                h0 = ho + meta[toff + t0] * T
                h1 = ho + meta[toff + t1] * T
                for b0 in range(0, L3, blk):
                    s00 = vload(w, h0 + b0)
                    s01 = vload(w, h0 + b0 + nl)
                    s02 = vload(w, h0 + b0 + 2 * nl)
                    s10 = vload(w, h1 + b0)
                    s11 = vload(w, h1 + b0 + nl)
                    s12 = vload(w, h1 + b0 + 2 * nl)
                    for oc in range(OC):
                        gb = go + oc * L + b0
                        v0 = vload(w, gb)
                        v1 = vload(w, gb + nl)
                        v2 = vload(w, gb + 2 * nl)
                        a = vsplat(Wc, oc * nterms + t0)
                        s00 = vfma(a, v0, s00)
                        s01 = vfma(a, v1, s01)
                        s02 = vfma(a, v2, s02)
                        a = vsplat(Wc, oc * nterms + t1)
                        s10 = vfma(a, v0, s10)
                        s11 = vfma(a, v1, s11)
                        s12 = vfma(a, v2, s12)
                    vstore(w, h0 + b0, s00)
                    vstore(w, h0 + b0 + nl, s01)
                    vstore(w, h0 + b0 + 2 * nl, s02)
                    vstore(w, h1 + b0, s10)
                    vstore(w, h1 + b0 + nl, s11)
                    vstore(w, h1 + b0 + 2 * nl, s12)
                _input_grad_term(Wc, w, h0, go, t0, nterms, OC, L, L3)
                _input_grad_term(Wc, w, h1, go, t1, nterms, OC, L, L3)
            for ci in range(CK2, CK):
                t = ci * kw + j
                _input_grad_term(Wc, w, ho + meta[toff + t] * T, go, t, nterms, OC, L, 0)


@kernel
def _conv_backward_rows(
    Wc, gW, gb, has_bias, w, meta, toff, in_row, gz_row, gx_row, scr_row, want_gx, geo, n_in, T
):
    """Backward of :func:`_conv_forward_rows`: reductions and updates along whole rows."""
    OC, OH, OW = geo[0], geo[4], geo[5]
    npos = OH * OW
    zero = w.dtype.type(0.0)
    if has_bias:
        # vector partial sums in four registers (the scalar loop ran at ~2 numbers per ns)
        nl = lanes(w)
        n = npos * T
        n4 = n - n % (4 * nl)
        for oc in range(OC):
            q = (gz_row + oc * npos) * T
            a0 = vfill(w, 0.0)
            a1, a2, a3 = a0, a0, a0
            for b in range(0, n4, 4 * nl):
                a0 = vadd(a0, vload(w, q + b))
                a1 = vadd(a1, vload(w, q + b + nl))
                a2 = vadd(a2, vload(w, q + b + 2 * nl))
                a3 = vadd(a3, vload(w, q + b + 3 * nl))
            s = vsum(vadd(vadd(a0, a1), vadd(a2, a3)))
            for b in range(n4, n):
                s += w[q + b]
            gb[oc] += s
    _conv_weight_grad_rows(gW, w, meta, toff, in_row, gz_row, geo, T)
    if not want_gx:
        return
    for j in range(n_in * T):
        w[gx_row * T + j] = zero
    _conv_input_grad_rows(Wc, w, meta, toff, gz_row, gx_row, scr_row, geo, T)
