"""One dispatch for every layer kind: the chain interpreters and the layers' compiled kernels.

Each layer kind has two kernels beside its descriptor (``layers/*.py``), with the signatures

    forward(l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0) -> 0
    backward(l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other) -> flags

(layer ``l`` of the chain on a tile of ``m <= T`` samples held in the work buffer ``w``; see
:func:`tile_forward` and :func:`tile_backward` for the arguments). They are compiled as
C-callables (``numba.cfunc``, cached on disk), one per layer kind and dtype, *when a chain
that uses them is first prepared* for that dtype (:func:`prepare`), and their addresses go to
the chain's ``spec`` (columns ``S_FWD32``.. of :mod:`._layout`). The interpreters below call
them through those addresses.

Why not let numba inline everything: numba links a kernel's callees into the caller's LLVM
module and optimises the whole module again, at every level of the call tree. With the SIMD
layer kernels inlined into the tile interpreters, those into the batch loops, those into the
training loop (and, for ODEs, into every right-hand side and vjp), one training step compiled
for ~45 s cold and the first neural-ODE gradient for ~70 s. Called through an address, a layer
kernel is compiled once per dtype, only if a chain uses it, and its callers stay small; an
indirect call costs a few nanoseconds per layer and tile.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba.core import types
from numba.extending import overload

from .._jit import CFUNC_FLAGS, function_from_address, kernel
from ._activations import IDENTITY
from ._layout import (
    ACTIVATION,
    ADDRESS_COLUMNS,
    B_SCALED,
    B_SWAPPED,
    CONV,
    DENSE,
    DROPOUT,
    M_GA,
    M_GB,
    MAXPOOL,
    RESHAPE,
    S_ACT,
    S_BWD32,
    S_BWD64,
    S_D,
    S_FWD32,
    S_FWD64,
    S_KIND,
    S_NOUT,
    S_ONE_B32,
    S_ONE_B64,
    S_ONE_F32,
    S_ONE_F64,
)
from ._simd import borrow
from .layers import conv, dense, elementwise, pool

_I2 = types.int64[:, ::1]
_F2 = types.float64[:, ::1]
_I1 = types.int64[::1]


def forward_signature(dtype):
    """``forward(l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0) -> int64``."""
    D = types.float32[::1] if np.dtype(dtype) == np.float32 else types.float64[::1]
    i = types.int64
    return i(i, _I2, _F2, _I1, D, D, i, i, types.boolean, i, i, _I1, i)


def backward_signature(dtype):
    """``backward(l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other) -> int64``."""
    D = types.float32[::1] if np.dtype(dtype) == np.float32 else types.float64[::1]
    i, b = types.int64, types.boolean
    return i(i, _I2, _I1, D, D, D, b, D, i, i, b, i, i)


def one_forward_signature(dtype):
    """``forward_one(l, spec, meta, p, w) -> int64``: a layer on one sample (``T == 1``)."""
    D = types.float32[::1] if np.dtype(dtype) == np.float32 else types.float64[::1]
    i = types.int64
    return i(i, _I2, _I1, D, D)


def one_backward_signature(dtype):
    """``backward_one(l, spec, p, g, w, cur, other) -> int64`` (flags, as ``backward``)."""
    D = types.float32[::1] if np.dtype(dtype) == np.float32 else types.float64[::1]
    i = types.int64
    return i(i, _I2, D, D, D, i, i)


_fwd32 = function_from_address(types.FunctionType(forward_signature(np.float32)), "_fwd32")
_fwd64 = function_from_address(types.FunctionType(forward_signature(np.float64)), "_fwd64")
_bwd32 = function_from_address(types.FunctionType(backward_signature(np.float32)), "_bwd32")
_bwd64 = function_from_address(types.FunctionType(backward_signature(np.float64)), "_bwd64")

_one_f32 = function_from_address(types.FunctionType(one_forward_signature(np.float32)), "_one_f32")
_one_f64 = function_from_address(types.FunctionType(one_forward_signature(np.float64)), "_one_f64")
_one_b32 = function_from_address(types.FunctionType(one_backward_signature(np.float32)), "_one_b32")
_one_b64 = function_from_address(types.FunctionType(one_backward_signature(np.float64)), "_one_b64")

#: the kernels of each layer kind: (forward, backward or None)
KERNELS = {
    DENSE: (dense.forward, dense.backward),
    CONV: (conv.forward, conv.backward),
    MAXPOOL: (pool.forward, pool.backward),
    ACTIVATION: (elementwise.activation_forward, None),
    DROPOUT: (elementwise.dropout_forward, None),
    RESHAPE: (None, None),
}

#: the lean single-sample kernels (``T == 1``) of the kinds that have them: (forward, backward).
#: Called through their own addresses with five or seven arguments instead of thirteen: for a
#: 2 -> 50 -> 2 chain the single-vector forward + vjp took 405 ns with the general kernels and
#: 223 ns with these. (Called directly instead, they would be compiled and optimised again
#: into every caller of the interpreters: +8 s of CPU for the first matexp step, cold.)
ONE_KERNELS = {
    DENSE: (dense.forward_one, dense.backward_one),
    ACTIVATION: (elementwise.activation_forward_one, None),
}

_COMPILED: dict = {}
_LOCK = threading.Lock()


def kernel_address(kind: int, backward: bool, dtype, one: bool = False) -> int:
    """Address of the compiled forward (or backward) kernel of a layer kind for ``dtype``
    (compiled, or loaded from numba's cache, on first use); 0 where the kind has none.
    ``one``: the lean single-sample kernel instead."""
    dt = np.dtype(dtype)
    key = (kind, backward, dt.char, one)
    cf = _COMPILED.get(key)
    if cf is None:
        table = ONE_KERNELS if one else KERNELS
        fn = table[kind][1 if backward else 0] if kind in table else None
        if fn is None:
            return 0
        with _LOCK:
            cf = _COMPILED.get(key)
            if cf is None:
                if one:
                    sig = one_backward_signature(dt) if backward else one_forward_signature(dt)
                else:
                    sig = backward_signature(dt) if backward else forward_signature(dt)
                cf = numba.cfunc(sig, **CFUNC_FLAGS)(fn)
                _COMPILED[key] = cf
    return cf.address


def prepare(spec: np.ndarray, dtype, single: bool = False) -> None:
    """Write the addresses of the layer kernels for ``dtype`` into ``spec`` (in place).

    ``single``: for one sample at a time only (``T == 1``, direct gradients: what
    ``chain_forward``, ``chain_vjp`` and the ODE right-hand sides run): the lean single-sample
    kernels where a layer kind has them, the general ones for the other kinds. A chain used
    only this way (a neural ODE) then never compiles the batched dense kernels; the
    interpreters refuse a tile of several samples until the general kernels are prepared.
    Otherwise: the general kernels of every layer (the lean ones are added when asked)."""
    dt = np.dtype(dtype)
    f32 = dt == np.float32
    fcol, bcol = (S_FWD32, S_BWD32) if f32 else (S_FWD64, S_BWD64)
    ofcol, obcol = (S_ONE_F32, S_ONE_B32) if f32 else (S_ONE_F64, S_ONE_B64)
    for l in range(spec.shape[0]):
        kind = int(spec[l, S_KIND])
        if single:
            spec[l, ofcol] = kernel_address(kind, False, dt, one=True)
            spec[l, obcol] = kernel_address(kind, True, dt, one=True)
            if kind in ONE_KERNELS:
                continue
        spec[l, fcol] = kernel_address(kind, False, dt)
        spec[l, bcol] = kernel_address(kind, True, dt)


def clear_addresses(spec: np.ndarray) -> np.ndarray:
    """A copy of ``spec`` without kernel addresses (they are valid in this process only)."""
    out = spec.copy()
    out[:, ADDRESS_COLUMNS] = 0
    return out


@kernel
def _not_prepared(l):
    raise RuntimeError(
        "scichains: the chain's kernels are not prepared for this dtype in this process (or "
        "only for one sample at a time); build the kernel arguments with chain.kernel(dtype), "
        "and call chain.spec_for(dtype) before running tiles of several samples (a "
        "ChainKernel from another process is refused)"
    )


def _call_forward(addr, l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    """Call the forward kernel at ``addr`` (compiled code only)."""


def _call_backward(addr, l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other):
    """Call the backward kernel at ``addr`` (compiled code only)."""


@overload(_call_forward, jit_options=CFUNC_FLAGS)
def _ov_call_forward(addr, l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    fn = _fwd32 if w.dtype == types.float32 else _fwd64

    def impl(addr, l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
        return fn(addr)(l, spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0)

    return impl


@overload(_call_backward, jit_options=CFUNC_FLAGS)
def _ov_call_backward(addr, l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other):
    fn = _bwd32 if w.dtype == types.float32 else _bwd64

    def impl(addr, l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other):
        return fn(addr)(l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other)

    return impl


def _call_one_forward(addr, l, spec, meta, p, w):
    """Call the single-sample forward kernel at ``addr`` (compiled code only)."""


def _call_one_backward(addr, l, spec, p, g, w, cur, other):
    """Call the single-sample backward kernel at ``addr`` (compiled code only)."""


@overload(_call_one_forward, jit_options=CFUNC_FLAGS)
def _ov_call_one_forward(addr, l, spec, meta, p, w):
    fn = _one_f32 if w.dtype == types.float32 else _one_f64

    def impl(addr, l, spec, meta, p, w):
        return fn(addr)(l, spec, meta, p, w)

    return impl


@overload(_call_one_backward, jit_options=CFUNC_FLAGS)
def _ov_call_one_backward(addr, l, spec, p, g, w, cur, other):
    fn = _one_b32 if w.dtype == types.float32 else _one_b64

    def impl(addr, l, spec, p, g, w, cur, other):
        return fn(addr)(l, spec, p, g, w, cur, other)

    return impl


@kernel
def tile_forward(spec, fspec, meta, p, w, T, m, train, seed, step, samples, c0):
    """Run every layer on a tile of ``m <= T`` samples whose inputs are already in ``w``.

    ``w`` holds ``rows * T`` numbers (row ``r`` at ``r * T``); ``samples[c0 + b]`` is the data
    index of column ``b`` (it seeds the dropout masks); ``train`` switches dropout on.
    ``T == 1`` is the single-sample path (dot products instead of batch-innermost loops).
    """
    col = S_FWD32 if w.itemsize == 4 else S_FWD64
    ocol = S_ONE_F32 if w.itemsize == 4 else S_ONE_F64
    for l in range(spec.shape[0]):
        kind = spec[l, S_KIND]
        if kind == RESHAPE:
            continue  # its output rows are its input rows
        if T == 1 and spec[l, ocol] != 0:
            _call_one_forward(spec[l, ocol], l, spec, meta, p, w)
            continue
        addr = spec[l, col]
        if addr == 0:
            _not_prepared(l)
        _call_forward(
            addr,
            l,
            spec,
            fspec,
            meta,
            p,
            w,
            T,
            m,
            train,
            np.int64(seed),
            np.int64(step),
            samples,
            c0,
        )


@kernel
def tile_backward(spec, meta, p, g, gv, direct, w, T, m, want_gx, train):
    """Back-propagate the output gradient held in rows ``meta[M_GA]`` of ``w``.

    Accumulates dL/dp into ``g``; unless ``direct``, the dense layers' weight gradients
    accumulate as vector partial sums in ``gv`` instead (``lanes`` numbers per parameter, see
    :func:`scichains.nn._batch.fold_partials`). Returns the row where dL/d(input) ends up
    (valid when ``want_gx``).
    """
    spec = borrow(spec)
    w = borrow(w)
    col = S_BWD32 if w.itemsize == 4 else S_BWD64
    fcol = S_FWD32 if w.itemsize == 4 else S_FWD64
    ocol = S_ONE_B32 if w.itemsize == 4 else S_ONE_B64
    ofcol = S_ONE_F32 if w.itemsize == 4 else S_ONE_F64
    # the two gradient buffers alternate; ``cur`` holds dL/d(output of layer l)
    cur, other = meta[M_GA], meta[M_GB]
    # True when the layer after already multiplied dL/d(output of layer l) by l's derivative
    scaled = False
    for l in range(spec.shape[0] - 1, -1, -1):
        kind = spec[l, S_KIND]
        if kind == RESHAPE or (kind == DROPOUT and not train):
            continue
        lean = T == 1 and direct and spec[l, ocol] != 0
        # prepared: the general kernels, or for one sample a kind whose only kernel is a lean
        # forward (an activation layer: no backward kernel)
        if (
            not lean
            and spec[l, fcol] == 0
            and not (T == 1 and spec[l, ofcol] != 0 and spec[l, ocol] == 0)
        ):
            _not_prepared(l)
        n_out = spec[l, S_NOUT]
        if (kind == DROPOUT or spec[l, S_ACT] != IDENTITY) and not scaled:
            d = w[spec[l, S_D] * T : (spec[l, S_D] + n_out) * T]
            gz = w[cur * T : (cur + n_out) * T]
            # whole rows, columns past m included (stale but finite): one flat loop vectorises
            for j in range(n_out * T):
                gz[j] *= d[j]
        if lean:
            flags = _call_one_backward(spec[l, ocol], l, spec, p, g, w, cur, other)
        else:
            addr = spec[l, col]
            if addr == 0:
                scaled = False
                continue
            need_in = want_gx or l > 0
            flags = _call_backward(
                addr, l, spec, meta, p, g, gv, direct, w, T, m, need_in, cur, other
            )
        if flags & B_SWAPPED:
            cur, other = other, cur
        scaled = (flags & B_SCALED) != 0
    return cur
