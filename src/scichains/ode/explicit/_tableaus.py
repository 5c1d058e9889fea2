"""Explicit Runge-Kutta methods: a Butcher tableau, its order, and an embedded error estimate.

Coefficients are the published ones (references in each docstring); their correctness is
checked by the measured convergence orders in ``tests/ode``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._family import register
from .._order import check_order


@dataclass(frozen=True)
class ExplicitRK:
    """An explicit Runge-Kutta method of ``s`` stages.

    ``scichains.ode`` provides ``Tsit5``, ``DP5``, ``BS3``, ``Vern7``, ``RK4`` and ``Euler``.
    When a method is made its coefficients are checked: the shapes, ``A`` strictly lower, the
    nodes as the row sums of ``A``, and every order condition (rooted trees,
    :mod:`scichains.ode._order`) up to ``order`` for ``b`` and up to ``error_order`` for the
    embedded weights ``b - btilde``: ``ValueError`` naming what fails.

    Parameters
    ----------
    name : str
        The method's name, as shown by ``repr`` and in error messages.
    A : numpy.ndarray
        Shape ``(s, s)``, strictly lower triangular: the Butcher matrix.
    b : numpy.ndarray
        Shape ``(s,)``: the weights of the propagated solution.
    c : numpy.ndarray
        Shape ``(s,)``: the nodes.
    order : int
        The order of the propagated solution.
    btilde : numpy.ndarray or None
        Shape ``(s,)``: the error estimate is ``h * sum(btilde_i k_i)`` (the difference
        between the propagated solution and the embedded one) for adaptive methods; ``None``
        (default) for fixed-step ones.
    error_order : int
        The order of the embedded solution (step-size control uses ``error_order + 1``);
        default 0 (fixed step).
    fsal : bool
        The last stage is ``f`` at the new point (first same as last); default False.
    interp : numpy.ndarray or None
        Shape ``(s, 5)``, optional: a continuous extension linear in the stages,
        ``u(t + theta h) = u + h sum_i b_i(theta) k_i`` with ``b_i(theta) = sum_d interp[i, d]
        theta^(d + 1)``, and ``b_i(1) = b_i``. Methods that have one save at ``saveat`` by
        interpolation (the steps do not land there) and their dense output uses it.
    interp_order : int
        The order of ``interp`` (default 0: none).
    """

    name: str
    A: np.ndarray = field(repr=False)
    b: np.ndarray = field(repr=False)
    c: np.ndarray = field(repr=False)
    order: int
    btilde: np.ndarray | None = field(default=None, repr=False)
    error_order: int = 0
    fsal: bool = False
    interp: np.ndarray | None = field(default=None, repr=False)
    interp_order: int = 0

    family = "explicit"
    """The method family (:mod:`scichains.ode._family`): what ``solve``, the adjoints and
    the models look up instead of the class."""

    def __post_init__(self):
        A = np.asarray(self.A, dtype=np.float64)
        s = A.shape[0]
        b, c = np.asarray(self.b, dtype=np.float64), np.asarray(self.c, dtype=np.float64)
        if A.shape != (s, s) or b.shape != (s,) or c.shape != (s,):
            raise ValueError(
                f"{self.name}: A must be (s, s), b and c (s,); got {A.shape}, {b.shape}, {c.shape}"
            )
        if np.any(np.triu(A) != 0.0):
            raise ValueError(f"{self.name}: A must be strictly lower triangular (explicit)")
        # to the rounding of the sums (Vern7's rows, with coefficients up to ~50: 1.1e-14)
        slack = 16 * np.finfo(np.float64).eps * (np.abs(A).sum(axis=1) + 1.0)
        if np.any(np.abs(A.sum(axis=1) - c) > slack):
            raise ValueError(f"{self.name}: the nodes c must be the row sums of A")
        check_order(self.name, A, b, self.order)
        if self.btilde is not None:
            check_order(f"{self.name} (embedded)", A, b - self.btilde, self.error_order)

    @property
    def default_sensealg(self) -> str:
        """The gradient method used when none is given: ``"discrete"`` (the exact gradient of
        the discretised solution, 4-5x faster than the continuous adjoints on the spiral
        neural ODE)."""
        return "discrete"

    @property
    def adaptive(self) -> bool:
        return self.btilde is not None

    @property
    def stages(self) -> int:
        return len(self.b)

    def arrays(self):
        """Contiguous float64 arrays for the compiled stepper."""
        bt = self.btilde if self.btilde is not None else np.zeros(self.stages)
        return (
            np.ascontiguousarray(self.A, dtype=np.float64),
            np.ascontiguousarray(self.b, dtype=np.float64),
            np.ascontiguousarray(self.c, dtype=np.float64),
            np.ascontiguousarray(bt, dtype=np.float64),
        )

    def interp_weights(self, theta) -> np.ndarray:
        """``b_i(theta)``: shape ``(s,)`` for a scalar ``theta``, ``(len(theta), s)`` for an
        array."""
        if self.interp is None:
            raise ValueError(f"{self.name} has no continuous extension of its own")
        th = np.asarray(theta, dtype=np.float64)
        powers = th[..., None] ** np.arange(1, self.interp.shape[1] + 1)
        return powers @ self.interp.T

    def __call__(self):
        # solvers are used as `solver=Tsit5()`; the instances are immutable, so return self
        return self


def _poly_rows(polys, s):
    """Coefficients of theta^1..theta^5 (shape (s, 5)) from numpy poly1d objects without a
    constant term."""
    P = np.zeros((s, 5))
    for i, q in enumerate(polys):
        c = q.coeffs[::-1]  # ascending powers
        if abs(c[0]) > 1e-15:
            raise ValueError("a continuous extension has b_i(0) = 0")
        P[i, : c.size - 1] = c[1:]
    return P


def _hermite_fsal(b):
    """The cubic Hermite interpolant of an FSAL method (f at both ends are stages 1 and s),
    written as weights on the stages: third order."""
    th = np.poly1d([1.0, 0.0])
    h01 = 3 * th**2 - 2 * th**3
    h10 = th**3 - 2 * th**2 + th
    h11 = th**3 - th**2
    polys = [h01 * bi for bi in b]
    polys[0] = polys[0] + h10
    polys[-1] = polys[-1] + h11
    return _poly_rows(polys, len(b))


def _lower(rows, s):
    A = np.zeros((s, s))
    for i, row in enumerate(rows):
        A[i + 1, : len(row)] = row
    return A


Euler = ExplicitRK("Euler", np.zeros((1, 1)), np.array([1.0]), np.array([0.0]), order=1)
"""Forward Euler, fixed step (``dt0`` required)."""

RK4 = ExplicitRK(
    "RK4",
    _lower([[0.5], [0.0, 0.5], [0.0, 0.0, 1.0]], 4),
    np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
    np.array([0.0, 0.5, 0.5, 1.0]),
    order=4,
)
"""The classical fourth-order Runge-Kutta method, fixed step (``dt0`` required)."""

_bs3_b = np.array([2 / 9, 1 / 3, 4 / 9, 0.0])
BS3 = ExplicitRK(
    "BS3",
    _lower([[0.5], [0.0, 0.75], list(_bs3_b[:3])], 4),
    _bs3_b,
    np.array([0.0, 0.5, 0.75, 1.0]),
    order=3,
    btilde=_bs3_b - np.array([7 / 24, 1 / 4, 1 / 3, 1 / 8]),
    error_order=2,
    fsal=True,
    interp=_hermite_fsal(_bs3_b),
    interp_order=3,
)
"""Bogacki-Shampine 3(2), FSAL (Bogacki & Shampine 1989); cubic Hermite dense output."""

_dp5_b = np.array([35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0])
# Shampine's (1986) dense output of DOPRI5, as in Hairer, Norsett & Wanner I, II.6:
# u(theta) = u + h [theta b + theta(1-theta)(e1 - b) + theta^2(1-theta)(2b - e1 - e7)
#                   + theta^2 (1-theta)^2 d]
_dp5_d = np.array(
    [
        -12715105075 / 11282082432,
        0.0,
        87487479700 / 32700410799,
        -10690763975 / 1880347072,
        701980252875 / 199316789632,
        -1453857185 / 822651844,
        69997945 / 29380423,
    ]
)


def _dp5_interp():
    th = np.poly1d([1.0, 0.0])
    one = np.poly1d([1.0])
    e1, e7 = np.eye(7)[0], np.eye(7)[6]
    polys = [
        th * _dp5_b[i]
        + th * (one - th) * (e1[i] - _dp5_b[i])
        + th**2 * (one - th) * (2 * _dp5_b[i] - e1[i] - e7[i])
        + th**2 * (one - th) ** 2 * _dp5_d[i]
        for i in range(7)
    ]
    return _poly_rows(polys, 7)


DP5 = ExplicitRK(
    "DP5",
    _lower(
        [
            [1 / 5],
            [3 / 40, 9 / 40],
            [44 / 45, -56 / 15, 32 / 9],
            [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
            [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
            list(_dp5_b[:6]),
        ],
        7,
    ),
    _dp5_b,
    np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0]),
    order=5,
    btilde=np.array([71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40]),
    error_order=4,
    fsal=True,
    interp=_dp5_interp(),
    interp_order=4,
)
"""Dormand-Prince 5(4), FSAL (Dormand & Prince 1980); the method of MATLAB's ode45."""


def _tsit5_interp():
    # Tsitouras (2011), the free fourth-order continuous extension, in factored form
    th = np.poly1d([1.0, 0.0])
    t2 = th**2
    polys = [
        -1.0530884977290216
        * th
        * (th - 1.3299890189751412)
        * (t2 - 1.4364028541716351 * th + 0.7139816917074209),
        0.1017 * t2 * (t2 - 2.1966568338249754 * th + 1.2949852507374631),
        2.490627285651252793 * t2 * (t2 - 2.38535645472061657 * th + 1.57803468208092486),
        -16.54810288924490272 * (th - 1.21712927295533244) * (th - 0.61620406037800089) * t2,
        47.37952196281928122 * (th - 1.203071208372362603) * (th - 0.658047292653547382) * t2,
        -34.87065786149660974 * (th - 1.2) * (th - 0.666666666666666667) * t2,
        2.5 * (th - 1) * (th - 0.6) * t2,
    ]
    return _poly_rows(polys, 7)


_ts_b = np.array(
    [
        0.09646076681806523,
        0.01,
        0.4798896504144996,
        1.379008574103742,
        -3.290069515436081,
        2.324710524099774,
        0.0,
    ]
)
Tsit5 = ExplicitRK(
    "Tsit5",
    _lower(
        [
            [0.161],
            [-0.008480655492356989, 0.335480655492357],
            [2.8971530571054935, -6.359448489975075, 4.3622954328695815],
            [5.325864828439257, -11.748883564062828, 7.4955393428898365, -0.09249506636175525],
            [
                5.86145544294642,
                -12.92096931784711,
                8.159367898576159,
                -0.071584973281401,
                -0.028269050394068383,
            ],
            list(_ts_b[:6]),
        ],
        7,
    ),
    _ts_b,
    np.array([0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0]),
    order=5,
    btilde=-np.array(
        [
            -0.00178001105222577714,
            -0.0008164344596567469,
            0.007880878010261995,
            -0.1447110071732629,
            0.5823571654525552,
            -0.45808210592918697,
            1 / 66,
        ]
    ),
    error_order=4,
    fsal=True,
    interp=_tsit5_interp(),
    interp_order=4,
)
"""Tsitouras 5(4), FSAL (Tsitouras 2011), with its own fourth-order continuous extension; the
default, as in DifferentialEquations.jl."""

_v7_b = np.array(
    [
        0.04715561848627222170,
        0.0,
        0.0,
        0.25750564298434151896,
        0.26216653977412620477,
        0.15216092656738557403,
        0.49399691700324842469,
        -0.29430311714032504416,
        0.08131747232495109999,
        0.0,
    ]
)
_v7_bhat = np.array(
    [
        0.04460860660634117629,
        0.0,
        0.0,
        0.26716403785713726805,
        0.22010183001772930200,
        0.21884317031431568310,
        0.22898717054112028834,
        0.0,
        0.0,
        0.02029518466335628223,
    ]
)
Vern7 = ExplicitRK(
    "Vern7",
    _lower(
        [
            [0.005],
            [-1.07679012345679012346, 1.18567901234567901235],
            [0.04083333333333333333, 0.0, 0.1225],
            [0.63891392362557267805, 0.0, -2.45567263822365680966, 2.27225871459808413161],
            [
                -2.66157737501875713112,
                0.0,
                10.80451388645613769565,
                -8.35391465739619941197,
                0.82048759495665697914,
            ],
            [
                6.06774143469677099272,
                0.0,
                -24.71127363591108579734,
                20.42751793078889394046,
                -1.90615797881664715062,
                1.00617224924206801479,
            ],
            [
                12.05467007625320299509,
                0.0,
                -49.75478495046898932807,
                41.14288863860467663260,
                -4.46176014997400418564,
                2.04233482223917495982,
                -0.09834843665406107380,
            ],
            [
                10.13814652288180787642,
                0.0,
                -42.64113603171750214623,
                35.76384003992257007135,
                -4.34802284039290765334,
                2.00986226837703589544,
                0.34874904603382724060,
                -0.27143900510483128424,
            ],
            [
                -45.03007203429867712435,
                0.0,
                187.32724376545888407524,
                -154.02882369350186905967,
                18.56465306347536233859,
                -7.14180967929507885493,
                1.30880857816137862511,
                0.0,
                0.0,
            ],
        ],
        10,
    ),
    _v7_b,
    np.array(
        [
            0.0,
            0.005,
            0.10888888888888888889,
            0.16333333333333333333,
            0.4555,
            0.60950944899783813171,
            0.884,
            0.925,
            1.0,
            1.0,
        ]
    ),
    order=7,
    btilde=_v7_b - _v7_bhat,
    error_order=6,
)
"""Verner's "most efficient" 7(6) pair (J. H. Verner, RKV76.IIa Efficient, 2010: coefficients
from his published tables), 10 stages, not FSAL; for tight tolerances, as in OrdinaryDiffEq."""

SOLVERS = {m.name: m for m in (Euler, RK4, BS3, DP5, Tsit5, Vern7)}
register(*SOLVERS.values())
