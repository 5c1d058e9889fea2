"""The bouncing ball shared by the event tests (tests/ode/test_events.py,
tests/adjoint/test_events.py): height u[0], velocity u[1], gravity p[0], restitution p[1]."""

import numba


@numba.njit
def falling(du, u, p, t):
    du[0] = u[1]
    du[1] = -p[0]


@numba.njit
def ground(u, t, p):
    return u[0]


@numba.njit
def bounce(u, t, p):
    u[1] = -p[1] * u[1]
