"""Exact derivatives of a plain compiled right-hand side by symbolic tracing.

The user's ``f(du, u, p, t)`` is run once *as Python* (its ``py_func``) on arrays of SymPy
symbols: ``u[i]`` is the symbol ``u_i``, ``p[j]`` is ``p_j``, ``t`` is ``t``. What it writes
into ``du`` are the right-hand side's expressions, from which :class:`SymbolicModel` generates
the exact vjp (reverse mode: one pass, the cost of about one right-hand side), the same code a
user writing the model in SymPy would get. Names rebound in the traced function's globals:

- ``math`` and ``np``: their analytic functions (exp, log, sqrt, sin, ..., tanh, pow) as
  SymPy's, element-wise on arrays; ``np.empty``/``zeros``/``ones`` (and ``_like``) give
  object arrays that hold expressions;
- other ``@njit`` functions it calls are traced the same way (recursively).

Tracing fails, and the caller falls back to the complex step (:mod:`._autodiff`), where the
code depends on *values*: a branch or loop on ``u``/``p``/``t`` (SymPy cannot decide
``u_0 < 0.5``), ``abs``/``min``/``max``/``np.maximum`` and other non-smooth functions,
integer casts, anything numba-only. It is also skipped for large systems (more than
:data:`MAX_STATES` states) and when the expressions grow past :data:`MAX_OPS` operations
(a loop that would build one huge expression): the complex step costs more per call but
nothing to build.
"""

from __future__ import annotations

import math
import types as pytypes

import numpy as np
from numba.core.registry import CPUDispatcher

MAX_STATES = 200
MAX_OPS = 20_000


class NotTraceable(Exception):
    """The function cannot be traced symbolically (the reason is the message)."""


def _refuse(name):
    def f(*args, **kwargs):
        raise NotTraceable(f"{name} is not smooth (traced functions must be)")

    return f


def _on_numbers(builtin):
    """``builtin`` (abs, min, max) on plain numbers (loop bounds, sizes); refused on
    expressions of the state, parameters or time."""

    def f(*args):
        flat = args[0] if len(args) == 1 and not np.isscalar(args[0]) else args
        if all(isinstance(a, (int, float, np.number)) for a in flat):
            return builtin(*args)
        raise NotTraceable(f"{builtin.__name__} of a value is not smooth")

    return f


def _elementwise(fn):
    def g(x, *rest):
        if isinstance(x, np.ndarray):
            out = np.empty(x.shape, dtype=object)
            for idx in np.ndindex(x.shape):
                out[idx] = fn(x[idx], *rest)
            return out
        return fn(x, *rest)

    return g


def _object_array(fill):
    def make(shape, dtype=None):
        out = np.empty(shape, dtype=object)
        out.fill(fill)
        return out

    return make


def _object_like(fill):
    def make(a, dtype=None):
        return _object_array(fill)(np.shape(a))

    return make


def _shims():
    import sympy as sp

    fns = {
        "exp": sp.exp,
        "log": sp.log,
        "sqrt": sp.sqrt,
        "sin": sp.sin,
        "cos": sp.cos,
        "tan": sp.tan,
        "asin": sp.asin,
        "acos": sp.acos,
        "atan": sp.atan,
        "sinh": sp.sinh,
        "cosh": sp.cosh,
        "tanh": sp.tanh,
        "asinh": sp.asinh,
        "acosh": sp.acosh,
        "atanh": sp.atanh,
        "expm1": lambda x: sp.exp(x) - 1,
        "log1p": lambda x: sp.log(1 + x),
        "log10": lambda x: sp.log(x, 10),
        "log2": lambda x: sp.log(x, 2),
        "pow": lambda x, y: x**y,
    }
    m = pytypes.ModuleType("scichains_trace_math")
    for name in dir(math):
        if not name.startswith("_"):
            value = getattr(math, name)
            setattr(m, name, value if isinstance(value, float) else _refuse(f"math.{name}"))
    for name, fn in fns.items():
        setattr(m, name, fn)
    m.atan2 = sp.atan2
    m.hypot = lambda x, y: sp.sqrt(x * x + y * y)

    npm = pytypes.ModuleType("scichains_trace_numpy")
    for name in dir(np):
        if name.startswith("_"):
            continue
        try:
            setattr(npm, name, getattr(np, name))
        except AttributeError:  # pragma: no cover - lazily removed numpy names
            pass
    for name in (
        "abs absolute fabs maximum minimum sign clip floor ceil round rint trunc "
        "fmax fmin heaviside where"
    ).split():
        setattr(npm, name, _refuse(f"np.{name}"))
    npnames = {
        "arcsin": "asin",
        "arccos": "acos",
        "arctan": "atan",
        "arcsinh": "asinh",
        "arccosh": "acosh",
        "arctanh": "atanh",
        "power": "pow",
    }
    for name, fn in fns.items():
        if hasattr(np, name) and name != "pow":
            setattr(npm, name, _elementwise(fn))
    for name, base in npnames.items():
        setattr(npm, name, _elementwise(fns[base]))
    npm.square = _elementwise(lambda x: x * x)
    npm.arctan2 = _elementwise(sp.atan2)
    npm.empty = npm.zeros = _object_array(sp.Integer(0))
    npm.ones = _object_array(sp.Integer(1))
    npm.empty_like = npm.zeros_like = _object_like(sp.Integer(0))
    npm.ones_like = _object_like(sp.Integer(1))
    return m, npm


def _rewrite(f, memo: dict, shims):
    """A Python function running ``f``'s code with the traced names rebound."""
    if f in memo:
        return memo[f]
    math_shim, np_shim = shims
    py = f.py_func if isinstance(f, CPUDispatcher) else f
    g = dict(py.__globals__)
    fc = pytypes.FunctionType(py.__code__, g, py.__name__, py.__defaults__, py.__closure__)
    memo[f] = fc
    for name, value in list(g.items()):
        if value is math:
            g[name] = math_shim
        elif value is np:
            g[name] = np_shim
        elif isinstance(value, CPUDispatcher):
            g[name] = _rewrite(value, memo, shims)
    g["abs"], g["min"], g["max"] = _on_numbers(abs), _on_numbers(min), _on_numbers(max)
    return fc


def trace_rhs(f, n: int, m: int):
    """``(states, params, t, equations)``: SymPy symbols and the expressions that the compiled
    ``f(du, u, p, t)`` writes into ``du`` for symbolic ``u`` (``n``) and ``p`` (``m``).
    Raises :class:`NotTraceable` with the reason when that is not possible."""
    import sympy as sp

    if n > MAX_STATES:
        raise NotTraceable(f"{n} states (tracing is for at most {MAX_STATES})")
    states = [sp.Symbol(f"u_{i}", real=True) for i in range(n)]
    params = [sp.Symbol(f"p_{j}", real=True) for j in range(m)]
    t = sp.Symbol("t", real=True)
    u = np.empty(n, dtype=object)
    u[:] = states
    p = np.empty(m, dtype=object)
    p[:] = params
    du = np.full(n, None, dtype=object)
    fc = _rewrite(f, {}, _shims())
    try:
        fc(du, u, p, t)
    except NotTraceable:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the trace is a reason to fall back
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise NotTraceable(f"{type(e).__name__}: {first}") from None
    eqs = []
    for i, e in enumerate(du):
        if e is None:
            raise NotTraceable(f"du[{i}] was not written")
        try:
            e = sp.sympify(e)
        except (sp.SympifyError, TypeError) as err:
            raise NotTraceable(f"du[{i}] is not an expression: {err}") from None
        if not isinstance(e, sp.Expr) or e.has(sp.zoo, sp.nan) or e.is_extended_real is False:
            raise NotTraceable(f"du[{i}] is not a real expression: {e}")
        eqs.append(e)
    ops = sum(sp.count_ops(e) for e in eqs)
    if ops > MAX_OPS:
        raise NotTraceable(f"{ops} operations (tracing is for at most {MAX_OPS})")
    return states, params, t, eqs
