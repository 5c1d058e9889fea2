"""Checks of hand-written derivatives against float64 central differences."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..nn._validate import as_real
from ..ode._problem import ODEProblem


@dataclass
class DerivativeCheck:
    """The result of :func:`check_vjp` or :func:`check_gradient`.

    ``analytic`` and ``numeric`` are the compared vectors (for a vjp: ``[v^T df/du,
    v^T df/dp]``), ``max_abs_error`` the largest difference, ``rel_error`` that difference over
    the largest magnitude of ``numeric`` (at least 1e-12), ``worst`` the entry where it occurs
    (e.g. ``"dp[2]"``), ``ok`` whether ``rel_error <= rtol``."""

    analytic: np.ndarray
    numeric: np.ndarray
    max_abs_error: float
    rel_error: float
    worst: str
    ok: bool

    def __repr__(self) -> str:
        verdict = "agrees" if self.ok else "DISAGREES"
        return (
            f"DerivativeCheck({verdict} with central differences: worst entry {self.worst}, "
            f"analytic {self.analytic[self._i]:.6g} vs numeric {self.numeric[self._i]:.6g}, "
            f"max abs error {self.max_abs_error:.3g}, relative {self.rel_error:.3g})"
        )

    @property
    def _i(self) -> int:
        return int(np.argmax(np.abs(self.analytic - self.numeric)))


def _compare(analytic, numeric, names, rtol) -> DerivativeCheck:
    diff = np.abs(analytic - numeric)
    i = int(np.argmax(diff)) if diff.size else 0
    scale = max(float(np.max(np.abs(numeric))) if numeric.size else 0.0, 1e-12)
    err = float(diff[i]) if diff.size else 0.0
    ok = bool(np.all(np.isfinite(analytic))) and err / scale <= rtol
    return DerivativeCheck(analytic, numeric, err, err / scale, names[i] if names else "-", ok)


def _steps(x, eps):
    return eps * np.maximum(1.0, np.abs(x))


def check_vjp(
    prob: ODEProblem, u=None, p=None, t=None, v=None, eps: float = 1e-6, rtol: float = 1e-6
) -> DerivativeCheck:
    """Compare the problem's vjp at ``(u, p, t)`` with central differences of its right-hand
    side (float64, steps ``eps * max(1, |x|)``), for the cotangent ``v``.

    Returns a :class:`DerivativeCheck`; a wrong vjp shows as ``ok = False`` with the worst
    entry named (``du[i]`` or ``dp[j]``). The vjp runs from Python here (its exceptions are
    raised as they are).

    Parameters
    ----------
    prob : ODEProblem
        A problem with a vjp; anything else raises ``TypeError``, a problem without a vjp
        ``ValueError``.
    u : array_like, optional
        The state, shape ``(n,)`` (default ``prob.u0``).
    p : array_like, optional
        The parameters, shape ``prob.p.shape`` (default ``prob.p``).
    t : float, optional
        The time (default ``t0``, the start of ``prob.tspan``).
    v : array_like, optional
        The cotangent, shape ``(n,)``; default a fixed random vector (standard normal, seed
        0), so that every entry of the Jacobian counts.
    eps : float
        Relative step of the central differences: ``eps * max(1, |x|)`` for each entry ``x``
        of ``u`` and ``p`` (default ``1e-6``).
    rtol : float
        ``ok`` is True when the vjp is finite and ``rel_error <= rtol`` (default ``1e-6``).

    ``u``, ``p``, ``v`` are converted to float64: non-real values raise ``TypeError``, another
    shape ``ValueError``.
    """
    if not isinstance(prob, ODEProblem):
        raise TypeError(f"check_vjp needs an ODEProblem, got {type(prob).__name__}")
    if prob.vjp is None:
        raise ValueError("the problem has no vjp to check (pass vjp= to ODEProblem)")
    n = prob.u0.size
    u = prob.u0.copy() if u is None else as_real(u, "u").copy()
    p = prob.p.copy() if p is None else as_real(p, "p").copy()
    if u.shape != (n,) or p.shape != prob.p.shape:
        raise ValueError(f"u must have shape ({n},) and p {prob.p.shape}; got {u.shape}, {p.shape}")
    t = prob.tspan[0] if t is None else float(t)
    v = np.random.default_rng(0).standard_normal(n) if v is None else as_real(v, "v")
    if v.shape != (n,):
        raise ValueError(f"v must have shape ({n},), got {v.shape}")
    ub, pb = np.zeros(n), np.zeros(p.size)
    if prob.vjp_takes_kernel:
        prob.vjp(v, u.copy(), p.copy(), t, prob.kernel, ub, pb)
    else:
        prob.vjp(v, u.copy(), p.copy(), t, ub, pb)

    def f(uu, pp):
        du = np.empty(n)
        prob.rhs(du, uu, t, pp)
        return du

    num_u = np.empty(n)
    for i, h in enumerate(_steps(u, eps)):
        up, um = u.copy(), u.copy()
        up[i] += h
        um[i] -= h
        num_u[i] = v @ (f(up, p) - f(um, p)) / (2.0 * h)
    num_p = np.empty(p.size)
    for j, h in enumerate(_steps(p, eps)):
        pp, pm = p.copy(), p.copy()
        pp[j] += h
        pm[j] -= h
        num_p[j] = v @ (f(u, pp) - f(u, pm)) / (2.0 * h)
    names = [f"du[{i}]" for i in range(n)] + [f"dp[{j}]" for j in range(p.size)]
    return _compare(np.concatenate([ub, pb]), np.concatenate([num_u, num_p]), names, rtol)


def check_gradient(fun, x, eps: float = 1e-6, rtol: float = 1e-5) -> DerivativeCheck:
    """Compare the gradient that ``fun(x)`` returns with central differences of its value.

    Returns a :class:`DerivativeCheck` naming the worst entry (``dx[j]``). ``fun`` is called
    ``1 + 2 len(x)`` times, each time on a copy of ``x``.

    Parameters
    ----------
    fun : callable
        ``fun(x)`` returns a tuple ``(value, gradient, ...)`` (as ``Objective.value_and_grad``,
        whose third output, dL/du0, is ignored, or the function of ``nn.loss_and_grad``); the
        gradient must have ``x``'s shape (else ``ValueError``); another return type raises
        ``TypeError``.
    x : array_like
        The point, a vector of real numbers (converted to float64); not a vector:
        ``ValueError``.
    eps : float
        Relative step of the central differences, ``eps * max(1, |x_j|)`` (default ``1e-6``).
    rtol : float
        ``ok`` is True when the gradient is finite and ``rel_error <= rtol`` (default
        ``1e-5``).
    """
    x = as_real(x, "x").copy()
    if x.ndim != 1:
        raise ValueError(f"x must be a vector, got shape {x.shape}")
    out = fun(x.copy())
    if not isinstance(out, tuple) or len(out) < 2:
        raise TypeError("fun(x) must return (value, gradient)")
    g = as_real(out[1], "the gradient fun returns")
    if g.shape != x.shape:
        raise ValueError(f"the gradient has shape {g.shape}, x {x.shape}")
    num = np.empty(x.size)
    for j, h in enumerate(_steps(x, eps)):
        xp, xm = x.copy(), x.copy()
        xp[j] += h
        xm[j] -= h
        num[j] = (float(fun(xp)[0]) - float(fun(xm)[0])) / (2.0 * h)
    return _compare(g.astype(np.float64), num, [f"dx[{j}]" for j in range(x.size)], rtol)
