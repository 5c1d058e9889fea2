"""Atomic operations on ``int64`` array elements, a cycle counter and a CPU yield, for
compiled code that several threads run at once (see :mod:`scichains._workers`).

numba has no atomics of its own. These are LLVM instructions emitted through intrinsics:
``load atomic`` (acquire), ``store atomic`` (release), ``atomicrmw add`` and ``cmpxchg``
(sequentially consistent). A plain load in a waiting loop would be hoisted out of the loop by
LLVM; an atomic load is not.
"""

from __future__ import annotations

import sys

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _pointer(context, builder, aryty, ary, idx):
    a = context.make_array(aryty)(context, builder, ary)
    return cgutils.get_item_pointer(context, builder, aryty, a, [idx])


def _check(arr) -> None:
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1):
        raise TypeError(f"atomics take a 1-d int64 array, got {arr}")


@intrinsic
def atomic_load(typingctx, arr, idx):
    """``arr[idx]``, read with acquire ordering."""
    _check(arr)
    sig = types.int64(arr, types.intp)

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return sig, codegen


@intrinsic
def atomic_store(typingctx, arr, idx, value):
    """``arr[idx] = value``, written with release ordering."""
    _check(arr)
    sig = types.void(arr, types.intp, types.int64)

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1])
        builder.store_atomic(args[2], ptr, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def atomic_add(typingctx, arr, idx, value):
    """``arr[idx] += value`` in one step; returns the value before."""
    _check(arr)
    sig = types.int64(arr, types.intp, types.int64)

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")

    return sig, codegen


@intrinsic
def atomic_cas(typingctx, arr, idx, expected, new):
    """``arr[idx] = new`` if it holds ``expected``, in one step; returns the value found (equal
    to ``expected`` exactly when the swap happened)."""
    _check(arr)
    sig = types.int64(arr, types.intp, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        ptr = _pointer(context, builder, sig.args[0], args[0], args[1])
        pair = builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return sig, codegen


@intrinsic
def cycles(typingctx):
    """The CPU's cycle counter (``rdtsc`` on x86; 0 where LLVM knows none)."""
    sig = types.int64()

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


_YIELD = "SwitchToThread" if sys.platform == "win32" else "sched_yield"


@intrinsic
def yield_cpu(typingctx):
    """Give the CPU to another runnable thread, if any (``sched_yield``)."""
    sig = types.void()

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(32), []), _YIELD
        )
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen
