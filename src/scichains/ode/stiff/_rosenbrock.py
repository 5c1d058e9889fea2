"""Linearly implicit (Rosenbrock) methods for stiff problems: their coefficients.

A Rosenbrock method is stored in the transformed form of Hairer & Wanner (Solving ODEs II,
IV.7, eq. (7.25)) that the compiled stepper (:mod:`scichains.ode.stiff._rosenbrock_kernel`) runs:
with ``W = I / (h gamma) - J``, ``J = df/du(t, u)``, ``f_t = df/dt(t, u)``,

    W U_i = f(t + c_i h, u + sum_{j<i} a_ij U_j) + sum_{j<i} (C_ij / h) U_j + h d_i f_t,
    u_new = u + sum_i m_i U_i,      error estimate  sum_i btilde_i U_i,

one LU factorisation of ``W`` per step and one solve per stage. Methods published in the
original form (``alpha``, ``Gamma``, ``b``, Hairer & Wanner's (7.4)) are transformed by
:func:`from_original`. Dense output is linear in the ``U_i``: ``u(t + theta h) = u + sum_i
w_i(theta) U_i`` with ``w_i`` polynomials without constant term (``interp``, the rows of
coefficients of ``theta^1..theta^5``), which the stepper stores as ``U_i / h`` so that the
explicit methods' interpolation kernel serves both families.

Correctness is checked by the measured convergence orders of the steps and of the dense
output, and against the reference solutions of the Bari test set, in ``tests/ode/test_stiff.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .._family import register
from .._order import check_order, rosenbrock_original

JACOBIANS = ("exact", "finite difference")


class JacobianChoice:
    """What the stiff methods share: ``method(jacobian=...)`` is the same method with another
    Jacobian (``"exact"`` or ``"finite difference"``; another name raises ``ValueError``), and
    ``repr`` shows it. The classes are frozen dataclasses made with ``repr=False``."""

    name: str
    jacobian: str

    def __call__(self, jacobian: str | None = None):
        if jacobian is None or jacobian == self.jacobian:
            return self
        if jacobian not in JACOBIANS:
            raise ValueError(f"jacobian must be one of {JACOBIANS}, got {jacobian!r}")
        return replace(self, jacobian=jacobian)

    def __repr__(self) -> str:
        return f"{self.name}(jacobian={self.jacobian!r})"


@dataclass(frozen=True, repr=False)
class Rosenbrock(JacobianChoice):
    """A Rosenbrock method of ``s`` stages (see the module's docstring for the form of its
    coefficients).

    Call the method to change its Jacobian: ``Rodas5P(jacobian="finite difference")`` (an
    unknown name raises ``ValueError``). When a method is made its order conditions are
    checked (every rooted tree up to ``order`` for ``m`` and up to ``error_order`` for ``m -
    btilde``, on the coefficients transformed back to Hairer & Wanner's ``alpha``, ``Gamma``,
    ``b``: :mod:`scichains.ode._order`); ``ValueError`` naming the tree that fails.

    ``df/dt`` (non-autonomous problems) is a one-sided second-order difference in ``t``
    (step ``eps^(1/3) max(|t|, |h|)``, towards the end of the time span, so ``f`` is never
    called before ``t0``): two more calls of ``f`` per step, relative error about ``1e-10``,
    seen only by the ``h d_i f_t`` terms. An autonomous problem is detected at each step
    (``f`` unchanged bit for bit at the shifted time) and costs one call.

    Parameters
    ----------
    name : str
        The method's name, as shown by ``repr`` and in error messages.
    gamma : float
        The diagonal ``gamma`` of ``W = I / (h gamma) - J``.
    a : numpy.ndarray
        Shape ``(s, s)``, strictly lower: the ``a_ij`` of the stage arguments.
    C : numpy.ndarray
        Shape ``(s, s)``, strictly lower: the ``C_ij`` of the stage right-hand sides.
    c : numpy.ndarray
        Shape ``(s,)``: the nodes.
    d : numpy.ndarray
        Shape ``(s,)``: the weights ``d_i`` of the ``h d_i f_t`` terms.
    m : numpy.ndarray
        Shape ``(s,)``: the weights of ``u_new = u + sum_i m_i U_i``.
    btilde : numpy.ndarray
        Shape ``(s,)``: the error estimate is ``sum_i btilde_i U_i``.
    order : int
        The order of ``u_new``.
    ctrl_order : int
        The power of ``h`` in the local error estimate (the PI controller's ``k``).
    interp : numpy.ndarray
        Shape ``(s, 5)``: the dense output weights ``w_i(theta)`` on the ``U_i``, coefficients
        of ``theta^1..theta^5``.
    interp_order : int
        The order of the dense output.
    fsal : bool
        The last stage is evaluated at ``(t + h, u_new)``, so its ``f`` is the next step's
        first (default False).
    jacobian : str
        ``"exact"`` (the default: ``J`` from the problem's vjp, made automatically for a
        compiled right-hand side as for the adjoints, see :meth:`ODEProblem.ensure_vjp`) or
        ``"finite difference"`` (forward differences, ``n`` more calls of ``f`` per step).
    dae : bool
        The method is built for a singular mass matrix (index-1 DAEs ``M du/dt = f``; a
        stiffly accurate method whose order conditions include the DAE ones): Rodas5P. Every
        Rosenbrock method takes a non-singular ``M``.
    """

    name: str
    gamma: float
    a: np.ndarray = field(repr=False)
    C: np.ndarray = field(repr=False)
    c: np.ndarray = field(repr=False)
    d: np.ndarray = field(repr=False)
    m: np.ndarray = field(repr=False)
    btilde: np.ndarray = field(repr=False)
    order: int
    ctrl_order: int
    interp: np.ndarray = field(repr=False)
    interp_order: int
    fsal: bool = False
    jacobian: str = "exact"
    dae: bool = False

    adaptive = True
    family = "rosenbrock"

    def __post_init__(self):
        alpha, Gamma, b = rosenbrock_original(self.a, self.C, self.m, self.gamma)
        beta = alpha + Gamma  # a vertex with one son: the Jacobian's linear term
        check_order(self.name, alpha, b, self.order, single=beta)
        bhat = (np.asarray(self.m) - np.asarray(self.btilde)) @ Gamma
        check_order(f"{self.name} (embedded)", alpha, bhat, self.error_order, single=beta)

    @property
    def default_sensealg(self) -> str:
        """``"discrete"`` (through the steps: one backward step per forward step) with the
        exact Jacobian, else ``"interpolating"``."""
        return "discrete" if self.jacobian == "exact" else "interpolating"

    @property
    def stages(self) -> int:
        return len(self.m)

    @property
    def error_order(self) -> int:
        """The order of the embedded solution (``ctrl_order - 1``), as for ExplicitRK."""
        return self.ctrl_order - 1

    def arrays(self):
        """``(a, m, c, btilde)`` as contiguous float64 arrays (the plan's ``A, b, c, btilde``)."""
        return tuple(
            np.ascontiguousarray(x, dtype=np.float64) for x in (self.a, self.m, self.c, self.btilde)
        )


def _poly_rows(polys, s):
    """Coefficients of theta^1..theta^5 (shape (s, 5)) of numpy poly1d objects."""
    P = np.zeros((s, 5))
    for i, q in enumerate(polys):
        co = np.atleast_1d(q.coeffs)[::-1]
        if abs(co[0]) > 1e-14:
            raise ValueError("a dense output weight has a constant term")
        P[i, : co.size - 1] = co[1:]
    return P


def from_original(name, alpha, Gamma, b, bhat, dense_k, order, ctrl_order, fsal):
    """A :class:`Rosenbrock` from Hairer & Wanner's original form

        (I - h gamma J) k_i = h f(u + sum_j alpha_ij k_j) + h J sum_{j<i} gamma_ij k_j
                              + h^2 gamma_i f_t,     u_new = u + sum b_i k_i

    (``Gamma`` lower triangular with ``gamma`` on its diagonal, ``gamma_i`` its row sums),
    the embedded solution ``bhat`` and dense weights ``dense_k`` (poly1d in theta, one per
    stage, on the ``k_i``), by the substitution ``U = Gamma k``."""
    s = len(b)
    alpha = np.asarray(alpha, dtype=float)
    Gamma = np.asarray(Gamma, dtype=float)
    gamma = Gamma[0, 0]
    Ginv = np.linalg.inv(Gamma)
    a = alpha @ Ginv
    C = np.diag(1.0 / np.diag(Gamma)) - Ginv
    P = _poly_rows(dense_k, s)
    return Rosenbrock(
        name=name,
        gamma=float(gamma),
        a=np.tril(a, -1),
        C=np.tril(C, -1),
        c=alpha.sum(axis=1),
        d=Gamma.sum(axis=1),
        m=np.asarray(b) @ Ginv,
        btilde=(np.asarray(b) - np.asarray(bhat)) @ Ginv,
        order=order,
        ctrl_order=ctrl_order,
        interp=(P.T @ Ginv).T,  # weights on U: w(theta) = b(theta) Gamma^-1
        interp_order=2,
        fsal=fsal,
    )


def _rosenbrock23():
    # Shampine & Reichelt (1997), "The MATLAB ODE suite", SIAM J. Sci. Comput. 18: the
    # second-order W-method of ode23s with d = 1 / (2 + sqrt 2), e32 = 6 + sqrt 2:
    #   W k1 = F0 + h d T,  F1 = f(y + h k1 / 2),  W (k2 - k1) = F1 - k1,  y_new = y + h k2,
    #   F2 = f(y_new),  W k3 = F2 - e32 (k2 - F1) - 2 (k1 - F0) + h d T,
    #   error h/6 (k1 - 2 k2 + k3),  y(theta) = y + h [theta(1-theta) k1 + theta(theta-2d) k2]
    #   / (1 - 2d)
    # rewritten here in Hairer & Wanner's form (K = h k): substituting W (k2 - k1) and
    # W k1 gives Gamma's rows [d], [-d, d], [(e32 - 2) d, -e32 d, d].
    d = 1.0 / (2.0 + math.sqrt(2.0))
    e32 = 6.0 + math.sqrt(2.0)
    alpha = [[0, 0, 0], [0.5, 0, 0], [0, 1.0, 0]]
    Gamma = [[d, 0, 0], [-d, d, 0], [(e32 - 2.0) * d, -e32 * d, d]]
    b = np.array([0.0, 1.0, 0.0])
    bhat = b - np.array([1.0, -2.0, 1.0]) / 6.0
    th = np.poly1d([1.0, 0.0])
    one = np.poly1d([1.0])
    dense = [th * (one - th) / (1 - 2 * d), th * (th - 2 * d) / (1 - 2 * d), 0 * th]
    return from_original("Rosenbrock23", alpha, Gamma, b, bhat, dense, 2, 3, True)


Rosenbrock23 = _rosenbrock23()
"""Shampine & Reichelt's (1997) second-order W-method with a third-order error estimate
(MATLAB's ode23s), L-stable: robust at loose tolerances; second-order dense output."""


def _rodas5p():
    # G. Steinebach, "Construction of Rosenbrock-Wanner method Rodas5P and numerical
    # benchmarks within the Julia Differential Equations package", BIT Numer. Math. 63 (2023)
    # 27: eight stages, order 5, stiffly accurate, embedded order 4 (the last stage is the
    # error estimate), dense output of order 4 from three further rows. The published
    # coefficients in the transformed form (a_ij, C_ij, c_i, d_i, gamma).
    s = 8
    gamma = 0.21193756319429014
    a = np.zeros((s, s))
    a[1, 0] = 3.0
    a[2, :2] = [2.849394379747939, 0.45842242204463923]
    a[3, :3] = [-6.954028509809101, 2.489845061869568, -10.358996098473584]
    a[4, :4] = [2.8029986275628964, 0.5072464736228206, -0.3988312541770524, -0.04721187230404641]
    a6 = [
        -7.502846399306121,
        2.561846144803919,
        -11.627539656261098,
        -0.18268767659942256,
        0.030198172008377946,
    ]
    a[5, :5] = a6
    a[6, :5] = a6  # stage 7: stage 6's point plus U_6
    a[6, 5] = 1.0
    a[7, :6] = a[6, :6]  # stage 8: the embedded solution, plus U_7
    a[7, 6] = 1.0
    C = np.zeros((s, s))
    C[1, 0] = -14.155112264123755
    C[2, :2] = [-17.97296035885952, -2.859693295451294]
    C[3, :3] = [147.12150275711716, -1.41221402718213, 71.68940251302358]
    C[4, :4] = [165.43517024871676, -0.4592823456491126, 42.90938336958603, -5.961986721573306]
    C[5, :5] = [
        24.854864614690072,
        -3.0009227002832186,
        47.4931110020768,
        5.5814197821558125,
        -0.6610691825249471,
    ]
    C[6, :6] = [
        30.91273214028599,
        -3.1208243349937974,
        77.79954646070892,
        34.28646028294783,
        -19.097331116725623,
        -28.087943162872662,
    ]
    C[7, :7] = [
        37.80277123390563,
        -3.2571969029072276,
        112.26918849496327,
        66.9347231244047,
        -40.06618937091002,
        -54.66780262877968,
        -9.48861652309627,
    ]
    c = np.array([0.0, 0.6358126895828704, 0.4095798393397535, 0.9769306725060716,
                  0.4288403609558664, 1.0, 1.0, 1.0])  # fmt: skip
    d = np.array([gamma, -0.42387512638858027, -0.3384627126235924, 1.8046452872882734,
                  2.325825639765069, 0.0, 0.0, 0.0])  # fmt: skip
    m = a[7].copy()
    m[7] = 1.0  # u_new = stage 8's point + U_8
    btilde = np.zeros(s)
    btilde[7] = 1.0  # the error estimate is U_8
    H = np.array(
        [
            [25.948786856663858, -2.5579724845846235, 10.433815404888879, -2.3679251022685204,
             0.524948541321073, 1.1241088310450404, 0.4272876194431874, -0.17202221070155493],
            [-9.91568850695171, -0.9689944594115154, 3.0438037242978453, -24.495224566215796,
             20.176138334709044, 15.98066361424651, -6.789040303419874, -6.710236069923372],
            [11.419903575922262, 2.8879645146136994, 72.92137995996029, 80.12511834622643,
             -52.072871366152654, -59.78993625266729, -0.15582684282751913, 4.883087185713722],
        ]
    )  # fmt: skip
    # u(theta) = (1 - theta) u + theta (u_new + (1 - theta) (D1 + theta (D2 + theta D3))),
    # D_r = sum_i H[r, i] U_i: weights theta m + (theta - theta^2) H1 + (theta^2 - theta^3) H2
    # + (theta^3 - theta^4) H3
    P = np.zeros((s, 5))
    P[:, 0] = m + H[0]
    P[:, 1] = -H[0] + H[1]
    P[:, 2] = -H[1] + H[2]
    P[:, 3] = -H[2]
    return Rosenbrock(
        name="Rodas5P",
        gamma=gamma,
        a=a,
        C=C,
        c=c,
        d=d,
        m=m,
        btilde=btilde,
        order=5,
        ctrl_order=5,
        interp=P,
        interp_order=4,
        fsal=False,
        dae=True,
    )


Rodas5P = _rodas5p()
"""Steinebach's (2023) Rodas5P: order 5(4), eight stages, stiffly accurate and L-stable,
fourth-order dense output; the method of choice for small stiff systems at moderate to tight
tolerances (as in DifferentialEquations.jl)."""

STIFF_SOLVERS = {m.name: m for m in (Rosenbrock23, Rodas5P)}
register(*STIFF_SOLVERS.values())
