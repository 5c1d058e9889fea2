"""Population on executors: the subjects' objectives built on the workers once, each call
sending theta and the chunk's etas, block sums added in a fixed order: the same bits for any
number of workers, any batch size, and in this process."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from _local_dask import local_dask_client

from scichains.models import Population

from .test_population import _model, _population


def _subjects_and_z(copies=4):
    base = _population()
    subjects = base.subjects * copies  # 12 subjects
    rng = np.random.default_rng(3)
    pop = Population(_model(), subjects, [0, 1], [0.3, 0.2], block=2, rtol=1e-8, atol=1e-10)
    z = pop.pack(np.log([0.8, 0.3, 1.2]), 0.2 * rng.standard_normal((len(subjects), 2)))
    return pop, subjects, z


def test_population_identical_on_executors():
    pop, subjects, z = _subjects_and_z()
    v, g = pop.value_and_grad(z)
    kw = dict(block=2, rtol=1e-8, atol=1e-10)
    with ThreadPoolExecutor(3) as pool:
        p2 = Population(_model(), subjects, [0, 1], [0.3, 0.2], executor=pool, batch_size=5, **kw)
        v2, g2 = p2.value_and_grad(z)
    assert v2 == v and np.array_equal(g2, g)
    with local_dask_client() as client:
        for bs in (None, 3):
            p3 = Population(
                _model(), subjects, [0, 1], [0.3, 0.2], executor=client, batch_size=bs, **kw
            )
            for _ in range(2):
                v3, g3 = p3.value_and_grad(z)
                assert v3 == v and np.array_equal(g3, g)
            assert p3.fun(z)[0] == v


def test_population_sums_are_the_subjects_sums():
    # block sums regroup the additions only: against a plain per-subject sum, to rounding
    pop, subjects, z = _subjects_and_z(2)
    v, g = pop.value_and_grad(z)
    one = Population(_model(), subjects, [0, 1], [0.3, 0.2], block=100, rtol=1e-8, atol=1e-10)
    v1, g1 = one.value_and_grad(z)
    assert v == pytest.approx(v1, rel=1e-13)
    np.testing.assert_allclose(g, g1, rtol=1e-12, atol=1e-12)


def test_population_executor_bad_input():
    pop, subjects, _ = _subjects_and_z(1)
    with pytest.raises(TypeError, match="submit"):
        Population(_model(), subjects, [0, 1], [0.3, 0.2], executor=42)
    with pytest.raises(ValueError, match="block must be a positive integer"):
        Population(_model(), subjects, [0, 1], [0.3, 0.2], block=0)
    with pytest.raises(ValueError, match="batch_size must be positive"):
        with ThreadPoolExecutor(1) as pool:
            Population(_model(), subjects, [0, 1], [0.3, 0.2], executor=pool, batch_size=-1)


def test_an_error_on_a_worker_reaches_the_caller_naming_the_subject():
    from scichains.models import SubjectData
    from scichains.ode import ODESolveError

    pop, subjects, z = _subjects_and_z()

    def bad_u0(p):
        raise ValueError("no initial state for this one")

    broken = list(subjects)
    s = broken[7]
    broken[7] = SubjectData(t=s.t, y=s.y, weights=s.weights, u0=s.u0, jumps=s.jumps, tspan=s.tspan)
    kw = dict(block=2, rtol=1e-8, atol=1e-10)
    with ThreadPoolExecutor(2) as pool:
        p = Population(_model(), broken, [0, 1], [0.3, 0.2], executor=pool, batch_size=4, **kw)
        broken[7].u0 = bad_u0  # after the client-side checks: fails where the task runs
        with pytest.raises(ValueError, match="no initial state") as info:
            p.value_and_grad(z)
        assert "(in subject 7)" in info.value.__notes__
        # a failed solve: ODESolveError, and ScipyFun turns it into a rejected value
        p2 = Population(_model(), subjects, [0, 1], [0.3, 0.2], executor=pool, block=2, max_steps=3)
        with pytest.raises(ODESolveError) as info:
            p2.value_and_grad(z)
        assert "(in subject 0)" in info.value.__notes__
        assert p2.fun(z)[0] == 1e100  # (no finite value seen yet)


def test_dask_chunks_live_on_distinct_workers_and_errors_name_the_subject():
    """Each chunk is held by an actor on its worker (chunk j on worker j mod W); a call sends
    only the parameters; several threads per worker run the chunks they hold at once; an
    error raised on a worker reaches the caller with the subject's note."""
    distributed = pytest.importorskip("distributed")
    pop, subjects, z = _subjects_and_z()
    v, g = pop.value_and_grad(z)
    kw = dict(block=2, rtol=1e-8, atol=1e-10)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        p = Population(_model(), subjects, [0, 1], [0.3, 0.2], executor=client, batch_size=4, **kw)
        holders = p._chunks.holders
        assert len(holders) == 3
        workers = sorted(client.scheduler_info()["workers"])
        assert [h._address for h in holders] == [workers[0], workers[1], workers[0]]
        for _ in range(2):
            v2, g2 = p.value_and_grad(z)
            assert v2 == v and np.array_equal(g2, g)
        assert p._chunks.holders is holders  # placed once
        from scichains.parallel._executor import _POOLS

        assert any(pool._max_workers == 2 for pool in _POOLS.values())  # the worker's threads
        broken = list(subjects)
        s = broken[9]
        broken[9] = type(s)(t=s.t, y=s.y, weights=s.weights, u0=s.u0, jumps=s.jumps)
        p2 = Population(_model(), broken, [0, 1], [0.3, 0.2], executor=client, batch_size=4, **kw)
        broken[9].u0 = _no_u0  # after the client-side checks: fails on the worker
        with pytest.raises(ValueError, match="no initial state") as info:
            p2.value_and_grad(z)
        assert "(in subject 9)" in info.value.__notes__


def _no_u0(p):
    raise ValueError("no initial state for this one")
