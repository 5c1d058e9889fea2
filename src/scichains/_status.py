"""Calling a compiled user function and getting its exception status back, at no cost.

The solvers call right-hand sides and vjps through C function pointers (``numba.cfunc``),
across which numba cannot carry an exception: a raise inside one is printed ("Exception
ignored") and the caller goes on with garbage. The C-callables therefore return a status,
and the adapter that wraps the user's ``@njit`` function has to learn whether it raised.

numba's ``try: ... except Exception:`` does that, but costs 80-130 ns per call here (measured
against a plain call: ~20-50 ns for a two-state right-hand side, in one process), which is as
much as a small network evaluation. :func:`call_status` below emits the call exactly as numba
does for an ordinary call between compiled functions, and instead of propagating the callee's
return status it turns it into 0 (returned normally) or 1 (raised): the same cost as the plain
call. Python then re-runs the function at the failing arguments to raise the real exception
(see ``scichains.ode._solution.reproduce_user_error``).
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic


def _status_codegen(context, builder, signature, args):
    fnty = signature.args[0]
    argtys = signature.args[1:]
    call_sig = fnty.get_call_type(context.typing_context, argtys, {})
    cres = fnty.dispatcher.get_compile_result(call_sig)
    context.add_linking_libs([cres.library])
    status, _ = context.call_internal_no_propagate(builder, cres.fndesc, cres.signature, args[1:])
    one = context.get_constant(types.int64, 1)
    zero = context.get_constant(types.int64, 0)
    return builder.select(status.is_error, one, zero)


def _typer(typingctx, fn, argtys):
    if not isinstance(fn, types.Dispatcher):
        return None
    fn.get_call_type(typingctx, argtys, {})  # compile for these arguments (typing errors here)
    return types.int64(fn, *argtys)


@intrinsic
def call_status3(typingctx, fn, a, b, c):
    """``fn(a, b, c)``; returns 0, or 1 if it raised (the exception is dropped)."""
    return _typer(typingctx, fn, (a, b, c)), _status_codegen


@intrinsic
def call_status4(typingctx, fn, a, b, c, d):
    """``fn(a, b, c, d)``; returns 0, or 1 if it raised (the exception is dropped)."""
    return _typer(typingctx, fn, (a, b, c, d)), _status_codegen


@intrinsic
def call_status5(typingctx, fn, a, b, c, d, e):
    """``fn(a, b, c, d, e)``; returns 0, or 1 if it raised."""
    return _typer(typingctx, fn, (a, b, c, d, e)), _status_codegen


@intrinsic
def call_status6(typingctx, fn, a, b, c, d, e, f):
    """``fn(a, b, c, d, e, f)``; returns 0, or 1 if it raised."""
    return _typer(typingctx, fn, (a, b, c, d, e, f)), _status_codegen


@intrinsic
def call_status7(typingctx, fn, a, b, c, d, e, f, g):
    """``fn(a, b, c, d, e, f, g)``; returns 0, or 1 if it raised."""
    return _typer(typingctx, fn, (a, b, c, d, e, f, g)), _status_codegen
