"""Dense layers: the descriptor and its kernels (register-blocked SIMD over a tile of samples,
dot products for one sample)."""

from __future__ import annotations

import math

import numpy as np

from ..._jit import inline_kernel, kernel
from .._activations import IDENTITY, ActivationFunction, activate, get_activation
from .._layout import (
    B_SCALED,
    B_SWAPPED,
    DENSE,
    M_GA,
    S_ACT,
    S_BOFF,
    S_D,
    S_IN,
    S_KIND,
    S_NIN,
    S_NOUT,
    S_OUT,
    S_WOFF,
)
from .._simd import borrow, lanes, vadd, vfill, vfma, vload, vmul, vsplat, vstore, vsum
from .base import Layer, LayerCode


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
def _outer_acc(gz, x, gW, gWv, direct, gb, has_bias, n_out, n_in, T, m):
    """dL/dW += sum_{b<m} gz[o, b] x[i, b] for a dense layer, and dL/db[o] += sum_b gz[o, b]
    when ``has_bias``.

    ``direct``: added to ``gW[o*n_in + i]``. Otherwise to vector partial sums:
    ``gWv[(o*n_in + i)*lanes : ...]`` holds one vector per weight whose lanes add up to its
    gradient (see :func:`fold_partials`), so that over a batch of many tiles the lanes are
    added once per batch instead of once per tile. Blocked 4 outputs x 2 inputs: 8 vector
    accumulators over the batch, 6 loads per 8 fused multiply-adds. The bias sums ride along
    the first pair of inputs (4 more accumulators on the rows already loaded) instead of a
    pass of their own over ``gz``.
    """
    nl = lanes(gz)
    m1 = m - m % nl
    o4 = n_out - n_out % 4
    i2 = n_in - n_in % 2
    zv = vfill(gz, 0.0)
    # the rows that no 4 x 2 block covers sum their bias on their own
    if has_bias:
        _row_sums(gz, gb, 0 if i2 == 0 else o4, n_out, T, m)
    for o in range(0, o4, 4):
        g0 = o * T
        for i in range(0, i2, 2):
            s00, s01, s10, s11 = zv, zv, zv, zv
            s20, s21, s30, s31 = zv, zv, zv, zv
            xa = i * T
            if has_bias and i == 0:
                t0, t1, t2, t3 = zv, zv, zv, zv
                for b in range(0, m1, nl):
                    c0 = vload(x, xa + b)
                    c1 = vload(x, xa + T + b)
                    a = vload(gz, g0 + b)
                    t0 = vadd(t0, a)
                    s00 = vfma(a, c0, s00)
                    s01 = vfma(a, c1, s01)
                    a = vload(gz, g0 + T + b)
                    t1 = vadd(t1, a)
                    s10 = vfma(a, c0, s10)
                    s11 = vfma(a, c1, s11)
                    a = vload(gz, g0 + 2 * T + b)
                    t2 = vadd(t2, a)
                    s20 = vfma(a, c0, s20)
                    s21 = vfma(a, c1, s21)
                    a = vload(gz, g0 + 3 * T + b)
                    t3 = vadd(t3, a)
                    s30 = vfma(a, c0, s30)
                    s31 = vfma(a, c1, s31)
                e0, e1, e2, e3 = vsum(t0), vsum(t1), vsum(t2), vsum(t3)
                for b in range(m1, m):
                    e0 += gz[g0 + b]
                    e1 += gz[g0 + T + b]
                    e2 += gz[g0 + 2 * T + b]
                    e3 += gz[g0 + 3 * T + b]
                gb[o] += e0
                gb[o + 1] += e1
                gb[o + 2] += e2
                gb[o + 3] += e3
            else:
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
def _row_sums(gz, gb, o_lo, n_out, T, m):
    """gb[o] += sum_{b<m} gz[o, b] for o_lo <= o < n_out."""
    nl = lanes(gz)
    m1 = m - m % nl
    for o in range(o_lo, n_out):
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
    # np.int64 / np.bool_: run-time values, not literals, so that the forward pass and dL/dx
    # share one compiled _matmul_rows (a literal per call site compiled it twice)
    one = np.int64(1)
    _matmul_rows(W, n_in, one, bias, has_bias, x, z, n_in, n_out, T, m, z[0:0], np.bool_(False))


@kernel
def _dense_backward(
    W, gW, gWv, direct, gb, has_bias, x, gz, gx, want_gx, n_in, n_out, T, m, d, has_d
):
    """Accumulate dL/db and dL/dW (into ``gW``, or its vector partials ``gWv``: see
    :func:`_outer_acc`) from dL/dz; write dL/dx = W^T dL/dz into gx when ``want_gx`` (times
    ``d``, the derivative stored by the layer before, when ``has_d``)."""
    _outer_acc(gz, x, gW, gWv, direct, gb, has_bias, n_out, n_in, T, m)
    if want_gx:
        one = np.int64(1)
        _matmul_rows(W, one, n_in, gb, np.bool_(False), gz, gx, n_out, n_in, T, m, d, has_d)


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
    """gW += gz x^T and gx = W^T gz (written) for one sample."""
    zero = gz.dtype.type(0.0)
    if n_in == 1:
        a0 = zero
        x0 = x[0]
        for o in range(n_out):
            go = gz[o]
            gW[o] += go * x0
            a0 += W[o] * go
        gx[0] = a0
    elif n_in == 2:
        a0 = zero
        a1 = zero
        x0, x1 = x[0], x[1]
        for o in range(n_out):
            go = gz[o]
            gW[2 * o] += go * x0
            gW[2 * o + 1] += go * x1
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
            gW[3 * o] += go * x0
            gW[3 * o + 1] += go * x1
            gW[3 * o + 2] += go * x2
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
            gW[4 * o] += go * x0
            gW[4 * o + 1] += go * x1
            gW[4 * o + 2] += go * x2
            gW[4 * o + 3] += go * x3
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
                gwo[i] += go * x[i]
                gx[i] += wo[i] * go


def forward_one(l, spec, meta, p, w):
    """The layer's forward pass on one sample (``T == 1``): the lean single-sample kernel
    (see :mod:`scichains.nn._dispatch`)."""
    spec = borrow(spec)
    meta = borrow(meta)
    p = borrow(p)
    w = borrow(w)
    n_in = spec[l, S_NIN]
    n_out = spec[l, S_NOUT]
    i0 = spec[l, S_IN]
    o0 = spec[l, S_OUT]
    woff = spec[l, S_WOFF]
    boff = spec[l, S_BOFF]
    act = spec[l, S_ACT]
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
        activate(act, w, z0, o0, spec[l, S_D], n_out)
    return 0


def backward_one(l, spec, p, g, w, cur, other):
    """dL/dW, dL/db (accumulated into ``g``) and dL/dx (written to row ``other``) on one
    sample (``T == 1``): the lean single-sample kernel (see :mod:`scichains.nn._dispatch`)."""
    spec = borrow(spec)
    p = borrow(p)
    g = borrow(g)
    w = borrow(w)
    n_in = spec[l, S_NIN]
    n_out = spec[l, S_NOUT]
    woff = spec[l, S_WOFF]
    boff = spec[l, S_BOFF]
    i0 = spec[l, S_IN]
    gz = w[cur : cur + n_out]
    if boff >= 0:
        for o in range(n_out):
            g[boff + o] += gz[o]
    _vec_dense_backward(
        p[woff : woff + n_in * n_out],
        g[woff : woff + n_in * n_out],
        w[i0 : i0 + n_in],
        gz,
        w[other : other + n_in],
        n_in,
        n_out,
    )
    return B_SWAPPED


def forward(l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    """The layer's forward pass on a tile (see :mod:`scichains.nn._dispatch`)."""
    spec = borrow(spec)
    meta = borrow(meta)
    p = borrow(p)
    w = borrow(w)
    n_in = spec[l, S_NIN]
    n_out = spec[l, S_NOUT]
    i0 = spec[l, S_IN] * T
    o0 = spec[l, S_OUT] * T
    woff = spec[l, S_WOFF]
    boff = spec[l, S_BOFF]
    W = p[woff : woff + n_in * n_out]
    bias = p[boff : boff + n_out] if boff >= 0 else p[0:0]
    act = spec[l, S_ACT]
    # with an activation, the pre-activations go to scratch rows (the gradient rows, free
    # during the forward pass): z, f(z) and f'(z) in three disjoint places let every
    # activation loop vectorise (aliasing makes LLVM fall back to scalar code)
    z0 = o0 if act == IDENTITY else meta[M_GA] * T
    # (one sample, T == 1, goes to forward_one instead)
    _dense_forward(
        W, bias, boff >= 0, w[i0 : i0 + n_in * T], w[z0 : z0 + n_out * T], n_in, n_out, T, m
    )
    if act != IDENTITY:
        activate(act, w, z0, o0, spec[l, S_D] * T, n_out * T)
    return 0


def backward(l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other):
    """Accumulate dL/dW, dL/db; write dL/dx into the ``other`` gradient rows (see
    :mod:`scichains.nn._dispatch`)."""
    spec = borrow(spec)
    p = borrow(p)
    g = borrow(g)
    gv = borrow(gv)
    w = borrow(w)
    n_in = spec[l, S_NIN]
    n_out = spec[l, S_NOUT]
    woff = spec[l, S_WOFF]
    boff = spec[l, S_BOFF]
    W = p[woff : woff + n_in * n_out]
    gW = g[woff : woff + n_in * n_out]
    i0 = spec[l, S_IN] * T
    # (one sample with its gradient accumulated directly goes to backward_one instead)
    nl = lanes(gv)
    gWv = gv[woff * nl : (woff + n_in * n_out) * nl]
    gbias = g[boff : boff + n_out] if boff >= 0 else g[0:0]
    # the layer before is a dense layer with an activation: its derivative is applied as
    # dL/dx is written
    scaled = need_in and l > 0 and spec[l - 1, S_KIND] == DENSE and spec[l - 1, S_ACT] != IDENTITY
    gx = w[other * T : (other + n_in) * T]
    dprev = w[spec[l - 1, S_D] * T : (spec[l - 1, S_D] + n_in) * T] if scaled else gx[0:0]
    _dense_backward(
        W,
        gW,
        gWv,
        direct,
        gbias,
        boff >= 0,
        w[i0 : i0 + n_in * T],
        w[cur * T : (cur + n_out) * T],
        gx,
        need_in,
        n_in,
        n_out,
        T,
        m,
        dprev,
        scaled,
    )
    return B_SWAPPED | B_SCALED if scaled else B_SWAPPED
