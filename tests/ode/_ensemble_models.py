"""Right-hand sides of the ensemble tests, importable by name (Dask worker processes import
them instead of receiving them pickled by value)."""

import numba


@numba.njit(cache=True)
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = p[2] * u[0] * u[1] - p[3] * u[1]


@numba.njit(cache=True)
def lotka_volterra_vjp(v, u, p, t, ubar, pbar):
    ubar[0] = v[0] * (p[0] - p[1] * u[1]) + v[1] * p[2] * u[1]
    ubar[1] = -v[0] * p[1] * u[0] + v[1] * (p[2] * u[0] - p[3])
    pbar[0] = v[0] * u[0]
    pbar[1] = -v[0] * u[0] * u[1]
    pbar[2] = v[1] * u[0] * u[1]
    pbar[3] = -v[1] * u[1]


@numba.njit(cache=True)
def fragile(du, u, p, t):
    """du = p0 u^2 (blows up in finite time 1 / (p0 u0) for p0 > 0); raises for p1 < 0."""
    if p[1] < 0.0:
        raise ValueError("p[1] must be non-negative")
    du[0] = p[0] * u[0] * u[0]
