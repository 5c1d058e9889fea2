"""Convolution layers: the descriptor and its kernels."""

from __future__ import annotations

import math

import numpy as np

from ..._jit import inline_kernel, kernel
from .._activations import IDENTITY, RELU, activate, get_activation
from .._layout import (
    B_SWAPPED,
    C_GEO,
    C_NPOS,
    C_NTERMS,
    C_OC,
    C_ROWS,
    C_TABLE,
    CONV,
    M_GA,
    M_ZERO,
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
from .._simd import (
    borrow,
    lanes,
    vadd,
    vfill,
    vfma,
    vload,
    vselect_gt,
    vsplat,
    vstore,
    vsum,
)
from .base import Layer, LayerCode, _image_shape, _pair


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
