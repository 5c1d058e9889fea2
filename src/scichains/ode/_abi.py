"""The C interface of the solvers: the signatures of the right-hand sides and vjps they call,
the network kernels handed to them, and the tuples a stepping kernel takes (tolerances, stops,
the step store).

Everything that compiles a right-hand side, a vjp or a kernel against the solvers (``adjoint``,
``models``, the generated code of ``SymbolicModel`` and ``trace``) imports it from here, not
from a stepper.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .._jit import CFUNC_FLAGS, FLAGS, function_from_address
from ..nn._chain import SimpleChain

F64 = types.float64[::1]
I64 = types.int64[::1]


def _empty_chain_kernel():
    from ..nn.layers import Flatten

    return SimpleChain(1, Flatten()).kernel(np.float64)


NO_NETWORK = _empty_chain_kernel()
"""The ChainKernel handed to right-hand sides of problems without a network."""

KERNEL_TYPE = numba.typeof(NO_NETWORK)
RHS_SIGNATURE = types.int64(F64, F64, F64, types.float64, KERNEL_TYPE)
"""``f(du, u, p, t, k) -> status`` of the C-callables the solvers call: writes ``du`` and returns
0, or nonzero when the user's function raised (the adapter catches the exception; numba cannot
carry it across a C call, so the solver stops and Python re-runs the function to raise it)."""
RHS_TYPE = types.FunctionType(RHS_SIGNATURE)


VJP_SIGNATURE = types.int64(F64, F64, F64, types.float64, KERNEL_TYPE, F64, F64)
"""``vjp(v, u, p, t, k, ubar, pbar) -> status``: *writes* ``ubar = v^T df/du`` and
``pbar = v^T df/dp``; returns 0, or nonzero when the user's function raised."""
VJP_TYPE = types.FunctionType(VJP_SIGNATURE)


rhs_from_address = function_from_address(RHS_TYPE, "rhs_from_address")

LEAN_RHS_SIGNATURE = types.int64(
    types.uintp, types.uintp, types.uintp, types.float64, types.int64, types.int64
)
"""``f(du_address, u_address, p_address, t, n, len(p)) -> status``: the right-hand side of a
problem without network kernels, called with the addresses of contiguous float64 vectors. The
ensemble loop calls this form: the arrays' structs, and the empty network kernels, are not
copied onto the stack for every call (~11 ns of the ~42 ns per call of a two-state problem,
measured)."""
LEAN_RHS_TYPE = types.FunctionType(LEAN_RHS_SIGNATURE)
lean_from_address = function_from_address(LEAN_RHS_TYPE, "lean_from_address")


@intrinsic
def float64_pointer(typingctx, address):
    """The integer ``address`` as a ``float64*`` (for ``numba.carray``)."""
    sig = types.CPointer(types.float64)(address)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


def _function_value(context, builder, fntype, address):
    """The first-class function value of type ``fntype`` for the C-callable at ``address``
    (as :func:`scichains._jit.function_from_address` builds it)."""
    sfunc = cgutils.create_struct_proxy(fntype)(context, builder)
    llvoidptr = context.get_value_type(types.voidptr)
    sfunc.c_addr = builder.inttoptr(address, llvoidptr)
    sfunc.py_addr = cgutils.get_null_value(llvoidptr)
    sfunc.jit_addr = cgutils.get_null_value(llvoidptr)
    return sfunc._getvalue()


# rhs_function and call_rhs are intrinsics (LLVM emitted at the call site), not inlined
# overloads: numba's IR-level inlining (``overload(..., inline="always")``) of the same two
# helpers corrupted the stepper's state in numba 0.68.1 (its proposed next step came out as
# garbage), and a separately compiled helper taking the array structs by value made a
# trajectory 2x slower.


@intrinsic
def rhs_function(typingctx, address):
    """The right-hand side at ``address``: an ``int64`` address is a C-callable of
    :data:`RHS_SIGNATURE`, a ``uint64`` one of :data:`LEAN_RHS_SIGNATURE`."""
    fntype = LEAN_RHS_TYPE if address == types.uint64 else RHS_TYPE

    def codegen(context, builder, signature, args):
        return _function_value(context, builder, signature.return_type, args[0])

    return fntype(address), codegen


@intrinsic
def call_rhs(typingctx, fn, du, u, p, t, k):
    """``fn(du, u, p, t, k)`` for a right-hand side of either form (see
    :func:`rhs_function`): the lean one gets the vectors' addresses and lengths instead of
    the arrays and ``k``. Emits the same call numba emits for a C-callable function value."""
    if fn not in (RHS_TYPE, LEAN_RHS_TYPE):
        return None
    lean = fn == LEAN_RHS_TYPE

    def codegen(context, builder, signature, args):
        fnty = signature.args[0]
        fstruct = args[0]
        address = builder.extract_value(fstruct, 0)
        fptr = builder.bitcast(address, context.get_value_type(fnty.ftype))
        if not lean:
            return builder.call(fptr, list(args[1:]))
        intp = context.get_value_type(types.uintp)
        arrays = [
            context.make_array(ty)(context, builder, value=v)
            for ty, v in zip(signature.args[1:4], args[1:4])
        ]
        du_a, u_a, p_a = (builder.ptrtoint(a.data, intp) for a in arrays)
        n = builder.extract_value(arrays[1].shape, 0)  # len(u) (= len(du) for a rhs)
        m = builder.extract_value(arrays[2].shape, 0)
        return builder.call(fptr, [du_a, u_a, p_a, args[4], n, m])

    return types.int64(fn, du, u, p, t, k), codegen


vjp_from_address = function_from_address(VJP_TYPE, "vjp_from_address")


class StepControl(NamedTuple):
    """Tolerances and limits of an adaptive solve, and the problem's mass matrix."""

    rtol: float
    atol: float
    dt0: float  # the first step (0: automatic)
    dtmin: float  # the smallest step before DT_UNDERFLOW
    max_steps: int
    group: int  # 0: the error norm over the whole state; g > 0: the largest of the norms of
    #             consecutive groups of g components (one trajectory each of a lockstep system)
    mass: np.ndarray  # (n, n) float64: M of M du/dt = f (the families with mass matrices
    #                   read it); (0, 0): the identity
    watch: float = 0.0  # > 0: the switch watch of the automatic method (ode._auto): the
    #                     explicit family stops with SWITCH when h |lambda| stays above it,
    #                     the Rosenbrock family when it stays below; 0: off
    watch_steps: int = 0  # the accepted steps in a row the watch needs
    row0: int = 0  # the first row of store.kstore the family's stages go to (the others of
    #                the step are zeroed): the automatic method's shared store


NO_MASS = np.zeros((0, 0))
"""``StepControl.mass`` of a problem without a mass matrix (``M = I``)."""


class EventTable(NamedTuple):
    """The state-dependent events of a solve as the loop takes them (``scichains.ode._events``
    builds it; ``Stops.events`` is None without events). ``m`` events, records for up to
    ``len(times)``."""

    cond: int  # address of the conditions (uint64): a C-callable of LEAN_RHS_SIGNATURE writing
    #            g_i(u, t, p) into its first argument (length m; the length passed is u's)
    affect: int  # address of the affects (RHS_SIGNATURE): its first argument flags the events
    #              (1.0) whose affect changes u in place; 0 where no event has one
    max_events: int  # events allowed in one solve (more: status MAX_EVENTS)
    points: int  # interior points of each step where the conditions are checked for sign
    #              changes that the step's end does not show (two crossings in one step)
    direction: np.ndarray  # (m,) int64: +1 upward crossings only, -1 downward, 0 both
    terminal: np.ndarray  # (m,) int64: 1 ends the solve at the event
    has_affect: np.ndarray  # (m,) int64: 1 if the event has an affect
    mark: np.ndarray  # (m,) int64: 1 if the event happened (or g was 0) at the last point
    state: np.ndarray  # int64 [events recorded, error (1 condition, 2 affect raised), search
    #                    phase, candidate, iterations, side]: the loop's, kept over a GROW
    g: np.ndarray  # (8, m) float64: g at the last point, at the best point, at the trial
    #                point, at the bracket's crossed end; the flags of the events fired; the
    #                interval (step lengths) where the interior check saw each one cross,
    #                and its root there
    s: np.ndarray  # (8,) float64: the root search's step lengths (see _event_search)
    times: np.ndarray  # (cap,) float64: the time of each recorded event
    which: np.ndarray  # (cap,) int64: the index of each recorded event
    states: np.ndarray  # (cap, n) float64: the state at each (before its affect)


class Stops(NamedTuple):
    """Times the stepper lands on, in the direction of integration, ending with ``t1``, the
    jumps (doses) at them, and the state-dependent events."""

    times: np.ndarray  # float64
    jump_index: np.ndarray  # int64: per stop, the index of its first jump, or -1
    jump_count: np.ndarray  # int64: per stop, how many jumps
    jump_state: np.ndarray  # int64: per jump, the state it adds to
    jump_amount: np.ndarray  # float64: per jump, the amount
    events: EventTable | None = None  # None: no events (the loop compiles without them)


class StepStore(NamedTuple):
    """What the stepper writes (see :func:`integrate`)."""

    ts: np.ndarray  # (cap,) step times; after the last entry the step it would try next
    us: np.ndarray  # (cap, n) states at the step times
    fs: np.ndarray  # (cap, n) f there (right limits)
    stats: np.ndarray  # int64 [stored, nf, naccept, nreject, steps, stop index, resume]:
    #                    out, and in with stats[6] = 1 to resume after GROW (buffers grown)
    kstore: np.ndarray  # (cap, s, n) the stages of the step ending at each entry, or
    #                     (0, s, n) for none
    astore: np.ndarray  # (cap, s, R) the network work buffer of each stage's evaluation
    #                     (R = k.work.size; R = 0 for none): a network right-hand side
    #                     leaves its activations there for the adjoint sweep
    carry: np.ndarray  # (3 + R,) the controller's state for a resume
    fail: np.ndarray  # (1 + n,) on RHS_ERROR the time and state of the failed call


_F2 = types.float64[:, ::1]
_F3 = types.float64[:, :, ::1]
CONTROL_TYPE = types.NamedTuple(
    (types.float64,) * 4 + (types.int64,) * 2 + (_F2, types.float64, types.int64, types.int64),
    StepControl,
)
EVENTS_TYPE = types.NamedTuple(
    (types.uint64,) + (types.int64,) * 3 + (I64,) * 5 + (_F2, F64, F64, I64, _F2), EventTable
)
STOPS_TYPE = types.NamedTuple((F64, I64, I64, I64, F64, types.none), Stops)
"""The stops of a solve without events."""
EVENT_STOPS_TYPE = types.NamedTuple((F64, I64, I64, I64, F64, EVENTS_TYPE), Stops)
"""The stops of a solve with events (the kernels compiled for them on first use)."""
STORE_TYPE = types.NamedTuple((F64, _F2, _F2, I64, _F3, _F3, F64, F64), StepStore)


@numba.njit(**FLAGS)
def store_point(ts, us, fs, m, t, u, du):
    """Keep entry ``m`` of the dense output: time, state and derivative."""
    ts[m] = t
    for i in range(u.shape[0]):
        us[m, i] = u[i]
        fs[m, i] = du[i]


@numba.njit(**FLAGS)
def record_failure(fail, t, x):
    """``fail = [t, x]``: where a user function raised (Python re-runs it there)."""
    fail[0] = t
    for i in range(x.shape[0]):
        fail[1 + i] = x[i]


_ADAPTERS: dict[int, tuple] = {}


def register_cfunc(f, cfunc, takes_kernel: bool) -> None:
    """Use ``cfunc`` (compiled ahead, e.g. cached by a generated module) as the C-callable
    of the dispatcher ``f`` instead of compiling an adapter per problem. ``cfunc`` may also be
    a :class:`LazyCfunc`, compiled (or loaded from the cache) the first time a problem uses
    ``f``."""
    _ADAPTERS[id(f)] = (f, cfunc, takes_kernel)


class LazyCfunc:
    """``numba.cfunc(sig, **CFUNC_FLAGS)(fn)``, compiled on first use instead of at import.

    A module-level ``numba.cfunc`` compiles when its module is imported: with a cold cache,
    importing ``scichains.models`` compiled the lockstep and neural-ODE right-hand sides and
    vjps (~7 s, measured on an AMD EPYC Zen 4) for every user, whatever they went on to use.
    """

    def __init__(self, sig, fn):
        self._sig = sig
        self._fn = fn
        self._made = None
        self._lock = threading.Lock()

    def get(self):
        """The compiled ``numba.cfunc``."""
        with self._lock:
            if self._made is None:
                self._made = numba.cfunc(self._sig, **CFUNC_FLAGS)(self._fn)
            return self._made
