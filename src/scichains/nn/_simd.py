"""Explicit SIMD vectors for the dense kernels: a numba type for one vector register and the
few operations the register-blocked loops need.

LLVM's loop vectoriser turns the kernels' inner loops over the batch into vector code, but it
keeps every partial result in memory between the loops over a layer's inputs (a load and a store
per multiply-add group), and numba leaves the SLP vectoriser off, so a loop written with scalar
accumulators per lane stays scalar. With these intrinsics a kernel holds a block of outputs for
several vectors of samples in registers across a whole dot product: the loads and stores per
multiply-add drop from about 0.75 to about 0.6, and the 32 -> 16 layer of the
matrix-exponential MLP ran at 70 instead of 43 GFLOP/s on one core in isolation; a whole
training step of that MLP took ~1.25x less time on one thread (see ``benchmarks/README.md``).

``Vec`` is ``lanes(arr)`` values of ``arr.dtype``: :data:`VEC_BYTES` bytes, chosen for the CPU
by :func:`scichains._jit.vector_bytes` (32 with AVX2: 8 float32 or 4 float64; 16 elsewhere). Loads
and stores take an element index into a 1-D array and do no bounds check and no negative-index
wraparound: callers guarantee ``0 <= i`` and ``i + lanes <= len``. Everything here is inlined
into the calling kernel, so the kernels stay cacheable.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, models, register_model

from .._jit import VECTOR_BYTES

_I32 = ir.IntType(32)

#: Bytes of one vector, and the most lanes a vector has (float32).
VEC_BYTES = VECTOR_BYTES
MAX_LANES = VEC_BYTES // 4


class Vec(types.Type):
    """``n`` lanes of the numba scalar type ``dtype`` in one register."""

    def __init__(self, dtype, n):
        self.dtype = dtype
        self.n = n
        super().__init__(name=f"Vec({dtype}x{n})")


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        be = ir.VectorType(dmm.lookup(fe_type.dtype).get_value_type(), fe_type.n)
        super().__init__(dmm, fe_type, be)


def _vec_of(arr):
    if not isinstance(arr, types.Array) or arr.dtype not in (types.float32, types.float64):
        raise TypeError(f"SIMD kernels take float32/float64 arrays, got {arr}")
    return Vec(arr.dtype, VEC_BYTES // (arr.dtype.bitwidth // 8))


def _ptr(context, builder, arrty, arr, idx):
    return builder.gep(context.make_array(arrty)(context, builder, arr).data, [idx])


def _splat(builder, vty, s):
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), s, ir.Constant(_I32, 0))
    mask = ir.Constant(ir.VectorType(_I32, vty.count), [0] * vty.count)
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined), mask)


@intrinsic
def lanes(typingctx, arr):
    """Number of lanes of a vector of ``arr``'s dtype (a compile-time constant)."""
    n = _vec_of(arr).n

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.IntType(64), n)

    return types.int64(arr), codegen


@intrinsic
def vload(typingctx, arr, idx):
    """``arr[idx : idx + lanes]`` as a vector (unaligned load)."""
    V = _vec_of(arr)

    def codegen(context, builder, sig, args):
        p = _ptr(context, builder, sig.args[0], args[0], args[1])
        p = builder.bitcast(p, context.get_value_type(V).as_pointer())
        return builder.load(p, align=V.dtype.bitwidth // 8)

    return V(arr, idx), codegen


@intrinsic
def vstore(typingctx, arr, idx, v):
    """``arr[idx : idx + lanes] = v``."""

    def codegen(context, builder, sig, args):
        p = _ptr(context, builder, sig.args[0], args[0], args[1])
        p = builder.bitcast(p, args[2].type.as_pointer())
        builder.store(args[2], p, align=sig.args[2].dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.none(arr, idx, v), codegen


@intrinsic
def vsplat(typingctx, arr, idx):
    """A vector with ``arr[idx]`` in every lane."""
    V = _vec_of(arr)

    def codegen(context, builder, sig, args):
        s = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1]))
        return _splat(builder, context.get_value_type(V), s)

    return V(arr, idx), codegen


@intrinsic
def vfill(typingctx, arr, x):
    """A vector of ``arr``'s dtype with the scalar ``x`` in every lane."""
    V = _vec_of(arr)

    def codegen(context, builder, sig, args):
        s = context.cast(builder, args[1], sig.args[1], V.dtype)
        return _splat(builder, context.get_value_type(V), s)

    return V(arr, x), codegen


@intrinsic
def vfma(typingctx, a, b, c):
    """``a * b + c`` lane by lane, one fused multiply-add."""
    if not (isinstance(a, Vec) and a == b == c):
        return None

    def codegen(context, builder, sig, args):
        vty = args[0].type
        bits = 32 if isinstance(vty.element, ir.FloatType) else 64
        fnty = ir.FunctionType(vty, [vty, vty, vty])
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.fma.v{vty.count}f{bits}")
        return builder.call(fn, list(args))

    return a(a, b, c), codegen


@intrinsic
def vadd(typingctx, a, b):
    """``a + b`` lane by lane."""
    if not (isinstance(a, Vec) and a == b):
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])

    return a(a, b), codegen


@intrinsic
def vmul(typingctx, a, b):
    """``a * b`` lane by lane."""
    if not (isinstance(a, Vec) and a == b):
        return None

    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], args[1])

    return a(a, b), codegen


def _select_codegen(op):
    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered(op, args[0], args[1]), args[2], args[3])

    return codegen


@intrinsic
def vselect_gt(typingctx, a, b, x, y):
    """``x`` where ``a > b``, else ``y``, lane by lane (a NaN compares false)."""
    if not (isinstance(a, Vec) and a == b == x == y):
        return None
    return a(a, b, x, y), _select_codegen(">")


@intrinsic
def vselect_eq(typingctx, a, b, x, y):
    """``x`` where ``a == b``, else ``y``, lane by lane."""
    if not (isinstance(a, Vec) and a == b == x == y):
        return None
    return a(a, b, x, y), _select_codegen("==")


@intrinsic
def vsum(typingctx, a):
    """The sum of the lanes (as a scalar of the lane type)."""
    if not isinstance(a, Vec):
        return None

    def codegen(context, builder, sig, args):
        # pairwise: halves added until one lane is left
        v = args[0]
        n = sig.args[0].n
        while n > 1:
            h = n // 2
            lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, h), list(range(h))))
            hi = builder.shuffle_vector(
                v, v, ir.Constant(ir.VectorType(_I32, h), list(range(h, n)))
            )
            v = builder.fadd(lo, hi)
            n = h
        return builder.extract_element(v, ir.Constant(_I32, 0))

    return a.dtype(a), codegen


@intrinsic
def borrow(typingctx, arr):
    """``arr`` without its reference-counted owner (a borrowed view).

    Slices of a borrowed array skip numba's atomic reference counting (``NRT_incref`` /
    ``NRT_decref`` on the owner), which costs more than the arithmetic of a small layer on
    one sample. Only for arrays that outlive every use of the view: a kernel's arguments
    inside the kernel.
    """
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, value=args[0])
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        return ary._getvalue()

    return arr(arr), codegen
