"""Order conditions checked when a method is made (ode._order): the rooted trees, every
shipped tableau exact to its order and failing at the next (so the check can fail), and a
mistyped coefficient refused at construction with the tree that fails."""

import dataclasses

import numpy as np
import pytest

from scichains import ode
from scichains.ode._order import check_order, density, residuals, rosenbrock_original, trees

EXPLICIT = [ode.Tsit5, ode.DP5, ode.BS3, ode.Vern7, ode.RK4]
ROSENBROCK = [ode.Rodas5P, ode.Rosenbrock23]
NAME = lambda m: m.name  # noqa: E731


def test_the_rooted_trees():
    # A000081: 1, 1, 2, 4, 9, 20, 48 trees of orders 1..7; densities of order 3: 3 and 6
    assert [len(trees(q)) for q in range(1, 8)] == [1, 1, 2, 4, 9, 20, 48]
    assert sorted(density(t) for t in trees(3)) == [3, 6]
    assert sum(1.0 / density(t) for t in trees(4)) == pytest.approx(1 / 4 + 1 / 8 + 1 / 12 + 1 / 24)


@pytest.mark.parametrize("method", EXPLICIT, ids=NAME)
def test_explicit_tableaus_have_their_orders_and_no_more(method):
    A, b, c, bt = method.arrays()
    assert max(abs(r) for _, r in residuals(A, b, method.order)) < 2e-14
    with pytest.raises(ValueError, match="order condition"):
        check_order(method.name, A, b, method.order + 1)
    if method.error_order:
        bhat = b - bt
        assert max(abs(r) for _, r in residuals(A, bhat, method.error_order)) < 2e-14
        with pytest.raises(ValueError, match="order condition"):
            check_order(method.name, A, bhat, method.error_order + 1)


@pytest.mark.parametrize("method", [ode.Kvaerno5, ode.KenCarp4], ids=NAME)
def test_esdirk_tableaus_have_their_orders_and_no_more(method):
    A = method.butcher()
    with pytest.raises(ValueError, match="order condition"):
        check_order(method.name, A, A[-1], method.order + 1)


@pytest.mark.parametrize("method", ROSENBROCK, ids=NAME)
def test_rosenbrock_conditions_with_beta_on_one_son_vertices(method):
    """Rodas5P's published coefficients satisfy all 17 conditions of order 5 (measured
    3e-15) with Hairer & Wanner's rule (beta = alpha + Gamma where a vertex has one son) and
    the back-transformation; with A = alpha everywhere (the rule left out) order 3 fails by
    0.044."""
    alpha, Gamma, b = rosenbrock_original(method.a, method.C, method.m, method.gamma)
    beta = alpha + Gamma
    assert max(abs(r) for _, r in residuals(alpha, b, method.order, beta)) < 1e-13
    with pytest.raises(ValueError):
        check_order(method.name, alpha, b, method.order + 1, single=beta)
    if method.order >= 3:
        with pytest.raises(ValueError):
            check_order(method.name, alpha, b, 3)


def test_a_mistyped_coefficient_is_refused_when_the_method_is_made():
    A = ode.DP5.A.copy()
    A[4, 2] *= 1.0 + 1e-9
    with pytest.raises(ValueError, match=r"DP5-typo: the order condition of the tree"):
        ode.ExplicitRK("DP5-typo", A, ode.DP5.b, A.sum(axis=1), order=5)
    with pytest.raises(ValueError, match="row sums"):
        ode.ExplicitRK("bad-c", ode.RK4.A, ode.RK4.b, ode.RK4.c + 0.1, order=4)
    with pytest.raises(ValueError, match="strictly lower"):
        ode.ExplicitRK("implicit", np.eye(1) * 0.5, np.ones(1), np.array([0.5]), order=1)
    bt = ode.DP5.btilde.copy()
    bt[0] += 1e-6
    with pytest.raises(ValueError, match=r"DP5 \(embedded\)"):
        dataclasses.replace(ode.DP5, btilde=bt)
    m = ode.Rodas5P.m.copy()
    m[3] += 1e-9
    with pytest.raises(ValueError, match="Rodas5P: the order condition"):
        dataclasses.replace(ode.Rodas5P, m=m)
