"""Exact derivatives of a plain compiled right-hand side: symbolic tracing (:mod:`._trace`)
where the code allows it, else the complex step described here.

For ``f(du, u, p, t)`` written with real arithmetic, ``Im f(u + i h e_j) / h`` is the j-th
column of the Jacobian to rounding (no subtraction, so ``h = 1e-30`` loses nothing): the
complex-step derivative (Squire & Trapp 1998; Martins et al. 2003). numba compiles the user's
own Python source a second time for complex128 arrays, with these names rebound in its
globals so that the real-valued semantics survive:

- ``math``: the analytic functions (exp, log, sqrt, sin, cos, tanh, pow, ...) on complex
  arguments (their numpy counterparts); ``math.fabs`` as ``abs`` below;
- ``abs``, ``min``, ``max``: decided on the real part (``abs(z) = -z`` where ``Re z < 0``);
- ``np``: numpy with ``abs``/``absolute``/``fabs``/``maximum``/``minimum``/``sign``/``clip``
  rebound the same way;
- comparisons ``<``, ``<=``, ``>``, ``>=`` between a complex and a real or complex number
  compare real parts (registered with numba for the whole process);
- ``np.empty``/``zeros``/``ones`` (and ``empty_like``/``zeros_like``) make complex128 scratch;
- other ``@njit`` functions the right-hand side calls through its globals are recompiled the
  same way (recursively).

Branches on values (``if u[0] < 0.1``) are therefore fine (the derivative of the branch
taken, as with dual numbers). Not differentiable this way: a network called through
``nn.chain_forward`` (its kernels are real), integer casts of values, ``math.floor`` and
other functions without a complex form. The derivative is checked at construction against
central differences, and a mismatch or a compile failure is a clear ``TypeError``.
"""

from __future__ import annotations

import math
import operator
import types as pytypes
import weakref

import numba
import numpy as np
from numba import types
from numba.core.registry import CPUDispatcher
from numba.extending import overload

H = 1e-30  # the complex step

# automatic vjps made so far, per function and (n, len(p), traced?): a new problem on the same
# function reuses them (building one compiles for about a second)
_MADE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _is_complex(t) -> bool:
    return isinstance(t, types.Complex)


def _real_order(op):
    def typer(a, b):
        if not (_is_complex(a) or _is_complex(b)):
            return None
        if not all(isinstance(x, (types.Number, types.Boolean)) for x in (a, b)):
            return None

        def impl(a, b):
            return op(a.real, b.real)

        return impl

    return typer


for _op in (operator.lt, operator.le, operator.gt, operator.ge):
    overload(_op)(_real_order(_op))


@numba.njit(cache=False)
def _cabs(x):
    return -x if x.real < 0.0 else x


@numba.njit(cache=False)
def _cmax(a, b):
    return a if a.real >= b.real else b


@numba.njit(cache=False)
def _cmin(a, b):
    return a if a.real <= b.real else b


@numba.njit(cache=False)
def _csign(x):
    return 1.0 if x.real > 0.0 else (-1.0 if x.real < 0.0 else 0.0)


@numba.njit(cache=False)
def _cclip(x, lo, hi):
    return _cmin(_cmax(x, lo), hi)


@numba.njit(cache=False)
def _cpow(x, y):
    return x**y


@numba.njit(cache=False)
def _cempty(shape, dtype=None):
    return np.empty(shape, np.complex128)


@numba.njit(cache=False)
def _czeros(shape, dtype=None):
    return np.zeros(shape, np.complex128)


@numba.njit(cache=False)
def _cones(shape, dtype=None):
    return np.ones(shape, np.complex128)


@numba.njit(cache=False)
def _cempty_like(a, dtype=None):
    return np.empty(a.shape, np.complex128)


@numba.njit(cache=False)
def _czeros_like(a, dtype=None):
    return np.zeros(a.shape, np.complex128)


def _math_shim():
    m = pytypes.ModuleType("scichains_complex_step_math")
    for name in dir(math):
        if not name.startswith("_"):
            setattr(m, name, getattr(math, name))
    m.exp, m.log, m.log10, m.sqrt = np.exp, np.log, np.log10, np.sqrt
    m.sin, m.cos, m.tan = np.sin, np.cos, np.tan
    m.asin, m.acos, m.atan = np.arcsin, np.arccos, np.arctan
    m.sinh, m.cosh, m.tanh = np.sinh, np.cosh, np.tanh
    m.asinh, m.acosh, m.atanh = np.arcsinh, np.arccosh, np.arctanh
    m.expm1, m.log1p = np.expm1, np.log1p
    m.pow = _cpow
    m.fabs = _cabs
    return m


def _numpy_shim():
    m = pytypes.ModuleType("scichains_complex_step_numpy")
    for name in dir(np):
        if not name.startswith("_"):
            try:
                setattr(m, name, getattr(np, name))
            except AttributeError:  # pragma: no cover - lazily removed numpy names
                pass
    m.abs = m.absolute = m.fabs = _cabs
    m.maximum, m.minimum, m.sign, m.clip = _cmax, _cmin, _csign, _cclip
    m.empty, m.zeros, m.ones = _cempty, _czeros, _cones  # scratch holds complex values
    m.empty_like, m.zeros_like = _cempty_like, _czeros_like
    return m


_MATH = _math_shim()
_NUMPY = _numpy_shim()
_SHIMS = {
    _cabs,
    _cmax,
    _cmin,
    _csign,
    _cclip,
    _cpow,
    _cempty,
    _czeros,
    _cones,
    _cempty_like,
    _czeros_like,
}


def complex_step_version(f, memo: dict | None = None):
    """The user's ``@njit`` function recompiled with the rebound names above (a new,
    uncached dispatcher); other ``@njit`` functions it calls through its globals are
    rewritten the same way (recursively)."""
    memo = {} if memo is None else memo
    if f in memo:
        return memo[f]
    py = f.py_func
    g = dict(py.__globals__)
    fc = numba.njit(cache=False)(
        pytypes.FunctionType(
            py.__code__, g, py.__name__ + "_complex_step", py.__defaults__, py.__closure__
        )
    )
    memo[f] = fc
    for name, value in list(g.items()):
        if value is math:
            g[name] = _MATH
        elif value is np:
            g[name] = _NUMPY
        elif isinstance(value, CPUDispatcher) and value not in _SHIMS:
            g[name] = complex_step_version(value, memo)
    g["abs"], g["min"], g["max"] = _cabs, _cmin, _cmax
    return fc


def make_vjp(fc):
    """``vjp(v, u, p, t, ubar, pbar)`` from the complex-step Jacobian of ``fc``: ``n + len(p)``
    complex evaluations per call."""

    def vjp(v, u, p, t, ubar, pbar):
        n = u.shape[0]
        m = p.shape[0]
        x = np.empty(n + m, dtype=np.complex128)  # [u, p], stepped one entry at a time
        du = np.empty(n, dtype=np.complex128)
        for i in range(n):
            x[i] = u[i]
        for j in range(m):
            x[n + j] = p[j]
        uc = x[:n]
        pc = x[n:]
        for j in range(n + m):
            real = x[j].real
            x[j] = complex(real, H)
            fc(du, uc, pc, t)
            acc = 0.0
            for k in range(n):
                acc += v[k] * du[k].imag
            if j < n:
                ubar[j] = acc / H
            else:
                pbar[j - n] = acc / H
            x[j] = real

    return numba.njit(cache=False)(vjp)


def automatic_vjp(f, u0, p, t0, trace: bool = True):
    """``(vjp, method)``: an exact vjp for the plain compiled ``f(du, u, p, t)`` and how it was
    made, ``"traced"`` (symbolic tracing, :mod:`._trace`: reverse mode, about the cost of one
    right-hand side) where the code allows it, else ``"complex step"`` (``n + len(p)``
    complex evaluations per call). Checked at ``(u0, p, t0)`` against central differences;
    ``TypeError`` naming the reason when neither can be made."""
    key = (u0.size, p.size, trace)
    made = _MADE.setdefault(f, {})
    if key in made:  # made for this function before: only the check is per problem
        vjp, how, check = made[key]
        _check_against_differences(f, check, u0, p, t0)
        return vjp, how
    vjp, how, check = _make(f, u0, p, t0, trace)
    made[key] = (vjp, how, check)
    return vjp, how


def _make(f, u0, p, t0, trace):
    traced = _traced_vjp(f, u0, p, t0) if trace else None
    if traced is not None:
        vjp, kernel = traced

        def vjp6(v, u, p, t, ubar, pbar):
            vjp(v, u, p, t, kernel, ubar, pbar)

        _check_against_differences(f, vjp6, u0, p, t0)
        return vjp, "traced", vjp6
    try:
        fc = complex_step_version(f)
        vjp = make_vjp(fc)
        n = u0.size
        ub, pb = np.zeros(n), np.zeros(p.size)
        vjp(np.ones(n), u0.copy(), p.copy(), float(t0), ub, pb)
    except Exception as e:  # noqa: BLE001 - reported with the reason
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TypeError(
            "no automatic derivative for this right-hand side: compiling it for complex "
            f"numbers (the complex step) failed ({first}); write its vjp by hand "
            "(ODEProblem(..., vjp=...)) or build the model with SymbolicModel"
        ) from None
    _check_against_differences(f, vjp, u0, p, t0)
    return vjp, "complex step", vjp


def _traced_vjp(f, u0, p, t0):
    """``(vjp, kernel)``: the generated vjp of the traced right-hand side (SymbolicModel's
    code, taking the network kernel argument ``kernel``, unused), or None when
    the function cannot be traced or the traced expressions do not reproduce ``f`` (then the
    complex step serves)."""
    from ._symbolic import SymbolicModel
    from ._trace import NotTraceable, trace_rhs

    try:
        states, params, t, eqs, _ = trace_rhs(f, u0.size, p.size)
    except NotTraceable:
        return None
    uses_t = any(t in e.free_symbols for e in eqs)
    model = SymbolicModel(states, params, eqs, t=t if uses_t else None)
    kernel = model.kernel()
    r = np.random.default_rng(2).standard_normal(u0.size + p.size)
    points = [
        (u0, p),
        (
            u0 * (1.0 + 1e-2 * r[: u0.size]) + 1e-2 * r[: u0.size],
            p * (1.0 + 1e-2 * r[u0.size :]) + 1e-2 * r[u0.size :],
        ),
    ]
    want, got = np.empty(u0.size), np.empty(u0.size)
    for u, q in points:
        try:
            f(want, u.copy(), q.copy(), float(t0))
            model.rhs(got, u.copy(), q.copy(), float(t0), kernel)
        except Exception:  # noqa: BLE001 - a user error here is left to the complex step's
            return None
        if not np.all(np.isfinite(want)):
            continue
        if not np.allclose(got, want, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(want).max())):
            return None
    return model.vjp, kernel


def network_vjp(f, u0, p, t0, kernel):
    """``(vjp, kernel)`` for a right-hand side ``f(du, u, p, t, k)`` that calls a network
    through ``nn.chain_forward``: traced (:mod:`._trace`), the physics differentiated by SymPy
    and the network by its compiled vjp; ``kernel`` is the problem's with the scratch that
    vjp needs appended to its work buffer. Checked against central differences; ``ValueError``
    naming the reason when the function cannot be traced (the complex step cannot see through
    a network's real kernels)."""
    from .._abi import register_cfunc
    from ._codegen import load
    from ._trace import NotTraceable, network_scratch, network_vjp_source, trace_rhs

    try:
        states, params, t, eqs, calls = trace_rhs(f, u0.size, p.size, kernel)
    except NotTraceable as e:
        raise ValueError(
            "no automatic derivative for this network-calling right-hand side: tracing it "
            f"failed ({e}); it must call nn.chain_forward(k, p[a:b], x, out) with no branch on "
            "values (write its vjp by hand, or build the model with SymbolicModel and a "
            "NetworkTerm)"
        ) from None
    base = kernel.work.size
    source = network_vjp_source(states, params, eqs, calls, base)
    module = load(source)
    register_cfunc(module.vjp, module.vjp_cfunc, True)
    work = np.zeros(base + network_scratch(calls))
    kernel = kernel._replace(work=work)
    vjp = module.vjp

    def vjp6(v, u, p, t, ubar, pbar):
        vjp(v, u, p, t, kernel, ubar, pbar)

    _check_against_differences(f, vjp6, u0, p, t0, kernel)
    return vjp, kernel


def _check_against_differences(f, vjp, u0, p, t0, kernel=None):
    """Refuse the vjp if it disagrees with central differences at ``(u0, p)`` and also at a
    point nearby (a kink at ``u0``, e.g. ``abs(u)`` at 0, fools the differences, not the
    complex step)."""
    mismatch = _mismatch(f, vjp, u0, p, t0, kernel)
    if mismatch is None:
        return
    r = np.random.default_rng(1).standard_normal(u0.size + p.size)
    u1 = u0 * (1.0 + 1e-3 * r[: u0.size]) + 1e-3 * r[: u0.size]
    p1 = p * (1.0 + 1e-3 * r[u0.size :]) + 1e-3 * r[u0.size :]
    if _mismatch(f, vjp, u1, p1, t0, kernel) is None:
        return
    raise TypeError(
        "no automatic derivative for this right-hand side: its complex-step derivative "
        f"disagrees with central differences at (u0, p, t0) ({mismatch}); it may use a "
        "function the complex step cannot see through (np.abs and friends through another "
        "name, integer casts, a network): write its vjp by hand or build the model with "
        "SymbolicModel"
    )


def _mismatch(f, vjp, u0, p, t0, kernel=None):
    """None, or where the vjp and central differences disagree."""
    n = u0.size
    rng = np.random.default_rng(0)
    v = rng.standard_normal(n)
    ub, pb = np.zeros(n), np.zeros(p.size)
    vjp(v, u0.copy(), p.copy(), float(t0), ub, pb)
    x0 = np.concatenate([u0, p])
    num = np.empty(x0.size)
    du_p, du_m = np.empty(n), np.empty(n)
    for j in range(x0.size):
        # relative to the value (a small parameter such as 1e-6 must not be stepped to 0)
        h = 1e-6 * (abs(x0[j]) if x0[j] != 0.0 else 1.0)
        xp, xm = x0.copy(), x0.copy()
        xp[j] += h
        xm[j] -= h
        k = () if kernel is None else (kernel,)
        f(du_p, xp[:n].copy(), xp[n:].copy(), float(t0), *k)
        f(du_m, xm[:n].copy(), xm[n:].copy(), float(t0), *k)
        num[j] = v @ (du_p - du_m) / (2 * h)
    got = np.concatenate([ub, pb])
    scale = max(1.0, float(np.max(np.abs(num))))
    bad = np.abs(got - num) > 1e-5 * scale
    if not bad.any():
        return None
    j = int(np.argmax(np.abs(got - num)))
    what = f"du[{j}]" if j < n else f"dp[{j - n}]"
    return f"{what}: {got[j]:.6g} vs {num[j]:.6g}"
