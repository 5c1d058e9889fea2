"""The work each method does on reference problems at fixed tolerances: right-hand-side
calls, accepted and rejected steps (and Jacobians, LU factorisations, Newton iterations for the
stiff families), pinned to the figures of the current controllers.

The kernels are deterministic, so these counts change only when the stepping changes: a
controller edit that costs 19% more steps (a changed PI gain) passed every accuracy test, since
the solutions stay within tolerance. Each count may move by 2% (or 2) to allow for last-bit
differences of another CPU's floating point (FMA contraction, vector widths); anything more is
a change of the algorithm, to be made on purpose with these figures updated.
"""

import numba
import numpy as np
import pytest

from scichains import ode
from scichains.ode._testset import orego


@numba.njit
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = -p[2] * u[1] + p[3] * u[0] * u[1]


@numba.njit
def van_der_pol(du, u, p, t):
    du[0] = u[1]
    du[1] = p[0] * (1.0 - u[0] ** 2) * u[1] - u[0]


PROBLEMS = {
    "lv": (lotka_volterra, [1.0, 1.0], (0.0, 10.0), [1.5, 1.0, 3.0, 1.0], 1e-6, 1e-8),
    "vdp5": (van_der_pol, [2.0, 0.0], (0.0, 20.0), [5.0], 1e-5, 1e-7),
    "vdp100": (van_der_pol, [2.0, 0.0], (0.0, 200.0), [100.0], 1e-6, 1e-8),
    "orego": (orego, [1.0, 2.0, 3.0], (0.0, 360.0), [], 1e-7, 1e-9),
}

# measured on an AMD EPYC Zen 4 (2026-12-02)
COUNTS = {
    ("lv", "Tsit5"): dict(nf=710, naccept=116, nreject=2),
    ("vdp5", "Tsit5"): dict(nf=1466, naccept=226, nreject=18),
    ("lv", "DP5"): dict(nf=680, naccept=112, nreject=1),
    ("vdp5", "DP5"): dict(nf=1634, naccept=254, nreject=18),
    ("lv", "Vern7"): dict(nf=706, naccept=65, nreject=6),
    ("vdp5", "Vern7"): dict(nf=1546, naccept=140, nreject=16),
    ("lv", "BS3"): dict(nf=2921, naccept=973, nreject=0),
    ("vdp5", "BS3"): dict(nf=2699, naccept=897, nreject=2),
    ("vdp100", "Rodas5P"): dict(nf=5170, naccept=568, nreject=8, njac=568, nlu=576),
    ("orego", "Rodas5P"): dict(nf=19640, naccept=2182, nreject=0, njac=2182, nlu=2182),
    ("vdp100", "Rosenbrock23"): dict(nf=13881, naccept=4626, nreject=0, njac=4626, nlu=4626),
    ("orego", "Rosenbrock23"): dict(nf=64676, naccept=21558, nreject=0, njac=21558, nlu=21558),
    ("vdp100", "KenCarp4"): dict(
        nf=5449, naccept=453, nreject=15, njac=195, nlu=387, nnewton=5447, nnewton_fail=0
    ),
    ("orego", "KenCarp4"): dict(
        nf=17489, naccept=1628, nreject=1, njac=489, nlu=1100, nnewton=17487, nnewton_fail=0
    ),
    ("vdp100", "Kvaerno5"): dict(
        nf=6155, naccept=378, nreject=28, njac=175, nlu=336, nnewton=6153, nnewton_fail=2
    ),
    ("orego", "Kvaerno5"): dict(
        nf=18511, naccept=1329, nreject=4, njac=518, nlu=956, nnewton=18509, nnewton_fail=0
    ),
    # RadauIIA5: measured on an AMD EPYC Zen 3, AVX2 (2026-12-04); nnewton counts iterations
    # of the whole 3n system (three calls of f each)
    ("vdp100", "RadauIIA5"): dict(
        nf=5979, naccept=764, nreject=23, njac=324, nlu=594, nnewton=1737, nnewton_fail=0
    ),
    ("orego", "RadauIIA5"): dict(
        nf=16490, naccept=2106, nreject=4, njac=1032, nlu=1522, nnewton=4794, nnewton_fail=10
    ),
}


@pytest.mark.parametrize("case", list(COUNTS), ids=lambda c: f"{c[1]}-{c[0]}")
def test_work_at_fixed_tolerances_is_pinned(case):
    name, method = case
    f, u0, tspan, p, rtol, atol = PROBLEMS[name]
    solver = getattr(ode, method)()
    sol = ode.solve(
        ode.ODEProblem(f, u0, tspan, np.asarray(p, dtype=float)), solver, rtol=rtol, atol=atol
    )
    assert sol.success
    got = {k: sol.stats[k] for k in COUNTS[case]}
    for key, want in COUNTS[case].items():
        assert abs(got[key] - want) <= max(2, 0.02 * want), f"{key}: {got} against {COUNTS[case]}"
