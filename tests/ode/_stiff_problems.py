"""Problems and per-method settings shared by the tests of the compiled stiff solvers
(test_stiff.py: what all five do; test_esdirk.py: the ESDIRK methods' own)."""

import math

import numba
import numpy as np

from scichains import ode

ROSENBROCKS = [ode.Rosenbrock23, ode.Rodas5P]
ESDIRKS = [ode.Kvaerno5, ode.KenCarp4]
RADAUS = [ode.RadauIIA5]
STIFF = ROSENBROCKS + ESDIRKS + RADAUS

NEWTON_TIGHT = dict(rtol=1e-13, atol=1e-15)
"""Tolerances for the ESDIRK and Radau methods' fixed-step order measurements: they set the Newton
iteration's stopping test, whose error must stay below the truncation error being measured
(a Rosenbrock step has no iteration)."""


def fixed_step_options(solver) -> dict:
    return NEWTON_TIGHT if any(solver is m for m in ESDIRKS + RADAUS) else {}


@numba.njit
def kaps(du, u, p, t):
    # Kaps' problem: stiff (eps = p[0]) and nonlinear, u = (exp(-2t), exp(-t)) for every eps
    du[0] = -(2.0 + 1.0 / p[0]) * u[0] + u[1] * u[1] / p[0]
    du[1] = u[0] - u[1] * (1.0 + u[1])


@numba.njit
def prothero_robinson(du, u, p, t):
    # u' = lam (u - phi(t)) + phi'(t), phi = sin t + t^2 / 4: non-autonomous, u = phi exactly
    du[0] = p[0] * (u[0] - math.sin(t) - 0.25 * t * t) + math.cos(t) + 0.5 * t


@numba.njit
def one_compartment(du, u, p, t):
    # depot -> central -> elimination, with a fast absorption (stiff at ka = 1e3)
    du[0] = -p[0] * u[0]
    du[1] = p[0] * u[0] - p[1] * u[1]


def pk_exact(t, doses, ka, ke):
    out = np.zeros((t.size, 2))
    for td, amount in doses:
        s = np.clip(t - td, 0.0, None)
        on = t >= td
        out[:, 0] += on * amount * np.exp(-ka * s)
        out[:, 1] += on * amount * ka / (ka - ke) * (np.exp(-ke * s) - np.exp(-ka * s))
    return out


@numba.njit
def sqrt_rhs(du, u, p, t):
    du[0] = -math.sqrt(abs(u[0]))
    du[1] = -u[1]


@numba.njit
def sqrt_vjp(v, u, p, t, ubar, pbar):
    # d/du0 of -sqrt(|u0|) is infinite at u0 = 0
    r = math.sqrt(abs(u[0]))
    ubar[0] = -v[0] * (0.5 / r if r > 0.0 else math.inf)
    ubar[1] = -v[1]


@numba.njit
def raising(du, u, p, t):
    if t > 0.5:
        raise ValueError("boom at t > 0.5")
    du[0] = -u[0]


@numba.njit
def blowup(du, u, p, t):
    # finite-time blow-up u' = u^2 from u = 1 at t = 1
    du[0] = u[0] * u[0]


def order(errs, dts):
    return np.polyfit(np.log(dts), np.log(errs), 1)[0]
