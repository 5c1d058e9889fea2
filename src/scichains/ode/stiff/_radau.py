"""The three-stage Radau IIA method (order 5) for stiff problems: its coefficients.

Radau IIA with ``s = 3`` is the collocation method at the nodes ``c = ((4 - sqrt 6) / 10,
(4 + sqrt 6) / 10, 1)``: from ``(t, u)`` with step ``h`` it solves for the stage increments
``Z_i = Y_i - u``

    Z = h (A (x) I) F(u + Z),        F(Y)_i = f(t + c_i h, Y_i),        u_new = u + Z_3,

all three stages at once (a ``3n`` system). Hairer & Wanner's RADAU5 (Solving ODEs II, IV.8)
solves it by a simplified Newton iteration on the transformed increments ``W = (T^-1 (x) I) Z``,
where ``T^-1 A^-1 T = diag(gamma, [[alpha, -beta], [beta, alpha]])`` (one real eigenvalue, one
complex pair of ``A^-1``): each iteration is one real system with ``gamma / h I - J`` and one
complex one with ``(alpha + i beta) / h I - J`` (see :mod:`scichains.ode.stiff._radau_kernel`).

The error estimate is RADAU5's: the embedded method of order 3 that adds ``f(t, u)`` with the
weight ``1 / gamma`` to the quadrature, its difference ``h f(t, u) / gamma + sum e_i Z_i``
filtered by ``(I - h J / gamma)^-1`` (which keeps it bounded for stiff components). The dense
output is the collocation polynomial itself (order 3 between the steps, the nodes' values at
``c_i h``), written as weights on the stage derivatives ``k = (A^-1 (x) I) Z / h``:
``u(t + theta h) = u + h sum_j (int_0^theta l_j) k_j`` with ``l_j`` the Lagrange polynomials on
``c``.

Every number here is computed from ``c`` (the collocation conditions), and checked when the
method is made: the order conditions ``B(5)`` and ``C(3)``, the transformation, and the error
estimate's weights against RADAU5's published ``dd`` (``-(13 + 7 sqrt 6) / 3``,
``(-13 + 7 sqrt 6) / 3``, ``-1 / 3``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._family import register
from ..explicit._tableaus import _poly_rows
from ._rosenbrock import JacobianChoice


def _lagrange(c, j):
    p = np.poly1d([1.0])
    for m, cm in enumerate(c):
        if m != j:
            p = p * np.poly1d([1.0, -cm]) / (c[j] - cm)
    return p


def _coefficients():
    s6 = np.sqrt(6.0)
    c = np.array([(4.0 - s6) / 10.0, (4.0 + s6) / 10.0, 1.0])
    L = [_lagrange(c, j).integ() for j in range(3)]  # int_0^theta l_j, zero at 0
    A = np.array([[L[j](c[i]) for j in range(3)] for i in range(3)])
    Ainv = np.linalg.inv(A)
    w, V = np.linalg.eig(Ainv)
    real = int(np.argmin(np.abs(w.imag)))
    pair = next(i for i in range(3) if w[i].imag < 0)  # alpha - i beta: the block below
    gamma = float(w[real].real)
    alpha, beta = float(w[pair].real), float(-w[pair].imag)
    T = np.column_stack([V[:, real].real, V[:, pair].real, V[:, pair].imag])
    TI = np.linalg.inv(T)
    # the embedded method: f(t, u) with weight 1/gamma and bhat of order 3 on c
    Vc = np.array([c**q for q in range(3)])
    rhs = 1.0 / np.arange(1, 4)
    rhs[0] -= 1.0 / gamma
    bhat = np.linalg.solve(Vc, rhs)
    dd = gamma * ((bhat - A[-1]) @ Ainv)  # error = E1^-1 (f(t, u) + sum dd_i Z_i / h)
    P = _poly_rows(L, 3)
    return c, A, Ainv, T, TI, gamma, alpha, beta, dd, P


@dataclass(frozen=True, repr=False)
class RadauIIA(JacobianChoice):
    """A three-stage Radau IIA method (see the module's docstring); ``RadauIIA5`` is the one
    instance. Call it to change its Jacobian: ``RadauIIA5(jacobian="finite difference")``
    (an unknown name raises ``ValueError``).

    Parameters
    ----------
    name : str
        The method's name, as shown by ``repr`` and in error messages.
    jacobian : str
        ``"exact"`` (default: ``J`` from the problem's vjp, made automatically for a compiled
        right-hand side) or ``"finite difference"`` (``n`` calls of ``f`` per Jacobian).
    """

    name: str = "RadauIIA5"
    jacobian: str = "exact"
    c: np.ndarray = field(init=False, repr=False, compare=False)
    A: np.ndarray = field(init=False, repr=False, compare=False)
    Ainv: np.ndarray = field(init=False, repr=False, compare=False)
    T: np.ndarray = field(init=False, repr=False, compare=False)
    TI: np.ndarray = field(init=False, repr=False, compare=False)
    gamma: float = field(init=False, repr=False, compare=False)
    alpha: float = field(init=False, repr=False, compare=False)
    beta: float = field(init=False, repr=False, compare=False)
    dd: np.ndarray = field(init=False, repr=False, compare=False)
    interp: np.ndarray = field(init=False, repr=False, compare=False)

    adaptive = True
    dae = True  # stiffly accurate, L-stable: index-1 DAEs (singular M) keep order 5 (RADAU5)
    family = "radau"
    default_sensealg = "interpolating"  # integrated backward by Rodas5P
    order = 5
    error_order = 3
    """The order of the embedded solution: the controller's exponent is ``1 / 4``."""
    interp_order = 3
    stages = 3
    fsal = False

    def __post_init__(self):
        c, A, Ainv, T, TI, gamma, alpha, beta, dd, P = _coefficients()
        for name, value in zip(
            ("c", "A", "Ainv", "T", "TI", "gamma", "alpha", "beta", "dd", "interp"),
            (c, A, Ainv, T, TI, gamma, alpha, beta, dd, P),
            strict=True,
        ):
            object.__setattr__(self, name, value)
        b = A[-1]
        # B(5): the Radau quadrature is exact to degree 4; C(3): the stage order
        for q in range(1, 6):
            assert abs(b @ c ** (q - 1) - 1.0 / q) < 1e-14, q
        for q in range(1, 4):
            assert np.allclose(A @ c ** (q - 1), c**q / q, atol=1e-14), q
        block = np.array([[gamma, 0.0, 0.0], [0.0, alpha, -beta], [0.0, beta, alpha]])
        assert np.allclose(TI @ Ainv @ T, block, atol=1e-12)
        s6 = np.sqrt(6.0)
        assert np.allclose(dd, [-(13 + 7 * s6) / 3, (-13 + 7 * s6) / 3, -1 / 3], atol=1e-12)
        # the dense output ends at u_new = u + h sum b_j k_j
        assert np.allclose(P.sum(axis=1), b, atol=1e-14)

    def arrays(self):
        """``(A, b, c, btilde)`` as contiguous float64 arrays (the plan's; ``btilde`` is
        zero: the error estimate is the filtered one, made in the stepper)."""
        return tuple(
            np.ascontiguousarray(x, dtype=np.float64)
            for x in (self.A, self.A[-1], self.c, np.zeros(3))
        )


RadauIIA5 = RadauIIA()
register(RadauIIA5)
"""Hairer & Wanner's RADAU5: the three-stage Radau IIA method, order 5, L-stable, stiffly
accurate, stage order 3; simplified Newton on the transformed system (one real and one
complex LU per step size, the Jacobian kept while the iteration contracts fast), the filtered
order-3 error estimate, the collocation polynomial as dense output (third order)."""
