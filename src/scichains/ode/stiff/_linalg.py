"""Small dense LU factorisation with partial pivoting, in place (the stiff solvers' linear
algebra).

For the system sizes of the stiff solvers (2-50 states) a plain compiled loop beats LAPACK
through numba's ``np.linalg`` (whose calls copy and allocate on every use): see
``benchmarks/stiff.py --lu`` for the measurement that chose it.
"""

from __future__ import annotations

import math

from ..._jit import inline_kernel, kernel


@inline_kernel
def lu_factor(A, piv):
    """Factor ``A`` (n, n) in place into ``P A = L U`` (unit lower ``L`` below the diagonal,
    ``U`` on and above it), ``piv[k]`` the row swapped with row ``k`` at step ``k``.

    Returns -1 on success, else the first column ``k`` whose pivot is zero or not finite
    (the matrix is singular to working precision, or holds NaN/inf)."""
    n = A.shape[0]
    for k in range(n):
        p = k
        big = abs(A[k, k])
        for i in range(k + 1, n):
            v = abs(A[i, k])
            if v > big:
                big = v
                p = i
        piv[k] = p
        if not (big > 0.0) or not math.isfinite(big):
            return k
        if p != k:
            for j in range(n):
                tmp = A[k, j]
                A[k, j] = A[p, j]
                A[p, j] = tmp
        inv = 1.0 / A[k, k]
        for i in range(k + 1, n):
            A[i, k] *= inv
        for i in range(k + 1, n):
            lik = A[i, k]
            if lik != 0.0:
                for j in range(k + 1, n):
                    A[i, j] -= lik * A[k, j]
    return -1


@inline_kernel
def lu_solve(LU, piv, b):
    """Solve ``A x = b`` in place (``b`` becomes ``x``) with the factors of :func:`lu_factor`."""
    n = LU.shape[0]
    for k in range(n):
        p = piv[k]
        if p != k:
            tmp = b[k]
            b[k] = b[p]
            b[p] = tmp
    for i in range(n):
        acc = b[i]
        for j in range(i):
            acc -= LU[i, j] * b[j]
        b[i] = acc
    for i in range(n - 1, -1, -1):
        acc = b[i]
        for j in range(i + 1, n):
            acc -= LU[i, j] * b[j]
        b[i] = acc / LU[i, i]


@inline_kernel
def transpose_into(LU, LUT):
    """``LUT = LU^T`` (for :func:`lu_solve_columns`)."""
    n = LU.shape[0]
    for i in range(n):
        for j in range(n):
            LUT[j, i] = LU[i, j]


@inline_kernel
def lu_solve_columns(LUT, piv, b):
    """:func:`lu_solve` from the transposed factors ``LUT = LU^T`` (:func:`transpose_into`):
    both substitutions as updates along contiguous rows of ``LUT`` (independent multiply-adds
    that vectorise) instead of dot products (a chain of dependent ones)."""
    n = LUT.shape[0]
    for k in range(n):
        p = piv[k]
        if p != k:
            tmp = b[k]
            b[k] = b[p]
            b[p] = tmp
    for k in range(n):  # L y = b, column k of L is row k of LUT below the diagonal
        bk = b[k]
        if bk != 0.0:
            for i in range(k + 1, n):
                b[i] -= LUT[k, i] * bk
    for k in range(n - 1, -1, -1):  # U x = y, column k of U is row k of LUT above it
        bk = b[k] / LUT[k, k]
        b[k] = bk
        for i in range(k):
            b[i] -= LUT[k, i] * bk


@inline_kernel
def lu_solve_transposed(LU, piv, b):
    """Solve ``A^T x = b`` in place with the factors of :func:`lu_factor` (``A^T = U^T L^T
    P``): the adjoint sweeps' solves, as updates along contiguous rows of ``LU``."""
    n = LU.shape[0]
    for i in range(n):  # U^T y = b: row i of U is column i of U^T
        bi = b[i] / LU[i, i]
        b[i] = bi
        for j in range(i + 1, n):
            b[j] -= LU[i, j] * bi
    for i in range(n - 1, -1, -1):  # L^T z = y: row i of L is column i of L^T
        bi = b[i]
        for j in range(i):
            b[j] -= LU[i, j] * bi
    for k in range(n - 1, -1, -1):  # x = P^T z
        p = piv[k]
        if p != k:
            tmp = b[k]
            b[k] = b[p]
            b[p] = tmp


@kernel
def lu_factor_solve(A, piv, b):
    """:func:`lu_factor` then :func:`lu_solve` (for tests and the benchmark); returns the
    factor's code."""
    code = lu_factor(A, piv)
    if code < 0:
        lu_solve(A, piv, b)
    return code


@kernel
def lu_solve_t(LU, piv, b):
    """:func:`lu_solve_transposed` as a callable kernel (for tests)."""
    lu_solve_transposed(LU, piv, b)


@kernel
def lu_solve_c(LU, piv, b):
    """:func:`lu_solve_columns` on the factors of :func:`lu_factor` (for tests)."""
    LUT = LU.T.copy()
    lu_solve_columns(LUT, piv, b)


POWER_ITERATIONS = 12
"""Products of :func:`spectral_radius`."""


@kernel
def spectral_radius(J, v, w):
    """``|lambda|`` of the dominant eigenvalue of ``J`` ``(n, n)`` by power iteration from the
    ones vector: the growth ``||J v|| / ||v||`` after :data:`POWER_ITERATIONS` products (an
    estimate: a complex pair makes it oscillate within a small factor). ``v``, ``w``:
    scratch of length ``n``."""
    n = J.shape[0]
    for i in range(n):
        v[i] = 1.0 / math.sqrt(n)
    growth = 0.0
    for _ in range(POWER_ITERATIONS):
        acc2 = 0.0
        for i in range(n):
            acc = 0.0
            for j in range(n):
                acc += J[i, j] * v[j]
            w[i] = acc
            acc2 += acc * acc
        growth = math.sqrt(acc2)
        if not growth > 0.0:
            return growth  # 0, or NaN
        for i in range(n):
            v[i] = w[i] / growth
    return growth


@inline_kernel
def shifted_into(out, J, mass, shift):
    """``out = shift M - J`` (``(n, n)``; ``M`` the identity when ``mass`` is empty, ``(0,
    0)``): the iteration matrix of the Rosenbrock and Radau steps and their adjoints. ``out``
    and ``shift`` may be complex (Radau's ``(alpha + i beta) / h``)."""
    n = J.shape[0]
    if mass.shape[0] > 0:
        for i in range(n):
            for j in range(n):
                out[i, j] = shift * mass[i, j] - J[i, j]
    else:
        for i in range(n):
            for j in range(n):
                out[i, j] = -J[i, j]
            out[i, i] += shift
