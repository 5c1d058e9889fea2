"""The one stepping loop (white-box: ``ode._loop`` and the solve plan): what it leaves for a
continuation, its resume after GROW, and the family registry."""

import numba
import numpy as np
import pytest

from scichains import ode
from scichains.ode import _loop
from scichains.ode._plan import plan_solve, run_plan

pytestmark = pytest.mark.whitebox


@numba.njit
def van_der_pol(du, u, p, t):
    du[0] = u[1]
    du[1] = p[0] * (1.0 - u[0] ** 2) * u[1] - u[0]


FAMILIES = ["Tsit5", "Rodas5P", "Kvaerno5", "RadauIIA5"]  # explicit, Rosenbrock, ESDIRK, Radau


def _plan(solver, tspan=(0.0, 30.0)):
    prob = ode.ODEProblem(van_der_pol, [2.0, 0.0], tspan, np.array([5.0]))
    plan = plan_solve(prob, solver, None, 1e-8, 1e-10, None, 100_000, None, None, None, None)
    return prob, plan


@pytest.mark.parametrize("name", FAMILIES)
def test_the_proposed_next_step_is_left_after_the_last_entry(name):
    # a checkpointed adjoint starts each segment with it; numba 0.68.1 once dropped this store
    prob, plan = _plan(getattr(ode, name)())
    assert run_plan(plan, prob.u0, prob.p) == 0
    m = plan.stats[0]
    assert plan.ts[m] == plan.carry[0]
    steps = np.abs(np.diff(plan.ts[:m]))
    assert 0.1 * steps.max() < plan.ts[m] < 10.0 * steps.max()


@pytest.mark.parametrize("name", FAMILIES)
def test_a_resume_after_grow_takes_the_same_steps_as_one_run(name):
    solver = getattr(ode, name)()
    prob, grown = _plan(solver)
    assert run_plan(grown, prob.u0, prob.p) == 0
    prob, roomy = _plan(solver)
    while roomy.ts.shape[0] < 4 * grown.stats[0]:
        roomy.grow()
    assert run_plan(roomy, prob.u0, prob.p) == 0
    assert grown.ts.shape[0] > 300  # the first buffers (256 steps) did grow
    m = grown.stats[0]
    np.testing.assert_array_equal(grown.stats[:6], roomy.stats[:6])  # [6]: the resume flag
    np.testing.assert_array_equal(grown.ts[: m + 1], roomy.ts[: m + 1])
    np.testing.assert_array_equal(grown.us[:m], roomy.us[:m])
    np.testing.assert_array_equal(grown.carry, roomy.carry)


def test_a_family_must_supply_every_hook():
    from typing import NamedTuple

    class Half(NamedTuple):
        ctrl_order: int

    with pytest.raises(TypeError, match="missing"):
        _loop.register_family(Half, workspace=lambda method, u0, p, store: None)
    with pytest.raises(TypeError, match="unknown"):
        _loop.register_family(Half, **{h: None for h in _loop.HOOKS}, step=None)


def test_the_hooks_are_not_callable_from_python():
    with pytest.raises(NotImplementedError, match="hook of the compiled loop"):
        _loop.attempt(None)
