"""Mass-matrix problems ``M du/dt = f(u, p, t)``: the matrix, its algebraic part, and
consistent initial states.

``M`` is constant, ``(n, n)``. Where it is singular the problem is a differential-algebraic
system: with the singular value decomposition ``M = U S V^T`` of rank ``r``, the last
``n - r`` columns ``U_a`` of ``U`` span the combinations of equations that carry no
derivative, ``U_a^T f(u, p, t) = 0`` (the algebraic equations), and the last ``n - r``
columns ``V_a`` of ``V`` the directions of ``u`` that no derivative sees (the algebraic
variables). For ``M = diag(1, 1, 0)`` these are the third equation and the third state.

The compiled solvers that take ``M`` (Rodas5P, RadauIIA5 for a singular one) are built for
index 1: the algebraic equations determine the algebraic variables, i.e. ``U_a^T J V_a`` is
non-singular (``J = df/du``). They need a consistent start: the algebraic equations must hold
at ``(u0, t0)``. :func:`check_consistent` measures how far they are from holding, as the
change of the algebraic variables that one Newton step would make, against the solve's
tolerances; :func:`consistent_state` makes them hold (Newton on the algebraic variables, the
others kept; what DifferentialEquations.jl calls ``BrownFullBasicInit``).

A gradient through a DAE solve whose start is made consistent at each ``p`` sees the start
move with ``p``: with ``z*(u_d, p)`` the algebraic variables that solve ``U_a^T f = 0`` and
``G = U_a^T J V_a``, the implicit function theorem gives ``dz*/dp = -G^-1 U_a^T f_p`` and
``dz*/du0 = -G^-1 U_a^T J`` (along the directions ``M`` sees); :func:`start_vjp` adds their
terms to the gradient of the solve from the consistent start with one vjp call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .._jit import FLAGS
from ._abi import NO_MASS, vjp_from_address


@dataclass(frozen=True)
class AlgebraicPart:
    """The algebraic equations and variables of a singular mass matrix (see the module)."""

    equations: np.ndarray
    """``(n, n_a)``: ``U_a``, the combinations of equations without derivatives."""
    variables: np.ndarray
    """``(n, n_a)``: ``V_a``, the directions of ``u`` without derivatives."""


def check_mass_matrix(mass_matrix, n: int) -> np.ndarray | None:
    """``mass_matrix`` as a C-contiguous float64 ``(n, n)`` array (``None`` stays ``None``);
    ``ValueError`` or ``TypeError`` naming what is wrong."""
    if mass_matrix is None:
        return None
    M = np.asarray(mass_matrix)
    if M.dtype.kind not in "fiub":
        raise TypeError(f"mass_matrix must hold real numbers, got dtype {M.dtype}")
    if M.shape != (n, n):
        raise ValueError(
            f"mass_matrix must have shape (n, n) = ({n}, {n}) for the {n} states of u0, "
            f"got {M.shape}"
        )
    M = np.ascontiguousarray(M, dtype=np.float64)
    if not np.all(np.isfinite(M)):
        raise ValueError("mass_matrix contains NaN or infinite values")
    if not np.any(M):
        raise ValueError("mass_matrix is zero: there is no differential equation to solve")
    return M


def algebraic_part(M: np.ndarray) -> AlgebraicPart | None:
    """The algebraic equations and variables of ``M``; ``None`` when ``M`` is non-singular
    (rank decided as numpy's ``matrix_rank``: singular values below ``n eps s_max``)."""
    U, s, Vt = np.linalg.svd(M)
    n = M.shape[0]
    rank = int(np.sum(s > n * np.finfo(np.float64).eps * s[0]))
    if rank == n:
        return None
    return AlgebraicPart(np.ascontiguousarray(U[:, rank:]), np.ascontiguousarray(Vt[rank:].T))


def mass_of(prob) -> np.ndarray:
    """``StepControl.mass`` of ``prob``: its mass matrix, or the empty one for ``M = I``."""
    M = getattr(prob, "mass_matrix", None)
    return NO_MASS if M is None else M


def _f(prob, u, p, t) -> np.ndarray:
    du = np.empty(u.size)
    if prob.takes_kernel:
        prob.f(du, u, p, t, prob.kernel)
    else:
        prob.f(du, u, p, t)
    return du


def _jacobian(prob, u, p, t, fu) -> np.ndarray:
    """``df/du`` at ``(u, t)``: exact from the vjp where the problem has one, else forward
    differences (only the Newton steps and the consistency measure below use it)."""
    n = u.size
    J = np.empty((n, n))
    if prob.vjp_address:
        from .cvode._sundials import jacobian_from_vjp

        if jacobian_from_vjp(
            prob.vjp_address, prob.kernel, u.copy(), p, t, J, np.empty(n), np.empty(p.size)
        ):
            _f(prob, u, p, t)  # the vjp raised: the right-hand side usually says why
            raise RuntimeError(f"the vjp failed at t = {t!r}, u = {u.tolist()!r}")
        return J
    for j in range(n):
        h = 1.5e-8 * max(1.0, abs(u[j]))
        up = u.copy()
        up[j] += h
        J[:, j] = (_f(prob, up, p, t) - fu) / h
    return J


def _newton_step(prob, part: AlgebraicPart, u, p, t):
    """The change of ``u`` (along the algebraic variables) of one Newton step on the
    algebraic equations, and their residual ``U_a^T f``."""
    fu = _f(prob, u, p, t)
    r = part.equations.T @ fu
    if not np.all(np.isfinite(r)):
        raise ValueError(
            f"the right-hand side is not finite at t0 = {t!r}, u0 = {u.tolist()!r}: the "
            "algebraic equations cannot be checked there"
        )
    if not np.any(r):
        return np.zeros_like(u), r
    G = part.equations.T @ _jacobian(prob, u, p, t, fu) @ part.variables
    try:
        dz = np.linalg.solve(G, -r)
    except np.linalg.LinAlgError:
        dz = None
    if dz is None or not np.all(np.isfinite(dz)):
        raise ValueError(
            "the algebraic equations of M du/dt = f do not determine the algebraic variables "
            f"at t = {t!r} (their Jacobian with respect to them is singular): the system is not "
            "of index 1, which the mass-matrix solvers require"
        )
    return part.variables @ dz, r


def check_consistent(prob, part: AlgebraicPart, u0, p, t0, rtol, atol) -> None:
    """``ValueError`` unless the algebraic equations hold at ``(u0, t0)`` to the tolerances:
    the algebraic variables' Newton correction within ``atol + rtol |u0|`` in every state."""
    du, r = _newton_step(prob, part, u0, p, t0)
    scaled = np.abs(du) / (atol + rtol * np.abs(u0))
    if np.all(scaled <= 1.0):
        return
    i = int(np.argmax(scaled))
    raise ValueError(
        f"inconsistent initial state for M du/dt = f: the algebraic equations do not hold at "
        f"t0 = {t0!r} (residual {np.abs(r).max():.3g}); they would move state {i} from "
        f"{u0[i]!r} to {u0[i] + du[i]!r}, more than the tolerance (atol + rtol |u|). Correct "
        "u0, or pass init='algebraic' to ode.solve (or start from prob.consistent_u0()) to "
        "solve for the algebraic variables"
    )


def consistent_state(prob, part: AlgebraicPart, u0, p, t0, max_iter: int = 50) -> np.ndarray:
    """``u0`` with its algebraic variables changed (Newton) so that the algebraic equations
    hold at ``t0`` (the last correction below ``1e-13`` of the largest state); the rest of
    ``u0`` (its part that ``M`` sees) kept. ``ValueError`` when the iteration does not
    converge."""
    u = np.array(u0, dtype=np.float64)
    for _ in range(max_iter):
        du, _ = _newton_step(prob, part, u, p, t0)
        u += du
        # quadratic convergence ends at rounding: a correction of 1e-13 of the state's size
        if np.abs(du).max() <= 1e-13 * max(np.abs(u).max(), 1e-300):
            return u
    raise ValueError(
        f"init='algebraic': the Newton iteration on the algebraic equations did not converge "
        f"in {max_iter} iterations from u0 = {np.asarray(u0).tolist()!r}; give a better u0"
    )


@numba.njit(**FLAGS)
def _vjp_once(vaddr, k, v, u, p, t, ub, pb):
    return vjp_from_address(vaddr)(v, u, p, t, k, ub, pb)


def start_vjp(prob, part: AlgebraicPart, u0, p, t0, dp, du0):
    """The gradient of a loss through a solve whose algebraic variables were made consistent
    at ``(u0, p)`` (see the module): ``(dp, du0)``, the gradient of the solve from the
    consistent ``u0`` (as the adjoint returns it), with the start's dependence on ``p`` and
    on the differential part of ``u0`` added; new arrays. ``du0`` is then zero along the
    algebraic variables (their given values do not matter)."""
    fu = _f(prob, u0, p, t0)
    J = _jacobian(prob, u0, p, t0, fu)
    G = part.equations.T @ J @ part.variables
    y = np.linalg.solve(G.T, -(part.variables.T @ du0))
    lam = np.ascontiguousarray(part.equations @ y)
    ub = np.empty(u0.size)
    pb = np.empty(p.size)
    if _vjp_once(prob.vjp_address, prob.kernel, lam, u0.copy(), p, t0, ub, pb):
        _f(prob, u0, p, t0)
        raise RuntimeError(f"the vjp failed at t0 = {t0!r}, u0 = {u0.tolist()!r}")
    return dp + pb, du0 + ub
