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

from ._jit import kernel


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


@kernel
def stalled(cstat, cstart, open_value, m, patience):
    """The last of the first ``m`` pieces of work still open (``cstat[c] == open_value``) and
    taken more than ``patience`` cycles ago (``cstart[c]``), or -1: what a waiting thread
    computes as well (``nn/_chunked.py``, ``models/_lockstep_driver.py``)."""
    now = cycles()
    for c in range(m - 1, -1, -1):
        if atomic_load(cstat, c) == open_value and now - atomic_load(cstart, c) > patience:
            return c
    return -1


@kernel
def backoff(spins, give_way):
    """One more spin of a waiting thread (returns the new count): every 64th gives its CPU
    away when ``give_way`` (the threads may share a CPU)."""
    spins += 1
    if spins == 64 and give_way:
        spins = 0
        yield_cpu()
    return spins
