"""Singly diagonally implicit Runge-Kutta methods with an explicit first stage (ESDIRK) for
stiff problems: their coefficients.

An ESDIRK method of ``s`` stages with diagonal ``gamma`` takes, from ``(t, u)`` with step
``h``, ``k_1 = f(t, u)`` and for ``i = 2..s``

    Y_i = u + h sum_{j<i} a_ij k_j + h gamma k_i,     k_i = f(t + c_i h, Y_i),

each stage an implicit equation for ``z_i = h gamma k_i`` solved by a simplified Newton
iteration with the one matrix ``I - h gamma J`` (see :mod:`scichains.ode.stiff._esdirk_kernel`).
The methods here are *stiffly accurate* (``u_new = Y_s``: ``b`` is the last row of ``A``) and
their embedded solution is an earlier stage (for Kvaerno5 ``Y_6``, also at ``c = 1``), so the
error estimate ``h sum_i btilde_i k_i = Y_s - Y_6`` is the difference of two stages. The last
stage's derivative is ``f`` at ``u_new`` (FSAL), so the cubic Hermite interpolant of the step
is linear in the stages: the dense output, third order (as diffrax's and OrdinaryDiffEq's
Kvaerno5).

Correctness: the simplified order conditions are asserted when a method is made; the measured
orders of the steps and of the dense output and the Bari test set's reference solutions are in
``tests/ode/test_esdirk.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._family import register
from .._order import check_order
from ..explicit._tableaus import _hermite_fsal
from ._rosenbrock import JacobianChoice


@dataclass(frozen=True, repr=False)
class ESDIRK(JacobianChoice):
    """An ESDIRK method of ``s`` stages (see the module's docstring).

    Call the method to change its Jacobian: ``Kvaerno5(jacobian="finite difference")`` (an
    unknown name raises ``ValueError``). When a method is made, its order conditions (every
    rooted tree up to ``order`` and ``error_order``: ``ValueError`` naming the failing one),
    the stage order, the row sums and the shapes are checked.

    Parameters
    ----------
    name : str
        The method's name, as shown by ``repr`` and in error messages.
    gamma : float
        The diagonal of the Butcher matrix below its first row.
    a : numpy.ndarray
        Shape ``(s, s)``: the strictly lower part of the Butcher matrix (whose last row,
        with ``gamma`` on the diagonal, is ``b``: stiffly accurate).
    alpha : numpy.ndarray
        Shape ``(s, s)``, strictly lower: the stage predictor, the first guess
        ``k_i ~ sum_{j<i} alpha_ij k_j`` of each implicit stage's derivative.
    c : numpy.ndarray
        Shape ``(s,)``: the nodes (the row sums of the Butcher matrix).
    btilde : numpy.ndarray
        Shape ``(s,)``: the error weights (``b`` minus the embedded method's ``b``).
    order : int
        The order of ``u_new``.
    error_order : int
        The order of the embedded solution.
    stage_order : int
        The stage order asserted, ``A c^(k-1) = c^k / k`` for ``k <= stage_order``
        (default 2).
    jacobian : str
        ``"exact"`` (default: ``J`` from the problem's vjp, made automatically for a compiled
        right-hand side) or ``"finite difference"`` (forward differences, ``n`` calls of ``f``
        per Jacobian).
    interp : numpy.ndarray or None
        Shape ``(s, 5)``: the dense output's weights on the stages (coefficients of
        ``theta^1..theta^5``, as for ``ExplicitRK``); default None: the cubic Hermite
        interpolant of the step.
    interp_order : int
        The order of the dense output (default 3).
    """

    name: str
    gamma: float
    a: np.ndarray = field(repr=False)
    alpha: np.ndarray = field(repr=False)
    c: np.ndarray = field(repr=False)
    btilde: np.ndarray = field(repr=False)
    order: int
    error_order: int
    stage_order: int = 2
    jacobian: str = "exact"
    interp: np.ndarray = field(default=None, repr=False)
    interp_order: int = 3

    adaptive = True
    family = "esdirk"
    default_sensealg = "interpolating"  # integrated backward by Rodas5P

    def __post_init__(self):
        s = self.stages
        A = self.butcher()
        b = A[-1]
        assert self.a.shape == self.alpha.shape == (s, s)
        assert np.all(np.triu(self.a) == 0.0) and np.all(np.triu(self.alpha) == 0.0)
        # the nodes are the row sums, the predictor's rows are consistent
        assert np.allclose(A.sum(axis=1), self.c, atol=1e-14, rtol=0)
        assert np.allclose(self.alpha[1:].sum(axis=1), 1.0, atol=1e-13)
        # every order condition (rooted trees) up to the order, the embedded method's up to
        # its order, and the stage order (A c^(k-1) = c^k / k)
        check_order(self.name, A, b, self.order)
        check_order(f"{self.name} (embedded)", A, b - self.btilde, self.error_order)
        for q in range(1, self.stage_order + 1):
            assert np.allclose(A @ self.c ** (q - 1), self.c**q / q, atol=1e-13)
        if self.interp is None:
            object.__setattr__(self, "interp", _hermite_fsal(b))
        # the dense output ends at u_new
        assert np.allclose(self.interp.sum(axis=1), b, atol=1e-13), self.name

    @property
    def stages(self) -> int:
        return self.c.size

    def butcher(self) -> np.ndarray:
        """The full Butcher matrix (s, s): ``a`` plus ``gamma`` on the diagonal below row 0."""
        A = self.a.copy()
        A[np.arange(1, self.stages), np.arange(1, self.stages)] = self.gamma
        return A

    def arrays(self):
        """``(a, b, c, btilde)`` as contiguous float64 arrays (the plan's ``A, b, c,
        btilde``; ``b`` is the last row of the Butcher matrix)."""
        b = self.butcher()[-1]
        return tuple(
            np.ascontiguousarray(x, dtype=np.float64) for x in (self.a, b, self.c, self.btilde)
        )


def _kvaerno5():
    # A. Kværnø, "Singly diagonally implicit Runge-Kutta methods with an explicit first stage",
    # BIT 44 (2004) 489-502: the 5(4) pair, 7 stages, gamma = 0.26, stiffly accurate and
    # L-stable, embedded solution Y_6. Coefficients as tabulated in diffrax
    # (diffrax/_solver/kvaerno5.py) and OrdinaryDiffEq.jl (Kvaerno5Tableau); the stage
    # predictor (alpha) is OrdinaryDiffEq's, with alpha_21 = 1 as diffrax corrects it.
    gamma = 0.26
    s = 7
    a = np.zeros((s, s))
    a[1, :1] = [gamma]
    a[2, :2] = [0.13, 0.84033320996790809]
    a[3, :3] = [0.22371961478320505, 0.47675532319799699, -0.06470895363112615]
    a[4, :4] = [0.16648564323248321, 0.10450018841591720, 0.03631482272098715,
                -0.13090704451073998]  # fmt: skip
    a[5, :5] = [0.13855640231268224, 0.0, -0.04245337201752043, 0.02446657898003141,
                0.61943039072480676]  # fmt: skip
    a[6, :6] = [0.13659751177640291, 0.0, -0.05496908796538376, -0.04118626728321046,
                0.62993304899016403, 0.06962479448202728]  # fmt: skip
    alpha = np.zeros((s, s))
    alpha[1, :1] = [1.0]
    alpha[2, :2] = [-1.366025403784441, 2.3660254037844357]
    alpha[3, :3] = [-0.19650552613122207, 0.8113579546496623, 0.38514757148155954]
    alpha[4, :3] = [0.10375304369958693, 0.937994698066431, -0.04174774176601781]
    alpha[5, :3] = [-0.17281112873898072, 0.6235784481025847, 0.5492326806363959]
    alpha[6, :5] = a[5, :5]  # the last stage starts from the embedded stage's combination
    alpha[6, 5] = gamma
    c = a.sum(axis=1)
    c[1:] += gamma  # 0, 0.52, 1.2303..., 0.8958..., 0.4364..., 1, 1
    b = a[6].copy()
    b[6] = gamma
    bhat = a[5].copy()
    bhat[5] = gamma
    return ESDIRK(
        name="Kvaerno5",
        gamma=gamma,
        a=a,
        alpha=alpha,
        c=c,
        btilde=b - bhat,
        order=5,
        error_order=4,
    )


Kvaerno5 = _kvaerno5()
"""Kværnø's (2004) ESDIRK 5(4): seven stages (six implicit, one explicit), stiffly accurate,
L-stable, stage order 2; simplified Newton with one LU of ``I - h gamma J`` per step size;
cubic Hermite dense output (third order). Stage 3 is evaluated at ``t + 1.23 h``: the
right-hand side is called slightly beyond the end of a step (and of the time span)."""


def _kencarp4():
    # C. A. Kennedy & M. H. Carpenter, "Additive Runge-Kutta schemes for convection-diffusion-
    # reaction equations", Appl. Numer. Math. 44 (2003) 139-181: the implicit (ESDIRK) part of
    # ARK4(3)6L[2]SA, gamma = 1/4, six stages, stiffly accurate and L-stable, embedded order 3,
    # and its dense output (the b*_ij, third order). Coefficients as tabulated in diffrax
    # (diffrax/_solver/kencarp4.py) and OrdinaryDiffEq.jl (KenCarp4Tableau); the stage
    # predictor is diffrax's (linear in c through earlier stages).
    gamma = 0.25
    s = 6
    b = np.array([82889 / 524892, 0.0, 15625 / 83664, 69875 / 102672, -2260 / 8211, gamma])
    bhat = np.array([4586570599 / 29645900160, 0.0, 178811875 / 945068544,
                     814220225 / 1159782912, -3700637 / 11593932, 61727 / 225920])  # fmt: skip
    a = np.zeros((s, s))
    a[1, :1] = [gamma]
    a[2, :2] = [8611 / 62500, -1743 / 31250]
    a[3, :3] = [5012029 / 34652500, -654441 / 2922500, 174375 / 388108]
    a[4, :4] = [15267082809 / 155376265600, -71443401 / 120774400, 730878875 / 902184768,
                2285395 / 8070912]  # fmt: skip
    a[5, :5] = b[:5]
    c = np.array([0.0, 0.5, 83 / 250, 31 / 50, 17 / 20, 1.0])
    alpha = np.zeros((s, s))
    alpha[1, 0] = 1.0
    r = c[2] / c[1]
    alpha[2, :2] = [1 - r, r]
    r = c[3] / c[1]
    alpha[3, :2] = [1 - r, r]  # c_3 < c_2: from the first two stages
    r = c[4] / c[3]
    alpha[4, [0, 3]] = [1 - r, r]
    r = c[5] / c[4]
    alpha[5, [0, 4]] = [1 - r, r]
    # u(t + theta h) = u + h sum_i (d1_i theta + d2_i theta^2 + d3_i theta^3) k_i
    D = np.array(
        [
            [6943876665148 / 7220017795957, -54480133 / 30881146, 6818779379841 / 7100303317025],
            [0.0, 0.0, 0.0],
            [7640104374378 / 9702883013639, -11436875 / 14766696, 2173542590792 / 12501825683035],
            [-20649996744609 / 7521556579894, 174696575 / 18121608,
             -31592104683404 / 5083833661969],
            [8854892464581 / 2390941311638, -12120380 / 966161, 61146701046299 / 7138195549469],
            [-11397109935349 / 6675773540249, 3843 / 706, -17219254887155 / 4939391667607],
        ]
    )  # fmt: skip
    P = np.zeros((s, 5))
    P[:, :3] = D
    return ESDIRK(
        name="KenCarp4",
        gamma=gamma,
        a=a,
        alpha=alpha,
        c=c,
        btilde=b - bhat,
        order=4,
        error_order=3,
        interp=P,
        interp_order=3,
    )


KenCarp4 = _kencarp4()
"""The implicit part of Kennedy & Carpenter's (2003) ARK4(3)6L[2]SA: an ESDIRK 4(3) of six
stages, stiffly accurate, L-stable, stage order 2, all nodes in ``[0, 1]``; Kennedy &
Carpenter's third-order dense output."""

ESDIRK_SOLVERS = {m.name: m for m in (Kvaerno5, KenCarp4)}
register(*ESDIRK_SOLVERS.values())
