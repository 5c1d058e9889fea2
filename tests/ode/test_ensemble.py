"""Ensembles: every trajectory as ``solve`` gives it, bit for bit, for any thread count,
batch size and executor; failures are per trajectory; bad input is named."""

import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from scichains import ode
from scichains.ode import (
    CVODE_BDF,
    DP5,
    EnsembleProblem,
    Kvaerno5,
    ODEProblem,
    ReturnCode,
    Rodas5P,
    Tsit5,
    Vern7,
    solve,
    solve_ensemble,
)

from ._ensemble_models import fragile, lotka_volterra

P0 = np.array([1.5, 1.0, 1.0, 3.0])
TS = np.linspace(0.0, 10.0, 50)


def _lv(tspan=(0.0, 10.0)):
    return ODEProblem(lotka_volterra, [1.0, 1.0], tspan, P0)


def _rows(m, seed=0):
    rng = np.random.default_rng(seed)
    u0s = 1.0 + rng.random((m, 2))
    ps = P0 * (1.0 + 0.2 * rng.random((m, 4)))
    return u0s, ps


def _one_by_one(prob, u0s, ps, solver, saveat, **kw):
    out = []
    for u0, p in zip(u0s, ps):
        q = ODEProblem(prob.f, u0, prob.tspan, p)
        out.append(solve(q, solver, saveat=saveat, **kw).u)
    return np.stack(out)


@pytest.mark.parametrize("solver", [Tsit5(), Vern7(), DP5()], ids=lambda s: s.name)
def test_each_trajectory_is_what_solve_gives(solver):
    # Tsit5/DP5 save by their continuous extension, Vern7 lands on the save times: both paths
    u0s, ps = _rows(24)
    prob = _lv()
    sol = solve_ensemble(EnsembleProblem(prob, u0s=u0s, ps=ps), solver, saveat=TS, rtol=1e-7)
    ref = _one_by_one(prob, u0s, ps, solver, TS, rtol=1e-7)
    assert sol.u.shape == (24, TS.size, 2)
    np.testing.assert_array_equal(sol.u, ref)
    assert np.all(sol.status == ReturnCode.SUCCESS) and sol.success.all()
    np.testing.assert_array_equal(sol.t, TS)
    assert sol.nf.min() > 0 and sol.naccept.min() > 0


def test_buffers_grow_for_long_solves():
    # 40 periods need far more steps than the buffers start with (they double in the kernel)
    prob = _lv((0.0, 200.0))
    u0s, ps = _rows(6, seed=1)
    ts = np.linspace(0.0, 200.0, 30)
    sol = solve_ensemble(EnsembleProblem(prob, u0s=u0s, ps=ps), Tsit5(), saveat=ts)
    assert sol.naccept.min() > 600
    np.testing.assert_array_equal(sol.u, _one_by_one(prob, u0s, ps, Tsit5(), ts))


def test_identical_for_threads_batches_and_executors():
    u0s, ps = _rows(101, seed=2)
    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps)
    ref = solve_ensemble(e, Tsit5(), saveat=TS, threads=1)
    for kw in (dict(threads=2), dict(batch_size=7), dict(batch_size=1000, threads=2)):
        np.testing.assert_array_equal(solve_ensemble(e, Tsit5(), saveat=TS, **kw).u, ref.u)
    with ThreadPoolExecutor(3) as pool:
        got = solve_ensemble(e, Tsit5(), saveat=TS, executor=pool, batch_size=13)
    np.testing.assert_array_equal(got.u, ref.u)
    np.testing.assert_array_equal(got.status, ref.status)


def test_shared_rows_and_prob_func():
    prob = _lv()
    u0s, ps = _rows(5, seed=3)
    # only the parameters vary: u0 is the problem's
    sol = solve_ensemble(EnsembleProblem(prob, ps=ps), Tsit5(), saveat=TS)
    np.testing.assert_array_equal(sol.u, _one_by_one(prob, [prob.u0] * 5, ps, Tsit5(), TS))

    def prob_func(prob, i):
        return u0s[i], (ps[i] if i % 2 else None)

    e = EnsembleProblem(prob, prob_func=prob_func, trajectories=5)
    want_p = [ps[i] if i % 2 else P0 for i in range(5)]
    np.testing.assert_array_equal(
        solve_ensemble(e, Tsit5(), saveat=TS).u, _one_by_one(prob, u0s, want_p, Tsit5(), TS)
    )
    assert e.u0(2).tolist() == u0s[2].tolist() and len(e) == 5


def test_output_func_and_reduction_run_per_batch():
    u0s, ps = _rows(30, seed=4)
    seen = []

    def peak(u, status, index):
        seen.append(index.copy())
        return u[:, :, 0].max(axis=1)

    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps, output_func=peak)
    got = solve_ensemble(e, Tsit5(), saveat=TS, batch_size=8)
    full = solve_ensemble(EnsembleProblem(_lv(), u0s=u0s, ps=ps), Tsit5(), saveat=TS)
    np.testing.assert_array_equal(got, full.u[:, :, 0].max(axis=1))
    assert [s.tolist() for s in seen] == [list(range(a, min(30, a + 8))) for a in (0, 8, 16, 24)]
    e2 = EnsembleProblem(_lv(), u0s=u0s, output_func=peak, reduction=lambda outs: len(outs))
    assert solve_ensemble(e2, Tsit5(), saveat=TS, batch_size=10) == 3


def test_a_failed_trajectory_reports_its_status_and_the_others_go_on():
    # p0 = 2, u0 = 1 blows up at t = 0.5; p1 < 0 raises in the right-hand side
    prob = ODEProblem(fragile, [1.0], (0.0, 1.0), [0.1, 0.0])
    ps = np.array([[0.1, 0.0], [2.0, 0.0], [0.2, -1.0], [0.3, 0.0]])
    ts = np.linspace(0.0, 1.0, 11)
    sol = solve_ensemble(EnsembleProblem(prob, ps=ps), Tsit5(), saveat=ts)
    assert sol.status[0] == sol.status[3] == ReturnCode.SUCCESS
    assert sol.status[1] in (ReturnCode.NONFINITE, ReturnCode.DT_UNDERFLOW)
    assert sol.status[2] == ReturnCode.RHS_ERROR
    assert sol.failed.tolist() == [1, 2]
    assert 0.45 < sol.t_reached[1] < 0.51
    # one state: the scalar stepper's sums over the stages are contiguous, and LLVM
    # reorders them (fast-math reassociation); the error estimate, a sum that cancels to
    # ~1e-9, then differs from the lane loop's in-order sum at ~1e-7, and so do the step
    # sizes: the values agree to a small fraction of the solver's error (see
    # test_ensemble_lanes.py for the exact agreement of the two-state problems)
    alone = solve(ODEProblem(fragile, [1.0], (0.0, 1.0), ps[1]), Tsit5(), saveat=ts)
    assert alone.status == sol.status[1]
    np.testing.assert_allclose(sol.t_reached[1], alone.t_reached, rtol=1e-9)
    k = len(alone.t)
    np.testing.assert_allclose(sol.u[1, : k - 1], alone.u[:-1], rtol=1e-9)
    np.testing.assert_allclose(sol.u[1, k - 1], alone.u[-1], rtol=1e-6)  # u ~ 1e6 there
    # not reached: NaN; reached: the values solve gives
    assert np.isnan(sol.u[1, -1]).all() and np.isfinite(sol.u[1, :5]).all()
    assert np.isnan(sol.u[2]).all() or np.isnan(sol.u[2, 1:]).all()
    for i in (0, 3):
        q = ODEProblem(fragile, [1.0], (0.0, 1.0), ps[i])
        np.testing.assert_allclose(sol.u[i], solve(q, Tsit5(), saveat=ts).u, rtol=1e-9)
    exc = sol.exception(2)
    assert isinstance(exc, ValueError) and "non-negative" in str(exc)
    assert sol.exception(1) is None
    assert "trajectory 1 stopped" in sol.message(1)


def test_bad_input_is_named():
    prob = _lv()
    u0s, ps = _rows(4)
    with pytest.raises(ValueError, match=r"u0s must have shape \(m, 2\)"):
        EnsembleProblem(prob, u0s=np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"ps must have shape \(m, 4\)"):
        EnsembleProblem(prob, ps=np.ones(4))
    bad = ps.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="ps contains NaN or infinite values.*row 2"):
        EnsembleProblem(prob, ps=bad)
    with pytest.raises(ValueError, match="disagree"):
        EnsembleProblem(prob, u0s=u0s, ps=ps[:3])
    with pytest.raises(ValueError, match="how many"):
        EnsembleProblem(prob)
    with pytest.raises(TypeError, match="u0s must hold real numbers"):
        EnsembleProblem(prob, u0s=np.ones((4, 2), dtype=complex))
    with pytest.raises(TypeError, match="needs an ODEProblem"):
        EnsembleProblem("prob", u0s=u0s)
    with pytest.raises(TypeError, match="prob_func must be callable"):
        EnsembleProblem(prob, u0s=u0s, prob_func=3)
    with pytest.raises(TypeError, match=r"must return \(u0, p\)"):
        EnsembleProblem(prob, prob_func=lambda prob, i: prob, trajectories=2)
    with pytest.raises(ValueError, match="returned p of length 3"):
        EnsembleProblem(prob, prob_func=lambda prob, i: (None, [1.0, 2, 3]), trajectories=2)
    e = EnsembleProblem(prob, u0s=u0s)
    with pytest.raises(ValueError, match="give saveat"):
        solve_ensemble(e, Tsit5())
    with pytest.raises(TypeError, match="explicit methods"):
        solve_ensemble(e, CVODE_BDF(), saveat=TS)
    for stiff in (Rodas5P(), Kvaerno5()):  # a clear refusal, not a numba typing error
        with pytest.raises(TypeError, match=f"explicit methods.*for {stiff.name} solve"):
            solve_ensemble(e, stiff, saveat=TS)
    with pytest.raises(TypeError, match="submit\\(\\) and map\\(\\)"):
        solve_ensemble(e, Tsit5(), saveat=TS, executor=object())
    with pytest.raises(TypeError, match="executor instance"):
        solve_ensemble(e, Tsit5(), saveat=TS, executor=ThreadPoolExecutor)
    with pytest.raises(ValueError, match="batch_size must be positive"):
        solve_ensemble(e, Tsit5(), saveat=TS, batch_size=0)
    with pytest.raises(ValueError, match="saveat has times outside tspan"):
        solve_ensemble(e, Tsit5(), saveat=[0.0, 11.0])
    with pytest.raises(TypeError, match="needs an EnsembleProblem"):
        solve_ensemble(prob, Tsit5(), saveat=TS)
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        solve_ensemble(e, Tsit5(), saveat=TS, threads=0)


def test_dask_in_process_cluster_matches_in_process():
    distributed = pytest.importorskip("distributed")
    u0s, ps = _rows(64, seed=5)
    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps)
    ref = solve_ensemble(e, Tsit5(), saveat=TS)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        held = []
        for bs in (None, 9, 5):  # 2 batches, and more batches than holders (dealt in turn)
            got = solve_ensemble(e, Tsit5(), saveat=TS, executor=client, batch_size=bs)
            np.testing.assert_array_equal(got.u, ref.u)
            np.testing.assert_array_equal(got.status, ref.status)
            held.append(e._holders(client))
        # the problem is placed on the workers once and kept for later calls
        assert held[0] is held[1] is held[2] and len(held[0].holders) == 2
        e2 = EnsembleProblem(_lv(), u0s=u0s, ps=ps, output_func=lambda u, s, i: u[:, -1])
        np.testing.assert_array_equal(
            solve_ensemble(e2, Tsit5(), saveat=TS, executor=client, batch_size=10), ref.u[:, -1]
        )
        _results_by_shared_memory_or_not(e, ref, client)


def _root(a):
    """The object at the end of an array's chain of bases."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def _results_by_shared_memory_or_not(e, ref, client):
    """Workers on this machine write into the caller's block of shared memory; a worker that
    cannot see it (as on another machine) returns its batch; one that finds no room returns
    the chunks it could not write; without a block (no /dev/shm or no room) every batch
    returns its rows. The same results every way."""
    from scichains.parallel import _shm as shm

    real_visible, real_write = shm.visible, shm.write
    seen = []
    lock = threading.Lock()  # the in-process cluster's workers are threads

    def half_visible(handle):  # every other batch "on another machine"
        with lock:
            seen.append(len(seen) % 2 == 0)
            mine = seen[-1]
        return real_visible(handle) if mine else False

    def half_full(handle, pieces):  # the inputs go in (the caller's first write), then no
        with lock:  # room for every other chunk
            seen.append(len(seen) % 2 == 0)
            mine = seen[-1]
        return real_write(handle, pieces) if mine else False

    ways = {
        "shared": {},
        "some remote": {"visible": half_visible},
        "some full": {"write": half_full},
        "no block": {"create": lambda nbytes: None},
    }
    for way, patches in ways.items():
        seen.clear()
        with pytest.MonkeyPatch.context() as mp:
            for name, fn in patches.items():
                if name == "create":
                    mp.setattr(shm.SharedBlock, "create", staticmethod(fn))
                else:
                    mp.setattr(shm, name, fn)
            got = solve_ensemble(e, Tsit5(), saveat=TS, executor=client, batch_size=7)
        for name in ("u", "status", "t_reached", "nf", "naccept", "nreject"):
            np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=way)
        if way == "shared":
            assert isinstance(_root(got.u), mmap.mmap)  # views on the caller's block
        else:
            assert not isinstance(_root(got.u), mmap.mmap), way  # arrays of its own
        if way != "shared" and way != "no block":
            assert seen.count(False) >= 2, (way, seen)
    assert not list(shm.SHM_DIR.glob(f"{shm.PREFIX}{os.getpid()}-*"))  # blocks, claims removed


def test_public_names():
    for name in ("EnsembleProblem", "EnsembleSolution", "solve_ensemble"):
        assert name in ode.__all__


def test_calls_from_several_threads_give_the_serial_results():
    u0s, ps = _rows(50, seed=6)
    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps)
    serial = [solve_ensemble(e, Tsit5(), saveat=TS, threads=t).u for t in (1, 2, 1, 2)]
    with ThreadPoolExecutor(4) as pool:
        futures = [
            pool.submit(solve_ensemble, e, Tsit5(), saveat=TS, threads=t) for t in (1, 2, 1, 2)
        ]
        for f, ref in zip(futures, serial):
            np.testing.assert_array_equal(f.result().u, ref)


def test_errors_in_output_func_reach_the_caller():
    def bad(u, status, index):
        raise KeyError("summary failed")

    e = EnsembleProblem(_lv(), u0s=_rows(6)[0], output_func=bad)
    with pytest.raises(KeyError, match="summary failed"):
        solve_ensemble(e, Tsit5(), saveat=TS)
    with ThreadPoolExecutor(2) as pool, pytest.raises(KeyError, match="summary failed"):
        solve_ensemble(e, Tsit5(), saveat=TS, executor=pool, batch_size=2)


def test_workers_rebuild_the_problem_once_per_ensemble():
    from scichains.parallel import _transport

    e = EnsembleProblem(_lv(), u0s=_rows(8)[0])
    assert e.spec() is e.spec()
    with ThreadPoolExecutor(2) as pool:
        solve_ensemble(e, Tsit5(), saveat=TS, executor=pool, batch_size=3)
        key = ("problem", e.spec().token)
        first = _transport._CACHE[key]
        solve_ensemble(e, Tsit5(), saveat=TS, executor=pool, batch_size=3)
        assert _transport._CACHE[key] is first
    e.prob.kernel = e.prob.kernel._replace(work=e.prob.kernel.work.copy())
    assert e.spec().token != key[1]  # a changed problem is sent anew


def test_the_lean_right_hand_side_form():
    # f(du, u, p, t) gets the lean C form the ensemble loop calls (vector addresses, no
    # array structs); a right-hand side taking the network kernels k, or a Python one, has none
    import numba

    prob = _lv()
    assert prob.lean_address != 0 and prob.lean_address == _lv().lean_address  # one per f

    @numba.njit
    def with_k(du, u, p, t, k):
        du[0] = -p[0] * u[0]

    assert ODEProblem(with_k, [1.0], (0.0, 1.0), [0.5]).lean_address == 0
    assert ODEProblem(with_k.py_func, [1.0], (0.0, 1.0), [0.5]).lean_address == 0
    # the kernels-taking form still runs in ensembles (the stepper's other signature)
    e = EnsembleProblem(ODEProblem(with_k, [1.0], (0.0, 1.0), [0.5]), u0s=[[1.0], [2.0]])
    sol = solve_ensemble(e, Tsit5(), saveat=[0.5, 1.0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        sol.u[:, :, 0], [[1.0], [2.0]] * np.exp(-0.5 * np.array([0.5, 1.0])), rtol=1e-8
    )
