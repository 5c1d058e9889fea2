"""Compiled forward and vector-Jacobian-product kernels for a chain described as data.

A chain is encoded as three small arrays (see ``_chain.py``):

- ``spec`` (int64, one row per layer): kind, activation code, sizes, parameter offsets and the
  rows of the work buffer that hold the layer's input, output and stored derivative;
- ``fspec`` (float64, one row per layer): real-valued options (the dropout rate);
- ``meta`` (int64): sizes of the whole chain (see the ``M_*`` constants).

Activations are stored features-major in a work buffer of ``rows * T`` elements: row ``r`` of a
tile of ``T`` samples starts at ``r * T`` and the batch index is the innermost, contiguous loop,
which is what vectorises. Samples stay first in the user's arrays; the kernels gather a tile of
samples (through an index array, so mini-batches are never copied) and transpose it on the fly.

All kernels are module-level and cached; the same code serves every architecture.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._jit import inline_kernel, kernel, parallel_kernel
from ._activations import IDENTITY, activate
from ._simd import lanes, vadd, vfill, vfma, vload, vmul, vsplat, vstore, vsum

# layer kinds
DENSE, ACTIVATION, DROPOUT, RESHAPE, CONV, MAXPOOL = 1, 2, 3, 4, 5, 6
# spec columns
S_KIND, S_ACT, S_NIN, S_NOUT, S_WOFF, S_BOFF, S_IN, S_OUT, S_D, S_INDEX, S_X0 = range(11)
SPEC_WIDTH = 24  # columns S_X0.. hold layer-specific integers (LayerCode.extra)
# meta entries
M_NIN, M_NOUT, M_ROWS, M_YROW, M_GA, M_GB, M_NPARAMS, M_ZERO = range(8)
META_WIDTH = 8  # then the layers' index tables (convolution and pooling windows)
# loss kinds
LOSS_NONE, LOSS_SQUARED, LOSS_ABSOLUTE, LOSS_LOGITCE = 0, 1, 2, 3


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


@kernel
def _matmul_rows(A, sq, sk, bias, has_bias, x, z, K, R, T, m, d, has_d):
    """z[r, :m] = bias[r] + sum_k A[r*sq + k*sk] x[k, :m] for r < R (rows of length T),
    times d[r, :m] when ``has_d`` (dL/dx of a layer times the stored derivative of the layer
    before it, which saves that layer a pass over its gradient rows).

    The dense forward pass (A = W, sq = n_in, sk = 1) and dL/dx = W^T dL/dz (sq = 1,
    sk = n_in). Register-blocked: 4 rows x 3 vectors of samples (12 accumulators) stay in
    registers over the whole sum, so each step over k loads 3 vectors and 4 weights for 12
    fused multiply-adds and nothing is stored until the end.
    """
    nl = lanes(z)
    blk = 3 * nl
    m3 = m - m % blk
    m1 = m - m % nl
    R4 = R - R % 4
    zero = z.dtype.type(0.0)
    for r in range(0, R4, 4):
        e0 = bias[r] if has_bias else zero
        e1 = bias[r + 1] if has_bias else zero
        e2 = bias[r + 2] if has_bias else zero
        e3 = bias[r + 3] if has_bias else zero
        f0 = vfill(z, e0)
        f1 = vfill(z, e1)
        f2 = vfill(z, e2)
        f3 = vfill(z, e3)
        a0 = r * sq
        for b0 in range(0, m3, blk):
            s00, s01, s02 = f0, f0, f0
            s10, s11, s12 = f1, f1, f1
            s20, s21, s22 = f2, f2, f2
            s30, s31, s32 = f3, f3, f3
            xb = b0
            ab = a0
            for _ in range(K):
                v0 = vload(x, xb)
                v1 = vload(x, xb + nl)
                v2 = vload(x, xb + 2 * nl)
                w = vsplat(A, ab)
                s00 = vfma(w, v0, s00)
                s01 = vfma(w, v1, s01)
                s02 = vfma(w, v2, s02)
                w = vsplat(A, ab + sq)
                s10 = vfma(w, v0, s10)
                s11 = vfma(w, v1, s11)
                s12 = vfma(w, v2, s12)
                w = vsplat(A, ab + 2 * sq)
                s20 = vfma(w, v0, s20)
                s21 = vfma(w, v1, s21)
                s22 = vfma(w, v2, s22)
                w = vsplat(A, ab + 3 * sq)
                s30 = vfma(w, v0, s30)
                s31 = vfma(w, v1, s31)
                s32 = vfma(w, v2, s32)
                xb += T
                ab += sk
            zb = r * T + b0
            # written out per accumulator: the same through a small helper kernel (inlined by
            # numba or by LLVM) made a training step 1.5x slower
            if has_d:
                s00 = vmul(s00, vload(d, zb))
                s01 = vmul(s01, vload(d, zb + nl))
                s02 = vmul(s02, vload(d, zb + 2 * nl))
                s10 = vmul(s10, vload(d, zb + T))
                s11 = vmul(s11, vload(d, zb + T + nl))
                s12 = vmul(s12, vload(d, zb + T + 2 * nl))
                s20 = vmul(s20, vload(d, zb + 2 * T))
                s21 = vmul(s21, vload(d, zb + 2 * T + nl))
                s22 = vmul(s22, vload(d, zb + 2 * T + 2 * nl))
                s30 = vmul(s30, vload(d, zb + 3 * T))
                s31 = vmul(s31, vload(d, zb + 3 * T + nl))
                s32 = vmul(s32, vload(d, zb + 3 * T + 2 * nl))
            vstore(z, zb, s00)
            vstore(z, zb + nl, s01)
            vstore(z, zb + 2 * nl, s02)
            zb += T
            vstore(z, zb, s10)
            vstore(z, zb + nl, s11)
            vstore(z, zb + 2 * nl, s12)
            zb += T
            vstore(z, zb, s20)
            vstore(z, zb + nl, s21)
            vstore(z, zb + 2 * nl, s22)
            zb += T
            vstore(z, zb, s30)
            vstore(z, zb + nl, s31)
            vstore(z, zb + 2 * nl, s32)
        for b0 in range(m3, m1, nl):
            s0, s1, s2, s3 = f0, f1, f2, f3
            xb = b0
            ab = a0
            for _ in range(K):
                v = vload(x, xb)
                s0 = vfma(vsplat(A, ab), v, s0)
                s1 = vfma(vsplat(A, ab + sq), v, s1)
                s2 = vfma(vsplat(A, ab + 2 * sq), v, s2)
                s3 = vfma(vsplat(A, ab + 3 * sq), v, s3)
                xb += T
                ab += sk
            zb = r * T + b0
            if has_d:
                s0 = vmul(s0, vload(d, zb))
                s1 = vmul(s1, vload(d, zb + T))
                s2 = vmul(s2, vload(d, zb + 2 * T))
                s3 = vmul(s3, vload(d, zb + 3 * T))
            vstore(z, zb, s0)
            vstore(z, zb + T, s1)
            vstore(z, zb + 2 * T, s2)
            vstore(z, zb + 3 * T, s3)
        for q in range(4):
            for b in range(m1, m):
                s = bias[r + q] if has_bias else zero
                for k in range(K):
                    s += A[(r + q) * sq + k * sk] * x[k * T + b]
                z[(r + q) * T + b] = s * d[(r + q) * T + b] if has_d else s
    for r in range(R4, R):
        e = bias[r] if has_bias else zero
        f = vfill(z, e)
        for b0 in range(0, m1, nl):
            s = f
            xb = b0
            ab = r * sq
            for _ in range(K):
                s = vfma(vsplat(A, ab), vload(x, xb), s)
                xb += T
                ab += sk
            if has_d:
                s = vmul(s, vload(d, r * T + b0))
            vstore(z, r * T + b0, s)
        for b in range(m1, m):
            t = e
            for k in range(K):
                t += A[r * sq + k * sk] * x[k * T + b]
            z[r * T + b] = t * d[r * T + b] if has_d else t


@kernel
def _outer_acc(gz, x, gW, gWv, direct, n_out, n_in, T, m):
    """dL/dW += sum_{b<m} gz[o, b] x[i, b] for a dense layer.

    ``direct``: added to ``gW[o*n_in + i]``. Otherwise to vector partial sums:
    ``gWv[(o*n_in + i)*lanes : ...]`` holds one vector per weight whose lanes add up to its
    gradient (see :func:`fold_partials`), so that over a batch of many tiles the lanes are
    added once per batch instead of once per tile. Blocked 4 outputs x 2 inputs: 8 vector
    accumulators over the batch, 6 loads per 8 fused multiply-adds.
    """
    nl = lanes(gz)
    m1 = m - m % nl
    o4 = n_out - n_out % 4
    i2 = n_in - n_in % 2
    zv = vfill(gz, 0.0)
    for o in range(0, o4, 4):
        g0 = o * T
        for i in range(0, i2, 2):
            s00, s01, s10, s11 = zv, zv, zv, zv
            s20, s21, s30, s31 = zv, zv, zv, zv
            xa = i * T
            for b in range(0, m1, nl):
                c0 = vload(x, xa + b)
                c1 = vload(x, xa + T + b)
                a = vload(gz, g0 + b)
                s00 = vfma(a, c0, s00)
                s01 = vfma(a, c1, s01)
                a = vload(gz, g0 + T + b)
                s10 = vfma(a, c0, s10)
                s11 = vfma(a, c1, s11)
                a = vload(gz, g0 + 2 * T + b)
                s20 = vfma(a, c0, s20)
                s21 = vfma(a, c1, s21)
                a = vload(gz, g0 + 3 * T + b)
                s30 = vfma(a, c0, s30)
                s31 = vfma(a, c1, s31)
            if direct:
                r = o * n_in + i
                gW[r] += vsum(s00)
                gW[r + 1] += vsum(s01)
                gW[r + n_in] += vsum(s10)
                gW[r + n_in + 1] += vsum(s11)
                gW[r + 2 * n_in] += vsum(s20)
                gW[r + 2 * n_in + 1] += vsum(s21)
                gW[r + 3 * n_in] += vsum(s30)
                gW[r + 3 * n_in + 1] += vsum(s31)
                continue
            r = (o * n_in + i) * nl
            rn = n_in * nl
            vstore(gWv, r, vadd(vload(gWv, r), s00))
            vstore(gWv, r + nl, vadd(vload(gWv, r + nl), s01))
            r += rn
            vstore(gWv, r, vadd(vload(gWv, r), s10))
            vstore(gWv, r + nl, vadd(vload(gWv, r + nl), s11))
            r += rn
            vstore(gWv, r, vadd(vload(gWv, r), s20))
            vstore(gWv, r + nl, vadd(vload(gWv, r + nl), s21))
            r += rn
            vstore(gWv, r, vadd(vload(gWv, r), s30))
            vstore(gWv, r + nl, vadd(vload(gWv, r + nl), s31))
    for o in range(n_out):
        for i in range(0 if o >= o4 else i2, n_in):
            s = zv
            for b in range(0, m1, nl):
                s = vfma(vload(gz, o * T + b), vload(x, i * T + b), s)
            if direct:
                gW[o * n_in + i] += vsum(s)
            else:
                r = (o * n_in + i) * nl
                vstore(gWv, r, vadd(vload(gWv, r), s))
    if m1 < m:
        # the last columns of a tile that is not a whole number of vectors
        for o in range(n_out):
            for i in range(n_in):
                t = gz.dtype.type(0.0)
                for b in range(m1, m):
                    t += gz[o * T + b] * x[i * T + b]
                if direct:
                    gW[o * n_in + i] += t
                else:
                    gWv[(o * n_in + i) * nl] += t


@kernel
def fold_partials(spec, gv, g):
    """Add the lanes of the dense layers' vector partial sums (``_outer_acc``) into ``g``."""
    nl = lanes(gv)
    for l in range(spec.shape[0]):
        if spec[l, S_KIND] == DENSE:
            woff = spec[l, S_WOFF]
            for j in range(woff, woff + spec[l, S_NIN] * spec[l, S_NOUT]):
                g[j] += vsum(vload(gv, j * nl))


@kernel
def zero_partials(spec, gv):
    """Zero the dense layers' vector partial sums."""
    nl = lanes(gv)
    for l in range(spec.shape[0]):
        if spec[l, S_KIND] == DENSE:
            woff = spec[l, S_WOFF]
            for j in range(woff * nl, (woff + spec[l, S_NIN] * spec[l, S_NOUT]) * nl):
                gv[j] = 0


@kernel
def _row_sums(gz, gb, n_out, T, m):
    """gb[o] += sum_{b<m} gz[o, b]."""
    nl = lanes(gz)
    m1 = m - m % nl
    for o in range(n_out):
        s = vfill(gz, 0.0)
        for b in range(0, m1, nl):
            s = vadd(s, vload(gz, o * T + b))
        t = vsum(s)
        for b in range(m1, m):
            t += gz[o * T + b]
        gb[o] += t


@kernel
def _dense_forward(W, bias, has_bias, x, z, n_in, n_out, T, m):
    """z[o, :m] = b[o] + sum_i W[o, i] x[i, :m] (rows of length T)."""
    _matmul_rows(W, n_in, 1, bias, has_bias, x, z, n_in, n_out, T, m, z[0:0], False)


@kernel
def _dense_backward(
    W, gW, gWv, direct, gb, has_bias, x, gz, gx, want_gx, n_in, n_out, T, m, d, has_d
):
    """Accumulate dL/db and dL/dW (into ``gW``, or its vector partials ``gWv``: see
    :func:`_outer_acc`) from dL/dz; write dL/dx = W^T dL/dz into gx when ``want_gx`` (times
    ``d``, the derivative stored by the layer before, when ``has_d``)."""
    if has_bias:
        _row_sums(gz, gb, n_out, T, m)
    _outer_acc(gz, x, gW, gWv, direct, n_out, n_in, T, m)
    if want_gx:
        _matmul_rows(W, 1, n_in, gb[0:0], False, gz, gx, n_out, n_in, T, m, d, has_d)


@kernel
def _row(meta, idx, in_row, zr):
    r = meta[idx]
    return in_row + r if r >= 0 else zr


@kernel
def _conv_forward(Wc, bias, has_bias, w, in_row, z_row, meta, toff, npos, nterms, OC, T, m):
    """Convolution as a dense map per output position, its inputs gathered through a table.

    ``meta[toff + pos * nterms + t]`` is the input row (relative to ``in_row``) of term ``t``
    (channel, kernel row, kernel column) at output position ``pos``, or -1 for padding (read
    from the zero row). Output row of (channel ``oc``, position ``pos``) is
    ``z_row + oc * npos + pos``; weights ``Wc`` are ``(OC, nterms)`` row-major. Blocked 4
    output channels x 4 terms, as the dense forward pass.
    """
    zero = w.dtype.type(0.0)
    zr = meta[M_ZERO]
    o4 = OC - OC % 4
    t4 = nterms - nterms % 4
    for pos in range(npos):
        base = toff + pos * nterms
        for oc in range(OC):
            zo = w[(z_row + oc * npos + pos) * T : (z_row + oc * npos + pos) * T + T]
            bo = bias[oc] if has_bias else zero
            for b in range(m):
                zo[b] = bo
        for oc in range(0, o4, 4):
            q0 = (z_row + oc * npos + pos) * T
            q1 = q0 + npos * T
            q2 = q1 + npos * T
            q3 = q2 + npos * T
            z0 = w[q0 : q0 + T]
            z1 = w[q1 : q1 + T]
            z2 = w[q2 : q2 + T]
            z3 = w[q3 : q3 + T]
            a = oc * nterms
            for t in range(0, t4, 4):
                r0 = _row(meta, base + t, in_row, zr) * T
                r1 = _row(meta, base + t + 1, in_row, zr) * T
                r2 = _row(meta, base + t + 2, in_row, zr) * T
                r3 = _row(meta, base + t + 3, in_row, zr) * T
                x0 = w[r0 : r0 + T]
                x1 = w[r1 : r1 + T]
                x2 = w[r2 : r2 + T]
                x3 = w[r3 : r3 + T]
                k = a + t
                a0, a1, a2, a3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                k += nterms
                b0, b1, b2, b3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                k += nterms
                c0, c1, c2, c3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                k += nterms
                d0, d1, d2, d3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                for b in range(m):
                    v0 = x0[b]
                    v1 = x1[b]
                    v2 = x2[b]
                    v3 = x3[b]
                    z0[b] += a0 * v0 + a1 * v1 + a2 * v2 + a3 * v3
                    z1[b] += b0 * v0 + b1 * v1 + b2 * v2 + b3 * v3
                    z2[b] += c0 * v0 + c1 * v1 + c2 * v2 + c3 * v3
                    z3[b] += d0 * v0 + d1 * v1 + d2 * v2 + d3 * v3
            for t in range(t4, nterms):
                r = _row(meta, base + t, in_row, zr) * T
                xr = w[r : r + T]
                k = a + t
                a0, b0 = Wc[k], Wc[k + nterms]
                c0, d0 = Wc[k + 2 * nterms], Wc[k + 3 * nterms]
                for b in range(m):
                    v = xr[b]
                    z0[b] += a0 * v
                    z1[b] += b0 * v
                    z2[b] += c0 * v
                    z3[b] += d0 * v
        for oc in range(o4, OC):
            q0 = (z_row + oc * npos + pos) * T
            zo = w[q0 : q0 + T]
            a = oc * nterms
            for t in range(0, t4, 4):
                r0 = _row(meta, base + t, in_row, zr) * T
                r1 = _row(meta, base + t + 1, in_row, zr) * T
                r2 = _row(meta, base + t + 2, in_row, zr) * T
                r3 = _row(meta, base + t + 3, in_row, zr) * T
                x0 = w[r0 : r0 + T]
                x1 = w[r1 : r1 + T]
                x2 = w[r2 : r2 + T]
                x3 = w[r3 : r3 + T]
                w0, w1, w2, w3 = Wc[a + t], Wc[a + t + 1], Wc[a + t + 2], Wc[a + t + 3]
                for b in range(m):
                    zo[b] += w0 * x0[b] + w1 * x1[b] + w2 * x2[b] + w3 * x3[b]
            for t in range(t4, nterms):
                r = _row(meta, base + t, in_row, zr) * T
                xr = w[r : r + T]
                wt = Wc[a + t]
                for b in range(m):
                    zo[b] += wt * xr[b]


@kernel
def _conv_backward(
    Wc,
    gW,
    gb,
    has_bias,
    w,
    in_row,
    gz_row,
    gx_row,
    want_gx,
    meta,
    toff,
    npos,
    nterms,
    OC,
    n_in,
    T,
    m,
):
    """Accumulate dL/dW, dL/db; write dL/dx (rows ``gx_row..``) when ``want_gx``.

    dL/dW: 2 output channels x 4 terms of dot products per pass; dL/dx: 4 terms x 4 output
    channels, as the dense backward pass. Padding terms (-1) read the zero row and, for
    dL/dx, write into a scratch row instead of the input.
    """
    zero = w.dtype.type(0.0)
    zr = meta[M_ZERO]
    if want_gx:
        for j in range(n_in * T):
            w[gx_row * T + j] = zero
    if has_bias:
        for oc in range(OC):
            s = zero
            for pos in range(npos):
                go = w[(gz_row + oc * npos + pos) * T : (gz_row + oc * npos + pos) * T + T]
                for b in range(m):
                    s += go[b]
            gb[oc] += s
    o2 = OC - OC % 2
    t4 = nterms - nterms % 4
    for pos in range(npos):
        base = toff + pos * nterms
        for oc in range(0, o2, 2):
            q0 = (gz_row + oc * npos + pos) * T
            q1 = q0 + npos * T
            g0 = w[q0 : q0 + T]
            g1 = w[q1 : q1 + T]
            a = oc * nterms
            for t in range(0, t4, 4):
                r0 = _row(meta, base + t, in_row, zr) * T
                r1 = _row(meta, base + t + 1, in_row, zr) * T
                r2 = _row(meta, base + t + 2, in_row, zr) * T
                r3 = _row(meta, base + t + 3, in_row, zr) * T
                x0 = w[r0 : r0 + T]
                x1 = w[r1 : r1 + T]
                x2 = w[r2 : r2 + T]
                x3 = w[r3 : r3 + T]
                s00 = zero
                s01 = zero
                s02 = zero
                s03 = zero
                s10 = zero
                s11 = zero
                s12 = zero
                s13 = zero
                for b in range(m):
                    e0 = g0[b]
                    e1 = g1[b]
                    c0 = x0[b]
                    c1 = x1[b]
                    c2 = x2[b]
                    c3 = x3[b]
                    s00 += e0 * c0
                    s01 += e0 * c1
                    s02 += e0 * c2
                    s03 += e0 * c3
                    s10 += e1 * c0
                    s11 += e1 * c1
                    s12 += e1 * c2
                    s13 += e1 * c3
                k = a + t
                gW[k] += s00
                gW[k + 1] += s01
                gW[k + 2] += s02
                gW[k + 3] += s03
                k += nterms
                gW[k] += s10
                gW[k + 1] += s11
                gW[k + 2] += s12
                gW[k + 3] += s13
            for t in range(t4, nterms):
                r = _row(meta, base + t, in_row, zr) * T
                xr = w[r : r + T]
                s0 = zero
                s1 = zero
                for b in range(m):
                    s0 += g0[b] * xr[b]
                    s1 += g1[b] * xr[b]
                gW[a + t] += s0
                gW[a + nterms + t] += s1
        for oc in range(o2, OC):
            q0 = (gz_row + oc * npos + pos) * T
            go = w[q0 : q0 + T]
            for t in range(nterms):
                r = _row(meta, base + t, in_row, zr) * T
                xr = w[r : r + T]
                s = zero
                for b in range(m):
                    s += go[b] * xr[b]
                gW[oc * nterms + t] += s
    if not want_gx:
        return
    # padding terms accumulate into a scratch row (the zero row is restored below)
    o4 = OC - OC % 4
    for pos in range(npos):
        base = toff + pos * nterms
        for t in range(0, t4, 4):
            r0 = meta[base + t]
            r1 = meta[base + t + 1]
            r2 = meta[base + t + 2]
            r3 = meta[base + t + 3]
            r0 = (gx_row + r0 if r0 >= 0 else zr) * T
            r1 = (gx_row + r1 if r1 >= 0 else zr) * T
            r2 = (gx_row + r2 if r2 >= 0 else zr) * T
            r3 = (gx_row + r3 if r3 >= 0 else zr) * T
            h0 = w[r0 : r0 + T]
            h1 = w[r1 : r1 + T]
            h2 = w[r2 : r2 + T]
            h3 = w[r3 : r3 + T]
            for oc in range(0, o4, 4):
                q0 = (gz_row + oc * npos + pos) * T
                q1 = q0 + npos * T
                q2 = q1 + npos * T
                q3 = q2 + npos * T
                g0 = w[q0 : q0 + T]
                g1 = w[q1 : q1 + T]
                g2 = w[q2 : q2 + T]
                g3 = w[q3 : q3 + T]
                k = oc * nterms + t
                a0, a1, a2, a3 = Wc[k], Wc[k + nterms], Wc[k + 2 * nterms], Wc[k + 3 * nterms]
                k += 1
                b0, b1, b2, b3 = Wc[k], Wc[k + nterms], Wc[k + 2 * nterms], Wc[k + 3 * nterms]
                k += 1
                c0, c1, c2, c3 = Wc[k], Wc[k + nterms], Wc[k + 2 * nterms], Wc[k + 3 * nterms]
                k += 1
                d0, d1, d2, d3 = Wc[k], Wc[k + nterms], Wc[k + 2 * nterms], Wc[k + 3 * nterms]
                for b in range(m):
                    v0 = g0[b]
                    v1 = g1[b]
                    v2 = g2[b]
                    v3 = g3[b]
                    h0[b] += a0 * v0 + a1 * v1 + a2 * v2 + a3 * v3
                    h1[b] += b0 * v0 + b1 * v1 + b2 * v2 + b3 * v3
                    h2[b] += c0 * v0 + c1 * v1 + c2 * v2 + c3 * v3
                    h3[b] += d0 * v0 + d1 * v1 + d2 * v2 + d3 * v3
            for oc in range(o4, OC):
                q0 = (gz_row + oc * npos + pos) * T
                go = w[q0 : q0 + T]
                k = oc * nterms + t
                a0, a1, a2, a3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                for b in range(m):
                    v = go[b]
                    h0[b] += a0 * v
                    h1[b] += a1 * v
                    h2[b] += a2 * v
                    h3[b] += a3 * v
        for t in range(t4, nterms):
            r = meta[base + t]
            r = (gx_row + r if r >= 0 else zr) * T
            hr = w[r : r + T]
            for oc in range(OC):
                q0 = (gz_row + oc * npos + pos) * T
                go = w[q0 : q0 + T]
                wt = Wc[oc * nterms + t]
                for b in range(m):
                    hr[b] += wt * go[b]
    for b in range(T):
        w[zr * T + b] = zero


@kernel
def _conv_forward_rows(Wc, bias, has_bias, w, in_row, z_row, geo, T):
    """Unpadded, stride-1 convolution on a full tile (``m == T``), along whole image rows.

    Rows of consecutive output columns are contiguous, and so are the input rows a term reads
    for them: one pass covers an output row (``OW * T`` elements) instead of one position.
    ``geo`` = (OC, C, H, W, OH, OW, kh, kw).
    """
    OC, C, H, W, OH, OW, kh, kw = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7]
    nterms = C * kh * kw
    npos = OH * OW
    L = OW * T
    zero = w.dtype.type(0.0)
    o4 = OC - OC % 4
    t4 = nterms - nterms % 4
    for oh in range(OH):
        for oc in range(OC):
            q = (z_row + oc * npos + oh * OW) * T
            bo = bias[oc] if has_bias else zero
            for b in range(L):
                w[q + b] = bo
        for oc in range(0, o4, 4):
            q0 = (z_row + oc * npos + oh * OW) * T
            q1 = q0 + npos * T
            q2 = q1 + npos * T
            q3 = q2 + npos * T
            z0 = w[q0 : q0 + L]
            z1 = w[q1 : q1 + L]
            z2 = w[q2 : q2 + L]
            z3 = w[q3 : q3 + L]
            for t in range(0, t4, 4):
                s0 = _term_start(t, in_row, oh, H, W, kh, kw, T)
                s1 = _term_start(t + 1, in_row, oh, H, W, kh, kw, T)
                s2 = _term_start(t + 2, in_row, oh, H, W, kh, kw, T)
                s3 = _term_start(t + 3, in_row, oh, H, W, kh, kw, T)
                x0 = w[s0 : s0 + L]
                x1 = w[s1 : s1 + L]
                x2 = w[s2 : s2 + L]
                x3 = w[s3 : s3 + L]
                k = oc * nterms + t
                a0, a1, a2, a3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                k += nterms
                b0, b1, b2, b3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                k += nterms
                c0, c1, c2, c3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                k += nterms
                d0, d1, d2, d3 = Wc[k], Wc[k + 1], Wc[k + 2], Wc[k + 3]
                for b in range(L):
                    v0 = x0[b]
                    v1 = x1[b]
                    v2 = x2[b]
                    v3 = x3[b]
                    z0[b] += a0 * v0 + a1 * v1 + a2 * v2 + a3 * v3
                    z1[b] += b0 * v0 + b1 * v1 + b2 * v2 + b3 * v3
                    z2[b] += c0 * v0 + c1 * v1 + c2 * v2 + c3 * v3
                    z3[b] += d0 * v0 + d1 * v1 + d2 * v2 + d3 * v3
            for t in range(t4, nterms):
                s0 = _term_start(t, in_row, oh, H, W, kh, kw, T)
                xr = w[s0 : s0 + L]
                k = oc * nterms + t
                a0, b0 = Wc[k], Wc[k + nterms]
                c0, d0 = Wc[k + 2 * nterms], Wc[k + 3 * nterms]
                for b in range(L):
                    v = xr[b]
                    z0[b] += a0 * v
                    z1[b] += b0 * v
                    z2[b] += c0 * v
                    z3[b] += d0 * v
        for oc in range(o4, OC):
            q0 = (z_row + oc * npos + oh * OW) * T
            zo = w[q0 : q0 + L]
            for t in range(nterms):
                s0 = _term_start(t, in_row, oh, H, W, kh, kw, T)
                xr = w[s0 : s0 + L]
                wt = Wc[oc * nterms + t]
                for b in range(L):
                    zo[b] += wt * xr[b]


@kernel
def _term_start(t, in_row, oh, H, W, kh, kw, T):
    """Element offset of the input run read by term ``t`` for output row ``oh`` (column 0)."""
    c = t // (kh * kw)
    rem = t - c * kh * kw
    i = rem // kw
    j = rem - i * kw
    return (in_row + (c * H + oh + i) * W + j) * T


@kernel
def _conv_backward_rows(Wc, gW, gb, has_bias, w, in_row, gz_row, gx_row, want_gx, geo, n_in, T):
    """Backward of :func:`_conv_forward_rows`: reductions and updates along whole rows."""
    OC, C, H, W, OH, OW, kh, kw = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7]
    nterms = C * kh * kw
    npos = OH * OW
    L = OW * T
    zero = w.dtype.type(0.0)
    if has_bias:
        for oc in range(OC):
            q = (gz_row + oc * npos) * T
            s = zero
            for b in range(npos * T):
                s += w[q + b]
            gb[oc] += s
    o2 = OC - OC % 2
    t4 = nterms - nterms % 4
    for oh in range(OH):
        for oc in range(0, o2, 2):
            q0 = (gz_row + oc * npos + oh * OW) * T
            q1 = q0 + npos * T
            g0 = w[q0 : q0 + L]
            g1 = w[q1 : q1 + L]
            for t in range(0, t4, 4):
                s0 = _term_start(t, in_row, oh, H, W, kh, kw, T)
                s1 = _term_start(t + 1, in_row, oh, H, W, kh, kw, T)
                s2 = _term_start(t + 2, in_row, oh, H, W, kh, kw, T)
                s3 = _term_start(t + 3, in_row, oh, H, W, kh, kw, T)
                x0 = w[s0 : s0 + L]
                x1 = w[s1 : s1 + L]
                x2 = w[s2 : s2 + L]
                x3 = w[s3 : s3 + L]
                a00 = zero
                a01 = zero
                a02 = zero
                a03 = zero
                a10 = zero
                a11 = zero
                a12 = zero
                a13 = zero
                for b in range(L):
                    e0 = g0[b]
                    e1 = g1[b]
                    c0 = x0[b]
                    c1 = x1[b]
                    c2 = x2[b]
                    c3 = x3[b]
                    a00 += e0 * c0
                    a01 += e0 * c1
                    a02 += e0 * c2
                    a03 += e0 * c3
                    a10 += e1 * c0
                    a11 += e1 * c1
                    a12 += e1 * c2
                    a13 += e1 * c3
                k = oc * nterms + t
                gW[k] += a00
                gW[k + 1] += a01
                gW[k + 2] += a02
                gW[k + 3] += a03
                k += nterms
                gW[k] += a10
                gW[k + 1] += a11
                gW[k + 2] += a12
                gW[k + 3] += a13
            for t in range(t4, nterms):
                s0 = _term_start(t, in_row, oh, H, W, kh, kw, T)
                xr = w[s0 : s0 + L]
                a0 = zero
                a1 = zero
                for b in range(L):
                    a0 += g0[b] * xr[b]
                    a1 += g1[b] * xr[b]
                gW[oc * nterms + t] += a0
                gW[(oc + 1) * nterms + t] += a1
        for oc in range(o2, OC):
            q0 = (gz_row + oc * npos + oh * OW) * T
            go = w[q0 : q0 + L]
            for t in range(nterms):
                s0 = _term_start(t, in_row, oh, H, W, kh, kw, T)
                xr = w[s0 : s0 + L]
                a0 = zero
                for b in range(L):
                    a0 += go[b] * xr[b]
                gW[oc * nterms + t] += a0
    if not want_gx:
        return
    for j in range(n_in * T):
        w[gx_row * T + j] = zero
    o4 = OC - OC % 4
    # one input run per pass: the runs of different terms overlap, so they are not blocked
    for oh in range(OH):
        for t in range(nterms):
            s0 = _term_start(t, gx_row, oh, H, W, kh, kw, T)
            h = w[s0 : s0 + L]
            for oc in range(0, o4, 4):
                q0 = (gz_row + oc * npos + oh * OW) * T
                q1 = q0 + npos * T
                q2 = q1 + npos * T
                q3 = q2 + npos * T
                g0 = w[q0 : q0 + L]
                g1 = w[q1 : q1 + L]
                g2 = w[q2 : q2 + L]
                g3 = w[q3 : q3 + L]
                k = oc * nterms + t
                a0, a1 = Wc[k], Wc[k + nterms]
                a2, a3 = Wc[k + 2 * nterms], Wc[k + 3 * nterms]
                for b in range(L):
                    h[b] += a0 * g0[b] + a1 * g1[b] + a2 * g2[b] + a3 * g3[b]
            for oc in range(o4, OC):
                q0 = (gz_row + oc * npos + oh * OW) * T
                go = w[q0 : q0 + L]
                a0 = Wc[oc * nterms + t]
                for b in range(L):
                    h[b] += a0 * go[b]


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
    """dL/dx: each output's gradient goes to the element that was the maximum."""
    zero = w.dtype.type(0.0)
    for j in range(n_in * T):
        w[gx_row * T + j] = zero
    for o in range(nout):
        base = toff + o * k
        for b in range(m):
            e = int(w[(d_row + o) * T + b])
            r = meta[base + e]
            w[(gx_row + r) * T + b] += w[(gz_row + o) * T + b]


@kernel
def tile_forward(spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    """Run every layer on a tile of ``m <= T`` samples whose inputs are already in ``w``.

    ``samples[c0 + b]`` is the data index of column ``b`` (it seeds the dropout masks).
    """
    zero = w.dtype.type(0.0)
    for l in range(spec.shape[0]):
        kind = spec[l, S_KIND]
        n_in = spec[l, S_NIN]
        n_out = spec[l, S_NOUT]
        xin = w[spec[l, S_IN] * T : (spec[l, S_IN] + n_in) * T]
        out = w[spec[l, S_OUT] * T : (spec[l, S_OUT] + n_out) * T]
        if kind == DENSE:
            woff = spec[l, S_WOFF]
            boff = spec[l, S_BOFF]
            W = p[woff : woff + n_in * n_out]
            bias = p[boff : boff + n_out] if boff >= 0 else p[0:0]
            act = spec[l, S_ACT]
            if act == IDENTITY:
                _dense_forward(W, bias, boff >= 0, xin, out, n_in, n_out, T, m)
            else:
                # pre-activations go to scratch rows (the gradient rows, free during the
                # forward pass): z, f(z) and f'(z) in three disjoint places let every
                # activation loop vectorise (aliasing makes LLVM fall back to scalar code)
                z = w[meta[M_GA] * T : (meta[M_GA] + n_out) * T]
                _dense_forward(W, bias, boff >= 0, xin, z, n_in, n_out, T, m)
                activate(act, w, meta[M_GA] * T, spec[l, S_OUT] * T, spec[l, S_D] * T, n_out * T)
        elif kind == CONV:
            woff = spec[l, S_WOFF]
            boff = spec[l, S_BOFF]
            nterms = spec[l, S_X0 + 2]
            OC = spec[l, S_X0 + 3]
            Wc = p[woff : woff + OC * nterms]
            bias = p[boff : boff + OC] if boff >= 0 else p[0:0]
            act = spec[l, S_ACT]
            z_row = spec[l, S_OUT] if act == IDENTITY else meta[M_GA]
            if m == T and spec[l, S_X0 + 11] == 1:
                # unpadded, stride 1, full tile: along whole image rows
                _conv_forward_rows(
                    Wc, bias, boff >= 0, w, spec[l, S_IN], z_row, spec[l, S_X0 + 3 : S_X0 + 11], T
                )
            else:
                _conv_forward(
                    Wc,
                    bias,
                    boff >= 0,
                    w,
                    spec[l, S_IN],
                    z_row,
                    meta,
                    spec[l, S_X0],
                    spec[l, S_X0 + 1],
                    nterms,
                    OC,
                    T,
                    m,
                )
            if act != IDENTITY:
                activate(act, w, z_row * T, spec[l, S_OUT] * T, spec[l, S_D] * T, n_out * T)
        elif kind == MAXPOOL:
            _maxpool_forward(
                w,
                spec[l, S_IN],
                spec[l, S_OUT],
                spec[l, S_D],
                meta,
                spec[l, S_X0],
                n_out,
                spec[l, S_X0 + 1],
                T,
                m,
            )
        elif kind == ACTIVATION:
            act = spec[l, S_ACT]
            d_row = spec[l, S_D] if act != IDENTITY else spec[l, S_OUT]
            activate(act, w, spec[l, S_IN] * T, spec[l, S_OUT] * T, d_row * T, n_out * T)
        elif kind == DROPOUT:
            if train:
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
        # RESHAPE: nothing to do, its output rows are its input rows


@kernel
def tile_backward(spec, meta, p, g, gv, direct, w, T, m, want_gx, train):
    """Back-propagate the output gradient held in rows ``meta[M_GA]`` of ``w``.

    Accumulates dL/dp into ``g``; unless ``direct``, the dense layers' weight gradients
    accumulate as vector partial sums in ``gv`` instead (``lanes`` numbers per parameter, see
    :func:`fold_partials`). Returns the row where dL/d(input) ends up (valid when
    ``want_gx``).
    """
    nl = lanes(gv)
    L = spec.shape[0]
    # the two gradient buffers alternate; ``cur`` holds dL/d(output of layer l)
    cur, other = meta[M_GA], meta[M_GB]
    # True when the layer after already multiplied dL/d(output of layer l) by l's derivative
    scaled = False
    for l in range(L - 1, -1, -1):
        kind = spec[l, S_KIND]
        n_in = spec[l, S_NIN]
        n_out = spec[l, S_NOUT]
        gz = w[cur * T : (cur + n_out) * T]
        need_in = want_gx or l > 0
        if kind == RESHAPE:
            continue
        if kind == DROPOUT and not train:
            continue
        act = spec[l, S_ACT]
        if (kind == DROPOUT or act != IDENTITY) and not scaled:
            d = w[spec[l, S_D] * T : (spec[l, S_D] + n_out) * T]
            # whole rows, columns past m included (stale but finite): one flat loop vectorises
            for j in range(n_out * T):
                gz[j] *= d[j]
        scaled = False
        if kind == DENSE:
            woff = spec[l, S_WOFF]
            boff = spec[l, S_BOFF]
            W = p[woff : woff + n_in * n_out]
            gW = g[woff : woff + n_in * n_out]
            gWv = gv[woff * nl : (woff + n_in * n_out) * nl]
            gbias = g[boff : boff + n_out] if boff >= 0 else g[0:0]
            xin = w[spec[l, S_IN] * T : (spec[l, S_IN] + n_in) * T]
            gx = w[other * T : (other + n_in) * T]
            # the layer before is a dense layer with an activation: its derivative is applied
            # as dL/dx is written
            scaled = need_in and l > 0 and spec[l - 1, S_KIND] == DENSE
            scaled = scaled and spec[l - 1, S_ACT] != IDENTITY
            dprev = w[spec[l - 1, S_D] * T : (spec[l - 1, S_D] + n_in) * T] if scaled else gx[0:0]
            _dense_backward(
                W,
                gW,
                gWv,
                direct,
                gbias,
                boff >= 0,
                xin,
                gz,
                gx,
                need_in,
                n_in,
                n_out,
                T,
                m,
                dprev,
                scaled,
            )
            cur, other = other, cur
        elif kind == CONV:
            woff = spec[l, S_WOFF]
            boff = spec[l, S_BOFF]
            nterms = spec[l, S_X0 + 2]
            OC = spec[l, S_X0 + 3]
            if m == T and spec[l, S_X0 + 11] == 1:
                _conv_backward_rows(
                    p[woff : woff + OC * nterms],
                    g[woff : woff + OC * nterms],
                    g[boff : boff + OC] if boff >= 0 else g[0:0],
                    boff >= 0,
                    w,
                    spec[l, S_IN],
                    cur,
                    other,
                    need_in,
                    spec[l, S_X0 + 3 : S_X0 + 11],
                    n_in,
                    T,
                )
            else:
                _conv_backward(
                    p[woff : woff + OC * nterms],
                    g[woff : woff + OC * nterms],
                    g[boff : boff + OC] if boff >= 0 else g[0:0],
                    boff >= 0,
                    w,
                    spec[l, S_IN],
                    cur,
                    other,
                    need_in,
                    meta,
                    spec[l, S_X0],
                    spec[l, S_X0 + 1],
                    nterms,
                    OC,
                    n_in,
                    T,
                    m,
                )
            cur, other = other, cur
        elif kind == MAXPOOL:
            if need_in:
                _maxpool_backward(
                    w,
                    cur,
                    other,
                    spec[l, S_D],
                    meta,
                    spec[l, S_X0],
                    n_out,
                    spec[l, S_X0 + 1],
                    n_in,
                    T,
                    m,
                )
            cur, other = other, cur
    return cur


@kernel
def tile_loss(loss_kind, w, out_row, y_row, g_row, K, T, m, Y, labels, samples, c0, scale, y_ready):
    """Loss summed over the tile's samples; writes ``scale * dL/d(output)`` into row ``g_row``.

    ``y_ready``: the targets are already in rows ``y_row..`` (pre-tiled data)."""
    total = 0.0
    zero = w.dtype.type(0.0)
    sc = w.dtype.type(scale)
    if loss_kind == LOSS_SQUARED or loss_kind == LOSS_ABSOLUTE:
        two = w.dtype.type(2.0)
        if not y_ready:
            gather_tile(Y, w, y_row, K, T, m, samples, c0)
        for k in range(K):
            yh = w[(out_row + k) * T : (out_row + k + 1) * T]
            yt = w[(y_row + k) * T : (y_row + k + 1) * T]
            gk = w[(g_row + k) * T : (g_row + k + 1) * T]
            acc = zero
            if loss_kind == LOSS_SQUARED:
                for b in range(m):
                    r = yh[b] - yt[b]
                    acc += r * r
                    gk[b] = two * sc * r
            else:
                for b in range(m):
                    r = yh[b] - yt[b]
                    acc += abs(r)
                    gk[b] = sc if r > zero else (-sc if r < zero else zero)
            total += acc
    elif loss_kind == LOSS_LOGITCE:
        for b in range(m):
            lab = labels[samples[c0 + b]]
            zmax = w[out_row * T + b]
            for k in range(1, K):
                zmax = max(zmax, w[(out_row + k) * T + b])
            ssum = 0.0
            for k in range(K):
                e = np.exp(np.float64(w[(out_row + k) * T + b] - zmax))
                w[(g_row + k) * T + b] = e
                ssum += e
            total += np.log(ssum) + zmax - w[(out_row + lab) * T + b]
            inv = 1.0 / ssum
            for k in range(K):
                pk = w[(g_row + k) * T + b] * inv
                w[(g_row + k) * T + b] = sc * (pk - (1.0 if k == lab else 0.0))
    return total


@kernel
def gather_tile(X, w, row, F, T, m, samples, c0):
    """Copy samples ``samples[c0:c0+m]`` of ``X`` (N, F) into rows ``row..row+F`` of ``w``."""
    for b in range(m):
        s = samples[c0 + b]
        for f in range(F):
            w[(row + f) * T + b] = X[s, f]


@kernel
def scatter_tile(w, row, F, T, m, out, samples, c0):
    """Copy rows ``row..row+F`` of ``w`` into ``out[samples[c0 + b], :]``."""
    for b in range(m):
        s = samples[c0 + b]
        for f in range(F):
            out[s, f] = w[(row + f) * T + b]


@parallel_kernel
def forward_batch(spec, fspec, meta, p, X, out, samples, nthreads, T, work):
    """out[s] = chain(X[s]) for every s in ``samples`` (inference: dropout off).

    ``work`` has shape (nthreads, rows * T); ``X`` is (N, n_in) and ``out`` (N, n_out).
    """
    n = samples.shape[0]
    F = meta[M_NIN]
    K = meta[M_NOUT]
    out_row = spec[spec.shape[0] - 1, S_OUT]
    for t in prange(nthreads):
        lo = (n * t) // nthreads
        hi = (n * (t + 1)) // nthreads
        w = work[t]
        for c0 in range(lo, hi, T):
            m = min(T, hi - c0)
            gather_tile(X, w, 0, F, T, m, samples, c0)
            tile_forward(spec, fspec, meta, p, w, T, m, False, 0, 0, samples, c0)
            scatter_tile(w, out_row, K, T, m, out, samples, c0)


@parallel_kernel
def valgrad_batch(
    spec,
    fspec,
    meta,
    loss_kind,
    p,
    X,
    Y,
    labels,
    samples,
    start,
    count,
    nthreads,
    T,
    work,
    gbuf,
    lbuf,
    grad,
    gX,
    want_gx,
    train,
    seed,
    step,
    XYt,
):
    """Mean loss over ``samples[start:start+count]`` and its gradient.

    ``XYt``: the same batch pre-tiled by :func:`pretile` (each tile's input rows, then its
    target rows, as they sit in the work buffer), copied instead of gathered; shape
    ``(0, 0)`` to gather (a squared or absolute loss only).

    Writes dL/dp into ``grad`` (after a fixed-order reduction of one buffer per thread, so a
    given thread count gives bit-identical results) and, when ``want_gx``, dL/dX into the rows
    ``samples[start:start+count]`` of ``gX``. Returns the loss (float64).
    """
    F = meta[M_NIN]
    K = meta[M_NOUT]
    L = spec.shape[0]
    out_row = spec[L - 1, S_OUT]
    y_row = meta[M_YROW]
    ga = meta[M_GA]
    scale = 1.0 / count
    P = p.shape[0]
    pretiled = XYt.shape[0] > 0
    for t in prange(nthreads):
        lo = start + (count * t) // nthreads
        hi = start + (count * (t + 1)) // nthreads
        w = work[t]
        g = gbuf[t]
        for j in range(P):
            g[j] = 0
        # past the rows: the dense weights' vector partial sums, used when this thread has
        # more than one tile (with one, they would only add a pass over the partials)
        gv = w[meta[M_ROWS] * T :]
        direct = hi - lo <= T
        if not direct:
            zero_partials(spec, gv)
        acc = 0.0
        tix = _first_tile(start, count, nthreads, T, t)
        for c0 in range(lo, hi, T):
            m = min(T, hi - c0)
            if pretiled:
                src = XYt[tix]
                for j in range(F * T):
                    w[j] = src[j]
                for j in range(K * T):
                    w[y_row * T + j] = src[F * T + j]
                tix += 1
            else:
                gather_tile(X, w, 0, F, T, m, samples, c0)
            tile_forward(spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0)
            acc += tile_loss(
                loss_kind,
                w,
                out_row,
                y_row,
                ga,
                K,
                T,
                m,
                Y,
                labels,
                samples,
                c0,
                scale,
                pretiled,
            )
            r = tile_backward(spec, meta, p, g, gv, direct, w, T, m, want_gx, train)
            if want_gx:
                scatter_tile(w, r, F, T, m, gX, samples, c0)
        if not direct:
            fold_partials(spec, gv, g)
        lbuf[t] = acc
    for j in range(P):
        grad[j] = gbuf[0, j]
    for t in range(1, nthreads):
        gt = gbuf[t]
        for j in range(P):
            grad[j] += gt[j]
    total = 0.0
    for t in range(nthreads):
        total += lbuf[t]
    return total * scale


@kernel
def _first_tile(start, count, nthreads, T, t):
    """Index of thread ``t``'s first tile when the threads' shares are tiled in turn."""
    k = 0
    for u in range(t):
        lo = start + (count * u) // nthreads
        hi = start + (count * (u + 1)) // nthreads
        k += (hi - lo + T - 1) // T
    return k


@kernel
def pretile(X, Y, samples, start, count, nthreads, T, F, K, XYt):
    """Lay out the batch ``samples[start:start+count]`` as :func:`valgrad_batch` tiles it:
    ``XYt[k]`` holds tile ``k``'s ``F`` input rows then its ``K`` target rows (length ``T``
    each; columns past the tile's width are zero)."""
    for j in range(XYt.shape[0]):
        for i in range(XYt.shape[1]):
            XYt[j, i] = 0
    for t in range(nthreads):
        lo = start + (count * t) // nthreads
        hi = start + (count * (t + 1)) // nthreads
        tix = _first_tile(start, count, nthreads, T, t)
        for c0 in range(lo, hi, T):
            m = min(T, hi - c0)
            gather_tile(X, XYt[tix], 0, F, T, m, samples, c0)
            gather_tile(Y, XYt[tix], F, K, T, m, samples, c0)
            tix += 1


def pretiled_count(count, nthreads, T):
    """Number of tiles :func:`pretile` makes."""
    return int(_first_tile(0, count, nthreads, T, nthreads))


@kernel
def loss_batch(spec, fspec, meta, loss_kind, p, X, Y, labels, samples, T, w):
    """Mean loss (no gradient, dropout off) over ``samples``, serial."""
    n = samples.shape[0]
    F = meta[M_NIN]
    K = meta[M_NOUT]
    out_row = spec[spec.shape[0] - 1, S_OUT]
    acc = 0.0
    for c0 in range(0, n, T):
        m = min(T, n - c0)
        gather_tile(X, w, 0, F, T, m, samples, c0)
        tile_forward(spec, fspec, meta, p, w, T, m, False, 0, 0, samples, c0)
        acc += tile_loss(
            loss_kind,
            w,
            out_row,
            meta[M_YROW],
            meta[M_GA],
            K,
            T,
            m,
            Y,
            labels,
            samples,
            c0,
            1.0,
            False,
        )
    return acc / n


@inline_kernel
def _vec_dense_forward(W, b, has_bias, x, z, n_in, n_out):
    """z = W x + b for one sample. Inputs of width 1-4 (ODE states) get loops with a constant
    stride, which LLVM vectorises over the outputs; wider inputs use contiguous dot products."""
    zero = z.dtype.type(0.0)
    if n_in == 1:
        x0 = x[0]
        for o in range(n_out):
            z[o] = (b[o] if has_bias else zero) + W[o] * x0
    elif n_in == 2:
        x0, x1 = x[0], x[1]
        for o in range(n_out):
            z[o] = (b[o] if has_bias else zero) + W[2 * o] * x0 + W[2 * o + 1] * x1
    elif n_in == 3:
        x0, x1, x2 = x[0], x[1], x[2]
        for o in range(n_out):
            z[o] = (
                (b[o] if has_bias else zero) + W[3 * o] * x0 + W[3 * o + 1] * x1 + W[3 * o + 2] * x2
            )
    elif n_in == 4:
        x0, x1, x2, x3 = x[0], x[1], x[2], x[3]
        for o in range(n_out):
            z[o] = (
                (b[o] if has_bias else zero)
                + W[4 * o] * x0
                + W[4 * o + 1] * x1
                + W[4 * o + 2] * x2
                + W[4 * o + 3] * x3
            )
    else:
        for o in range(n_out):
            s = b[o] if has_bias else zero
            wo = W[o * n_in : o * n_in + n_in]
            for i in range(n_in):
                s += wo[i] * x[i]
            z[o] = s


@inline_kernel
def _vec_dense_backward(W, gW, x, gz, gx, n_in, n_out):
    """gW = gz x^T (written, not accumulated) and gx = W^T gz for one sample."""
    zero = gz.dtype.type(0.0)
    if n_in == 1:
        a0 = zero
        x0 = x[0]
        for o in range(n_out):
            go = gz[o]
            gW[o] = go * x0
            a0 += W[o] * go
        gx[0] = a0
    elif n_in == 2:
        a0 = zero
        a1 = zero
        x0, x1 = x[0], x[1]
        for o in range(n_out):
            go = gz[o]
            gW[2 * o] = go * x0
            gW[2 * o + 1] = go * x1
            a0 += W[2 * o] * go
            a1 += W[2 * o + 1] * go
        gx[0] = a0
        gx[1] = a1
    elif n_in == 3:
        a0 = zero
        a1 = zero
        a2 = zero
        x0, x1, x2 = x[0], x[1], x[2]
        for o in range(n_out):
            go = gz[o]
            gW[3 * o] = go * x0
            gW[3 * o + 1] = go * x1
            gW[3 * o + 2] = go * x2
            a0 += W[3 * o] * go
            a1 += W[3 * o + 1] * go
            a2 += W[3 * o + 2] * go
        gx[0] = a0
        gx[1] = a1
        gx[2] = a2
    elif n_in == 4:
        a0 = zero
        a1 = zero
        a2 = zero
        a3 = zero
        x0, x1, x2, x3 = x[0], x[1], x[2], x[3]
        for o in range(n_out):
            go = gz[o]
            gW[4 * o] = go * x0
            gW[4 * o + 1] = go * x1
            gW[4 * o + 2] = go * x2
            gW[4 * o + 3] = go * x3
            a0 += W[4 * o] * go
            a1 += W[4 * o + 1] * go
            a2 += W[4 * o + 2] * go
            a3 += W[4 * o + 3] * go
        gx[0] = a0
        gx[1] = a1
        gx[2] = a2
        gx[3] = a3
    else:
        for i in range(n_in):
            gx[i] = zero
        for o in range(n_out):
            go = gz[o]
            wo = W[o * n_in : o * n_in + n_in]
            gwo = gW[o * n_in : o * n_in + n_in]
            for i in range(n_in):
                gwo[i] = go * x[i]
                gx[i] += wo[i] * go


@kernel
def vec_forward(spec, fspec, meta, p, w):
    """The forward pass for one sample whose input is in ``w[:n_in]`` (rows of length 1).

    A lean twin of ``tile_forward`` for T = 1: dot products along contiguous rows of ``W``
    instead of batch-innermost loops, which would run a single iteration each.
    """
    for l in range(spec.shape[0]):
        kind = spec[l, S_KIND]
        n_in = spec[l, S_NIN]
        n_out = spec[l, S_NOUT]
        i0 = spec[l, S_IN]
        o0 = spec[l, S_OUT]
        act = spec[l, S_ACT]
        if kind == DENSE:
            woff = spec[l, S_WOFF]
            boff = spec[l, S_BOFF]
            z0 = o0 if act == IDENTITY else meta[M_GA]
            _vec_dense_forward(
                p[woff : woff + n_in * n_out],
                p[boff : boff + n_out] if boff >= 0 else p[0:0],
                boff >= 0,
                w[i0 : i0 + n_in],
                w[z0 : z0 + n_out],
                n_in,
                n_out,
            )
            if act != IDENTITY:
                d0 = spec[l, S_D]
                activate(act, w, z0, o0, d0, n_out)
        elif kind == CONV or kind == MAXPOOL:
            # the batched kernels with a tile of one sample
            tile_forward(
                spec[l : l + 1], fspec[l : l + 1], meta, p, w, 1, 1, False, 0, 0, meta[0:1], 0
            )
        elif kind == ACTIVATION:
            d0 = spec[l, S_D] if act != IDENTITY else o0
            activate(act, w, i0, o0, d0, n_out)
        elif kind == DROPOUT:
            for j in range(n_out):
                w[o0 + j] = w[i0 + j]


@kernel
def vec_backward(spec, meta, p, g, w):
    """Back-propagate ``w[meta[M_GA]:]`` for one sample; *writes* dL/dp into ``g``.

    Every parameter belongs to exactly one layer, so each entry of ``g`` is assigned once.
    Returns the row where dL/d(input) ends up.
    """
    L = spec.shape[0]
    cur, other = meta[M_GA], meta[M_GB]
    for l in range(L - 1, -1, -1):
        kind = spec[l, S_KIND]
        n_in = spec[l, S_NIN]
        n_out = spec[l, S_NOUT]
        act = spec[l, S_ACT]
        if kind == RESHAPE or kind == DROPOUT:
            continue
        if kind == CONV or kind == MAXPOOL:
            if kind == CONV:
                woff = spec[l, S_WOFF]
                size = spec[l, S_X0 + 2] * spec[l, S_X0 + 3]
                for j in range(size):
                    g[woff + j] = 0.0
                boff = spec[l, S_BOFF]
                if boff >= 0:
                    for j in range(spec[l, S_X0 + 3]):
                        g[boff + j] = 0.0
            if act != IDENTITY:
                for j in range(n_out):
                    w[cur + j] *= w[spec[l, S_D] + j]
            # one layer through the batched backward kernels, T = 1; they use GA/GB as
            # cur/other, so run them on this layer's buffers directly
            if kind == CONV:
                nterms = spec[l, S_X0 + 2]
                OC = spec[l, S_X0 + 3]
                boff = spec[l, S_BOFF]
                _conv_backward(
                    p[woff : woff + OC * nterms],
                    g[woff : woff + OC * nterms],
                    g[boff : boff + OC] if boff >= 0 else g[0:0],
                    boff >= 0,
                    w,
                    spec[l, S_IN],
                    cur,
                    other,
                    True,
                    meta,
                    spec[l, S_X0],
                    spec[l, S_X0 + 1],
                    nterms,
                    OC,
                    n_in,
                    1,
                    1,
                )
            else:
                _maxpool_backward(
                    w,
                    cur,
                    other,
                    spec[l, S_D],
                    meta,
                    spec[l, S_X0],
                    n_out,
                    spec[l, S_X0 + 1],
                    n_in,
                    1,
                    1,
                )
            cur, other = other, cur
            continue
        if act != IDENTITY:
            gz = w[cur : cur + n_out]
            d = w[spec[l, S_D] : spec[l, S_D] + n_out]
            for j in range(n_out):
                gz[j] *= d[j]
        if kind == DENSE:
            woff = spec[l, S_WOFF]
            boff = spec[l, S_BOFF]
            i0 = spec[l, S_IN]
            if boff >= 0:
                for o in range(n_out):
                    g[boff + o] = w[cur + o]
            _vec_dense_backward(
                p[woff : woff + n_in * n_out],
                g[woff : woff + n_in * n_out],
                w[i0 : i0 + n_in],
                w[cur : cur + n_out],
                w[other : other + n_in],
                n_in,
                n_out,
            )
            cur, other = other, cur
    return cur


@kernel
def _length_error(fn, name, got, want, what):
    raise ValueError(
        f"{fn}: {name} has length {got}, but the chain's {what} has {want} entries; pass an "
        f"array of exactly that length (a slice, e.g. u[:{want}], is free in compiled code)"
    )


@kernel
def _report_lengths(fn, meta, nx, n_in_arr, nout, oname, np_, npbar, pname):
    # the error branch of the entry points' checks, reached only when a length is wrong;
    # out of line, with one call site per entry point, so that the message building (which
    # allocates) stays off the fast path
    if nx != meta[M_NIN]:
        _length_error(fn, "x", nx, meta[M_NIN], "input")
    if np_ != meta[M_NPARAMS]:
        _length_error(fn, "p", np_, meta[M_NPARAMS], "parameter vector")
    if nout != meta[M_NOUT]:
        _length_error(fn, oname, nout, meta[M_NOUT], "output")
    if npbar != meta[M_NPARAMS]:
        _length_error(fn, pname, npbar, meta[M_NPARAMS], "parameter vector")
    if n_in_arr != meta[M_NIN]:
        _length_error(fn, "x_bar", n_in_arr, meta[M_NIN], "input")


@kernel
def chain_forward(k, p, x, out):
    """``out = chain(x, p)`` for one sample, from compiled code.

    ``k`` is the :class:`~scichains.nn.ChainKernel` from ``chain.kernel(dtype)``; ``x`` has
    shape ``(n_in,)``, ``out`` ``(n_out,)``, ``p`` is the flat parameter vector of shape
    ``(num_params,)``; all of the kernel's dtype. Allocates nothing; uses ``k.work``, so one
    ``ChainKernel`` serves one thread. Dropout layers are the identity here (inference).

    The lengths are checked (a few integer compares): each array must have *exactly* the length
    above, else ``ValueError`` naming the array. Longer arrays are refused too, since a state
    or parameter vector longer than the chain's is as likely a wrong model as a deliberate
    prefix: pass a slice (``u[:2]``, ``p[3:3 + num_params]``, free in numba) to use part of one.
    """
    w = k.work
    meta = k.meta
    if x.shape[0] != meta[M_NIN] or out.shape[0] != meta[M_NOUT] or p.shape[0] != meta[M_NPARAMS]:
        _report_lengths(
            "chain_forward",
            meta,
            x.shape[0],
            meta[M_NIN],
            out.shape[0],
            "out",
            p.shape[0],
            p.shape[0],
            "p",
        )
    for f in range(meta[M_NIN]):
        w[f] = x[f]
    vec_forward(k.spec, k.fspec, meta, p, w)
    r = k.spec[k.spec.shape[0] - 1, S_OUT]
    for j in range(meta[M_NOUT]):
        out[j] = w[r + j]


@kernel
def chain_vjp(k, p, x, v, x_bar, p_bar):
    """Vector-Jacobian product of the chain at one sample, from compiled code.

    Overwrites ``x_bar`` (shape ``(n_in,)``) with ``v^T d chain/dx`` and ``p_bar`` (shape
    ``(num_params,)``) with ``v^T d chain/dp``, where ``v`` has shape ``(n_out,)``, ``x``
    ``(n_in,)`` and ``p`` ``(num_params,)``. Runs the forward pass itself. Allocates nothing.
    Every array must have exactly its length above, else ``ValueError`` naming it (as for
    :func:`chain_forward`).
    """
    w = k.work
    meta = k.meta
    n_in, n_p = meta[M_NIN], meta[M_NPARAMS]
    if (
        x.shape[0] != n_in
        or x_bar.shape[0] != n_in
        or v.shape[0] != meta[M_NOUT]
        or p.shape[0] != n_p
        or p_bar.shape[0] != n_p
    ):
        _report_lengths(
            "chain_vjp",
            meta,
            x.shape[0],
            x_bar.shape[0],
            v.shape[0],
            "v",
            p.shape[0],
            p_bar.shape[0],
            "p_bar",
        )
    for f in range(meta[M_NIN]):
        w[f] = x[f]
    vec_forward(k.spec, k.fspec, meta, p, w)
    ga = meta[M_GA]
    for j in range(meta[M_NOUT]):
        w[ga + j] = v[j]
    r = vec_backward(k.spec, meta, p, p_bar, w)
    for f in range(meta[M_NIN]):
        x_bar[f] = w[r + f]
