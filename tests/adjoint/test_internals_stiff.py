"""White-box tests of the stiff adjoints: how the Rosenbrock discrete adjoint stores its
forward pass (``scichains.adjoint._methods``). The gradients themselves are checked in
test_stiff_gradient.py."""

import numpy as np
import pytest

from scichains.adjoint import DiscreteAdjoint, _methods
from scichains.ode import Rodas5P

from .test_stiff_gradient import TIGHT, _tmdd_objective

pytestmark = pytest.mark.whitebox


def test_jacobians_recomputed_in_the_sweep_give_the_same_gradient(monkeypatch):
    # the Jacobians recomputed in the sweep (large systems) instead of kept: the same gradient
    obj, prob, p, ts, doses = _tmdd_objective(Rodas5P(), DiscreteAdjoint(), **TIGHT)
    assert obj.method.plan.astore.shape[0] > 0  # kept (4 states)
    value, dp, du0 = obj.value_and_grad(p)
    monkeypatch.setattr(_methods, "JACOBIANS_KEPT_UP_TO", 0)
    again, *_ = _tmdd_objective(Rodas5P(), DiscreteAdjoint(), **TIGHT)
    assert again.method.plan.astore.shape[0] == 0
    v3, dp3, du03 = again.value_and_grad(p)
    assert v3 == value
    np.testing.assert_allclose(dp3, dp, rtol=1e-9, atol=1e-12 * np.abs(dp).max())
    np.testing.assert_allclose(du03, du0, rtol=1e-9)
    assert again.stats()["vjp_calls"] > obj.stats()["vjp_calls"]
