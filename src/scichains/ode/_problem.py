"""ODEProblem, and turning a user's right-hand side into the compiled function type."""

from __future__ import annotations

import numbers
import re
import threading
import types as types_
import warnings

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

from .._checks import all_finite
from .._status import call_status4, call_status5, call_status6, call_status7
from ..nn._validate import as_real
from ._abi import (
    _ADAPTERS,
    LEAN_RHS_SIGNATURE,
    NO_NETWORK,
    RHS_SIGNATURE,
    VJP_SIGNATURE,
    LazyCfunc,
    float64_pointer,
    register_cfunc,
)
from ._controls import input_parameter_functions
from ._dae import algebraic_part, check_mass_matrix, consistent_state
from ._inputs import Interpolation, automatic_input_vjp, check_span, input_rhs, input_vjp

F64 = numba.types.float64[::1]


def _call(f, du, u, p, t0, kernel, five):
    if five:
        f(du, u, p, t0, kernel)
    else:
        f(du, u, p, t0)


def _indexes_past(py, u0, p, t0, kernel, five, which):
    """Whether the IndexError of the probe goes away when ``which`` ("u" or "p") is padded
    with NaN: that array is the one indexed past its end."""
    pad = np.full(max(64, 4 * max(u0.size, p.size)), np.nan)
    u, q = u0, p
    if which == "u":
        u = np.concatenate([u0, pad])
    else:
        q = np.concatenate([p, pad])
    try:
        _call(py, np.full(u.size, np.nan), u, q, t0, kernel, five)
    except IndexError:
        return False
    except Exception:  # noqa: BLE001 - the NaN padding may upset the function otherwise
        return True
    return True


def _probe(f, u0, p, t0, kernel, five):
    """Run the right-hand side once as plain Python: an index past ``u0`` or ``p`` raises here
    (the compiled code has no bounds checks), and every component of ``du`` must be written.

    A ``ValueError`` from the network entry points (``nn.chain_forward``/``nn.chain_vjp``
    check the lengths of what they are given) is raised as it is; other exceptions are
    ignored, since numba-only constructs may not run as Python."""
    du = np.full(u0.size, np.nan)
    py = getattr(f, "py_func", f)
    try:
        _call(py, du, u0.copy(), p, t0, kernel, five)
    except IndexError as e:
        if _indexes_past(py, u0, p, t0, kernel, five, "p"):
            raise ValueError(
                f"p has length {p.size}, but the right-hand side indexes past it ({e}); "
                "check the length of p"
            ) from None
        if _indexes_past(py, u0, p, t0, kernel, five, "u"):
            raise ValueError(
                f"u0 has length {u0.size}, but the right-hand side indexes past it ({e}); "
                "check the length of u0"
            ) from None
        raise ValueError(
            f"the right-hand side indexes past the end of an array at (u0, t0) ({e}); check "
            f"the lengths of u0 (here {u0.size}) and p (here {p.size})"
        ) from None
    except ValueError as e:
        if str(e).startswith(("chain_forward:", "chain_vjp:")):
            raise ValueError(f"the right-hand side's network call failed at (u0, t0): {e}") from e
        return
    except Exception:  # noqa: BLE001 - numba-only constructs may not run as Python
        return
    if np.isnan(du).any():
        raise ValueError(
            f"the right-hand side did not set du[{int(np.argmax(np.isnan(du)))}] at (u0, t0), "
            f"or set it to NaN: u0 has length {u0.size}; check it matches the model"
        )


def _probe_inputs(f, u0, p, t0, x0, kernel=None):
    """:func:`_probe` for ``f(du, u, p, t, x)`` (or ``f(du, u, p, t, x, k)`` with network
    ``kernel``), first checking that ``f`` reads no more than the ``m`` input values."""
    py = f.py_func
    if kernel is not None:
        py6 = py

        def py(du, u, p, t, x):
            return py6(du, u, p, t, x, kernel)

    try:
        py(np.full(u0.size, np.nan), u0.copy(), p, t0, x0.copy())
    except IndexError:
        try:
            py(np.full(u0.size, np.nan), u0.copy(), p, t0, np.concatenate([x0, np.zeros(64)]))
        except Exception:  # noqa: BLE001 - not the inputs: _probe tells u0 and p apart
            pass
        else:
            raise ValueError(
                f"the right-hand side reads past the {x0.size} input value(s) x (the inputs "
                f"have {x0.size} channel(s)); check the shape of the Interpolation's values"
            ) from None
    except Exception:  # noqa: BLE001 - numba-only constructs may not run as Python
        pass
    _probe(py, u0, p, t0, x0, True)


def vjp_makers():
    """The functions that make a vjp of a compiled right-hand side, ``(automatic_vjp,
    network_vjp)``, registered by :mod:`scichains.ode.derivatives` (which imports this module,
    so it registers itself rather than being imported from here)."""
    if not _VJP_MAKERS:  # pragma: no cover - scichains.ode imports the derivatives package
        raise RuntimeError("scichains.ode.derivatives is not imported: import scichains.ode")
    return _VJP_MAKERS["automatic"], _VJP_MAKERS["network"]


def register_vjp_makers(automatic, network) -> None:
    """Called once by :mod:`scichains.ode.derivatives` (see :func:`vjp_makers`)."""
    _VJP_MAKERS["automatic"] = automatic
    _VJP_MAKERS["network"] = network


_VJP_MAKERS: dict = {}


def _check_p(p) -> np.ndarray:
    """``p`` as a contiguous float64 vector of finite numbers, else ``ValueError``."""
    p = as_real(p, "p")
    if p.ndim != 1:
        raise ValueError(f"p must be a vector, got shape {p.shape}")
    if all_finite(p):
        return p
    bad = np.flatnonzero(~np.isfinite(p))
    if bad.size:
        raise ValueError(
            f"p contains NaN or infinite values at index {', '.join(map(str, bad[:5]))}"
            f"{', ...' if bad.size > 5 else ''} (p[{bad[0]}] = {p[bad[0]]})"
        )
    return p


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUMBA_FRAMING = ("Failed in ", "During: ", "- Resolution failure", "- Of which", "^")


def compile_reason(error: BaseException) -> str:
    """The first line of a numba compile error that says what is wrong (``NameError: name
    'fi' is not defined``, ``Untyped global name 'fi'``, ``No implementation of function
    ...``), with the user's source line where numba names it; numba's framing lines ("Failed
    in nopython mode pipeline", "During: ...") and its terminal colours left out."""
    lines = [_ANSI.sub("", line).strip() for line in str(error).splitlines()]
    lines = [x for x in lines if x and not x.startswith(_NUMBA_FRAMING)]
    if not lines:
        return str(error).strip() or type(error).__name__
    at = next((i for i, x in enumerate(lines) if not x.startswith(('File "', ">>> "))), 0)
    reason = lines[at]
    if reason.endswith(":") and at + 1 < len(lines) and lines[at + 1].startswith(">>> "):
        reason = f"{reason} {lines[at + 1][4:]}"  # the signature numba could not type
    where = next((x for x in lines if x.startswith('File "')), None)
    return f"{reason} ({where.rstrip(':')})" if where else reason


def _arity_mismatch(error: BaseException) -> bool:
    return "argument types given, but function takes" in str(error)


def _compile_error(what, form, e4, e5) -> TypeError:
    """The TypeError for a user function that compiles in neither call form: the reason of
    the form the function was written for (the other form's 'signature mismatch' says
    nothing), the real reason first."""
    if _arity_mismatch(e4) and not _arity_mismatch(e5):
        detail = f"(as the form with the network kernels k) {compile_reason(e5)}"
    elif _arity_mismatch(e5) and not _arity_mismatch(e4):
        detail = compile_reason(e4)
    else:
        detail = f"{compile_reason(e4)}; with the network kernels k: {compile_reason(e5)}"
    return TypeError(
        f"the {what} could not be compiled as {form} with float64 arrays and t a float: {detail}"
    )


def frozen_globals(f, _seen=None) -> list[str]:
    """Names of the numpy arrays that the compiled function ``f`` (or a compiled function it
    calls by a global name) reads as globals or closure variables: numba compiles them into
    the machine code as constants, so changing them afterwards changes nothing."""
    seen = set() if _seen is None else _seen
    py = getattr(f, "py_func", None)
    if py is None or id(py) in seen or len(seen) > 50:
        return []
    if (getattr(py, "__module__", None) or "").startswith("scichains."):
        return []  # the library's own constants (tables) are meant to be compiled in
    seen.add(id(py))
    found = []
    codes = [py.__code__]
    names = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types_.CodeType))
    glb = py.__globals__
    for name in sorted(names):
        value = glb.get(name)
        if isinstance(value, np.ndarray):
            found.append(f"{name} (a global of {glb.get('__name__', '?')})")
        elif isinstance(value, CPUDispatcher):
            found.extend(frozen_globals(value, seen))
    for name, cell in zip(py.__code__.co_freevars, py.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, np.ndarray):
            found.append(f"{name} (a closure variable of {py.__qualname__})")
        elif isinstance(value, CPUDispatcher):
            found.extend(frozen_globals(value, seen))
    return found


class FrozenGlobalWarning(UserWarning):
    """A compiled user function reads a numpy array that is not an argument: numba froze its
    values into the compiled code when it was first compiled."""


def warn_frozen_globals(f, what: str) -> None:
    """Warn (:class:`FrozenGlobalWarning`) when ``f`` reads global or closure arrays."""
    names = frozen_globals(f)
    if names:
        warnings.warn(
            f"the {what} {getattr(f, '__name__', '?')!r} reads the array(s) {', '.join(names)}. "
            "numba compiles arrays that are not arguments into the function as constants: "
            "changing them later has no effect on any solve. Pass such values in p (or "
            "rebuild the function after changing them)",
            FrozenGlobalWarning,
            stacklevel=3,
        )


def _as_cfunc(f, sig, k_at, what, form):
    """Compile a user's function into a C-callable of signature ``sig`` (a ``numba.cfunc``).

    Accepted: an ``@njit`` function taking all the arguments of ``sig``, or all but the network
    kernels ``k`` (argument ``k_at``). A small adapter calling it is compiled once per problem
    (~0.2 s); the solver kernels themselves are compiled once per machine. Returns
    ``(cfunc, takes_kernel)``.
    """
    if not isinstance(f, CPUDispatcher):
        raise TypeError(
            f"the {what} must be compiled with numba (@numba.njit), with the signature "
            f"{form}; got {type(f).__name__}"
        )
    known = _ADAPTERS.get(id(f))
    if known is not None and known[0] is f and known[1]._sig == sig:
        cf = known[1]
        return (cf.get() if isinstance(cf, LazyCfunc) else cf), known[2]
    short = sig.args[:k_at] + sig.args[k_at + 1 :]
    try:
        f.compile(sig.args)
        five = True
    except Exception as e5:  # noqa: BLE001 - report both attempts below
        err5 = e5
        five = False
    if not five:
        try:
            f.compile(short)
        except Exception as e4:  # noqa: BLE001
            raise _compile_error(what, form, e4, err5) from e4
    # the adapters return a status: an exception raised in the user's code cannot cross the C
    # call, so it becomes 1 here (scichains._status), the solver stops, and Python re-runs the
    # function to raise it
    user = f
    if k_at == 4 and len(sig.args) == 5:
        if five:

            def adapter(du, u, p, t, k):
                return call_status5(user, du, u, p, t, k)

        else:

            def adapter(du, u, p, t, k):
                return call_status4(user, du, u, p, t)

    else:
        if five:

            def adapter(v, u, p, t, k, ubar, pbar):
                return call_status7(user, v, u, p, t, k, ubar, pbar)

        else:

            def adapter(v, u, p, t, k, ubar, pbar):
                return call_status6(user, v, u, p, t, ubar, pbar)

    cf = numba.cfunc(sig, cache=False)(adapter)
    register_cfunc(f, cf, five)
    return cf, five


_LEAN: dict[int, tuple] = {}


def _as_lean(f):
    """A right-hand side ``f(du, u, p, t)`` as a C-callable of LEAN_RHS_SIGNATURE (addresses
    of contiguous float64 vectors and their lengths), compiled once per function (~0.2 s)."""
    known = _LEAN.get(id(f))
    if known is not None and known[0] is f:
        return known[1]
    user = f

    def lean(du_address, u_address, p_address, t, n, m):
        du = numba.carray(float64_pointer(du_address), (n,))
        u = numba.carray(float64_pointer(u_address), (n,))
        p = numba.carray(float64_pointer(p_address), (m,))
        return call_status4(user, du, u, p, t)

    cf = numba.cfunc(LEAN_RHS_SIGNATURE, cache=False)(lean)
    _LEAN[id(f)] = (f, cf)
    return cf


def _as_rhs(f):
    """The right-hand side ``f(du, u, p, t[, k])`` as a C-callable of RHS_SIGNATURE."""
    return _as_cfunc(f, RHS_SIGNATURE, 4, "right-hand side", "f(du, u, p, t) or f(du, u, p, t, k)")


def _as_vjp(f):
    """The vjp ``vjp(v, u, p, t[, k], ubar, pbar)`` as a C-callable of VJP_SIGNATURE."""
    return _as_cfunc(
        f,
        VJP_SIGNATURE,
        4,
        "vjp",
        "vjp(v, u, p, t, ubar, pbar) or vjp(v, u, p, t, k, ubar, pbar) writing "
        "ubar = v^T df/du and pbar = v^T df/dp",
    )


_INPUT_RHS = (F64, F64, F64, numba.types.float64, F64)
_INPUT_VJP = (F64, F64, F64, numba.types.float64, F64, F64, F64)


def _input_functions(f, vjp, inputs, kernel):
    """``(g, vjp_g)``: the right-hand side ``f(du, u, p, t, x)`` (and the vjp ``vjp(v, u, p,
    t, x, ubar, pbar)``, or None) of a problem with ``inputs`` as functions of the ordinary
    form, which evaluate the interpolant at ``t`` (:mod:`scichains.ode._inputs`). With network
    kernels: ``f(du, u, p, t, x, k)`` and ``vjp(v, u, p, t, x, k, ubar, pbar)``, the vjp
    required (none is made automatically for a network with inputs)."""
    if not isinstance(inputs, Interpolation):
        raise TypeError(
            f"inputs must be a scichains.ode.Interpolation, got {type(inputs).__name__}"
        )
    if kernel is None:
        forms = (
            ("right-hand side", f, _INPUT_RHS, "f(du, u, p, t, x)"),
            ("vjp", vjp, _INPUT_VJP, "vjp(v, u, p, t, x, ubar, pbar)"),
        )
    else:
        if vjp is None:
            raise ValueError(
                "a right-hand side with network kernels (kernel=) and inputs= needs its vjp: "
                "pass vjp(v, u, p, t, x, k, ubar, pbar) (nn.chain_vjp on the network's part; "
                "models.NeuralODE(..., inputs=) brings one)"
            )
        K = numba.typeof(kernel)
        forms = (
            ("right-hand side", f, (*_INPUT_RHS, K), "f(du, u, p, t, x, k)"),
            ("vjp", vjp, (*_INPUT_VJP[:5], K, F64, F64), "vjp(v, u, p, t, x, k, ubar, pbar)"),
        )
    for what, fn, args, form in forms:
        if fn is None:
            continue
        if not isinstance(fn, CPUDispatcher):
            raise TypeError(
                f"with inputs=, the {what} must be compiled with numba (@numba.njit), with the "
                f"signature {form} (x: the {inputs.m} input values at t); got "
                f"{type(fn).__name__}"
            )
        warn_frozen_globals(fn, what)
        try:
            fn.compile(args)
        except Exception as e:  # noqa: BLE001 - reported with numba's reason
            raise TypeError(
                f"with inputs=, the {what} could not be compiled as {form} with float64 arrays, "
                f"t a float and x a float64 vector of the {inputs.m} input values at t"
                f"{' (k: the network kernels)' if kernel is not None else ''}: "
                f"{compile_reason(e)}"
            ) from None
    k = kernel is not None
    key = (id(f), id(vjp), id(inputs), k)
    known = _INPUT_ADAPTERS.get(key)
    if known is not None and known[0] is f and known[1] is vjp and known[2] is inputs:
        _INPUT_ADAPTERS[key] = _INPUT_ADAPTERS.pop(key)  # the most recently used last
        return known[3], known[4]
    g = input_rhs(f, inputs, k)
    vg = None if vjp is None else input_vjp(vjp, inputs, k)
    if len(_INPUT_ADAPTERS) >= 256:  # (the least recently used out)
        del _INPUT_ADAPTERS[next(iter(_INPUT_ADAPTERS))]
    _INPUT_ADAPTERS[key] = (f, vjp, inputs, g, vg)
    return g, vg


# the adapters made for (f, vjp, inputs, kernel or not): problems built again on the same
# functions and signal (a NeuralODE's per-thread problems, an objective per trajectory) reuse
# them instead of compiling them again (~0.3 s each); the entries hold their keys' objects
_INPUT_ADAPTERS: dict = {}


_VJP_LOCK = threading.RLock()
"""Held while a problem's vjp is made (:meth:`ODEProblem.ensure_vjp`)."""


class ODEProblem:
    """An initial value problem du/dt = f(u, p, t), u(t0) = u0, or M du/dt = f(u, p, t) with a
    constant mass matrix ``M``.

    Parameters
    ----------
    f : numba-compiled function
        ``f(du, u, p, t)`` writing the derivative into ``du`` (shape ``(n,)``), or
        ``f(du, u, p, t, k)`` where ``k`` is a ``scichains.nn.ChainKernel`` for right-hand
        sides that call a network (``nn.chain_forward(k, p_net, u, out)``). A plain Python
        function ``f(du, u, p, t)`` is accepted too, for the SUNDIALS solvers only (at Python
        speed); the explicit solvers and the adjoints need the compiled one.
    u0 : array of shape ``(n,)``
    tspan : (t0, t1)
        ``t1 < t0`` integrates backward in time.
    p : array, optional
        Parameters (float64 vector of finite numbers: NaN or inf raise ``ValueError``, here
        and when ``prob.p`` is assigned), passed to ``f`` unchanged.
    kernel : ChainKernel, optional
        The network kernels handed to ``f`` (float64: ``chain.kernel(np.float64)``).
    vjp : numba-compiled function, optional
        ``vjp(v, u, p, t, ubar, pbar)`` (or with ``k`` after ``t``) *writing*
        ``ubar = v^T df/du`` (shape ``(n,)``) and ``pbar = v^T df/dp`` (shape ``p.shape``):
        what the adjoint methods of :mod:`scichains.adjoint` need. Problems built by
        :class:`scichains.ode.SymbolicModel` bring exact generated ones.
    mass_matrix : array of shape ``(n, n)``, optional
        A constant ``M`` of ``M du/dt = f(u, p, t)`` (default: the identity). A singular
        ``M`` makes a differential-algebraic system (a zero row: an algebraic equation
        ``0 = f_i``) of index 1, solved by Rodas5P and RadauIIA5 (Rosenbrock23 too for a
        non-singular ``M``); the other solvers refuse it. ``u0`` must then satisfy the
        algebraic equations to the tolerances (checked at each solve), or ``solve(...,
        init="algebraic")`` computes the algebraic variables (:meth:`consistent_u0`).
        Gradients: Rodas5P with its discrete adjoint.
    inputs : Interpolation, optional
        Measured input signals (:class:`scichains.ode.Interpolation`, ``m`` channels). The
        right-hand side is then ``f(du, u, p, t, x)``, ``x`` the ``m`` input values at ``t``
        (filled by the solver, a float64 vector valid during the call), and a ``vjp``
        ``vjp(v, u, p, t, x, ubar, pbar)``. Every compiled method, the ensembles and the
        adjoints take such a problem; gradients are with respect to ``u0`` and ``p`` (the
        inputs are data). The solvers stop at the samples of constant and linear inputs.
        ``tspan`` must lie within the samples' range. With ``kernel`` too: ``f(du, u, p, t,
        x, k)`` and a ``vjp(v, u, p, t, x, k, ubar, pbar)``, which must be given.
    """

    def __init__(self, f, u0, tspan, p=None, kernel=None, vjp=None, mass_matrix=None, inputs=None):
        self.inputs = inputs
        self.user_f = f
        self.user_vjp = vjp
        if inputs is not None:  # f(du, u, p, t, x) behind an adapter g(du, u, p, t)
            f, vjp = _input_functions(f, vjp, inputs, kernel)
        self.f = f
        if isinstance(f, CPUDispatcher):
            warn_frozen_globals(f, "right-hand side")
            self._cfunc, five = _as_rhs(f)
            self.f_address = self._cfunc.address
        elif callable(f):
            self._cfunc, five = None, False
            self.f_address = 0
        else:
            raise TypeError(f"the right-hand side must be a function, got {type(f).__name__}")
        self.takes_kernel = five
        self.vjp = vjp
        if vjp is not None:
            warn_frozen_globals(vjp, "vjp")
        self._vjp_cfunc, self.vjp_takes_kernel = (None, False) if vjp is None else _as_vjp(vjp)
        self.vjp_address = 0 if vjp is None else self._vjp_cfunc.address
        self.automatic_vjp = False  # True once ensure_vjp made one
        # the explicit solvers' error norm: 0 over the whole state; g > 0 the largest of the
        # norms of consecutive groups of g states (a lockstep system of trajectories of size g)
        self.error_group = 0
        self.derivatives = "none" if vjp is None else "given"
        u0 = np.asarray(u0)
        if u0.dtype.kind not in "fiu":
            raise TypeError(f"u0 must hold real numbers, got dtype {u0.dtype}")
        u0 = np.ascontiguousarray(u0, dtype=np.float64)
        if u0.ndim != 1 or u0.size == 0:
            raise ValueError(f"u0 must be a non-empty vector, got shape {u0.shape}")
        if not np.all(np.isfinite(u0)):
            raise ValueError("u0 contains NaN or infinite values")
        self.u0 = u0
        if len(tspan) != 2:
            raise ValueError(f"tspan must be (t0, t1), got {tspan!r}")
        t0, t1 = tspan
        if not all(isinstance(x, numbers.Real) for x in (t0, t1)):
            raise TypeError(f"tspan must hold two real numbers, got {tspan!r}")
        t0, t1 = float(t0), float(t1)
        if not (np.isfinite(t0) and np.isfinite(t1)):
            raise ValueError(f"tspan must be finite, got {tspan!r}")
        if t0 == t1:
            raise ValueError(f"tspan has zero length: {tspan!r}")
        self.tspan = (t0, t1)
        self.p = np.zeros(0) if p is None else p
        if kernel is None:
            kernel = NO_NETWORK
        elif kernel.work.dtype != np.float64:
            raise TypeError("the network kernel must be float64: chain.kernel(np.float64)")
        self.kernel = kernel
        self.mass_matrix = check_mass_matrix(mass_matrix, u0.size)
        self._algebraic = None
        if inputs is None:
            _probe(f, u0, self.p, t0, kernel, five)
        else:
            check_span(inputs, self.tspan)
            _probe_inputs(
                self.user_f, u0, self.p, t0, inputs(t0), None if kernel is NO_NETWORK else kernel
            )

    def with_inputs(self, inputs: Interpolation, u0=None, tspan=None) -> ODEProblem:
        """This problem driven by other measured inputs (another experiment's): a new
        problem with the same right-hand side ``f(du, u, p, t, x)``, vjp (the one given, or
        made again automatically), network kernels (their scratch its own), mass matrix and
        parameters, ``inputs`` (an :class:`Interpolation` with as many channels as this
        problem's), and ``u0``/``tspan`` where given. Its input adapters are compiled for
        ``inputs`` (~0.2 s each for the right-hand side and a given vjp, ~0.4 s more for an
        automatic vjp, measured on an AMD EPYC Zen 4): the right-hand side's and a given
        vjp's once per ``Interpolation`` object (kept for the 256 most recently used), an
        automatic vjp for each new problem.
        ``TypeError`` if this problem takes no inputs; ``ValueError`` for another number of
        channels or a time span the samples do not cover."""
        if self.inputs is None or getattr(self, "input_slice", None) is not None:
            raise TypeError(
                "this problem's right-hand side takes no inputs (it was made without inputs=, "
                "or by with_input_parameters: call with_inputs on the problem it was made from)"
            )
        if not isinstance(inputs, Interpolation):
            raise TypeError(
                f"inputs must be a scichains.ode.Interpolation, got {type(inputs).__name__}"
            )
        if inputs.m != self.inputs.m:
            raise ValueError(
                f"inputs must have the problem's {self.inputs.m} channel(s), got {inputs.m}"
            )
        k = self.kernel
        kernel = (
            None
            if k is NO_NETWORK
            else k._replace(work=np.zeros_like(k.work), samples=k.samples.copy())
        )
        return ODEProblem(
            self.user_f,
            self.u0 if u0 is None else u0,
            self.tspan if tspan is None else tspan,
            self.p.copy(),
            kernel=kernel,
            vjp=self.user_vjp,
            mass_matrix=self.mass_matrix,
            inputs=inputs,
        )

    def with_input_parameters(self) -> ODEProblem:
        """This problem with its input samples as parameters, for gradients with respect to
        them (optimal control, a forcing fitted with the model): a new problem whose ``p`` is
        ``[p, inputs.values.ravel()]`` (sample ``i``, channel ``c`` at ``len(p) + i m + c``;
        ``input_slice`` selects them), whose right-hand side interpolates the samples it reads
        there and calls ``f(du, u, p, t, x)`` with the original ``p``. Every sensitivity
        method then gives dL/d(samples) as the tail of dL/dp. For ``"constant"``,
        ``"linear"`` and ``"cubic"`` inputs (at most 256 samples) and an automatic vjp (no
        ``vjp=``, no mass matrix), or a network's (``NeuralODE(..., inputs=).problem()``);
        ``TypeError``/``ValueError`` naming what is not supported."""
        network = self.kernel is not NO_NETWORK
        f, vjp, how, p, where = input_parameter_functions(self, network, vjp_makers()[0])
        kernel = {"kernel": self.kernel} if network else {}
        new = ODEProblem(f, self.u0.copy(), self.tspan, p, vjp=vjp, **kernel)
        new.inputs, new.derivatives, new.input_slice = self.inputs, how, where  # stops kept
        return new

    @property
    def algebraic(self):
        """The algebraic equations and variables of a singular mass matrix (an
        :class:`~scichains.ode._dae.AlgebraicPart`), or ``None`` (an ODE)."""
        if self.mass_matrix is None:
            return None
        if self._algebraic is None:
            part = algebraic_part(self.mass_matrix)
            self._algebraic = False if part is None else part
        return self._algebraic or None

    def consistent_u0(self, u0=None, p=None) -> np.ndarray:
        """A new ``u0`` whose algebraic variables satisfy the algebraic equations of ``M
        du/dt = f`` at ``t0`` (Newton on them; the components ``M`` sees kept): ``u0`` and
        ``p`` default to the problem's. Without a singular mass matrix, a copy of ``u0``."""
        u0 = self.u0 if u0 is None else np.ascontiguousarray(u0, dtype=np.float64)
        p = self.p if p is None else _check_p(p)
        part = self.algebraic
        if part is None:
            return u0.copy()
        return consistent_state(self, part, u0, p, self.tspan[0])

    @property
    def lean_address(self) -> int:
        """The address of the right-hand side as a C-callable of ``LEAN_RHS_SIGNATURE`` (what
        the ensemble loop calls: vector addresses instead of array structs), compiled on
        first use; 0 when there is none (a plain Python function, or one taking the network
        kernels ``k``)."""
        if self.f_address == 0 or self.takes_kernel:
            return 0
        return _as_lean(self.f).address

    @property
    def p(self) -> np.ndarray:
        """The parameters (float64 vector); assigning checks that they are finite."""
        return self._p

    @p.setter
    def p(self, value) -> None:
        self._p = _check_p(value)

    def ensure_vjp(self, method: str = "auto") -> None:
        """Give a problem without a vjp the exact one of its compiled right-hand side, made
        once and checked against central differences at ``(u0, p, t0)``: by symbolic tracing
        (the function run on SymPy symbols, its vjp generated as for SymbolicModel) where the
        code has no value-dependent branches or non-smooth functions, else by the complex
        step (:mod:`scichains.ode.derivatives._autodiff`). ``prob.derivatives`` then says which
        (``"traced"`` or ``"complex step"``). The adjoints call this. ``ValueError`` when the
        right-hand side is plain Python, or calls a network and cannot be traced (write the
        vjp, or use SymbolicModel); ``TypeError`` when neither way works. A right-hand side
        ``f(du, u, p, t, k)`` calling ``nn.chain_forward(k, p[a:b], x, out)`` is traced with
        the network as an opaque function differentiated by its compiled vjp (the problem's
        kernel then gets the scratch that vjp needs). ``method="complex step"`` skips
        the tracing (``"auto"``: tracing first)."""
        with _VJP_LOCK:  # one vjp per problem: threads solving it at once wait for the first
            self._ensure_vjp(method)

    def _ensure_vjp(self, method: str) -> None:
        if method not in ("auto", "complex step"):
            raise ValueError(f"method must be 'auto' or 'complex step', got {method!r}")
        if self.vjp_address != 0:
            return
        if self.f_address == 0:
            raise ValueError(
                "the problem has no vjp, and none can be made automatically for a plain Python "
                "right-hand side: compile it with @numba.njit, build it with "
                "scichains.ode.SymbolicModel (exact generated derivatives) or pass vjp= to "
                "ODEProblem"
            )
        automatic_vjp, network_vjp = vjp_makers()
        if self.inputs is not None:
            vjp, self.derivatives = automatic_input_vjp(
                self.user_f,
                self.inputs,
                self.u0,
                self.p,
                self.tspan[0],
                method == "auto",
                automatic_vjp,
            )
        elif self.takes_kernel:
            vjp, self.kernel = network_vjp(self.f, self.u0, self.p, self.tspan[0], self.kernel)
            self.derivatives = "traced"
        else:
            vjp, self.derivatives = automatic_vjp(
                self.f, self.u0, self.p, self.tspan[0], trace=method == "auto"
            )
        self.vjp = vjp
        self._vjp_cfunc, self.vjp_takes_kernel = _as_vjp(vjp)
        self.vjp_address = self._vjp_cfunc.address
        self.automatic_vjp = True

    def rhs(self, du, u, t, p=None) -> None:
        """Evaluate ``f`` from Python (the SUNDIALS solvers' callback); ``p`` defaults to
        the problem's."""
        p = self.p if p is None else p
        if self.takes_kernel:
            self.f(du, u, p, t, self.kernel)
        else:
            self.f(du, u, p, t)

    def __repr__(self) -> str:
        return f"ODEProblem(n={self.u0.size}, tspan={self.tspan})"
