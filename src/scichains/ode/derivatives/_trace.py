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
    math_shim, np_shim, nn_shims = shims
    py = f.py_func if isinstance(f, CPUDispatcher) else f
    g = dict(py.__globals__)
    fc = pytypes.FunctionType(py.__code__, g, py.__name__, py.__defaults__, py.__closure__)
    memo[f] = fc
    for name, value in list(g.items()):
        if value is math:
            g[name] = math_shim
        elif value is np:
            g[name] = np_shim
        elif any(value is real for real, _ in nn_shims):
            g[name] = next(shim for real, shim in nn_shims if value is real)
        elif isinstance(value, CPUDispatcher):
            g[name] = _rewrite(value, memo, shims)
    g["abs"], g["min"], g["max"] = _on_numbers(abs), _on_numbers(min), _on_numbers(max)
    return fc


class NetworkCall:
    """One ``nn.chain_forward(k, p[a:b], x, out)`` met while tracing: the parameter slice,
    the input expressions and the output symbols standing for ``out``."""

    def __init__(self, a: int, b: int, inputs: list, outputs: list):
        self.a, self.b, self.inputs, self.outputs = a, b, inputs, outputs


def _network_shims(calls: list, params: list):
    """Stand-ins for ``scichains.nn.chain_forward`` (and the modules that hold it) that record
    each call in ``calls`` and fill ``out`` with fresh symbols."""
    import sympy as sp

    import scichains
    from scichains import nn
    from scichains.nn._compiled import M_NIN, M_NOUT, M_NPARAMS

    index = {sym: j for j, sym in enumerate(params)}

    def chain_forward(k, pn, x, out):
        js = [index.get(e) for e in pn] if isinstance(pn, np.ndarray) else [None]
        if not js or None in js or js != list(range(js[0], js[0] + len(js))):
            raise NotTraceable("the network's parameters must be a slice p[a:b] of p")
        meta = k.meta
        if len(x) != meta[M_NIN] or len(out) != meta[M_NOUT] or len(js) != meta[M_NPARAMS]:
            raise NotTraceable("chain_forward called with arrays of the wrong lengths")
        c = len(calls)
        inputs = [sp.sympify(e) for e in x]
        outputs = [sp.Symbol(f"U{c}_{j}", real=True) for j in range(len(out))]
        for e in inputs:
            if any(str(s).startswith("U") for s in e.free_symbols):
                raise NotTraceable("a network's input depends on a network's output")
        calls.append(NetworkCall(js[0], js[0] + len(js), inputs, outputs))
        for j, o in enumerate(outputs):
            out[j] = o

    def chain_vjp(*args):
        raise NotTraceable("chain_vjp in a right-hand side")

    nn_shim = pytypes.ModuleType("scichains_trace_nn")
    for name in dir(nn):
        if not name.startswith("_"):
            setattr(nn_shim, name, getattr(nn, name))
    nn_shim.chain_forward, nn_shim.chain_vjp = chain_forward, chain_vjp
    pkg_shim = pytypes.ModuleType("scichains_trace_pkg")
    for name in dir(scichains):
        if not name.startswith("_") and name != "nn":
            setattr(pkg_shim, name, getattr(scichains, name))
    pkg_shim.nn = nn_shim
    return [
        (nn.chain_forward, chain_forward),
        (nn.chain_vjp, chain_vjp),
        (nn, nn_shim),
        (scichains, pkg_shim),
    ]


def trace_rhs(f, n: int, m: int, kernel=None):
    """``(states, params, t, equations, calls)``: SymPy symbols and the expressions that the
    compiled ``f(du, u, p, t)`` (or ``f(du, u, p, t, k)`` with the network kernels ``kernel``)
    writes into ``du`` for symbolic ``u`` (``n``) and ``p`` (``m``); ``calls``: the
    :class:`NetworkCall` s, whose output symbols the equations may contain. Raises
    :class:`NotTraceable` with the reason when that is not possible."""
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
    calls: list = []
    math_shim, np_shim = _shims()
    fc = _rewrite(f, {}, (math_shim, np_shim, _network_shims(calls, params)))
    args = (du, u, p, t)
    if kernel is not None:  # its scratch holds expressions while tracing
        work = np.empty(kernel.work.shape, dtype=object)
        work.fill(sp.Integer(0))
        args += (kernel._replace(work=work),)
    try:
        fc(*args)
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
    return states, params, t, eqs, calls


def network_vjp_source(states, params, eqs, calls, base: int) -> str:
    """Source of a module defining ``vjp(v, u, p, t, k, ubar, pbar)`` (and its C-callable
    ``vjp_cfunc``) for traced equations with network calls: SymPy differentiates the
    physics, ``nn.chain_vjp`` the networks, and the chain rule joins them through the
    networks' inputs and outputs. Scratch lives in ``k.work[base:]`` (the caller extends the
    kernel's work buffer by :func:`network_scratch`)."""
    import sympy as sp

    from ._codegen import assign

    n = len(states)
    v = [sp.Symbol(f"v_{i}", real=True) for i in range(n)]
    total = sp.Add(*[v[i] * eqs[i] for i in range(n)])
    used = set().union(
        *[e.free_symbols for e in eqs], *[x.free_symbols for c in calls for x in c.inputs]
    )
    phys = [j for j, s in enumerate(params) if s in used]
    body = ["    " + f"u_{i} = u[{i}]" for i in range(n)]
    body += ["    " + f"p_{j} = p[{j}]" for j in phys]
    body += ["    " + f"v_{i} = v[{i}]" for i in range(n)]
    body += ["    w = k.work"]
    off = base
    layout = []
    for c in calls:
        nin, nout = len(c.inputs), len(c.outputs)
        zi, zo, vu, zb = off, off + nin, off + nin + nout, off + nin + 2 * nout
        off = zb + nin
        layout.append((zi, zo, vu, zb))
    gtmp = off
    zbs = [
        [sp.Symbol(f"zb{ci}_{m}", real=True) for m in range(len(c.inputs))]
        for ci, c in enumerate(calls)
    ]
    vus = [[total.diff(o) for o in c.outputs] for c in calls]
    full = total + sp.Add(
        *[zbs[ci][m] * c.inputs[m] for ci, c in enumerate(calls) for m in range(len(c.inputs))]
    )
    grads = [full.diff(x) for x in states] + [full.diff(params[j]) for j in phys]
    needed = set().union(*[e.free_symbols for e in grads + [x for v in vus for x in v]])
    for c, (zi, zo, _vu, _zb) in zip(calls, layout):
        nin, nout = len(c.inputs), len(c.outputs)
        body += [f"    zin = w[{zi}:{zi + nin}]"]
        body += assign([f"zin[{m}]" for m in range(nin)], c.inputs, f"a{zi}_")
        if needed & set(c.outputs):  # else chain_vjp's own forward pass is enough
            body += [
                f"    zout = w[{zo}:{zo + nout}]",
                f"    chain_forward(k, p[{c.a}:{c.b}], zin, zout)",
            ]
            body += ["    " + f"{c.outputs[j]} = zout[{j}]" for j in range(nout)]
    body += [f"    for j in range({len(params)}):", "        pbar[j] = 0.0"]
    for ci, (c, (zi, _zo, vu, zb)) in enumerate(zip(calls, layout)):
        nin, nout = len(c.inputs), len(c.outputs)
        body += [f"    vU = w[{vu}:{vu + nout}]"]
        body += assign([f"vU[{j}]" for j in range(nout)], vus[ci], f"y{ci}_")
        body += [
            f"    zbar = w[{zb}:{zb + nin}]",
            f"    g = w[{gtmp}:{gtmp + c.b - c.a}]",
            f"    chain_vjp(k, p[{c.a}:{c.b}], w[{zi}:{zi + nin}], vU, zbar, g)",
            f"    for j in range({c.b - c.a}):",
            f"        pbar[{c.a} + j] += g[j]",
        ]
        body += ["    " + f"{zbs[ci][m]} = zbar[{m}]" for m in range(nin)]
    targets = [f"ubar[{i}]" for i in range(n)] + [f"_pb{j}" for j in phys]
    body += assign(targets, grads, "z")
    body += ["    " + f"pbar[{j}] += _pb{j}" for j in phys]
    lines = [
        "# generated by scichains (automatic derivatives of a traced right-hand side)",
        "import math",
        "",
        "import numba",
        "",
        "from scichains._jit import FLAGS",
        "from scichains._status import call_status7",
        "from scichains.nn import chain_forward, chain_vjp",
        "from scichains.ode._abi import VJP_SIGNATURE",
        "",
        "",
        "def _vjp(v, u, p, t, k, ubar, pbar):",
        *body,
        "",
        "",
        "vjp = numba.njit(**FLAGS)(_vjp)",
        "# compiled before the C-callable that calls it: the same machine code whether this",
        "# process compiled them or loaded them from the cache (see ode/derivatives/_symbolic.py)",
        "vjp.compile(VJP_SIGNATURE.args)",
        "",
        "",
        "def _vjp_status(v, u, p, t, k, ubar, pbar):",
        "    return call_status7(vjp, v, u, p, t, k, ubar, pbar)",
        "",
        "",
        "_CF = {k: v for k, v in FLAGS.items() if k != 'nogil'}",
        "vjp_cfunc = numba.cfunc(VJP_SIGNATURE, **_CF)(_vjp_status)",
        "",
    ]
    return "\n".join(lines)


def network_scratch(calls) -> int:
    """Scratch (float64 entries) that :func:`network_vjp_source`'s code needs past the
    kernel's own work buffer."""
    per_call = sum(2 * len(c.inputs) + 2 * len(c.outputs) for c in calls)
    return per_call + max((c.b - c.a for c in calls), default=0)
