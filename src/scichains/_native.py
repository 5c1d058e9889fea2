"""Calling a compiled kernel through its address, so that its machine code is not copied into
(and optimised again inside) every kernel that calls it.

numba links a callee's whole LLVM module into its caller and runs LLVM's optimisation and code
generation over the result again, at every level of calls; a ``prange`` loop adds three more
levels (the outlined loop body, and two wrappers of it). Measured on the first training step of
the matrix-exponential chain (cold cache, AMD EPYC Zen 4): the threaded batch kernel's levels
took ~4 s of the ~21 s to the first step. Called through :func:`call_native`, the body is
compiled once and the levels above it hold only the call.

:func:`native` compiles (or loads from the cache) a kernel for given argument types and returns
a :class:`Native`: its address, with the signature in its numba type, so a kernel taking it is
compiled (and cached) per signature, and the call site checks that its arguments have exactly
those types (``TypingError`` otherwise, never a call with a mismatched layout). The address is
an argument at run time, so the callers' cached machine code holds no address of this process.
The call uses numba's own calling convention: an exception raised in the callee propagates to
the caller as from a direct call.
"""

from __future__ import annotations

import threading

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import (
    NativeValue,
    intrinsic,
    models,
    register_model,
    typeof_impl,
    unbox,
)


class Native:
    """A compiled kernel's native entry point: ``address`` (int) and ``signature`` (numba's).
    Keeps the dispatcher (and with it the machine code) alive."""

    __slots__ = ("dispatcher", "signature", "address")

    def __init__(self, dispatcher, signature, address: int):
        self.dispatcher = dispatcher
        self.signature = signature
        self.address = int(address)

    def __repr__(self) -> str:
        return f"Native({self.dispatcher.py_func.__qualname__}{self.signature})"

    def __reduce__(self):
        raise TypeError(
            "a Native holds a machine-code address of this process and cannot be pickled: "
            "make it where it is called (scichains._native.native_for)"
        )


class NativeType(types.Type):
    """The numba type of a :class:`Native`: one type per kernel and signature."""

    def __init__(self, qualname: str, signature):
        self.qualname = qualname
        self.signature = signature
        super().__init__(name=f"Native({qualname}{signature})")


@register_model(NativeType)
class _NativeModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.IntType(64))


@typeof_impl.register(Native)
def _typeof_native(val, c):
    return NativeType(val.dispatcher.py_func.__qualname__, val.signature)


@unbox(NativeType)
def _unbox_native(typ, obj, c):
    address = c.pyapi.object_getattr_string(obj, "address")
    value = c.pyapi.long_as_ulonglong(address)
    c.pyapi.decref(address)
    return NativeValue(value, is_error=cgutils.is_not_null(c.builder, c.pyapi.err_occurred()))


_MADE: dict = {}
_LOCK = threading.Lock()


def native(dispatcher, argtypes: tuple) -> Native:
    """``dispatcher`` compiled (or loaded from numba's cache) for the numba types ``argtypes``,
    as a :class:`Native` (made once per kernel and signature)."""
    key = (dispatcher, argtypes)
    made = _MADE.get(key)
    if made is not None:
        return made
    with _LOCK:
        made = _MADE.get(key)
        if made is None:
            dispatcher.compile(argtypes)
            cres = dispatcher.overloads[argtypes]
            address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
            made = _MADE[key] = Native(dispatcher, cres.signature, address)
    return made


@intrinsic
def call_native(typingctx, fn, *args):
    """``fn(*args)`` for a :class:`Native` ``fn``: its arguments must have its signature's
    types exactly (literals aside; integers are converted to the integer type it takes)."""
    if not isinstance(fn, NativeType):
        raise TypingError(f"call_native needs a Native function, got {fn}")
    if len(args) == 1 and isinstance(args[0], types.StarArgTuple):
        args = args[0].types
    want = fn.signature.args
    got = tuple(types.unliteral(a) for a in args)
    bad = [
        i
        for i, (g, w) in enumerate(zip(got, want))
        if g != w and not (isinstance(g, types.Integer) and isinstance(w, types.Integer))
    ]
    if bad or len(got) != len(want):
        diff = [f"argument {i}: {got[i]} where {fn.qualname} takes {want[i]}" for i in bad]
        if len(got) != len(want):
            diff.append(f"{len(got)} arguments where {fn.qualname} takes {len(want)}")
        raise TypingError("call_native: " + "; ".join(diff))
    restype = fn.signature.return_type
    packed = types.StarArgTuple.from_types(tuple(args))
    sig = restype(fn, packed)

    def codegen(context, builder, signature, llargs):
        values = [
            context.cast(builder, v, t, w)
            for v, t, w in zip(cgutils.unpack_tuple(builder, llargs[1]), packed.types, want)
        ]
        fnty = context.call_conv.get_function_type(restype, list(want))
        callee = builder.inttoptr(llargs[0], fnty.as_pointer())
        status, result = context.call_conv.call_function(
            builder, callee, restype, list(want), values
        )
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return result

    return sig, codegen


_BY_FINGERPRINT: dict = {}


def native_for(dispatcher, args: tuple) -> Native:
    """``dispatcher`` compiled for the types numba gives the values ``args`` when they are
    passed from Python (a Python ``int``: ``int64``; ``bool``: ``boolean``); looked up by the
    values' fingerprints (the C function numba's dispatchers use: ~0.1 us per value) so that a
    call from Python costs ~2 us, not the ~2 us per array of ``numba.typeof``."""
    from numba import typeof
    from numba._dispatcher import compute_fingerprint

    try:
        key = (dispatcher, tuple(compute_fingerprint(a) for a in args))
    except (TypeError, ValueError, NotImplementedError):  # a value without a fingerprint
        key = None
    made = _BY_FINGERPRINT.get(key) if key is not None else None
    if made is None:
        made = native(dispatcher, tuple(typeof(a) for a in args))
        if key is not None:
            _BY_FINGERPRINT[key] = made
    return made
