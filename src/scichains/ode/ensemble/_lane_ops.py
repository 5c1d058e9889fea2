"""Vector operations on ``LANES`` float64 lanes for the lane-parallel ensemble loop
(:mod:`scichains.ode.ensemble._lanes`): loads and stores of a lane vector from lanes-contiguous
arrays, splat, elementwise arithmetic, min/max and unary functions as LLVM vector instructions,
and :func:`lpow` (the scalar steppers' fdlibm ``pow`` on vectors), with the C signature of the
per-problem lane right-hand side.

The lane count is twice the machine's vector width in doubles (at least 4): two vector
registers per operation keep both FMA ports busy on AVX2 and AVX-512 machines.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..._jit import VECTOR_BYTES, function_from_address
from ...nn._simd import Vec
from .._pow import emit_pow

LANES = max(4, 2 * VECTOR_BYTES // 8)
"""Trajectories stepped together: two float64 vectors' worth (8 with AVX2, 4 with 16-byte
vectors); at most 64 (the lanes are a bit mask in the right-hand side's calls)."""

LANE_RHS_SIGNATURE = types.int64(
    types.uintp,
    types.uintp,
    types.uintp,
    types.uintp,
    types.uintp,
    types.int64,
    types.int64,
    types.int64,
)
"""``f(du, u, p, t, scratch, n, len(p), mask) -> failed``, addresses of contiguous float64
arrays: ``du``, ``u`` of shape ``(n, LANES)``, ``p`` ``(LANES, len(p))``, ``t`` ``(LANES,)``,
``scratch`` ``(2, n)``. Evaluates the right-hand side for each lane whose bit is set in
``mask`` (``du[:, lane] = f(u[:, lane], p[lane], t[lane])``); returns the bit mask of the lanes
whose call raised."""
LANE_RHS_TYPE = types.FunctionType(LANE_RHS_SIGNATURE)
lane_rhs_from_address = function_from_address(LANE_RHS_TYPE, "lane_rhs_from_address")


LVEC = Vec(types.float64, LANES)
"""One float64 per lane, in vector registers (``<LANES x double>``)."""
_LVEC_IR = ir.VectorType(ir.DoubleType(), LANES)


def _lane_pointer(context, builder, arrty, arr, idx):
    data = context.make_array(arrty)(context, builder, value=arr).data
    return builder.bitcast(builder.gep(data, [idx]), ir.PointerType(_LVEC_IR))


def _is_c_float64(arr):
    return isinstance(arr, types.Array) and arr.dtype == types.float64 and arr.layout == "C"


@intrinsic
def lload(typingctx, arr, idx):
    """The ``LANES`` values of the C-contiguous float64 array ``arr`` from flat index ``idx``."""
    if not _is_c_float64(arr):
        return None

    def codegen(context, builder, signature, args):
        return builder.load(_lane_pointer(context, builder, signature.args[0], *args), align=8)

    return LVEC(arr, idx), codegen


@intrinsic
def lstore(typingctx, arr, idx, v):
    """Store the lane vector ``v`` into ``arr`` from flat index ``idx``."""
    if not _is_c_float64(arr) or v != LVEC:
        return None

    def codegen(context, builder, signature, args):
        ptr = _lane_pointer(context, builder, signature.args[0], args[0], args[1])
        builder.store(args[2], ptr, align=8)
        return context.get_dummy_value()

    return types.none(arr, idx, v), codegen


@intrinsic
def lsplat(typingctx, x):
    """``x`` (a float) in every lane."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, signature, args):
        value = context.cast(builder, args[0], signature.args[0], types.float64)
        v = builder.insert_element(
            ir.Constant(_LVEC_IR, ir.Undefined), value, ir.Constant(ir.IntType(32), 0)
        )
        mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
        return builder.shuffle_vector(v, ir.Constant(_LVEC_IR, ir.Undefined), mask)

    return LVEC(x), codegen


def _lane_binop(op):
    def typer(typingctx, a, b):
        if a != LVEC or b != LVEC:
            return None

        def codegen(context, builder, signature, args):
            return getattr(builder, op)(*args)

        return LVEC(a, b), codegen

    return intrinsic(typer)


# the same instructions numba emits for the scalar operations (its fast-math pass then adds
# the same flags), so that every lane computes what the scalar stepper computes
ladd = _lane_binop("fadd")
lsub = _lane_binop("fsub")
lmul = _lane_binop("fmul")
ldiv = _lane_binop("fdiv")


@intrinsic
def lmin(typingctx, a, b):
    """``min(a, b)`` lane by lane as numba's ``min`` does it: ``b if b < a else a``."""
    if a != LVEC or b != LVEC:
        return None

    def codegen(context, builder, signature, args):
        x, y = args
        return builder.select(builder.fcmp_ordered("<", y, x), y, x)

    return LVEC(a, b), codegen


@intrinsic
def lmax(typingctx, a, b):
    """``max(a, b)`` lane by lane as numba's ``max`` does it: ``b if b > a else a``."""
    if a != LVEC or b != LVEC:
        return None

    def codegen(context, builder, signature, args):
        x, y = args
        return builder.select(builder.fcmp_ordered(">", y, x), y, x)

    return LVEC(a, b), codegen


def _lane_unary(name):
    def typer(typingctx, a):
        if a != LVEC:
            return None

        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(_LVEC_IR, [_LVEC_IR])
            fn = cgutils.get_or_insert_function(builder.module, fnty, f"{name}.v{LANES}f64")
            return builder.call(fn, args)

        return LVEC(a), codegen

    return intrinsic(typer)


labs = _lane_unary("llvm.fabs")
lsqrt = _lane_unary("llvm.sqrt")


@intrinsic
def lpow(typingctx, x, y):
    """``x ** y`` lane by lane (``x`` a lane vector, ``y`` a float): the instructions of
    :func:`scichains.ode._pow.cpow` on every lane (see there for the domain)."""
    if x != LVEC or not isinstance(y, types.Float):
        return None

    def codegen(context, builder, signature, args):
        yv = context.cast(builder, args[1], signature.args[1], types.float64)
        return emit_pow(builder, args[0], yv, LANES)

    return LVEC(x, y), codegen


@intrinsic
def data_address(typingctx, arr):
    """The address of ``arr``'s first element (``uintp``)."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        return builder.ptrtoint(a.data, context.get_value_type(types.uintp))

    return types.uintp(arr), codegen
