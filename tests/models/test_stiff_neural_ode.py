"""NeuralODE with the stiff solver families (Rosenbrock, ESDIRK, CVODE): a tanh network whose
dynamics have a fast mode (eigenvalue about -1000) beside a slow one, differentiated through
the family's adjoint and checked against float64 central differences and against the Tsit5
gradient of the same problem; many trajectories, trajectory lists, lockstep, training; the
refusals name the reason and the solvers that work."""

import numpy as np
import pytest

import scichains as sc
from scichains import ode
from scichains.adjoint import (
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    MultiObjective,
    QuadratureAdjoint,
    Trajectory,
)
from scichains.models import NeuralODE

TIGHT = dict(rtol=1e-10, atol=1e-12)
LOOSE = dict(rtol=1e-6, atol=1e-8)
TS = np.linspace(0.0, 2.0, 11)
U0 = np.array([1.0, 0.5])
ROS, ESD = ode.Rodas5P(), ode.KenCarp4()  # one instance each: kernels compile once


def _chain():
    return sc.SimpleChain(2, sc.Dense(8, "tanh"), sc.Dense(2))


def _stiff_params(chain, lam=1000.0, seed=0):
    """``du/dt = W2 tanh(W1 u + b1) + b2`` with the Jacobian at 0 close to
    ``[[-lam, lam/2], [-1, -0.2]]`` (eigenvalues about ``-lam`` and ``-0.7``) plus small
    random couplings through six more hidden units."""
    rng = np.random.default_rng(seed)
    p = np.zeros(chain.num_params)
    first, second = chain.params(p)
    first["W"][:] = 0.5 * rng.standard_normal((8, 2))
    first["W"][:2] = np.eye(2)
    first["b"][2:] = 0.1 * rng.standard_normal(6)
    second["W"][:] = 0.05 * rng.standard_normal((2, 8))
    second["W"][:, :2] = [[-lam, lam / 2], [-1.0, -0.2]]
    second["b"][:] = [0.3, 0.1]
    return p


def _case():
    chain = _chain()
    p = _stiff_params(chain)
    data = NeuralODE(chain, (0.0, 2.0), TS, **TIGHT).predict(U0, p) * 0.9 + 0.05
    return chain, p, data


def _central(f, x, h=1e-6):
    """Central differences of ``f`` at ``x``, each step ``h max(1, |x_j|)``."""
    out = np.empty(x.size)
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h * max(1.0, abs(x[j]))
        out[j] = (f(x + e) - f(x - e)) / (2 * e[j])
    return out


def _loss(node, u0, p, data):
    """The model's loss by its forward solve only (what ``loss_and_grad`` returns first)."""
    return float(np.sum((node.predict(u0, p) - data) ** 2))


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_the_problem_is_stiff():
    """At rtol 1e-6 Tsit5 is held by stability (about 600 steps), the stiff methods are
    not (about 80): the tests below differentiate a stiff neural ODE."""
    chain, p, _ = _case()
    prob = NeuralODE(chain, (0.0, 2.0), TS).problem(U0, p)  # the neural ODE's own problem
    steps = {}
    for solver in (ode.Tsit5(), ROS, ESD):
        sol = ode.solve(prob, solver, saveat=TS, **LOOSE)
        assert sol.success
        steps[solver.name] = sol.stats["naccept"]
    assert steps["Rodas5P"] * 4 < steps["Tsit5"]
    assert steps["KenCarp4"] * 4 < steps["Tsit5"]


@pytest.mark.parametrize("solver", [ROS, ESD], ids=lambda s: s.name)
def test_stiff_gradient_against_central_differences_and_tsit5(solver):
    chain, p, data = _case()
    node = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, **TIGHT)
    # the family's default_sensealg: the discrete adjoint through the Rosenbrock steps, the
    # interpolating adjoint (integrated backward by Rodas5P) for the ESDIRK methods
    want = DiscreteAdjoint if solver is ROS else InterpolatingAdjoint
    assert isinstance(node.sensealg, want)
    loss, g = node.loss_and_grad(U0, p, data)
    du0 = node.last_du0.copy()
    # the first call (its buffers grown mid-solve) and the later ones give the same bits
    again = node.loss_and_grad(U0, p, data)
    assert again[0] == loss and again[1].tobytes() == g.tobytes()
    assert np.sum((node.predict(U0, p) - data) ** 2) == pytest.approx(loss, rel=1e-15)
    # measured: 5e-9 (Rodas5P), 1e-7 (KenCarp4); Tsit5 on the same problem 2e-9
    fd = _central(lambda q: _loss(node, U0, q, data), p)
    assert _rel(g, fd) < 1e-6
    fd_u0 = _central(lambda v: _loss(node, v, p, data), U0)
    np.testing.assert_allclose(du0, fd_u0, rtol=1e-6)
    # the same gradient as the explicit method's on the same problem (another
    # discretisation: equal to the tolerance's level; measured 3e-11 and 2e-11)
    ref = NeuralODE(chain, (0.0, 2.0), TS, **TIGHT)
    l_ref, g_ref = ref.loss_and_grad(U0, p, data)
    assert loss == pytest.approx(l_ref, rel=1e-9)
    assert _rel(g, g_ref) < 1e-9
    np.testing.assert_allclose(du0, ref.last_du0, rtol=1e-9)


@pytest.mark.parametrize("solver", [ROS, ESD], ids=lambda s: s.name)
def test_adam_on_a_stiff_neural_ode_lowers_the_loss(solver):
    chain, p_true, _ = _case()
    data = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, **LOOSE).predict(U0, p_true)
    p = p_true.copy()
    first, second = chain.params(p)
    second["b"][:] = [0.0, 0.0]  # the offsets to learn back (the fast mode kept)
    first["b"][2:] *= -1.0
    node = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, **LOOSE)
    l0 = node.loss_and_grad(U0, p, data)[0]
    opt = sc.Adam(0.01)
    for _ in range(15):
        _, g = node.loss_and_grad(U0, p, data)
        opt.step(p, g)
    assert node.loss_and_grad(U0, p, data)[0] < 0.1 * l0  # measured: 0.085 -> 0.0028


@pytest.mark.parametrize("solver", [ROS, ESD], ids=lambda s: s.name)
def test_many_trajectories_lists_and_batches_with_stiff_solvers(solver):
    chain, p, _ = _case()
    rng = np.random.default_rng(1)
    u0 = np.c_[rng.uniform(0.5, 1.5, 5), rng.uniform(-0.5, 0.5, 5)]
    data = rng.standard_normal((5, TS.size, 2)) * 0.1
    node = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, lockstep=None, **LOOSE)
    loss, g = node.loss_and_grad(u0, p, data, threads=1)
    du0 = node.last_du0.copy()
    singles = [node.loss_and_grad(u0[i], p, data[i]) + (node.last_du0,) for i in range(5)]
    assert loss == sum(s[0] for s in singles)  # in order: the same bits
    np.testing.assert_array_equal(g, np.sum([s[1] for s in singles], axis=0))
    np.testing.assert_array_equal(du0, np.stack([s[2] for s in singles]))
    got = node.loss_and_grad(u0, p, data, threads=3)
    assert got[0] == loss and got[1].tobytes() == g.tobytes()
    pred = node.predict(u0, p, threads=2)
    assert pred.shape == (5, TS.size, 2)
    np.testing.assert_array_equal(pred[3], node.predict(u0[3], p))
    batch = np.array([4, 1])
    got = node.loss_and_grad(u0, p, data, batch=batch)
    ref = node.loss_and_grad(u0[batch], p, data[batch], threads=1)
    assert got[0] == ref[0] and got[1].tobytes() == ref[1].tobytes()
    # trajectories with times of their own, through MultiObjective with the model's solver
    specs = [Trajectory(u0[i], TS[1 : 3 + 2 * i], data[i, 1 : 3 + 2 * i]) for i in range(4)]
    obj = node.objective(specs)
    assert isinstance(obj, MultiObjective) and type(obj.sensealg) is type(node.sensealg)
    lt, gt = node.loss_and_grad(specs, p)
    one = [
        NeuralODE(chain, (0.0, s.saveat[-1]), s.saveat, solver=solver, **LOOSE).loss_and_grad(
            s.u0, p, s.data
        )
        for s in specs
    ]
    assert lt == pytest.approx(sum(o[0] for o in one), rel=1e-12)
    np.testing.assert_allclose(gt, np.sum([o[1] for o in one], axis=0), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("solver", [ROS, ESD], ids=lambda s: s.name)
def test_lockstep_with_stiff_solvers(solver):
    """Blocks stepped together by a stiff method: each trajectory within tolerance of its
    solo solve (the per-trajectory error norm), the gradient that of the block's
    discretisation (central differences) and close to the solo gradient at a tight
    tolerance."""
    chain, p, _ = _case()
    rng = np.random.default_rng(2)
    u0 = np.c_[rng.uniform(0.5, 1.5, 5), rng.uniform(-0.5, 0.5, 5)]
    data = rng.standard_normal((5, TS.size, 2)) * 0.1
    ref = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, **TIGHT).predict(u0, p)
    lock = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, lockstep=3, **LOOSE)
    np.testing.assert_allclose(lock.predict(u0, p), ref, rtol=0, atol=1e-6)
    node = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, lockstep=3, **TIGHT)
    _, g = node.loss_and_grad(u0, p, data)
    du0 = node.last_du0.copy()
    assert du0.shape == (5, 2)
    fd = _central(lambda q: _loss(node, u0, q, data), p)
    assert _rel(g, fd) < 1e-6  # measured: 1.4e-9 (Rodas5P), 1.4e-8 (KenCarp4)
    e = np.zeros_like(u0)
    e[4, 1] = 1e-6
    num = (_loss(node, u0 + e, p, data) - _loss(node, u0 - e, p, data)) / 2e-6
    assert du0[4, 1] == pytest.approx(num, rel=1e-6)
    solo = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, **TIGHT).loss_and_grad(u0, p, data)
    assert _rel(g, solo[1]) < 1e-9  # measured 2e-12, 6e-12


@pytest.mark.parametrize(
    "solver",
    [
        ode.Rosenbrock23(),
        ode.Kvaerno5(),
        ode.Rodas5P(jacobian="finite difference"),
        ode.RadauIIA5(),
    ],
    ids=repr,
)
def test_other_rosenbrock_and_esdirk_methods(solver):
    chain, p, data = _case()
    tol = TIGHT if solver.order > 2 else dict(rtol=1e-8, atol=1e-10)
    node = NeuralODE(chain, (0.0, 2.0), TS, solver=solver, **tol)
    want = DiscreteAdjoint if solver.default_sensealg == "discrete" else InterpolatingAdjoint
    assert isinstance(node.sensealg, want)
    _, g = node.loss_and_grad(U0, p, data)
    fd = _central(lambda q: _loss(node, U0, q, data), p)
    # measured: 8e-6 (Rosenbrock23 at rtol 1e-8), 3e-8 (Kvaerno5), 4e-8 (Rodas5P, FD Jacobian)
    assert _rel(g, fd) < (1e-6 if solver.order > 2 else 5e-5)


@pytest.mark.parametrize("solver", [ode.CVODE_BDF(), ode.CVODE_Adams()], ids=repr)
def test_cvode_gradient_against_central_differences(solver):
    """CVODE serves NeuralODE through its interpolating adjoint (its only one); the
    gradient is that of the exact solution to CVODE's accuracy."""
    chain, p, data = _case()
    node = NeuralODE(chain, (0.0, 2.0), TS[:6], solver=solver, **TIGHT)
    assert isinstance(node.sensealg, InterpolatingAdjoint)
    _, g = node.loss_and_grad(U0, p, data[:6])
    idx = [0, 5, 17, 20, 33]
    # CVODE's step choices move with p: central differences see them (measured 3e-5 over all
    # entries); the Tsit5 gradient of the same problem agrees to 5e-9
    fd = _central(lambda q: _loss(node, U0, q, data[:6]), p)[idx]
    assert _rel(g[idx], fd) < 1e-4
    ref = NeuralODE(chain, (0.0, 2.0), TS[:6], **TIGHT).loss_and_grad(U0, p, data[:6])[1]
    assert _rel(g, ref) < 1e-7
    u0 = np.stack([U0, -U0])
    d2 = np.stack([data[:6], data[:6]])
    l2, g2 = node.loss_and_grad(u0, p, d2, threads=2)
    assert l2 == pytest.approx(
        node.loss_and_grad(U0, p, data[:6])[0] + node.loss_and_grad(-U0, p, data[:6])[0]
    )


def test_refusals_name_the_reason_and_the_solvers_that_work():
    chain, _, _ = _case()
    stiff = ("Rodas5P", "Rosenbrock23", "Kvaerno5", "KenCarp4", "CVODE_BDF")
    explicit = ("BS3", "DP5", "Tsit5", "Vern7")
    # CVODE's norm is over the whole state: no lockstep
    for solver in (ode.CVODE_BDF(), ode.CVODE_Adams()):
        with pytest.raises(ValueError, match="lockstep=4 with CVODE_.*whole state") as e:
            NeuralODE(chain, (0.0, 1.0), [1.0], solver=solver, lockstep=4)
        assert all(n in str(e.value) for n in ("Tsit5", "Rodas5P", "KenCarp4"))
    # sensitivity methods the family has not
    with pytest.raises(TypeError, match="DiscreteAdjoint.*InterpolatingAdjoint"):
        NeuralODE(chain, (0.0, 1.0), [1.0], solver=ROS, sensealg=ForwardSensitivity())
    with pytest.raises(TypeError, match="KenCarp4 the gradient comes from InterpolatingAdjoint"):
        NeuralODE(chain, (0.0, 1.0), [1.0], solver=ESD, sensealg=DiscreteAdjoint())
    with pytest.raises(TypeError, match="InterpolatingAdjoint"):
        NeuralODE(chain, (0.0, 1.0), [1.0], solver=ode.CVODE_BDF(), sensealg=QuadratureAdjoint())
    # fixed steps: the adjoints differentiate adaptive solves
    for solver in (ode.RK4, ode.Euler):
        with pytest.raises(ValueError, match=f"fixed-step method {solver.name}: the adj") as e:
            NeuralODE(chain, (0.0, 1.0), [1.0], solver=solver)
        assert all(name in str(e.value) for name in explicit + stiff)
    # not a solver, or a class
    for bad in ("Rodas5P", object(), None):
        with pytest.raises(TypeError, match="NeuralODE does not take the solver") as e:
            NeuralODE(chain, (0.0, 1.0), [1.0], solver=bad)
        assert all(name in str(e.value) for name in explicit + stiff)
    with pytest.raises(TypeError, match="class"):
        NeuralODE(chain, (0.0, 1.0), [1.0], solver=ode.CVODE_BDF)
