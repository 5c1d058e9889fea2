"""The right-hand side of a neural ODE driven by measured inputs, ``du/dt = chain([u, x(t)];
p)``, its vjp (the inputs are data), and its vjp with respect to the input values too (for
``ODEProblem.with_input_parameters``)."""

from __future__ import annotations

import numba

from .._jit import FLAGS
from ..nn import chain_forward, chain_vjp
from ..ode._inputs import stack_vector


def _rhs_inputs(du, u, p, t, x, k):
    # the network sees [u, x(t)]: the state, then the input values, on this call's stack
    n = u.shape[0]
    z = stack_vector(n + x.shape[0])
    for i in range(n):
        z[i] = u[i]
    for j in range(x.shape[0]):
        z[n + j] = x[j]
    chain_forward(k, p, z, du)


def _vjp_inputs(v, u, p, t, x, k, ubar, pbar):
    n = u.shape[0]
    m = n + x.shape[0]
    z = stack_vector(m)
    zbar = stack_vector(m)
    for i in range(n):
        z[i] = u[i]
    for j in range(x.shape[0]):
        z[n + j] = x[j]
    chain_vjp(k, p, z, v, zbar, pbar)
    for i in range(n):  # the inputs are data: their part of the pullback is dropped
        ubar[i] = zbar[i]


_SPLIT_VJPS: dict[int, object] = {}


def _split_inputs_vjp(npar: int):
    """The vjp of ``chain([u, x]; p)`` with respect to ``(u, q = [p, x])`` for ``npar``
    weights (what ``ODEProblem.with_input_parameters`` spreads over the input samples),
    compiled once per weight count."""
    made = _SPLIT_VJPS.get(npar)
    if made is not None:
        return made

    def split(v, u, q, t, k, ubar, qbar):
        n = u.shape[0]
        m = n + q.shape[0] - npar
        z = stack_vector(m)
        zbar = stack_vector(m)
        for i in range(n):
            z[i] = u[i]
        for j in range(m - n):
            z[n + j] = q[npar + j]
        chain_vjp(k, q[:npar], z, v, zbar, qbar[:npar])
        for i in range(n):
            ubar[i] = zbar[i]
        for j in range(m - n):
            qbar[npar + j] = zbar[n + j]

    made = _SPLIT_VJPS[npar] = numba.njit(**FLAGS)(split)
    return made


_rhs_inputs_jit = numba.njit(**FLAGS)(_rhs_inputs)
_vjp_inputs_jit = numba.njit(**FLAGS)(_vjp_inputs)
