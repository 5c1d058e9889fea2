"""Vector operations on ``LANES`` float64 lanes for the lane-parallel ensemble loop
(:mod:`scichains.ode.ensemble._lanes`): loads and stores of a lane vector from lanes-contiguous
arrays, splat, elementwise arithmetic, min/max and unary functions as LLVM vector instructions,
and :func:`lpow` (the scalar steppers' fdlibm ``pow`` on vectors), with the C signature of the
per-problem lane right-hand side.

The lane count is twice the machine's vector width in doubles (at least 4): two vector
registers per operation keep both FMA ports busy on AVX2 and AVX-512 machines.
"""

from __future__ import annotations

import math
import threading

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..._jit import FLAGS, VECTOR_BYTES, function_from_address
from ..._status import call_status4, call_status5
from ...nn._simd import Vec
from .._abi import float64_pointer
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


_LOCK = threading.Lock()
_LANE_RHS: dict[int, tuple] = {}


def lane_rhs_address(f, n: int, m: int) -> int:
    """The address of a C-callable of :data:`LANE_RHS_SIGNATURE` running the compiled
    right-hand side ``f(du, u, p, t)`` lane by lane for ``n`` states and ``m`` parameters
    (constants there: the copies between the lanes and the contiguous vectors unroll),
    compiled once per function and sizes (~0.2 s)."""
    key = (id(f), int(n), int(m))
    with _LOCK:
        known = _LANE_RHS.get(key)
        if known is not None and known[0] is f:
            return known[1].address
        user = f
        L = LANES
        N = int(n)
        M = int(m)

        def lanes(du_a, u_a, p_a, t_a, w_a, n_, m_, mask):
            DU = numba.carray(float64_pointer(du_a), (N, L))
            U = numba.carray(float64_pointer(u_a), (N, L))
            P = numba.carray(float64_pointer(p_a), (L, M))
            T = numba.carray(float64_pointer(t_a), (L,))
            W = numba.carray(float64_pointer(w_a), (2, N))
            ub = W[0]
            db = W[1]
            failed = 0
            for lane in range(L):
                if (mask >> lane) & 1:
                    for i in range(N):
                        ub[i] = U[i, lane]
                    if call_status4(user, db, ub, P[lane], T[lane]) != 0:
                        failed |= 1 << lane
                    for i in range(N):
                        DU[i, lane] = db[i]
            return failed

        cf = numba.cfunc(LANE_RHS_SIGNATURE, cache=False)(lanes)
        _LANE_RHS[key] = (f, cf)
        return cf.address


_LANE_COND: dict[tuple, tuple] = {}


def lane_conditions_address(conditions, n: int, m: int) -> int:
    """The address of a C-callable of :data:`LANE_RHS_SIGNATURE` evaluating the compiled
    event conditions ``g_j(u, t, p)`` (``conditions``, a list) lane by lane for ``n`` states
    and ``m`` parameters: ``G[j, lane]`` (its first argument, ``(len(conditions), LANES)``)
    for each lane in ``mask``, with a scratch of ``(2, max(n, len(conditions)))``; returns
    the mask of the lanes where a condition raised. Compiled once per set of functions and
    sizes (~0.2 s)."""
    key = (tuple(id(g) for g in conditions), int(n), int(m))
    with _LOCK:
        known = _LANE_COND.get(key)
        if known is not None and all(a is b for a, b in zip(known[0], conditions)):
            return known[1].address
        nev = len(conditions)
        scope = {
            "numba": numba,
            "pointer": float64_pointer,
            "call_status5": call_status5,
            "L": LANES,
            "N": int(n),
            "M": int(m),
            "NEV": nev,
            "WIDTH": max(int(n), nev),
        }
        src = ""
        for j, g in enumerate(conditions):
            scope[f"g{j}"] = g
            src += f"def w{j}(out, i, u, t, p):\n    out[i] = g{j}(u, t, p)\n"
        src += (
            "def lanes(g_a, u_a, p_a, t_a, w_a, n_, m_, mask):\n"
            "    G = numba.carray(pointer(g_a), (NEV, L))\n"
            "    U = numba.carray(pointer(u_a), (N, L))\n"
            "    P = numba.carray(pointer(p_a), (L, M))\n"
            "    T = numba.carray(pointer(t_a), (L,))\n"
            "    W = numba.carray(pointer(w_a), (2, WIDTH))\n"
            "    ub = W[0, :N]\n"
            "    gb = W[1, :NEV]\n"
            "    failed = 0\n"
            "    for lane in range(L):\n"
            "        if (mask >> lane) & 1:\n"
            "            for i in range(N):\n"
            "                ub[i] = U[i, lane]\n"
        )
        for j in range(nev):
            src += (
                f"            if call_status5(w{j}, gb, {j}, ub, T[lane], P[lane]) != 0:\n"
                "                failed |= 1 << lane\n"
            )
        src += (
            "            for j in range(NEV):\n"
            "                G[j, lane] = gb[j]\n"
            "    return failed\n"
        )
        exec(compile(src, "<scichains lane events>", "exec"), scope)  # noqa: S102
        for j in range(nev):
            scope[f"w{j}"] = numba.njit(scope[f"w{j}"])
        cf = numba.cfunc(LANE_RHS_SIGNATURE, cache=False)(scope["lanes"])
        _LANE_COND[key] = (tuple(conditions), cf)
        return cf.address


@numba.njit(inline="always", **FLAGS)
def events_seen(G, GP, edir, amask, failed):
    """The lanes of ``amask`` where an event may have happened: a condition raised (the
    lane's bit in ``failed``) or is not finite, now (``G``) or at the lane's last point
    (``GP``), or moved to or across zero in its direction since then (a superset of what
    the scalar stepper takes for an event). ``GP`` takes ``G``'s columns of ``amask``."""
    seen = failed & amask
    for lane in range(LANES):
        if not (amask >> lane) & 1:
            continue
        for j in range(edir.shape[0]):
            gn = G[j, lane]
            gp = GP[j, lane]
            GP[j, lane] = gn
            d = edir[j]
            if not (math.isfinite(gn) and math.isfinite(gp)):
                seen |= 1 << lane
            elif (d >= 0 and gp <= 0.0 and gn >= 0.0) or (d <= 0 and gp >= 0.0 and gn <= 0.0):
                seen |= 1 << lane
    return seen
