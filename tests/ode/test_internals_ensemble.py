"""White-box tests of the ensemble machinery (``scichains.ode.ensemble``): which path runs a
problem (the lane loop or the scalar stepper), the split into blocks, the lanes' vector
arithmetic, the chunks that Dask workers claim and steal, and a fault injected into the lane
loop. They read private functions or replace them; the contracts (every trajectory what
``solve`` gives, bit for bit for any threads, batch or executor) are in test_ensemble.py and
test_ensemble_lanes.py."""

import glob
import threading
import time

import numba
import numpy as np
import pytest

from scichains import ode
from scichains._jit import FLAGS
from scichains.ode import DP5, EnsembleProblem, ODEProblem, ReturnCode, Tsit5, solve_ensemble
from scichains.ode._pow import cpow
from scichains.ode.ensemble import _rows as _rows_module
from scichains.ode.ensemble import _solve as _ensemble
from scichains.ode.ensemble._lane_ops import LANES, lload, lpow, lstore

from .test_ensemble_lanes import TS, _lv, _rows
from .test_nonfinite import SQRT, _problem

pytestmark = pytest.mark.whitebox


def test_the_lanes_run_plain_right_hand_sides_without_doses():
    e = EnsembleProblem(_lv(), u0s=_rows(3)[0])
    plan = _ensemble.plan_solve(
        e.prob, Tsit5(), TS, 1e-6, 1e-8, None, 100, None, None, None, None, interpolate=True
    )
    assert _ensemble.lanes_apply(e.prob, _ensemble._Settings(plan))
    dosed = _ensemble.plan_solve(
        e.prob, Tsit5(), TS, 1e-6, 1e-8, None, 100, None, [(2.0, 0, 1.0)], None, None, True
    )
    assert not _ensemble.lanes_apply(e.prob, _ensemble._Settings(dosed))

    @numba.njit
    def with_k(du, u, p, t, k):
        du[0] = -p[0] * u[0]

    pk = ODEProblem(with_k, [1.0], (0.0, 1.0), [0.5])
    plan_k = _ensemble.plan_solve(
        pk, Tsit5(), [1.0], 1e-6, 1e-8, None, 100, None, None, None, None, interpolate=True
    )
    assert not _ensemble.lanes_apply(pk, _ensemble._Settings(plan_k))
    assert 4 <= LANES <= 64


def test_vector_pow_against_numpy():
    # both compiled with the kernels' flags (fast-math: contraction into FMA and the rest)
    @numba.njit(**FLAGS)
    def run(x, y, out):
        for i in range(0, x.size, LANES):
            lstore(out, i, lpow(lload(x, i), y))

    @numba.njit(**FLAGS)
    def scalar(x, y):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = cpow(x[i], y)
        return out

    rng = np.random.default_rng(3)
    x = np.concatenate([10.0 ** rng.uniform(-300, 300, 4000), rng.uniform(0, 3, 4000)])
    x[:LANES] = [0.0, 1.0, 2.0, 1e-4, 5e-324, 1e-310, 0.5, 1e300][:LANES] + [1.0] * (LANES - 8)
    x = x[: x.size // LANES * LANES]
    for y in (0.7, 0.14, 0.08, 2.0 / 15.0):
        out = np.empty_like(x)
        run(x, y, out)
        # the scalar steppers' cpow: the same bits, value by value
        np.testing.assert_array_equal(scalar(x, y), out)
        want = x**y
        assert out[0] == 0.0 and out[1] == 1.0
        # a relative error growing with |y log x|: ~1e-16 near 1, ~1e-13 at 1e-300
        bound = 4e-16 * (1.0 + np.abs(y * np.log(np.where(x > 0, x, 1.0))))
        assert np.all(np.abs(out - want) <= bound * want), y


def _run_with_blocks(e, blocks):
    orig = _rows_module._lane_blocks
    _rows_module._lane_blocks = lambda m, threads: blocks
    try:
        return solve_ensemble(e, Tsit5(), saveat=TS, threads=1).u
    finally:
        _rows_module._lane_blocks = orig


def test_identical_for_any_split_into_blocks():
    # the split into blocks (one thread's share each) does not change a bit
    u0s, ps = _rows(203, seed=4)
    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps)
    ref = solve_ensemble(e, Tsit5(), saveat=TS, threads=1)
    for blocks in (1, 3, 50):
        got = _run_with_blocks(e, blocks)
        np.testing.assert_array_equal(got, ref.u)


def test_the_scalar_path_gives_the_same_numbers_as_the_lanes(monkeypatch):
    # the scalar path and the lanes on the same problem: the same numbers
    u0s, ps = _rows(19, seed=8)
    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps)
    lanes = solve_ensemble(e, DP5(), saveat=TS)
    monkeypatch.setattr(_rows_module, "_LANES_ENABLED", False)
    scalar = solve_ensemble(e, DP5(), saveat=TS)
    np.testing.assert_array_equal(lanes.u, scalar.u)
    np.testing.assert_array_equal(np.c_[lanes.nf, lanes.nreject], np.c_[scalar.nf, scalar.nreject])


def test_a_trajectory_no_block_reaches_is_not_run(monkeypatch):
    # a deliberate off-by-one in the lane loop: the last trajectory is never solved. Its
    # status must not read as SUCCESS (status arrays once started zero-filled: 0 = SUCCESS)
    real = _rows_module.solve_lanes

    def short(faddr, U0, P, *args):
        *settings, out, status, t_reached, fail, counts, caddr, edir, redo = args
        results = [a[:-1] for a in (out, status, t_reached, fail, counts)]
        return real(faddr, U0[:-1], P[:-1], *settings, *results, caddr, edir, redo)

    monkeypatch.setattr(_rows_module, "solve_lanes", short)
    m = 20
    ps = np.column_stack([np.full(m, -2.0), np.full(m, SQRT)])
    eprob = EnsembleProblem(_problem(SQRT), u0s=np.ones((m, 1)), ps=ps)
    sol = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=np.linspace(0, 1, 3), threads=1)
    assert sol.status[-1] == ReturnCode.NOT_RUN
    assert np.all(sol.status[:-1] == ReturnCode.SUCCESS)
    assert not sol.success[-1]


def test_dask_workers_take_over_a_slow_workers_chunks(monkeypatch):
    """Work stealing: batch 0's worker starts only once the other worker has claimed every
    chunk, batch 0's from the back; the results are the same bits."""
    distributed = pytest.importorskip("distributed")
    from scichains.ode.ensemble import _solve as ens
    from scichains.parallel import _shm as shm

    u0s, ps = _rows(800, seed=8)
    e = EnsembleProblem(_lv(), u0s=u0s, ps=ps)
    ref = solve_ensemble(e, Tsit5(), saveat=TS)
    real_call, real_claim = ens._ensemble_call, shm.claim
    claims = []

    def late_batch_zero(*args):
        if args[-1] == 0:  # the batch index: wait until the other worker took every chunk
            path = args[-2][0][0]
            deadline = time.monotonic() + 60
            while len(glob.glob(path + "-c*")) < 16 and time.monotonic() < deadline:
                time.sleep(0.01)
        return real_call(*args)

    def recording(handle, k):
        got = real_claim(handle, k)
        if got:
            claims.append((k, threading.get_ident()))
        return got

    monkeypatch.setattr(ens, "_ensemble_call", late_batch_zero)
    monkeypatch.setattr(shm, "claim", recording)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        got = solve_ensemble(e, Tsit5(), saveat=TS, executor=client, batch_size=400)
    for name in ("u", "status", "t_reached", "nf", "naccept", "nreject"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
    chunks, owner = ens._chunks([(0, 400), (400, 800)], least=4 * ens.LANES)
    assert sorted(k for k, _ in claims) == list(range(len(chunks)))  # each claimed once
    by = {k: t for k, t in claims}
    assert len({by[k] for k in range(len(chunks)) if owner[k] == 0}) == 1
    assert {by[k] for k in range(len(chunks)) if owner[k] == 0} == {
        by[k] for k in range(len(chunks)) if owner[k] == 1
    }  # the late worker found every chunk taken


def test_claim_order_and_chunks():
    from scichains.ode.ensemble._solve import _chunks, _claim_order

    chunks, owner = _chunks([(0, 100), (100, 130), (130, 400)], per_batch=4, least=20)
    assert chunks[0] == (0, 25) and chunks[-1][1] == 400
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))  # contiguous, in order
    assert owner == [0, 0, 0, 0, 1, 2, 2, 2, 2]
    assert _claim_order(owner, 1) == [4, 8, 7, 6, 5, 3, 2, 1, 0]
    assert _claim_order(owner, 0) == [0, 1, 2, 3, 4, 8, 7, 6, 5]
    assert _claim_order(owner, 2) == [5, 6, 7, 8, 3, 2, 1, 0, 4]
    assert _claim_order([0, 0, 0], 0) == [0, 1, 2]  # one batch
