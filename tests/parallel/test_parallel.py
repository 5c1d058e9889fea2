"""scichains.parallel: sweeps as futures, worker warm-up, problems sent to other processes by
reference, the package without Dask, and workers that die mid-call."""

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from _local_dask import local_dask_client

from scichains import warm_up
from scichains.parallel import SweepResult, default_key, sweep
from scichains.parallel._executor import auto_batch_size, batch_bounds


def _fit(cfg):
    if cfg == "boom":
        raise RuntimeError("diverged")
    return {"fun": (cfg - 3.0) ** 2, "x": cfg}


def _random_fit(_):
    return float(np.random.default_rng().random())


def test_sweep_ranks_and_keeps_failures():
    configs = [5.0, "boom", 2.5, 3.0, 10.0]
    for executor in (None, ThreadPoolExecutor(2)):
        res = sweep(_fit, configs, executor=executor)
        assert [r.index for r in res] == [3, 2, 0, 4, 1]
        assert all(isinstance(r, SweepResult) for r in res)
        assert res[0].result == {"fun": 0.0, "x": 3.0} and res[0].ok
        assert isinstance(res[-1].error, RuntimeError) and res[-1].score == np.inf
        if executor is not None:
            executor.shutdown()
    with pytest.raises(RuntimeError, match="diverged"):
        sweep(_fit, configs, errors="raise")
    with pytest.raises(ValueError, match="errors must be"):
        sweep(_fit, configs, errors="ignore")
    with pytest.raises(TypeError, match="submit"):
        sweep(_fit, configs, executor=[1, 2])
    res = sweep(lambda c: c, [3, 1, 2], key=lambda r: -r)
    assert [r.result for r in res] == [3, 2, 1]
    assert default_key(2) == 2.0


def test_sweep_on_dask_runs_every_identical_call():
    with local_dask_client() as client:
        # pure=False: five identical-looking calls are five runs (five different draws)
        res = sweep(_random_fit, [0] * 5, executor=client)
        assert len({r.result for r in res}) == 5
        assert [r.score for r in res] == sorted(r.score for r in res)
        res = sweep(_fit, [4.0, "boom", 3.5], executor=client)
        assert [r.index for r in res] == [2, 0, 1] and isinstance(res[2].error, RuntimeError)
        assert sweep(_fit, [3.0], executor="dask")[0].result["x"] == 3.0  # the running client
        info = warm_up(client)
        assert len(info) == 2 and all(v["seconds"] >= 0 for v in info.values())
    assert "local" in warm_up()
    with pytest.raises(ValueError, match="there is none"):
        sweep(_fit, [1.0], executor="dask")


def test_batch_sizes():
    assert batch_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert batch_bounds(10, 3, align=4) == [(0, 4), (4, 8), (8, 10)]
    # 20 us per item on 2 workers: one task each (0.2 s of work), not 25,000 items per task
    assert auto_batch_size(20_000, 20e-6, 2) == 10_000
    # 1 ms per item: 0.5 s per task
    assert auto_batch_size(20_000, 1e-3, 2) == 500
    # less than 0.5 s per worker: still one equal batch per worker (the 20,000 LV ensemble,
    # 7.6 us each: two tasks of 76 ms, not one of 100 ms and one of 52 ms)
    assert auto_batch_size(20_000, 7.6e-6, 2) == 10_000
    # the number of tasks is a multiple of the workers: 1.2 s on 2 workers -> 4 tasks
    assert auto_batch_size(20_000, 60e-6, 2) == 5_000
    assert auto_batch_size(20_000, 60e-6, 3) == -(-20_000 // 3)
    # tiny ensembles: no task below 20 ms unless the whole ensemble is smaller
    assert auto_batch_size(1_000, 20e-6, 64) == 1_000
    assert auto_batch_size(1_000, 50e-6, 64) == 500
    # alignment (the lane loop's multiples of 8)
    assert auto_batch_size(20_000, 60e-6, 3, align=8) % 8 == 0


_FRESH = textwrap.dedent(
    """
    import pickle, sys
    import numpy as np
    specs = pickle.loads(sys.stdin.buffer.read())
    from scichains.adjoint import SquaredError, gradient
    from scichains.ode import solve
    out = []
    for spec in specs:
        prob = spec.problem()
        g = gradient(prob, SquaredError(np.ones((2, prob.u0.size))), [0.5, 1.0])[1]
        out.append((solve(prob, saveat=[0.5, 1.0]).u.tolist(), g.tolist(), prob.derivatives))
    sys.stdout.write(repr(out))
    """
)


def test_problem_specs_travel_by_reference_to_a_fresh_process():
    """A SymbolicModel's problem rebuilt in a process that never saw the model (as on a
    worker of another machine), from its generated source; an importable function by name."""
    import sympy as sp

    from scichains.adjoint import SquaredError, gradient
    from scichains.ode import ODEProblem, SymbolicModel, solve
    from scichains.ode.ensemble._spec import FunctionRef, ProblemSpec

    x, y, a = sp.symbols("x y a")
    model = SymbolicModel([x, y], [a], [-a * x + y, -y * x])
    prob = model.problem([1.0, 0.5], (0.0, 1.0), [0.7])
    spec = ProblemSpec(prob)
    assert spec.f.kind == "generated" and spec.vjp.kind == "generated"
    from scichains._warm import _decay

    plain = ODEProblem(_decay, [1.0, 2.0], (0.0, 1.0), [0.3])
    plain.ensure_vjp()  # traced: its generated vjp travels by source too
    plain_spec = ProblemSpec(plain)
    assert plain_spec.f.kind == "import" and plain_spec.vjp.kind == "generated"
    blob = pickle.dumps([spec, plain_spec])
    r = subprocess.run(
        [sys.executable, "-c", _FRESH],
        input=blob,
        capture_output=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    got = eval(r.stdout.decode())
    for (u, g, _), q in zip(got, (prob, plain)):
        assert u == solve(q, saveat=[0.5, 1.0]).u.tolist()
        want = gradient(q, SquaredError(np.ones((2, q.u0.size))), [0.5, 1.0])[1]
        assert g == want.tolist()

    ref = FunctionRef(_decay)
    assert ref.kind == "import" and pickle.loads(pickle.dumps(ref)).resolve() is _decay

    import numba

    @numba.njit
    def local(du, u, p, t):
        du[0] = -u[0]

    assert FunctionRef(local).kind == "value"


_NO_DASK = textwrap.dedent(
    """
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("dask", "distributed"):
                raise ImportError("blocked: " + name)
    sys.meta_path.insert(0, Block())
    import numpy as np
    import scichains, scichains.ode, scichains.adjoint, scichains.models, scichains.parallel
    from scichains.parallel import require_dask, sweep
    from scichains._warm import warm
    warm()  # solve, ensemble and gradient without Dask
    assert [r.result for r in sweep(abs, [-2, 1])] == [1, 2]
    assert not [m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")]
    from scichains.ode import EnsembleProblem, solve_ensemble
    from scichains._warm import _decay
    from scichains.ode import ODEProblem
    ens = EnsembleProblem(ODEProblem(_decay, [1.0], (0.0, 1.0), [0.5]), u0s=np.ones((3, 1)))
    import sympy as sp
    from scichains import pk
    c, cl, tcl, e = sp.symbols("c cl tcl eta")
    model = pk.PKModel(states=[c], odes=[-cl * c], individual={cl: sp.exp(tcl + e)},
                       theta={tcl: 0.0}, eta=[e], omega=[0.1], observe=c, error=pk.Additive(1.0))
    for call in (
        require_dask,
        lambda: solve_ensemble(ens, saveat=[1.0], executor="dask"),
        lambda: pk.PopulationObjective(model, pk.EventData([], ()), executor="dask"),
    ):
        try:
            call()
        except ImportError as e:
            print("message:", e)
    """
)


def test_the_package_imports_and_runs_without_dask():
    r = subprocess.run(
        [sys.executable, "-c", _NO_DASK],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("pip install scichains[dask]") == 3, r.stdout


def _killing_output(marker):
    def out(u, status, index):
        if index[0] == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies mid-ensemble
        return u

    return out


def _die_in_first_chunk(marker):
    """A function for ``client.run``: the worker that first solves a chunk of an ensemble
    dies there (the marker file says one has)."""

    def patch():
        from scichains.ode.ensemble import _solve as _ensemble

        real = _ensemble._run_rows

        def run_rows(*args):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return real(*args)
            os._exit(1)

        _ensemble._run_rows = run_rows

    return patch


def test_a_worker_that_dies_is_replaced_and_the_results_are_identical(tmp_path):
    distributed = pytest.importorskip("distributed")
    import sympy as sp

    from scichains.models import Population, SubjectData
    from scichains.ode import EnsembleProblem, SymbolicModel, solve_ensemble

    x, y, a, b = sp.symbols("x y a b")
    model = SymbolicModel([x, y], [a, b], [a * x - x * y, x * y - b * y])
    prob = model.problem([1.0, 1.0], (0.0, 5.0), [1.5, 3.0])
    rng = np.random.default_rng(0)
    u0s = 1 + rng.random((40, 2))
    ts = np.linspace(0, 5, 11)
    ref = solve_ensemble(EnsembleProblem(prob, u0s=u0s), saveat=ts).u

    marker = str(tmp_path / "died-once")
    killer = {"path": str(tmp_path / "subject-died-once")}

    def u0(p):
        if not os.path.exists(killer["path"]):
            open(killer["path"], "w").close()
            os._exit(1)  # dies while building its subjects' objectives
        return np.array([1.0, 1.0]), np.zeros((2, 2))

    t = np.linspace(0.5, 5, 6)
    subjects = [
        SubjectData(t=t, y=np.ones((6, 2)), weights=np.ones((6, 2)), u0=np.array([1.0, 1.0]))
        for _ in range(6)
    ]
    pop = Population(model, subjects, [0], [0.3], block=2)
    z = pop.pack([1.4, 2.9], 0.1 * rng.standard_normal((6, 1)))
    v_ref, g_ref = pop.value_and_grad(z)
    open(killer["path"], "w").close()  # (the local population must not die)
    subjects_k = [
        SubjectData(t=s.t, y=s.y, weights=s.weights, u0=u0 if i == 4 else s.u0)
        for i, s in enumerate(subjects)
    ]
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        e = EnsembleProblem(prob, u0s=u0s, output_func=_killing_output(marker))
        got = solve_ensemble(e, saveat=ts, executor=client, batch_size=10)
        assert os.path.exists(marker)
        np.testing.assert_array_equal(got, ref)
        os.remove(killer["path"])
        p2 = Population(model, subjects_k, [0], [0.3], block=2, executor=client, batch_size=2)
        v, g = p2.value_and_grad(z)
        assert os.path.exists(killer["path"])
        assert v == v_ref and np.array_equal(g, g_ref)

        # without output_func the workers write into the caller's shared memory; one of
        # them dies between two calls: the problem is placed on the workers there are, and
        # the results are the same
        e3 = EnsembleProblem(prob, u0s=u0s)
        np.testing.assert_array_equal(
            solve_ensemble(e3, saveat=ts, executor=client, batch_size=10).u, ref
        )
        victim = sorted(client.scheduler_info()["workers"])[0]
        os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while victim in client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.05)
        got = solve_ensemble(e3, saveat=ts, executor=client, batch_size=10)
        np.testing.assert_array_equal(got.u, ref)
        assert victim not in {h._address for h in e3._holders(client).holders}

        # a worker dies in the middle of a call whose batches share claims on the block
        # (work stealing): the repeat gets a new block and claims, and the same results
        marker2 = str(tmp_path / "died-in-a-chunk")
        client.run(_die_in_first_chunk(marker2))
        got = solve_ensemble(e3, saveat=ts, executor=client, batch_size=20)
        assert os.path.exists(marker2)
        np.testing.assert_array_equal(got.u, ref)
        np.testing.assert_array_equal(got.status, np.zeros(40, dtype=np.int64))


def test_solve_errors_survive_pickling():
    # what a failure on a Dask worker process becomes on the caller's side
    from scichains._warm import _decay
    from scichains.ode import ODEProblem, ODESolveError, solve

    prob = ODEProblem(_decay, [1.0], (0.0, 1.0), [0.5])
    try:
        solve(prob, saveat=[1.0], max_steps=2, throw=True)
    except ODESolveError as e:
        e.add_note("(in subject 3)")
        err = e
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ODESolveError and str(back) == str(err)
    assert back.solution.status == err.solution.status and back.__notes__ == ["(in subject 3)"]
