"""The batched kernels: a batch split over threads and into tiles, each tile through the chain
(:mod:`scichains.nn._dispatch`), the loss, and the gradient reduced in a fixed order."""

from __future__ import annotations

import numpy as np
from numba import prange

from .._atomics import atomic_load
from .._jit import kernel, parallel_kernel
from .._native import call_native, native_for
from ._dispatch import tile_backward, tile_forward
from ._layout import (
    DENSE,
    LOSS_ABSOLUTE,
    LOSS_LOGITCE,
    LOSS_SQUARED,
    M_GA,
    M_NIN,
    M_NOUT,
    M_ROWS,
    M_YROW,
    S_KIND,
    S_NIN,
    S_NOUT,
    S_OUT,
    S_WOFF,
)
from ._simd import MAX_LANES, lanes, vload, vstore, vsum

#: Samples per tile in the batched kernels: activations of one tile stay in L1/L2 cache. A
#: multiple of the dense kernels' register blocks of 3 vectors: with 32-byte vectors (blocks of
#: 24 float32) 264 took 12-15% less time per step than 256 (whose last 16 samples per row group
#: fall to a slower 1-vector block), same process, 11 alternating rounds on one and on two
#: threads; 264 is also 22 blocks of 16-byte vectors; with 64-byte vectors, 288 (6 blocks of 48)
#: was the best of 96-384 measured.
TILE = 288 if MAX_LANES == 16 else 264


def tile_width(batch: int, nthreads: int) -> int:
    """Tile width for ``batch`` samples over ``nthreads``: at most :data:`TILE`, and no wider
    than one thread's share, so that small batches fill their tiles (the convolution kernels
    then run along whole rows of the image)."""
    return min(TILE, max(1, -(-int(batch) // int(nthreads))))


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
def copy_span(src, s0, dst, d0, n):
    """``dst[d0:d0+n] = src[s0:s0+n]`` in vectors (a plain loop over two slices of the same
    dtype stayed scalar: ~1.3 cycles per number, 6% of a matexp training step)."""
    nl = lanes(dst)
    n1 = n - n % nl
    for j in range(0, n1, nl):
        vstore(dst, d0 + j, vload(src, s0 + j))
    for j in range(n1, n):
        dst[d0 + j] = src[s0 + j]


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


@kernel
def forward_thread(t, spec, fspec, meta, p, X, out, samples, nthreads, T, work):
    """Thread ``t``'s share of :func:`forward_batch` (called through its address, as
    :func:`valgrad_thread`)."""
    n = samples.shape[0]
    F = meta[M_NIN]
    K = meta[M_NOUT]
    out_row = spec[spec.shape[0] - 1, S_OUT]
    lo = (n * t) // nthreads
    hi = (n * (t + 1)) // nthreads
    w = work[t]
    for c0 in range(lo, hi, T):
        m = min(T, hi - c0)
        gather_tile(X, w, 0, F, T, m, samples, c0)
        tile_forward(spec, fspec, meta, p, w, T, m, False, 0, 0, samples, c0)
        scatter_tile(w, out_row, K, T, m, out, samples, c0)
    return 0


def forward_body(spec, fspec, meta, p, X, out, samples, work):
    """The :class:`~scichains._native.Native` of :func:`forward_thread` for these arrays, to
    pass as ``forward_batch``'s ``body``."""
    return native_for(forward_thread, (0, spec, fspec, meta, p, X, out, samples, 0, 0, work))


@parallel_kernel
def forward_batch(body, spec, fspec, meta, p, X, out, samples, nthreads, T, work):
    """out[s] = chain(X[s]) for every s in ``samples`` (inference: dropout off).

    ``body``: :func:`forward_body` of the arrays. ``work`` has shape (nthreads, rows * T);
    ``X`` is (N, n_in) and ``out`` (N, n_out).
    """
    for t in prange(nthreads):
        call_native(body, t, spec, fspec, meta, p, X, out, samples, nthreads, T, work)


@kernel
def valgrad_thread(
    lo,
    hi,
    tix,
    slot,
    spec,
    fspec,
    meta,
    loss_kind,
    p,
    X,
    Y,
    labels,
    samples,
    count,
    T,
    work,
    gbuf,
    gX,
    want_gx,
    train,
    seed,
    step,
    XYt,
    abort,
    ai,
    av,
):
    """The samples ``samples[lo:hi]`` of a batch of ``count``, in tiles of ``T`` (the first
    being tile ``tix`` of pre-tiled data): their loss (not yet scaled by ``1/count``)
    returned, their gradient in ``gbuf[slot]`` (``work[slot]`` the scratch), their rows of
    ``gX`` when ``want_gx``.

    ``abort``: empty, or an ``int64`` array whose element ``ai`` is read between tiles: when it
    no longer holds ``av`` the work is dropped (its result is then meaningless; see
    ``nn/_chunked.py``).

    Called through its address (``valgrad_batch``'s ``body``): compiled once, its machine code
    is not linked into (and optimised again in) the levels numba builds around a ``prange``
    body, nor in the training loop that calls ``valgrad_batch`` (see ``scichains._native``)."""
    F = meta[M_NIN]
    K = meta[M_NOUT]
    L = spec.shape[0]
    out_row = spec[L - 1, S_OUT]
    y_row = meta[M_YROW]
    ga = meta[M_GA]
    scale = 1.0 / count
    P = p.shape[0]
    pretiled = XYt.shape[0] > 0
    watch = abort.shape[0] > 0
    w = work[slot]
    g = gbuf[slot]
    for j in range(P):
        g[j] = 0
    # past the rows: the dense weights' vector partial sums, used when this share has more
    # than one tile (with one, they would only add a pass over the partials)
    gv = w[meta[M_ROWS] * T :]
    direct = hi - lo <= T
    if not direct:
        zero_partials(spec, gv)
    acc = 0.0
    for c0 in range(lo, hi, T):
        if watch and atomic_load(abort, ai) != av:
            return 0.0
        m = min(T, hi - c0)
        if pretiled:
            src = XYt[tix]
            copy_span(src, 0, w, 0, F * T)
            copy_span(src, F * T, w, y_row * T, K * T)
            tix += 1
        else:
            gather_tile(X, w, 0, F, T, m, samples, c0)
        tile_forward(spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0)
        acc += tile_loss(
            loss_kind, w, out_row, y_row, ga, K, T, m, Y, labels, samples, c0, scale, pretiled
        )
        r = tile_backward(spec, meta, p, g, gv, direct, w, T, m, want_gx, train)
        if want_gx:
            scatter_tile(w, r, F, T, m, gX, samples, c0)
    if not direct:
        fold_partials(spec, gv, g)
    return acc


NO_ABORT = np.zeros(0, dtype=np.int64)
"""The ``abort`` of work that is never dropped."""


def valgrad_body(spec, fspec, meta, loss_kind, p, X, Y, labels, samples, work, gbuf, gX, XYt):
    """The :class:`~scichains._native.Native` of :func:`valgrad_thread` for these arrays (the
    scalars typed as ``valgrad_batch`` passes them), to pass as ``valgrad_batch``'s ``body``."""
    return native_for(
        valgrad_thread,
        (0, 0, 0, 0, spec, fspec, meta, loss_kind, p, X, Y, labels, samples, 0, 0)
        + (work, gbuf, gX, False, False, 0, 0, XYt, NO_ABORT, 0, 0),
    )


@parallel_kernel
def valgrad_batch(
    body,
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
    noabort,
):
    """Mean loss over ``samples[start:start+count]`` and its gradient.

    ``body``: :func:`valgrad_body` of the arrays. ``XYt``: shape ``(0, 0)`` (the samples are
    gathered; pre-tiled data, :func:`pretile`, is the training steps' layout, one run of tiles,
    which the threads' shares here do not follow). ``noabort``: an empty ``int64`` array
    (see :func:`valgrad_thread`).

    Writes dL/dp into ``grad`` (after a fixed-order reduction of one buffer per thread, so a
    given thread count gives bit-identical results) and, when ``want_gx``, dL/dX into the rows
    ``samples[start:start+count]`` of ``gX``. Returns the loss (float64).
    """
    P = p.shape[0]
    for t in prange(nthreads):
        lo = start + (count * t) // nthreads
        hi = start + (count * (t + 1)) // nthreads
        lbuf[t] = call_native(
            body, lo, hi, 0, t, spec, fspec, meta, loss_kind, p, X, Y, labels, samples,
            count, T, work, gbuf, gX, want_gx, train, seed, step, XYt, noabort, 0, 0,
        )  # fmt: skip
    for j in range(P):
        grad[j] = gbuf[0, j]
    for t in range(1, nthreads):
        gt = gbuf[t]
        for j in range(P):
            grad[j] += gt[j]
    total = 0.0
    for t in range(nthreads):
        total += lbuf[t]
    return total * (1.0 / count)


@kernel
def pretile(X, Y, samples, start, count, T, F, K, XYt):
    """Lay out the batch ``samples[start:start+count]`` as the training steps tile it (one run
    of tiles of ``T``, which the chunks of ``nn/_chunked.py`` cut): ``XYt[k]`` holds tile
    ``k``'s ``F`` input rows then its ``K`` target rows (length ``T`` each; columns past the
    tile's width are zero)."""
    for j in range(XYt.shape[0]):
        for i in range(XYt.shape[1]):
            XYt[j, i] = 0
    tix = 0
    for c0 in range(start, start + count, T):
        m = min(T, start + count - c0)
        gather_tile(X, XYt[tix], 0, F, T, m, samples, c0)
        gather_tile(Y, XYt[tix], F, K, T, m, samples, c0)
        tix += 1


def pretiled_count(count, T):
    """Number of tiles :func:`pretile` makes."""
    return -(-int(count) // int(T))


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
