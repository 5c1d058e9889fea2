"""Generic convolution kernels: forward and backward for any geometry, one output position
at a time over a table of the input positions each one reads."""

from __future__ import annotations

from ...._jit import kernel
from ..._layout import (
    M_ZERO,
)


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
