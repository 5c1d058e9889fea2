"""The FOCE-I / Laplace objective on executors: the model pickled by description, the
subjects' work on Dask workers (and threads), results the same bit for bit as in process."""

import pickle
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pytest
from _local_dask import local_dask_client

from scichains import pk

from .models import nn_model, oral_model, theoph_subset


@pytest.fixture(scope="module")
def client():
    with local_dask_client(processes=True) as c:  # the model pickled to other processes
        yield c


def _same(a, b):
    assert a[0] == b[0]
    if a[1] is None:
        assert b[1] is None
    else:
        assert np.array_equal(a[1], b[1])


def test_a_model_pickles_by_description_and_gives_the_same_bits():
    model = oral_model(error=pk.Combined(0.5, 0.1))
    blob = pickle.dumps(model)
    assert b"numba" not in blob and b"lambdify" not in blob  # nothing compiled travels
    back = pickle.loads(blob)
    assert isinstance(back, pk.PKModel) and back is not model
    assert back.parameter_names() == model.parameter_names()
    assert np.array_equal(back.pack(), model.pack())
    data = theoph_subset(4, drop_t0=True)
    x = model.pack() + 0.05
    _same(
        pk.PopulationObjective(model, data).value_and_grad(x),
        pk.PopulationObjective(back, data).value_and_grad(x),
    )
    # the error model's generated functions are made again, not pickled
    assert model.error._funcs is not None and pickle.loads(pickle.dumps(model.error))._funcs is None


@numba.njit
def _one_compartment(du, u, p, t):
    du[0] = -p[0] * u[0]
    du[1] = p[0] * u[0] - p[1] / p[2] * u[1]


def test_traced_and_network_models_pickle_by_their_equations():
    traced = oral_model(odes=_one_compartment)
    blob = pickle.dumps(traced)
    assert b"numba" not in blob and b"_one_compartment" not in blob  # its SymPy equations
    assert pickle.loads(blob).odes == traced.odes
    model = nn_model()
    back = pickle.loads(pickle.dumps(model))
    assert back.parameter_names() == model.parameter_names()
    assert np.array_equal(back.theta0, model.theta0) and back.odes == model.odes
    assert [n.name for n in back.networks] == [n.name for n in model.networks]


def test_threads_give_the_in_process_bits_and_warm_starts():
    model = oral_model()
    data = theoph_subset(12)
    local = pk.PopulationObjective(model, data)
    with ThreadPoolExecutor(2) as pool:
        obj = pk.PopulationObjective(model, data, executor=pool, batch_size=3, block=2)
        assert obj.bounds == [(0, 4), (4, 8), (8, 12)]
        local2 = pk.PopulationObjective(model, data, block=2)
        x = model.pack()
        for k in range(3):
            xk = x + 0.02 * k
            _same(obj.value_and_grad(xk), local2.value_and_grad(xk))
            assert np.array_equal(obj.etas, local2.etas)
        # another block size, from the same warm starts: other partial sums, the same value
        # to rounding
        local.etas = obj.etas.copy()
        v, g = local.value_and_grad(x + 0.04)
        obj.etas = local.etas.copy()
        ofv_i, g_i = obj.per_subject(x + 0.04, grad=True)
        assert v == pytest.approx(ofv_i.sum(), rel=1e-14)
        assert ofv_i.shape == (12,) and g_i.shape == (12, model.size)
        np.testing.assert_allclose(g_i.sum(axis=0), g, rtol=1e-10, atol=1e-10)


def test_a_fit_on_threads_takes_the_in_process_steps():
    # pk.fit with an executor (default suite; the whole fit on two Dask workers is slow)
    model = oral_model()
    data = theoph_subset(8)
    with pytest.warns(pk.FitWarning):  # three iterations: unconverged, and says so
        local = pk.fit(model, data, maxiter=3)
    with ThreadPoolExecutor(2) as pool, pytest.warns(pk.FitWarning):
        res = pk.fit(model, data, maxiter=3, executor=pool, batch_size=4)
    assert res.ofv == local.ofv and np.array_equal(res.x, local.x)
    assert np.array_equal(res.etas, local.etas)
    assert res.n_evaluations == local.n_evaluations


def test_bad_executors_and_sizes_are_refused():
    model = oral_model()
    data = theoph_subset(2)
    with pytest.raises(TypeError, match="submit"):
        pk.PopulationObjective(model, data, executor=object())
    with pytest.raises(TypeError, match="instance"):
        pk.PopulationObjective(model, data, executor=ThreadPoolExecutor)
    with pytest.raises(TypeError, match="submit"):
        pk.fit(model, data, executor="a client")
    with pytest.raises(ValueError, match="batch_size must be positive"):
        pk.PopulationObjective(model, data, executor=ThreadPoolExecutor(1), batch_size=0)
    with pytest.raises(ValueError, match="block must be a positive integer"):
        pk.PopulationObjective(model, data, block=0)


@pytest.mark.slow
def test_theophylline_fit_on_two_workers_is_bit_identical(client, theoph_fit):
    model, data, local = theoph_fit
    t = time.perf_counter()
    res = pk.fit(model, data, executor=client)
    seconds = time.perf_counter() - t
    assert res.success, res.message
    assert res.ofv == local.ofv and np.array_equal(res.x, local.x)
    assert np.array_equal(res.etas, local.etas)
    assert res.n_evaluations == local.n_evaluations
    print(
        f"Theophylline FOCE-I fit on two workers: {seconds:.2f} s (in process {local.seconds:.2f})"
    )


def test_objective_and_gradient_on_one_and_two_workers(client):
    """One chunk (one worker) and three chunks over two workers, FOCE-I and Laplace, with the
    warm starts carried between evaluations, and an error raised on a worker."""
    model = oral_model(
        error=pk.Proportional(0.2), omega=np.array([[0.6, 0.1, 0], [0.1, 0.3, 0], [0, 0, 0.1]])
    )
    data = theoph_subset(12, drop_t0=True)
    x0 = model.pack()
    for method in ("focei", "laplace"):
        local = pk.PopulationObjective(model, data, method=method)
        remote = {
            size: pk.PopulationObjective(
                model, data, method=method, executor=client, batch_size=size
            )
            for size in (12, 4)
        }
        assert len(remote[12].bounds) == 1 and len(remote[4].bounds) == 3
        for k in range(2):
            x = x0 + 0.03 * k
            want = local.value_and_grad(x)
            for obj in remote.values():
                _same(obj.value_and_grad(x), want)
                assert np.array_equal(obj.etas, local.etas)
        # the value alone, and the subjects' terms
        _same((remote[4].value(x0), None), (local.value(x0), None))
        a, b = remote[4].per_subject(x0, grad=True), local.per_subject(x0, grad=True)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        # warm starts set from outside (as fit restores them after a failed trial point)
        for obj in (local, *remote.values()):
            obj.etas = np.full_like(obj.etas, 0.05)
        want = local.value_and_grad(x0 - 0.02)
        for obj in remote.values():
            _same(obj.value_and_grad(x0 - 0.02), want)
    # an EBE that fails on a worker raises there the caller's own error, the warm starts kept
    strict = pk.PopulationObjective(model, data, inner_maxiter=1, executor=client, batch_size=4)
    before = strict.etas.copy()
    with pytest.raises(pk.InnerFailure, match="did not converge in 1 iterations") as e:
        strict.value(x0)
    with pytest.raises(pk.InnerFailure) as e_local:
        pk.PopulationObjective(model, data, inner_maxiter=1).value(x0)
    assert str(e.value) == str(e_local.value)
    assert np.array_equal(strict.etas, before)
    with pytest.raises(ValueError, match="x must have shape"):
        strict.value(x0[:-1])


def test_a_worker_that_dies_is_replaced_and_the_results_are_identical(client, tmp_path):
    """(Last in the module: a worker of the shared cluster dies and is restarted.)"""
    import os

    marker = str(tmp_path / "died-once")

    class DiesOnce(pk.Additive):
        def variance(self, f, sd):
            if not os.path.exists(marker):  # a worker building its error terms dies once
                open(marker, "w").close()
                os._exit(1)
            return sd[0] ** 2

    open(marker, "w").close()  # (not here)
    model = oral_model(error=DiesOnce(0.7))
    data = theoph_subset(12)
    x = model.pack()
    local = pk.PopulationObjective(model, data)
    want = local.value_and_grad(x)
    os.remove(marker)
    obj = pk.PopulationObjective(model, data, executor=client, batch_size=4)
    _same(obj.value_and_grad(x), want)
    assert os.path.exists(marker)  # a worker died
    assert np.array_equal(obj.etas, local.etas)
    _same(obj.value_and_grad(x + 0.02), local.value_and_grad(x + 0.02))
