"""ODEProblem, and turning a user's right-hand side into the compiled function type."""

from __future__ import annotations

import numbers

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

from ._kernels import NO_NETWORK, RHS_SIGNATURE


def _probe(f, u0, p, t0, kernel, five):
    """Run the right-hand side once as plain Python: an index past ``u0`` raises here (the
    compiled code has no bounds checks), and every component of ``du`` must be written."""
    du = np.full(u0.size, np.nan)
    try:
        if five:
            f.py_func(du, u0.copy(), p, t0, kernel)
        else:
            f.py_func(du, u0.copy(), p, t0)
    except IndexError as e:
        raise ValueError(
            f"u0 has length {u0.size}, but the right-hand side indexes past it ({e}); "
            "check the length of u0 (and of p)"
        ) from None
    except Exception:  # noqa: BLE001 - numba-only constructs may not run as Python
        return
    if np.isnan(du).any():
        raise ValueError(
            f"the right-hand side did not set du[{int(np.argmax(np.isnan(du)))}] at (u0, t0), "
            f"or set it to NaN: u0 has length {u0.size}; check it matches the model"
        )


def _as_rhs(f):
    """Compile the user's right-hand side into a C-callable function of RHS_SIGNATURE.

    Accepted: an ``@njit`` function ``f(du, u, p, t, k)`` (``k``: the network kernels, see
    ``scichains.nn.ChainKernel``) or ``f(du, u, p, t)``. A small ``numba.cfunc`` adapter
    calling it is compiled once per problem (~0.2 s); the solver kernel itself is compiled once
    per machine. Returns ``(cfunc, takes_kernel)``.
    """
    if not isinstance(f, CPUDispatcher):
        raise TypeError(
            "the right-hand side must be compiled with numba (@numba.njit), with the "
            "signature f(du, u, p, t) or f(du, u, p, t, k), writing du in place; got "
            f"{type(f).__name__}"
        )
    try:
        f.compile(RHS_SIGNATURE)
        five = True
    except Exception as e5:  # noqa: BLE001 - report both attempts below
        err5 = e5
        five = False
    if not five:
        try:
            f.compile(RHS_SIGNATURE.args[:4])
        except Exception as e4:  # noqa: BLE001
            raise TypeError(
                "the right-hand side could not be compiled as f(du, u, p, t) with du, u, p "
                f"float64 arrays and t a float: {str(e4).splitlines()[0]}; nor as "
                f"f(du, u, p, t, k): {str(err5).splitlines()[0]}"
            ) from None
    user = f
    if five:

        def adapter(du, u, p, t, k):
            user(du, u, p, t, k)

    else:

        def adapter(du, u, p, t, k):
            user(du, u, p, t)

    return numba.cfunc(RHS_SIGNATURE, cache=False)(adapter), five


class ODEProblem:
    """An initial value problem du/dt = f(u, p, t), u(t0) = u0.

    Parameters
    ----------
    f : numba-compiled function
        ``f(du, u, p, t)`` writing the derivative into ``du`` (shape ``(n,)``), or
        ``f(du, u, p, t, k)`` where ``k`` is a ``scichains.nn.ChainKernel`` for right-hand
        sides that call a network (``nn.chain_forward(k, p_net, u, out)``).
    u0 : array of shape ``(n,)``
    tspan : (t0, t1)
        ``t1 < t0`` integrates backward in time.
    p : array, optional
        Parameters (float64 vector), passed to ``f`` unchanged.
    kernel : ChainKernel, optional
        The network kernels handed to ``f`` (float64: ``chain.kernel(np.float64)``).
    """

    def __init__(self, f, u0, tspan, p=None, kernel=None):
        self.f = f
        self._cfunc, five = _as_rhs(f)
        self.f_address = self._cfunc.address
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
        p = np.zeros(0) if p is None else np.ascontiguousarray(p, dtype=np.float64)
        if p.ndim != 1:
            raise ValueError(f"p must be a vector, got shape {p.shape}")
        self.p = p
        if kernel is None:
            kernel = NO_NETWORK
        elif kernel.work.dtype != np.float64:
            raise TypeError("the network kernel must be float64: chain.kernel(np.float64)")
        self.kernel = kernel
        _probe(f, u0, p, t0, kernel, five)

    def __repr__(self) -> str:
        return f"ODEProblem(n={self.u0.size}, tspan={self.tspan})"
