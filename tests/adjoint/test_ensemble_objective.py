"""EnsembleObjective: the gradient of a loss summed over an ensemble, checked against central
differences and MultiObjective, and identical bit for bit on any executor."""

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pytest
from _local_dask import local_dask_client

from scichains.adjoint import EnsembleObjective, MultiObjective, SquaredError
from scichains.ode import EnsembleProblem, ODEProblem, solve_ensemble


@numba.njit
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = p[2] * u[0] * u[1] - p[3] * u[1]


@numba.njit
def lotka_volterra_vjp(v, u, p, t, ubar, pbar):
    ubar[0] = v[0] * (p[0] - p[1] * u[1]) + v[1] * p[2] * u[1]
    ubar[1] = -v[0] * p[1] * u[0] + v[1] * (p[2] * u[0] - p[3])
    pbar[0] = v[0] * u[0]
    pbar[1] = -v[0] * u[0] * u[1]
    pbar[2] = v[1] * u[0] * u[1]
    pbar[3] = -v[1] * u[1]


P0 = np.array([1.5, 1.0, 1.0, 3.0])
TS = np.linspace(0.0, 4.0, 12)


def _setup(m, seed=0):
    rng = np.random.default_rng(seed)
    prob = ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 4.0), P0, vjp=lotka_volterra_vjp)
    e = EnsembleProblem(prob, u0s=1.0 + rng.random((m, 2)))
    data = solve_ensemble(e, saveat=TS).u + 0.05 * rng.standard_normal((m, TS.size, 2))
    return prob, e, SquaredError(data)


def test_gradient_against_central_differences_and_multiobjective():
    prob, e, loss = _setup(7)
    obj = EnsembleObjective(e, loss, TS, block=3, rtol=1e-10, atol=1e-12)
    p = P0 * 0.9
    value, dp, du0 = obj.value_and_grad(p)
    h = 1e-6
    fd = [(obj.value(p + h * d) - obj.value(p - h * d)) / (2 * h) for d in np.eye(4)]
    np.testing.assert_allclose(dp, fd, rtol=1e-6)
    u0 = e.u0s.copy()
    fd0 = (
        obj.value(p, u0 + h * np.eye(14)[3].reshape(7, 2))
        - obj.value(p, u0 - h * np.eye(14)[3].reshape(7, 2))
    ) / (2 * h)
    assert du0.shape == (7, 2)
    assert du0[1, 1] == pytest.approx(fd0, rel=1e-6)
    mv, mdp, mdu0 = MultiObjective(prob, loss, TS, rtol=1e-10, atol=1e-12).value_and_grad(p, u0)
    assert value == pytest.approx(mv, rel=1e-14)
    np.testing.assert_allclose(dp, mdp, rtol=1e-13)
    np.testing.assert_array_equal(du0, mdu0)
    # one block holding every trajectory: the same sums as MultiObjective, bit for bit
    v1, dp1, _ = EnsembleObjective(e, loss, TS, block=64, rtol=1e-10, atol=1e-12)(p)
    assert v1 == mv and np.array_equal(dp1, mdp)


def test_identical_on_every_executor_and_batch_size():
    _, e, loss = _setup(40, seed=1)
    p = P0 * 1.05
    ref = EnsembleObjective(e, loss, TS, block=8).value_and_grad(p)
    with ThreadPoolExecutor(2) as pool:
        got = EnsembleObjective(e, loss, TS, block=8, executor=pool, batch_size=9)(p)
    assert got[0] == ref[0] and np.array_equal(got[1], ref[1]) and np.array_equal(got[2], ref[2])
    with local_dask_client() as client:
        for bs in (None, 16):
            obj = EnsembleObjective(e, loss, TS, block=8, executor=client, batch_size=bs)
            for _ in range(2):  # the second call sends only p
                got = obj.value_and_grad(p)
                assert got[0] == ref[0]
                np.testing.assert_array_equal(got[1], ref[1])
                np.testing.assert_array_equal(got[2], ref[2])
        u0 = e.u0s + 0.1
        np.testing.assert_array_equal(
            obj.value_and_grad(p, u0)[1], EnsembleObjective(e, loss, TS, block=8)(p, u0)[1]
        )


def test_bad_input():
    prob, e, loss = _setup(3)
    with pytest.raises(ValueError, match="shared by every trajectory"):
        EnsembleObjective(EnsembleProblem(prob, ps=np.ones((3, 4))), loss, TS)
    with pytest.raises(ValueError, match=r"loss data must have shape \(5, len\(saveat\), n\)"):
        EnsembleObjective(EnsembleProblem(prob, u0s=np.ones((5, 2))), loss, TS)
    with pytest.raises(TypeError, match="submit"):
        EnsembleObjective(e, loss, TS, executor="localhost:8786")
    with pytest.raises(ValueError, match="block must be a positive integer"):
        EnsembleObjective(e, loss, TS, block=0)
    obj = EnsembleObjective(e, loss, TS)
    with pytest.raises(ValueError, match=r"u0 must have shape \(3, 2\)"):
        obj.value_and_grad(P0, np.ones((2, 2)))
    with pytest.raises(ValueError, match="p contains NaN"):
        obj.value_and_grad(np.array([1.0, np.nan, 1.0, 1.0]))
