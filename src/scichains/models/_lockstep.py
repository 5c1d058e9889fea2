"""Many neural-ODE trajectories solved as one system in lockstep.

``m`` trajectories of du/dt = chain(u; p) stacked into one state of length ``m n``: each stage
evaluates the network on all ``m`` states at once with the batched tile kernels of
:mod:`scichains.nn` (SIMD across trajectories, as ``jax.vmap`` batches them), and the discrete
adjoint back-propagates through all ``m`` at once. The trajectories share one step size; the
error norm is the largest of the trajectories' own norms (``ODEProblem.error_group = n``), so
each trajectory is solved at least as accurately as it would be alone.

The kernel's work buffer holds one tile of ``T`` columns (``m`` rounded up to a multiple of 8,
the widest vector of float64 lanes): ``rows * T`` numbers, ``samples = arange(m)``.
"""

from __future__ import annotations

import numba
import numpy as np

from .._jit import FLAGS
from .._status import call_status5, call_status7
from ..nn._chain import ChainKernel, SimpleChain
from ..nn._compiled import (
    M_GA,
    M_NIN,
    M_ROWS,
    gather_tile,
    network_backward,
    network_forward,
    scatter_tile,
)
from ..ode._abi import RHS_SIGNATURE, VJP_SIGNATURE, LazyCfunc, register_cfunc
from ..ode._problem import ODEProblem


@numba.njit(**FLAGS)
def _forward(u, p, k):
    """The network on the ``m`` stacked states of ``u``, in the tile ``k.work``; returns
    ``(n, m, T, row of the outputs)``."""
    meta = k.meta
    n = meta[M_NIN]
    m = k.samples.shape[0]
    w = k.work
    T = w.shape[0] // meta[M_ROWS]
    gather_tile(u.reshape((m, n)), w, 0, n, T, m, k.samples, 0)
    out_row = network_forward(k, p, w, T, m)
    return n, m, T, out_row


def _rhs(du, u, p, t, k):
    n, m, T, out_row = _forward(u, p, k)
    scatter_tile(k.work, out_row, n, T, m, du.reshape((m, n)), k.samples, 0)


def _vjp(v, u, p, t, k, ubar, pbar):
    n, m, T, _ = _forward(u, p, k)
    w = k.work
    ga = k.meta[M_GA]
    for f in range(n):
        for b in range(T):
            w[(ga + f) * T + b] = v[b * n + f] if b < m else 0.0
    r = network_backward(k, p, pbar, w, T, m)
    for b in range(m):
        for f in range(n):
            ubar[b * n + f] = w[(r + f) * T + b]


_rhs_jit = numba.njit(**FLAGS)(_rhs)
_vjp_jit = numba.njit(**FLAGS)(_vjp)


def _rhs_status(du, u, p, t, k):
    return call_status5(_rhs_jit, du, u, p, t, k)


def _vjp_status(v, u, p, t, k, ubar, pbar):
    return call_status7(_vjp_jit, v, u, p, t, k, ubar, pbar)


_lockstep_rhs = LazyCfunc(RHS_SIGNATURE, _rhs_status)  # compiled when a problem first uses it
_lockstep_vjp = LazyCfunc(VJP_SIGNATURE, _vjp_status)
register_cfunc(_rhs_jit, _lockstep_rhs, True)
register_cfunc(_vjp_jit, _lockstep_vjp, True)


NO_LOCKSTEP = {
    "cvode": "CVODE steps by SUNDIALS' own error norm over the whole state, which cannot be "
    "the largest of the block's trajectories' norms (ODEProblem.error_group): the block's "
    "trajectories would not each be solved to rtol/atol",
}
"""The solver families that cannot step a block in lockstep, with the reason (for messages);
the others (explicit, Rosenbrock, ESDIRK) take the per-trajectory error norm."""


def tile_width(m: int) -> int:
    """Columns of the tile holding ``m`` trajectories: ``m`` rounded up to a multiple of 8."""
    return -(-m // 8) * 8


def lockstep_kernel(chain: SimpleChain, m: int) -> ChainKernel:
    """The network kernels for ``m`` trajectories in lockstep (a tile's work buffer)."""
    k = chain.kernel(np.float64)
    chain.spec_for(np.float64)  # tiles of several samples: the general kernels too
    rows = int(k.meta[M_ROWS])
    return k._replace(work=np.zeros(rows * tile_width(m)), samples=np.arange(m, dtype=np.int64))


def lockstep_problem(chain: SimpleChain, m: int, tspan) -> ODEProblem:
    """du/dt = chain(u_i; p) for ``i < m``, stacked: state of length ``m n`` (trajectory
    ``i`` in entries ``i n .. i n + n - 1``), with the exact vjp and the per-trajectory
    error norm."""
    n = chain.n_out
    prob = ODEProblem(
        _rhs_jit,
        np.zeros(m * n),
        tspan,
        np.zeros(chain.num_params),
        kernel=lockstep_kernel(chain, m),
        vjp=_vjp_jit,
    )
    prob.error_group = n
    prob.network_rhs = True  # f is the chain itself: the discrete adjoint reuses its tiles
    return prob
