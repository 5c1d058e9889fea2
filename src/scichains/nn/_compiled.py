"""The chain as compiled code sees it: what :mod:`scichains.ode`, :mod:`scichains.adjoint`,
:mod:`scichains.models` and users' ``@njit`` functions import from :mod:`scichains.nn`.

``chain_forward`` / ``chain_vjp`` take one sample; ``network_forward`` / ``network_backward``
take a tile of ``T`` columns in a work buffer laid out as ``_layout`` describes (the stored
stages of the discrete adjoint, trajectories in lockstep).
"""

from __future__ import annotations

import numpy as np

from .._jit import kernel
from ._batch import gather_tile, scatter_tile
from ._dispatch import tile_backward, tile_forward
from ._layout import M_GA, M_NIN, M_NOUT, M_NPARAMS, M_ROWS, S_OUT
from ._simd import borrow

# the words of the length errors, indexed by the codes below
_WORDS = (
    "chain_forward",
    "chain_vjp",
    "x",
    "p",
    "out",
    "v",
    "p_bar",
    "x_bar",
    "input",
    "parameter vector",
    "output",
    "k.work",
    "work buffer",
)
_FORWARD, _VJP, _X, _P, _OUT, _V, _PBAR, _XBAR, _INPUT, _PARAMS, _OUTPUT, _WORK, _ROWS = range(13)


class ChainLengthError(ValueError):
    """An array handed to :func:`chain_forward` / :func:`chain_vjp` has the wrong length.

    Raised from compiled code with integer arguments ``(function, array, got, want, what)``
    (codes into ``_WORDS``); the message is formatted here, in Python, so that no string
    formatting is compiled (it cost seconds of the first compilation of every caller).
    """

    def __str__(self) -> str:
        if len(self.args) != 5:
            return super().__str__()
        fn, name, got, want, what = self.args
        if name == _WORK:
            return (
                f"{_WORDS[fn]}: k.work has length {got}, but the chain's work buffer needs at "
                f"least {want} entries; build the kernel with chain.kernel(dtype) (one per "
                "thread)"
            )
        return (
            f"{_WORDS[fn]}: {_WORDS[name]} has length {got}, but the chain's {_WORDS[what]} "
            f"has {want} entries; pass an array of exactly that length (a slice, e.g. "
            f"u[:{want}], is free in compiled code)"
        )


@kernel
def _length_error(fn, name, got, want, what):
    raise ChainLengthError(fn, name, got, want, what)


@kernel
def _report_lengths(fn, meta, nx, n_in_arr, nout, oname, np_, npbar, pname, nwork):
    # the error branch of the entry points' checks, reached only when a length is wrong;
    # out of line, with one call site per entry point, so that the message building (which
    # allocates) stays off the fast path. np.int64(): integers, not literals, so that
    # _length_error has one compiled version
    i = np.int64
    if nx != meta[M_NIN]:
        _length_error(i(fn), i(_X), nx, meta[M_NIN], i(_INPUT))
    if np_ != meta[M_NPARAMS]:
        _length_error(i(fn), i(_P), np_, meta[M_NPARAMS], i(_PARAMS))
    if nout != meta[M_NOUT]:
        _length_error(i(fn), i(oname), nout, meta[M_NOUT], i(_OUTPUT))
    if npbar != meta[M_NPARAMS]:
        _length_error(i(fn), i(pname), npbar, meta[M_NPARAMS], i(_PARAMS))
    if n_in_arr != meta[M_NIN]:
        _length_error(i(fn), i(_XBAR), n_in_arr, meta[M_NIN], i(_INPUT))
    if nwork < meta[M_ROWS]:  # a ChainKernel built by hand with too small a work buffer
        _length_error(i(fn), i(_WORK), nwork, meta[M_ROWS], i(_ROWS))


@kernel
def chain_forward(k, p, x, out):
    """``out = chain(x, p)`` for one sample, from compiled code.

    ``k`` is the :class:`~scichains.nn.ChainKernel` from ``chain.kernel(dtype)``; ``x`` has
    shape ``(n_in,)``, ``out`` ``(n_out,)``, ``p`` is the flat parameter vector of shape
    ``(num_params,)``; all of the kernel's dtype. Allocates nothing; uses ``k.work``, so one
    ``ChainKernel`` serves one thread. Dropout layers are the identity here (inference).

    The lengths are checked (a few integer compares): each array must have *exactly* the length
    above, else ``ValueError`` naming the array (and ``k.work``, when a ``ChainKernel`` is
    built by hand, at least the chain's work rows). Longer arrays are refused too, since a state
    or parameter vector longer than the chain's is as likely a wrong model as a deliberate
    prefix: pass a slice (``u[:2]``, ``p[3:3 + num_params]``, free in numba) to use part of one.
    """
    # borrowed views: no atomic reference counting on this path (see _simd.borrow)
    w = borrow(k.work)
    meta = borrow(k.meta)
    spec = borrow(k.spec)
    p = borrow(p)
    x = borrow(x)
    out = borrow(out)
    if (
        x.shape[0] != meta[M_NIN]
        or out.shape[0] != meta[M_NOUT]
        or p.shape[0] != meta[M_NPARAMS]
        or w.shape[0] < meta[M_ROWS]
    ):
        _report_lengths(
            np.int64(_FORWARD),
            meta,
            x.shape[0],
            meta[M_NIN],
            out.shape[0],
            np.int64(_OUT),
            p.shape[0],
            p.shape[0],
            np.int64(_P),
            w.shape[0],
        )
    for f in range(meta[M_NIN]):
        w[f] = x[f]
    tile_forward(spec, borrow(k.fspec), meta, p, w, 1, 1, False, 0, 0, borrow(k.samples), 0)
    r = spec[spec.shape[0] - 1, S_OUT]
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
    w = borrow(k.work)
    meta = borrow(k.meta)
    spec = borrow(k.spec)
    p = borrow(p)
    x = borrow(x)
    v = borrow(v)
    x_bar = borrow(x_bar)
    p_bar = borrow(p_bar)
    n_in, n_p = meta[M_NIN], meta[M_NPARAMS]
    if (
        x.shape[0] != n_in
        or x_bar.shape[0] != n_in
        or v.shape[0] != meta[M_NOUT]
        or p.shape[0] != n_p
        or p_bar.shape[0] != n_p
        or w.shape[0] < meta[M_ROWS]
    ):
        _report_lengths(
            np.int64(_VJP),
            meta,
            x.shape[0],
            x_bar.shape[0],
            v.shape[0],
            np.int64(_V),
            p.shape[0],
            p_bar.shape[0],
            np.int64(_PBAR),
            w.shape[0],
        )
    for f in range(meta[M_NIN]):
        w[f] = x[f]
    tile_forward(spec, borrow(k.fspec), meta, p, w, 1, 1, False, 0, 0, borrow(k.samples), 0)
    ga = meta[M_GA]
    for j in range(meta[M_NOUT]):
        w[ga + j] = v[j]
    for j in range(n_p):
        p_bar[j] = 0
    r = tile_backward(spec, meta, p, p_bar, p_bar[0:0], True, w, 1, 1, True, False)
    for f in range(meta[M_NIN]):
        x_bar[f] = w[r + f]


@kernel
def network_forward(k, p, w, T, m):
    """The chain (inference) on a tile of ``m <= T`` samples whose inputs are already in rows
    ``0..n_in`` of the work buffer ``w`` (``rows * T`` numbers, row ``r`` at ``r * T``);
    returns the row where the outputs are."""
    tile_forward(k.spec, k.fspec, k.meta, p, w, T, m, False, 0, 0, k.samples, 0)
    return k.spec[k.spec.shape[0] - 1, S_OUT]


@kernel
def network_backward(k, p, p_bar, w, T, m):
    """Back-propagate the output gradient held in rows :func:`grad_row` of ``w`` through the
    tile whose forward pass ``w`` holds: *writes* dL/dp into ``p_bar``; returns the row where
    dL/d(input) is. Only gradient rows of ``w`` are written, so a stored tile can be swept
    again."""
    for j in range(p_bar.shape[0]):
        p_bar[j] = 0
    return tile_backward(k.spec, k.meta, p, p_bar, p_bar[0:0], True, w, T, m, True, False)


@kernel
def grad_row(k):
    """The work-buffer row where :func:`network_backward` takes dL/d(output)."""
    return k.meta[M_GA]


@kernel
def work_rows_of(k):
    """Rows of the chain's work buffer (a tile of ``T`` samples needs ``rows * T`` numbers)."""
    return k.meta[M_ROWS]


__all__ = [
    "M_GA",
    "M_NIN",
    "M_NOUT",
    "M_NPARAMS",
    "M_ROWS",
    "chain_forward",
    "chain_vjp",
    "gather_tile",
    "grad_row",
    "network_backward",
    "network_forward",
    "scatter_tile",
    "work_rows_of",
]
