"""Order conditions of Runge-Kutta and Rosenbrock methods, checked when a method is made.

A method has order ``p`` when ``b . Phi(t) = 1 / gamma(t)`` for every rooted tree ``t`` with at
most ``p`` vertices (Butcher; Hairer, Norsett & Wanner I, II.2): 1, 1, 2, 4, 9, 20 and 48 trees
of orders 1 to 7. ``gamma(t)`` is the tree's density (its order times its subtrees'), and
``Phi(t)`` the vector of elementary weights, built from the leaves up: a leaf is the vector of
ones; a vertex with sons ``t_1 .. t_m`` is the elementwise product of ``A Phi(t_k)``.

For a Rosenbrock method with coefficients ``alpha`` (strictly lower), ``Gamma`` (lower, with
``gamma`` on its diagonal) and weights ``b`` the conditions are the same with one change
(Hairer & Wanner II, IV.7): a vertex with exactly one son takes ``beta = alpha + Gamma``
instead of ``A`` (the Jacobian's linear term), a vertex with several sons ``alpha``.

:func:`check_order` raises ``ValueError`` naming the first tree that fails, so a mistyped
coefficient stops the import of its method instead of costing accuracy in silence.
"""

from __future__ import annotations

from functools import cache

import numpy as np

Tree = tuple
"""A rooted tree: the sorted tuple of its root's subtrees (a leaf is ``()``)."""


def order_of(t: Tree) -> int:
    return 1 + sum(order_of(s) for s in t)


def density(t: Tree) -> int:
    """``gamma(t)``: the order of ``t`` times the densities of its subtrees."""
    g = order_of(t)
    for s in t:
        g *= density(s)
    return g


@cache
def trees(order: int) -> tuple[Tree, ...]:
    """The rooted trees with ``order`` vertices, each once."""
    if order == 1:
        return ((),)
    found = set()

    def forests(total, smallest):
        # multisets of trees whose orders sum to total, in non-decreasing order of size
        if total == 0:
            yield ()
            return
        for k in range(smallest, total + 1):
            for t in trees(k):
                for rest in forests(total - k, k):
                    yield (t,) + rest

    for forest in forests(order - 1, 1):
        found.add(tuple(sorted(forest, key=repr)))
    return tuple(sorted(found, key=repr))


def _weights(t: Tree, A: np.ndarray, single: np.ndarray | None) -> np.ndarray:
    g = np.ones(A.shape[0])
    M = single if (single is not None and len(t) == 1) else A
    for s in t:
        g = g * (M @ _weights(s, A, single))
    return g


def residuals(A, b, order: int, single=None) -> list[tuple[Tree, float]]:
    """``(tree, b . Phi(tree) - 1 / gamma(tree))`` for every tree up to ``order``; ``single``:
    the matrix of vertices with one son (Rosenbrock's ``beta``), ``None`` for ``A``."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    single = None if single is None else np.asarray(single, dtype=np.float64)
    out = []
    for q in range(1, order + 1):
        for t in trees(q):
            out.append((t, float(b @ _weights(t, A, single) - 1.0 / density(t))))
    return out


def check_order(name: str, A, b, order: int, single=None, tol: float = 1e-12) -> None:
    """``ValueError`` unless ``b`` with ``A`` (and ``single``, see :func:`residuals`) satisfies
    every order condition up to ``order`` within ``tol`` relative to ``1 / gamma(t)``."""
    for t, r in residuals(A, b, order, single):
        if abs(r) > tol / density(t):
            raise ValueError(
                f"{name}: the order condition of the tree {t!r} (order {order_of(t)}, density "
                f"{density(t)}) fails by {r:.3g}: the coefficients do not make order {order}"
            )


def rosenbrock_original(a, C, m, gamma):
    """``(alpha, Gamma, b)`` of a Rosenbrock method given in the transformed form the stepper
    runs (``a = alpha Gamma^-1``, ``C = diag(1/gamma) - Gamma^-1``, ``m = b Gamma^-1``, Hairer &
    Wanner II, IV.7 (7.25))."""
    s = len(m)
    Gamma = np.linalg.inv(np.eye(s) / gamma - np.asarray(C, dtype=np.float64))
    return np.asarray(a) @ Gamma, Gamma, np.asarray(m) @ Gamma
