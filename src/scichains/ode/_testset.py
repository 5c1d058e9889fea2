"""Stiff test problems of the Bari test set (F. Mazzia, C. Magherini et al., "Test Set for IVP
Solvers", University of Bari, release 2.4, 2008) with its published reference solutions, and
Robertson's chemical kinetics (not in that set) with a reference computed here: the tests and
``benchmarks/stiff.py`` use them.

Each entry: the right-hand side (compiled, constants as in the test set's Fortran sources),
the initial state, the time span and the reference solution at its end (computed by the test
set's authors with RADAU5 in extended precision; digits as published in their ``solut``
routines). :func:`significant_digits` measures a solution against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np


@numba.njit
def hires(du, u, p, t):
    """HIRES (Schäfer 1975; Hairer & Wanner II, IV.10): plant physiology, 8 states."""
    du[0] = -1.71 * u[0] + 0.43 * u[1] + 8.32 * u[2] + 0.0007
    du[1] = 1.71 * u[0] - 8.75 * u[1]
    du[2] = -10.03 * u[2] + 0.43 * u[3] + 0.035 * u[4]
    du[3] = 8.32 * u[1] + 1.71 * u[2] - 1.12 * u[3]
    du[4] = -1.745 * u[4] + 0.43 * u[5] + 0.43 * u[6]
    du[5] = -280.0 * u[5] * u[7] + 0.69 * u[3] + 1.71 * u[4] - 0.43 * u[5] + 0.69 * u[6]
    du[6] = 280.0 * u[5] * u[7] - 1.81 * u[6]
    du[7] = -280.0 * u[5] * u[7] + 1.81 * u[6]


@numba.njit
def orego(du, u, p, t):
    """OREGO: the Oregonator (Field & Noyes 1974), Belousov-Zhabotinskii reaction, 3 states."""
    du[0] = 77.27 * (u[1] + u[0] * (1.0 - 8.375e-6 * u[0] - u[1]))
    du[1] = (u[2] - (1.0 + u[0]) * u[1]) / 77.27
    du[2] = 0.161 * (u[0] - u[2])


@numba.njit
def vdpol(du, u, p, t):
    """VDPOL: the van der Pol oscillator with eps = 1e-6 (mu = 1e6 in the time-scaled form)."""
    du[0] = u[1]
    du[1] = ((1.0 - u[0] * u[0]) * u[1] - u[0]) * 1e6


@numba.njit
def rober(du, u, p, t):
    """ROBER: Robertson's autocatalytic reaction (1966; Hairer & Wanner II, IV.1), 3 states,
    rate constants 0.04, 1e4 and 3e7."""
    du[0] = -0.04 * u[0] + 1e4 * u[1] * u[2]
    du[2] = 3e7 * u[1] * u[1]
    du[1] = -du[0] - du[2]


@numba.njit
def pollu(du, u, p, t):
    """POLLU: the air pollution model of Verwer (1994), 25 reactions, 20 species."""
    r1 = 0.35 * u[0]
    r2 = 26.6 * u[1] * u[3]
    r3 = 1.23e4 * u[4] * u[1]
    r4 = 8.6e-4 * u[6]
    r5 = 8.2e-4 * u[6]
    r6 = 1.5e4 * u[6] * u[5]
    r7 = 1.3e-4 * u[8]
    r8 = 2.4e4 * u[8] * u[5]
    r9 = 1.65e4 * u[10] * u[1]
    r10 = 9.0e3 * u[10] * u[0]
    r11 = 0.022 * u[12]
    r12 = 1.2e4 * u[9] * u[1]
    r13 = 1.88 * u[13]
    r14 = 1.63e4 * u[0] * u[5]
    r15 = 4.8e6 * u[2]
    r16 = 3.5e-4 * u[3]
    r17 = 0.0175 * u[3]
    r18 = 1.0e8 * u[15]
    r19 = 4.44e11 * u[15]
    r20 = 1.24e3 * u[16] * u[5]
    r21 = 2.1 * u[18]
    r22 = 5.78 * u[18]
    r23 = 0.0474 * u[0] * u[3]
    r24 = 1.78e3 * u[18] * u[0]
    r25 = 3.12 * u[19]
    du[0] = -r1 - r10 - r14 - r23 - r24 + r2 + r3 + r9 + r11 + r12 + r22 + r25
    du[1] = -r2 - r3 - r9 - r12 + r1 + r21
    du[2] = -r15 + r1 + r17 + r19 + r22
    du[3] = -r2 - r16 - r17 - r23 + r15
    du[4] = -r3 + r4 + r4 + r6 + r7 + r13 + r20
    du[5] = -r6 - r8 - r14 - r20 + r3 + r18 + r18
    du[6] = -r4 - r5 - r6 + r13
    du[7] = r4 + r5 + r6 + r7
    du[8] = -r7 - r8
    du[9] = -r12 + r7 + r9
    du[10] = -r9 - r10 + r8 + r11
    du[11] = r9
    du[12] = -r11 + r10
    du[13] = -r13 + r12
    du[14] = r14
    du[15] = -r18 - r19 + r16
    du[16] = -r20
    du[17] = r20
    du[18] = -r21 - r22 - r24 + r23 + r25
    du[19] = -r25 + r24


@numba.njit
def chemakzo(du, u, p, t):
    """CHEMAKZO: the Chemical Akzo Nobel problem (Akzo Nobel Central Research, Arnhem; the
    Bari test set), 6 states, an index-1 DAE with ``M = diag(1, 1, 1, 1, 1, 0)``: two species
    mixed while carbon dioxide is added; the last equation, ``0 = Ks y1 y4 - y6``, is
    algebraic."""
    k1, k2, k3, k4 = 18.7, 0.58, 0.09, 0.42
    kbig, kla, po2, hen, ks = 34.4, 3.3, 0.9, 737.0, 115.83
    r1 = k1 * u[0] ** 4 * math.sqrt(u[1])
    r2 = k2 * u[2] * u[3]
    r3 = k2 / kbig * u[0] * u[4]
    r4 = k3 * u[0] * u[3] ** 2
    r5 = k4 * u[5] ** 2 * math.sqrt(u[1])
    fin = kla * (po2 / hen - u[1])
    du[0] = -2.0 * r1 + r2 - r3 - r4
    du[1] = -0.5 * r1 - r4 - 0.5 * r5 + fin
    du[2] = r1 - r2 + r3
    du[3] = -r2 + r3 - 2.0 * r4
    du[4] = r2 - r3 + r5
    du[5] = ks * u[0] * u[3] - u[5]


@numba.njit
def rober_dae(du, u, p, t):
    """ROBER written as an index-1 DAE: the third equation replaced by the conservation law
    ``0 = y1 + y2 + y3 - 1`` (``M = diag(1, 1, 0)``); the same solution as ROBER."""
    du[0] = -0.04 * u[0] + 1e4 * u[1] * u[2]
    du[1] = 0.04 * u[0] - 1e4 * u[1] * u[2] - 3e7 * u[1] * u[1]
    du[2] = u[0] + u[1] + u[2] - 1.0


@dataclass(frozen=True)
class TestProblem:
    name: str
    f: object
    u0: np.ndarray
    tspan: tuple
    reference: np.ndarray
    mass_matrix: np.ndarray | None = None

    def problem(self):
        from ._problem import ODEProblem

        return ODEProblem(self.f, self.u0, self.tspan, mass_matrix=self.mass_matrix)


_pollu_u0 = np.zeros(20)
_pollu_u0[[1, 3, 6, 7, 8, 16]] = [0.2, 0.04, 0.1, 0.3, 0.01, 0.007]

PROBLEMS = {
    "HIRES": TestProblem(
        "HIRES",
        hires,
        np.array([1.0, 0, 0, 0, 0, 0, 0, 0.0057]),
        (0.0, 321.8122),
        np.array(
            [
                0.7371312573325668e-3,
                0.1442485726316185e-3,
                0.5888729740967575e-4,
                0.1175651343283149e-2,
                0.2386356198831331e-2,
                0.6238968252742796e-2,
                0.2849998395185769e-2,
                0.2850001604814231e-2,
            ]
        ),
    ),  # fmt: skip
    "OREGO": TestProblem(
        "OREGO",
        orego,
        np.array([1.0, 2.0, 3.0]),
        (0.0, 360.0),
        np.array([0.1000814870318523e1, 0.1228178521549917e4, 0.1320554942846706e3]),
    ),
    "VDPOL": TestProblem(
        "VDPOL",
        vdpol,
        np.array([2.0, 0.0]),
        (0.0, 2.0),
        np.array([0.1706167732170483e1, -0.8928097010247975e0]),
    ),
    # Robertson on [0, 1e5] (the span of SciMLBenchmarks' work-precision diagrams). No
    # extended-precision reference is published for it; these 12 digits are where independent
    # solvers meet (2026-12-04): scipy's Radau at rtol 1e-12, 1e-13 and 1e-14 (atol 1e-22, the
    # exact Jacobian) agree to 3e-13 relative, and scipy's BDF and LSODA and SUNDIALS' CVODE
    # converge to them as the tolerance falls (3e-12 apart at rtol 1e-14, 1e-11 at 1e-13).
    "ROBER": TestProblem(
        "ROBER",
        rober,
        np.array([1.0, 0.0, 0.0]),
        (0.0, 1e5),
        np.array([1.786592114210e-02, 7.274751468436e-08, 9.821340061104e-01]),
    ),
    "POLLU": TestProblem(
        "POLLU",
        pollu,
        _pollu_u0,
        (0.0, 60.0),
        np.array(
            [
                0.5646255480022769e-01,
                0.1342484130422339e00,
                0.4139734331099427e-08,
                0.5523140207484359e-02,
                0.2018977262302196e-06,
                0.1464541863493966e-06,
                0.7784249118997964e-01,
                0.3245075353396018e00,
                0.7494013383880406e-02,
                0.1622293157301561e-07,
                0.1135863833257075e-07,
                0.2230505975721359e-02,
                0.2087162882798630e-03,
                0.1396921016840158e-04,
                0.8964884856898295e-02,
                0.4352846369330103e-17,
                0.6899219696263405e-02,
                0.1007803037365946e-03,
                0.1772146513969984e-05,
                0.5682943292316392e-04,
            ]
        ),
    ),  # fmt: skip
}


DAE_PROBLEMS = {
    "CHEMAKZO": TestProblem(
        "CHEMAKZO",
        chemakzo,
        np.array([0.444, 0.00123, 0.0, 0.007, 0.0, 115.83 * 0.444 * 0.007]),
        (0.0, 180.0),
        np.array(
            [
                0.1150794920661702,
                0.1203831471567715e-2,
                0.1611562887407974,
                0.3656156421249283e-3,
                0.1708010885264404e-1,
                0.4873531310307455e-2,
            ]
        ),
        np.diag([1.0, 1.0, 1.0, 1.0, 1.0, 0.0]),
    ),
    "ROBER_DAE": TestProblem(
        "ROBER_DAE",
        rober_dae,
        np.array([1.0, 0.0, 0.0]),
        (0.0, 1e5),
        PROBLEMS["ROBER"].reference,
        np.diag([1.0, 1.0, 0.0]),
    ),
}
"""Index-1 differential-algebraic problems ``M du/dt = f`` (``mass_matrix``), with their
reference solutions: CHEMAKZO's from the test set (RADAU5 in extended precision, as
published), ROBER_DAE's that of ROBER."""


def relative_error(u_end, reference, floor=1e-12):
    """The largest relative error over the components whose reference exceeds ``floor`` in
    magnitude (POLLU's 16th, 4e-18, is below any tolerance used here)."""
    keep = np.abs(reference) > floor
    return float(np.max(np.abs(u_end[keep] - reference[keep]) / np.abs(reference[keep])))


def significant_digits(u_end, reference) -> float:
    """``-log10`` of :func:`relative_error` (the test set's "scd")."""
    return -float(np.log10(max(relative_error(u_end, reference), 1e-300)))
