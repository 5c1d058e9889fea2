"""Measured inputs: :class:`Interpolation` of sampled signals, and the compiled adapters that
hand their values at ``t`` to a right-hand side ``f(du, u, p, t, x)``.

Design. A problem with ``inputs=`` gets a compiled right-hand side of the ordinary form
``g(du, u, p, t)`` (made here, once per problem): it evaluates the interpolant at ``t`` into a
buffer on its own stack frame (:func:`stack_vector`: no allocation, nothing shared between
threads) and calls the user's ``f(du, u, p, t, x)``. Every solver family, the ensembles and the
adjoints call ``g`` as they call any right-hand side, so none of them has code for inputs. The
interpolation table is compiled into ``g`` as a constant (numba freezes a global array), which
keeps ``g`` valid in another process and the data immutable. The vjps are adapted the same way
(:func:`input_vjp`, :func:`automatic_input_vjp`): the inputs are data, only ``u`` and ``p`` are
differentiated.
"""

from __future__ import annotations

import inspect
import re

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .._jit import FLAGS
from ..nn._validate import as_real

KINDS = ("constant", "linear", "cubic", "akima")


@intrinsic
def stack_vector(typingctx, n):
    """A float64 vector of length ``n`` on the caller's stack frame (LLVM ``alloca``): valid
    until the calling compiled function returns, never allocated on the heap. A literal
    ``n`` (a global constant) reserves it once in the function's entry block."""
    if not isinstance(n, types.Integer):
        return None
    arrty = types.Array(types.float64, 1, "C")

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        double = context.get_value_type(types.float64)
        if isinstance(signature.args[0], types.IntegerLiteral):
            size = signature.args[0].literal_value
            data = cgutils.alloca_once(builder, double, size=max(size, 1))
            length = context.get_constant(types.intp, size)
        else:
            length = context.cast(builder, args[0], signature.args[0], types.intp)
            data = builder.alloca(double, size=length)
        ary = context.make_array(arrty)(context, builder)
        itemsize = context.get_constant(types.intp, 8)
        context.populate_array(
            ary,
            data=data,
            shape=cgutils.pack_array(builder, [length], ty=intp),
            strides=cgutils.pack_array(builder, [itemsize], ty=intp),
            itemsize=itemsize,
            meminfo=None,
        )
        return ary._getvalue()

    return arrty(n), codegen


# The compiled evaluation of the interpolant at t into x (m values), as source written into the
# body of each adapter below. ``TABLE``: the N knots, then per knot i the coefficients a, b, c,
# d (each M values) of a + s (b + s (c + s d)), s = t - ts[i], valid on [ts[i], ts[i + 1]);
# the last knot's row is its value; outside [ts[0], ts[-1]] the end values. Called as a
# separately compiled function from the adapter instead, it cost 60-70 ns more per call from
# 4 channels on (measured, AMD EPYC Zen 1: 71 ns against 11 ns with m = 4), where the inline
# version costs as much as with m = 1.
_EVALUATE = """
    i = 0
    s = 0.0
    if t >= TABLE[N - 1]:
        i = N - 1
    elif t > TABLE[0]:
        hi = N - 1  # TABLE[i] <= t < TABLE[hi]
        while hi - i > 1:
            mid = (i + hi) >> 1
            if TABLE[mid] <= t:
                i = mid
            else:
                hi = mid
        s = t - TABLE[i]
    base = N + 4 * M * i
    for j in range(M):
        a = TABLE[base + j]
        b = TABLE[base + M + j]
        c = TABLE[base + 2 * M + j]
        d = TABLE[base + 3 * M + j]
        X[j] = a + s * (b + s * (c + s * d))
"""


def search_source(table: str, n: str) -> str:
    """The source of the evaluation's first part, the interval ``i`` of ``t`` and ``s = t -
    ts[i]`` (0 outside the samples' range), its names replaced."""
    return _evaluation(table, n, "M", "X").split("    base = ")[0]


def _evaluation(table: str, n: str, m: str, x: str) -> str:
    """The source of the evaluation with its names replaced."""
    out = _EVALUATE
    for name, value in (("TABLE", table), ("N", n), ("M", m), ("X", x)):
        out = re.sub(rf"\b{name}\b", value, out)
    return out


def _natural_cubic(ts, y, h, slope):
    """Second derivatives of the natural cubic spline (zero at both ends), by the Thomas
    algorithm on the tridiagonal system of its continuity conditions (all channels at once)."""
    n = ts.size
    M = np.zeros_like(y)
    if n < 3:
        return M
    k = n - 2
    diag = 2.0 * (h[:-1] + h[1:])
    rhs = 6.0 * (slope[1:] - slope[:-1])
    cp = np.zeros(k)
    dp = np.zeros((k, y.shape[1]))
    cp[0] = h[1] / diag[0] if k > 1 else 0.0
    dp[0] = rhs[0] / diag[0]
    for i in range(1, k):
        den = diag[i] - h[i] * cp[i - 1]
        cp[i] = h[i + 1] / den if i < k - 1 else 0.0
        dp[i] = (rhs[i] - h[i] * dp[i - 1]) / den
    M[k] = dp[k - 1]
    for i in range(k - 2, -1, -1):
        M[i + 1] = dp[i] - cp[i] * M[i + 2]
    return M


def _akima_slopes(slope):
    """The derivatives at the knots of Akima's spline (H. Akima, "A new method of interpolation
    and smooth curve fitting based on local procedures", J. ACM 17(4), 589-602, 1970): a
    weighted mean of the two neighbouring secant slopes, weighted by the change of slope on the
    far side; two secants extrapolated linearly beyond each end."""
    k = slope.shape[0]  # intervals
    if k == 1:
        return np.vstack([slope, slope])
    ext = np.empty((k + 4, slope.shape[1]))
    ext[2 : k + 2] = slope
    ext[1] = 2.0 * ext[2] - ext[3]
    ext[0] = 2.0 * ext[1] - ext[2]
    ext[k + 2] = 2.0 * ext[k + 1] - ext[k]
    ext[k + 3] = 2.0 * ext[k + 2] - ext[k + 1]
    w1 = np.abs(ext[3:] - ext[2:-1])  # |m_{i+1} - m_i|, knot i = 0..k
    w2 = np.abs(ext[1:-2] - ext[:-3])  # |m_{i-1} - m_{i-2}|
    left, right = ext[1:-2], ext[2:-1]  # m_{i-1}, m_i
    den = w1 + w2
    flat = den <= 1e-9 * max(float(den.max()), np.finfo(float).tiny)
    safe = np.where(flat, 1.0, den)
    return np.where(flat, 0.5 * (left + right), (w1 * left + w2 * right) / safe)


def _coefficients(ts, y, kind):
    """``(n, 4, m)``: per knot the coefficients ``a, b, c, d`` of the piece starting there."""
    n, m = y.shape
    coef = np.zeros((n, 4, m))
    coef[:, 0] = y
    if kind == "constant":
        return coef
    h = np.diff(ts)
    slope = np.diff(y, axis=0) / h[:, None]
    if kind == "linear":
        coef[:-1, 1] = slope
    elif kind == "cubic":
        M = _natural_cubic(ts, y, h, slope)
        hc = h[:, None]
        coef[:-1, 1] = slope - hc * (2.0 * M[:-1] + M[1:]) / 6.0
        coef[:-1, 2] = 0.5 * M[:-1]
        coef[:-1, 3] = (M[1:] - M[:-1]) / (6.0 * hc)
    else:  # akima: cubic Hermite pieces on Akima's derivatives
        d = _akima_slopes(slope)
        hc = h[:, None]
        coef[:-1, 1] = d[:-1]
        coef[:-1, 2] = (3.0 * slope - 2.0 * d[:-1] - d[1:]) / hc
        coef[:-1, 3] = (d[:-1] + d[1:] - 2.0 * slope) / (hc * hc)
    return coef


class Interpolation:
    """A measured signal of ``m`` channels, interpolated between its samples: the inputs of
    ``ODEProblem(f, u0, tspan, p, inputs=...)``.

    Parameters
    ----------
    ts : array of shape ``(N,)``
        The sample times, strictly increasing and finite (``N >= 2``).
    values : array of shape ``(N, m)`` or ``(N,)`` (one channel)
        The samples, finite.
    kind : ``"linear"`` (default), ``"constant"``, ``"cubic"`` or ``"akima"``
        ``"constant"``: a zero-order hold, ``values[i]`` on ``[ts[i], ts[i + 1])``
        (right-continuous); ``"linear"``: straight lines between samples; ``"cubic"``: the
        natural cubic spline (twice continuously differentiable, zero second derivative at
        both ends); ``"akima"``: Akima's 1970 spline (once continuously differentiable, no
        overshoot near outliers). Constant and linear inputs are not smooth at the samples:
        the solvers stop at the sample times inside the time span (as at ``tstops``), so no
        step straddles one. For the splines, pass ``tstops=interp.ts`` to do the same.

    Outside ``[ts[0], ts[-1]]`` the interpolant holds the end values; an ``ODEProblem`` whose
    time span leaves that range is refused (``ValueError``): inputs are never extrapolated
    silently. Calling the object evaluates it: ``interp(t)`` has shape ``(m,)`` for a scalar
    ``t`` and ``(len(t), m)`` for a vector. The arrays are copied and read-only.
    """

    def __init__(self, ts, values, kind: str = "linear"):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
        ts = as_real(ts, "ts").copy()
        if ts.ndim != 1 or ts.size < 2:
            raise ValueError(
                f"ts must be a vector of at least 2 sample times, got shape {ts.shape}"
            )
        if not np.all(np.isfinite(ts)):
            raise ValueError("ts contains NaN or infinite values")
        if np.any(np.diff(ts) <= 0):
            i = int(np.flatnonzero(np.diff(ts) <= 0)[0])
            raise ValueError(
                f"ts must be strictly increasing: ts[{i}] = {ts[i]!r}, ts[{i + 1}] = {ts[i + 1]!r}"
            )
        y = as_real(values, "values").copy()
        if y.ndim == 1:
            y = y[:, None]
        if y.ndim != 2 or y.shape[0] != ts.size or y.shape[1] == 0:
            raise ValueError(
                f"values must have shape (len(ts), m) = ({ts.size}, m) or ({ts.size},), "
                f"got {np.shape(values)}"
            )
        if not np.all(np.isfinite(y)):
            bad = np.argwhere(~np.isfinite(y))[0]
            raise ValueError(f"values contains NaN or infinite values (at sample {bad[0]})")
        self.kind = kind
        self.ts = ts
        self.values = y
        self.m = int(y.shape[1])
        coef = _coefficients(ts, y, kind)
        self.table = np.concatenate([ts, coef.ravel()])
        for a in (self.ts, self.values, self.table):
            a.flags.writeable = False

    @property
    def stops(self) -> np.ndarray:
        """The times where the interpolant is not smooth and the solvers stop: the sample
        times for ``"linear"``, none for the splines. For ``"constant"`` also the float just
        below each sample time: the hold jumps at ``ts[i]``, and a step ending exactly there
        would see the new value in its last stages (at ``t + h``) while its other stages see
        the old one (the error control then shortens the steps before every sample: 7-12x
        the right-hand-side calls and errors 10x the tolerance, measured). With the extra
        stop the step before the sample ends a float short of it and sees the old value
        only, a step of one float's length crosses the sample (its error: that length times
        the jump), and the next step starts with the new value; in either direction of
        integration."""
        if self.kind == "linear":
            return self.ts
        if self.kind == "constant":
            return np.sort(np.concatenate([np.nextafter(self.ts, -np.inf), self.ts]))
        return self.ts[:0]

    @property
    def span(self) -> tuple[float, float]:
        """``(ts[0], ts[-1])``: the range a problem's time span must lie in."""
        return float(self.ts[0]), float(self.ts[-1])

    def __call__(self, t) -> np.ndarray:
        t = np.asarray(as_real(t, "t") if np.ndim(t) else as_real([t], "t")[0])
        n, m = self.ts.size, self.m
        i = np.clip(np.searchsorted(self.ts, t, side="right") - 1, 0, n - 1)
        inside = (t > self.ts[0]) & (t < self.ts[-1])
        s = np.where(inside, t - self.ts[i], 0.0)[..., None]
        a, b, c, d = np.moveaxis(self.table[n:].reshape(n, 4, m)[i], -2, 0)
        return a + s * (b + s * (c + s * d))

    def __repr__(self) -> str:
        return (
            f"Interpolation(kind={self.kind!r}, samples={self.ts.size}, m={self.m}, "
            f"span=({self.ts[0]}, {self.ts[-1]}))"
        )


def _compiled(source: str, name: str, env: dict):
    """The function ``name`` of ``source`` with the globals ``env`` (the user's functions and
    the table are globals, not closure variables, so that the automatic derivatives, which
    rewrite a function's globals, reach the user's code), compiled uncached."""
    scope = dict(env)
    scope["__name__"] = __name__
    exec(compile(source, f"<scichains input adapter {name}>", "exec"), scope)  # noqa: S102
    return numba.njit(**{**FLAGS, "cache": False})(scope[name])


def _table_env(interp: Interpolation) -> dict:
    return {
        "_TABLE": interp.table,
        "_N": int(interp.ts.size),
        "_M": interp.m,
        "_stack": stack_vector,
    }


_X = _evaluation("_TABLE", "_N", "_M", "x")
_RHS = (
    """
def input_rhs(du, u, p, t):
    x = _stack(_M)
"""
    + _X
    + """
    _user(du, u, p, t, x)
"""
)


# with network kernels k (ODEProblem(..., kernel=)): f(du, u, p, t, x, k) behind g(du, u, p, t, k)
_RHS_K = _RHS.replace("input_rhs(du, u, p, t)", "input_rhs(du, u, p, t, k)").replace(
    "_user(du, u, p, t, x)", "_user(du, u, p, t, x, k)"
)


def input_rhs(f, interp: Interpolation, kernel: bool = False):
    """``g(du, u, p, t)``: the interpolant at ``t`` on the stack, then ``f(du, u, p, t, x)``;
    with ``kernel``, ``g(du, u, p, t, k)`` calling ``f(du, u, p, t, x, k)``."""
    return _compiled(_RHS_K if kernel else _RHS, "input_rhs", {**_table_env(interp), "_user": f})


_VJP = _RHS.replace("input_rhs(du, u, p, t)", "input_vjp(v, u, p, t, ubar, pbar)").replace(
    "_user(du, u, p, t, x)", "_user(v, u, p, t, x, ubar, pbar)"
)
_VJP_K = _RHS.replace("input_rhs(du, u, p, t)", "input_vjp(v, u, p, t, k, ubar, pbar)").replace(
    "_user(du, u, p, t, x)", "_user(v, u, p, t, x, k, ubar, pbar)"
)


def input_vjp(vjp, interp: Interpolation, kernel: bool = False):
    """``vjp(v, u, p, t, ubar, pbar)`` from the user's ``vjp(v, u, p, t, x, ubar, pbar)``;
    with ``kernel``, ``vjp(v, u, p, t, k, ubar, pbar)`` from ``vjp(v, u, p, t, x, k, ubar,
    pbar)``."""
    return _compiled(_VJP_K if kernel else _VJP, "input_vjp", {**_table_env(interp), "_user": vjp})


SPLIT = """
def input_split_rhs(du, u, q, t):
    _user(du, u, q[:_NP], t, q[_NP:])
"""

# the automatic vjp differentiates input_split_rhs with respect to (u, q = [p, x]); these
# hand it [p, x(t)] and keep the p part of its q-gradient
SPLIT_HEAD = """
def input_auto_vjp(v, u, p, t, ubar, pbar):
    q = _stack(_NP + _M)
    qbar = _stack(_NP + _M)
    for r in range(_NP):
        q[r] = p[r]
    x = q[_NP:]
"""
SPLIT_TAIL = """
    _vjp(v, u, q, t, ubar, qbar)
    for r in range(_NP):
        pbar[r] = qbar[r]
"""
_SPLIT_VJP = SPLIT_HEAD + _X + SPLIT_TAIL


def with_kernel(source: str) -> str:
    """The source of a split vjp adapter whose automatic vjp takes the network kernels
    ``k`` (a traced vjp does)."""
    return source.replace("t, ubar, pbar)", "t, k, ubar, pbar)").replace(
        "t, ubar, qbar)", "t, k, ubar, qbar)"
    )


def split_vjp(f, interp: Interpolation, u0, p, t0, trace: bool, make):
    """``(vjp, how, takes_k)``: the exact vjp of ``f(du, u, p, t, x)`` as a function of ``(u,
    q = [p, x])``, made by ``make`` (:func:`scichains.ode.derivatives._autodiff.
    automatic_vjp`), how it was made, and whether it takes the network kernels ``k``."""
    split = _compiled(SPLIT, "input_split_rhs", {"_user": f, "_NP": int(p.size)})
    q0 = np.concatenate([p, interp(t0)])
    vjp, how = make(split, u0, q0, t0, trace=trace)
    return vjp, how, len(inspect.signature(vjp.py_func).parameters) == 7


def automatic_input_vjp(f, interp: Interpolation, u0, p, t0, trace: bool, make):
    """``(vjp, how)``: the exact vjp of ``f(du, u, p, t, x)`` with respect to ``u`` and ``p``
    (:func:`split_vjp`), adapted to take ``x`` from the interpolant."""
    vjp, how, takes_k = split_vjp(f, interp, u0, p, t0, trace, make)
    env = {**_table_env(interp), "_vjp": vjp, "_NP": int(p.size)}
    source = with_kernel(_SPLIT_VJP) if takes_k else _SPLIT_VJP
    return _compiled(source, "input_auto_vjp", env), how


def check_span(interp: Interpolation, tspan) -> None:
    """``ValueError`` unless the time span lies within the samples' range."""
    lo, hi = interp.span
    a, b = min(tspan), max(tspan)
    if a < lo or b > hi:
        raise ValueError(
            f"tspan {tuple(tspan)!r} leaves the range of the inputs' samples [{lo!r}, {hi!r}]: "
            "inputs are not extrapolated; give samples covering the time span"
        )
