"""The threading contract (README, "Threading contract"): shared objects called from several
Python threads at once give, bit for bit, the results of the same calls made one after the
other; state that cannot be shared (an optimizer's moments, a parameter vector being trained)
is refused with a RuntimeError.

Each test computes the serial results first, then makes the same calls from 2-8 threads that
start together (a barrier) and cycle through the cases, and counts the results that differ
in any bit."""

import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import scichains as sc
from scichains import nn
from scichains._jit import max_threads
from scichains.adjoint import (
    DiscreteAdjoint,
    ForwardSensitivity,
    InterpolatingAdjoint,
    MultiObjective,
    MultipleShooting,
    Objective,
    QuadratureAdjoint,
    SquaredError,
    Trajectory,
)
from scichains.models import NeuralODE, Population, SubjectData
from scichains.ode import CVODE_BDF, SymbolicModel, solve

NT = min(2, max_threads())


def _same(a, b) -> bool:
    """Equal in every bit (same types, shapes, dtypes and values)."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )
    return type(a) is type(b) and np.float64(a).tobytes() == np.float64(b).tobytes()


def _hammer(call, cases, threads, calls_per_thread):
    """Serial results of ``call(case)``, then ``threads`` threads each making
    ``calls_per_thread`` calls (thread ``w`` starts at case ``w``); returns the number of
    concurrent results that differ from the serial ones."""
    expected = [call(c) for c in cases]
    barrier = threading.Barrier(threads)

    def worker(w):
        barrier.wait()
        bad = 0
        for i in range(calls_per_thread):
            k = (i + w) % len(cases)
            if not _same(call(cases[k]), expected[k]):
                bad += 1
        return bad

    with ThreadPoolExecutor(threads) as ex:
        return sum(ex.map(worker, range(threads)))


# ---------------------------------------------------------------------------- nn


def _regression(n=96, seed=0):
    rng = np.random.default_rng(seed)
    chain = sc.SimpleChain(4, sc.Dense(12, "tanh"), sc.Dense(3))
    X = rng.standard_normal((n, 4)).astype(np.float32)
    Y = chain(X, chain.init_params(seed=100))
    return chain, X, Y


@pytest.mark.parametrize("threads", [4, 8])
def test_valgrad_on_a_shared_chain_with_loss(threads):
    chain, X, Y = _regression()
    cwl = chain.add_loss(sc.SquaredLoss(Y), penalty=sc.L2Penalty(1e-3))
    cases = [chain.init_params(seed=s) for s in range(6)]

    def call(p):
        g = np.empty_like(p)
        gx = np.empty_like(X)
        v = nn.valgrad(cwl, X, p, g, gx, threads=NT)
        return v, g, gx

    assert _hammer(call, cases, threads, 1000) == 0


def test_scipy_loss_and_grad_shared_between_threads():
    chain, X, Y = _regression()
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    fun = nn.loss_and_grad(cwl, X, threads=NT)
    cases = [chain.init_params(seed=s, dtype=np.float64) for s in range(6)]
    assert _hammer(fun, cases, 4, 1000) == 0


def test_accuracy_and_loss_shared_between_threads():
    rng = np.random.default_rng(1)
    chain = sc.SimpleChain(4, sc.Dense(10, "relu"), sc.Dense(3))
    X = rng.standard_normal((80, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 80)
    cwl = chain.add_loss(sc.LogitCrossEntropyLoss(labels))
    cases = [chain.init_params(seed=s) for s in range(5)]
    assert (
        _hammer(lambda p: sc.accuracy_and_loss(cwl, X, labels, p, threads=NT), cases, 4, 500) == 0
    )


def test_chain_call_shared_between_threads():
    chain, X, _ = _regression(n=300)  # more than one tile: both numba threads work
    cases = [chain.init_params(seed=s) for s in range(5)]
    assert _hammer(lambda p: chain(X, p, threads=NT), cases, 4, 1000) == 0


def _train_cases(batched):
    chain, X, Y = _regression(n=128)
    cwl = chain.add_loss(sc.SquaredLoss(Y), penalty=sc.L1Penalty(1e-4))

    def call(seed):
        p = chain.init_params(seed=seed)
        opt = sc.Adam(1e-2)  # each run its own optimizer (one optimizer serves one run)
        if batched:
            losses = sc.train_batched(p, cwl, X, opt, 10, 32, seed=seed, threads=NT)
        else:
            losses = sc.train_unbatched(
                p, cwl, X, opt, 40, threads=NT, callback=lambda *a: None, callback_every=7
            )
        return p, losses

    return call


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
def test_training_separate_parameters_with_one_loss_object(batched):
    # 25 runs of 40 optimizer steps per thread: 1,000 steps each
    assert _hammer(_train_cases(batched), list(range(4)), 4, 25) == 0


def _run_while_training(chain, cwl, X, opt, p, second):
    """Train ``p`` in one thread; while it is inside a training call, run ``second()`` in
    another thread; return what ``second`` raised (or None)."""
    inside, done = threading.Event(), threading.Event()

    def callback(*_):
        inside.set()
        done.wait(30)

    def first():
        sc.train_unbatched(p, cwl, X, opt, 4, threads=1, callback=callback, callback_every=1)

    with ThreadPoolExecutor(2) as ex:
        f1 = ex.submit(first)
        assert inside.wait(60)
        try:
            second()
        except RuntimeError as e:
            return e
        finally:
            done.set()
            f1.result()
    return None


def test_one_optimizer_in_two_concurrent_trainings_is_refused():
    chain, X, Y = _regression(n=64)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    opt = sc.Adam(1e-2)
    p1, p2 = chain.init_params(seed=1), chain.init_params(seed=2)
    p2_before = p2.copy()
    err = _run_while_training(
        chain, cwl, X, opt, p1, lambda: sc.train_unbatched(p2, cwl, X, opt, 3, threads=1)
    )
    assert err is not None and "optimizer" in str(err) and "per thread" in str(err)
    np.testing.assert_array_equal(p2, p2_before)  # refused before any step
    # and free again afterwards
    sc.train_unbatched(p2, cwl, X, opt, 3, threads=1)


def test_one_parameter_vector_in_two_concurrent_trainings_is_refused():
    chain, X, Y = _regression(n=64)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p = chain.init_params(seed=1)
    err = _run_while_training(
        chain,
        cwl,
        X,
        sc.Adam(1e-2),
        p,
        lambda: sc.train_batched(p, cwl, X, sc.SGD(0.1), 1, 16, threads=1),
    )
    assert err is not None and "parameter" in str(err)


def test_concurrent_parallel_kernels_under_the_workqueue_layer():
    """numba's workqueue threading layer aborts the process when two Python threads launch
    parallel kernels at once: scichains serialises those launches under it."""
    script = textwrap.dedent(
        """
        import threading
        from concurrent.futures import ThreadPoolExecutor
        import numba
        import numpy as np
        import scichains as sc
        from scichains import nn

        rng = np.random.default_rng(0)
        chain = sc.SimpleChain(4, sc.Dense(12, "tanh"), sc.Dense(3))
        X = rng.standard_normal((600, 4)).astype(np.float32)
        cwl = chain.add_loss(sc.SquaredLoss(chain(X, chain.init_params(seed=9), threads=2)))
        ps = [chain.init_params(seed=s) for s in range(4)]

        def call(p):
            g = np.empty_like(p)
            return nn.valgrad(cwl, X, p, g, threads=2), g, chain(X, p, threads=2)

        want = [call(p) for p in ps]
        assert numba.threading_layer() == "workqueue", numba.threading_layer()
        barrier = threading.Barrier(4)

        def worker(w):
            barrier.wait()
            bad = 0
            for i in range(150):
                v, g, out = call(ps[(i + w) % 4])
                wv, wg, wout = want[(i + w) % 4]
                bad += not (v == wv and np.array_equal(g, wg) and np.array_equal(out, wout))
            return bad

        with ThreadPoolExecutor(4) as ex:
            print("BAD", sum(ex.map(worker, range(4))))
        """
    )
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", NUMBA_NUM_THREADS="2")
    src = str(Path(sc.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "BAD 0" in r.stdout, r.stdout


# ---------------------------------------------------------------------------- ODE models


def _node_cases(sensealg):
    chain = sc.SimpleChain(2, sc.Dense(8, "tanh"), sc.Dense(2))
    ts = np.linspace(0.1, 1.0, 10)
    node = NeuralODE(chain, (0.0, 1.0), ts, sensealg=sensealg)
    rng = np.random.default_rng(3)
    cases = []
    for s in range(5):
        p = chain.init_params(seed=s, dtype=np.float64)
        u0 = np.array([1.0, -0.5]) + 0.1 * s
        data = node.predict(u0, p) + 0.05 * rng.standard_normal((10, 2))
        cases.append((u0, p, data))
    return node, cases


@pytest.mark.parametrize(
    "sensealg", [InterpolatingAdjoint(), DiscreteAdjoint()], ids=["interpolating", "discrete"]
)
def test_neural_ode_shared_between_threads(sensealg):
    node, cases = _node_cases(sensealg)

    def call(case):
        u0, p, data = case
        loss, dp = node.loss_and_grad(u0, p, data)
        return loss, dp, node.last_du0, node.predict(u0, p)

    assert _hammer(call, cases, 4, 1000) == 0


def test_many_trajectory_neural_ode_shared_between_threads():
    # batched calls (each on 2 worker threads of its own) from 3 threads at once
    node, cases = _node_cases(DiscreteAdjoint())
    u0 = np.stack([c[0] for c in cases])
    data = np.stack([c[2] for c in cases])
    batched = [(u0 * (1 + 0.1 * k), cases[k][1], data) for k in range(3)]

    def call(case):
        u, p, dat = case
        loss, dp = node.loss_and_grad(u, p, dat, threads=NT)
        return loss, dp, node.last_du0, node.predict(u, p, threads=NT)

    assert _hammer(call, batched, 3, 60) == 0


x, y = sp.symbols("x y")
a, b, c, d = sp.symbols("a b c d")
_LV = SymbolicModel([x, y], [a, b, c, d], [a * x - b * x * y, c * x * y - d * y])


def _objective_cases(sensealg, solver=None):
    ts = np.linspace(0.0, 2.0, 9)
    p0 = _LV.pack(a=1.3, b=0.9, c=0.8, d=1.8)
    u0 = np.array([0.44, 4.6])
    prob = _LV.problem(u0, (0.0, 2.0), p0)
    data = solve(prob, saveat=ts, rtol=1e-10, atol=1e-12).u
    kw = {} if solver is None else {"solver": solver}
    obj = Objective(prob, SquaredError(data), ts, sensealg=sensealg, **kw)
    cases = [(p0 * (1 + 0.05 * k), u0 * (1 - 0.03 * k), k % 3) for k in range(6)]

    def call(case):
        p, u, which = case
        if which == 0:
            return obj.value(p, u)
        if which == 1:
            return obj.value_and_grad(p, u)
        return obj(p, u)

    return call, cases


@pytest.mark.parametrize(
    "sensealg",
    [
        InterpolatingAdjoint(),
        DiscreteAdjoint(),
        ForwardSensitivity(),
        QuadratureAdjoint(checkpointing=True),
    ],
    ids=["interpolating", "discrete", "forward", "quadrature-checkpointed"],
)
def test_objective_shared_between_threads(sensealg):
    call, cases = _objective_cases(sensealg)
    assert _hammer(call, cases, 4, 1000) == 0


def test_multi_objective_shared_between_threads():
    ts = np.linspace(0.0, 2.0, 9)
    p0 = _LV.pack(a=1.3, b=0.9, c=0.8, d=1.8)
    u0 = np.array([[0.44, 4.6], [0.6, 3.9], [1.0, 2.5], [0.3, 5.0]])
    prob = _LV.problem(u0[0], (0.0, 2.0), p0)
    sols = [solve(_LV.problem(u, (0.0, 2.0), p0), saveat=ts, rtol=1e-10, atol=1e-12) for u in u0]
    data = np.stack([s.u for s in sols])
    multi = MultiObjective(prob, SquaredError(data), ts, sensealg=DiscreteAdjoint())
    cases = [(p0 * (1 + 0.05 * k), u0 * (1 - 0.03 * k)) for k in range(4)]

    def call(case):
        return multi.value_and_grad(*case, threads=NT)

    assert _hammer(call, cases, 3, 200) == 0


def test_trajectories_with_own_times_shared_between_threads():
    p0 = _LV.pack(a=1.3, b=0.9, c=0.8, d=1.8)
    u0 = np.array([[0.44, 4.6], [0.6, 3.9], [1.0, 2.5]])
    times = [np.linspace(0.2, 2.0, 9), np.linspace(0.5, 1.5, 4), np.array([0.3, 2.5])]
    rng = np.random.default_rng(1)
    specs = [Trajectory(u0[i], t, rng.uniform(0.5, 3, (t.size, 2))) for i, t in enumerate(times)]
    multi = MultiObjective(_LV.problem(u0[0], (0.0, 1.0), p0), specs)
    cases = [(p0 * (1 + 0.05 * k), u0 * (1 - 0.03 * k), [k % 3, (k + 1) % 3]) for k in range(4)]

    def call(case):
        return multi.value_and_grad(case[0], case[1], threads=NT, batch=case[2])

    assert _hammer(call, cases, 3, 200) == 0


def test_multiple_shooting_shared_between_threads():
    p0 = _LV.pack(a=1.3, b=0.9, c=0.8, d=1.8)
    ts = np.linspace(0.0, 3.0, 13)
    prob = _LV.problem(np.array([0.44, 4.6]), (0.0, 3.0), p0)
    data = solve(prob, saveat=ts, rtol=1e-10, atol=1e-12).u
    ms = MultipleShooting(prob, data, ts, 4, continuity=10.0)
    cases = [ms.initial(p0 * (1 + 0.05 * k)) + 0.02 * k for k in range(4)]

    def call(theta):
        return ms.value_and_grad(theta, threads=NT)

    assert _hammer(call, cases, 3, 100) == 0


def test_cvode_objective_shared_between_threads():
    # the CVODE path calls the right-hand side from Python (~ms per solve): 2 x 60 calls
    call, cases = _objective_cases(InterpolatingAdjoint(), CVODE_BDF())
    assert _hammer(call, cases, 2, 60) == 0


def test_population_shared_between_threads():
    lka, lke = sp.symbols("lka lke")
    model = SymbolicModel([x, y], [lka, lke], [-sp.exp(lka) * x, sp.exp(lka) * x - sp.exp(lke) * y])
    rng = np.random.default_rng(0)
    subjects = [
        SubjectData(
            t=np.linspace(0.5, 6.0, 8),
            y=np.stack([np.zeros(8), rng.uniform(0.1, 1, 8)], 1),
            weights=np.broadcast_to([0.0, 1.0], (8, 2)),
            u0=np.array([dose, 0.0]),
            jumps=[(3.0, 0, dose)],
            tspan=(0.0, 6.0),
        )
        for dose in (1.0, 2.0)
    ]
    pop = Population(model, subjects, [0, 1], [0.3, 0.3])
    cases = [
        pop.pack([np.log(1.5) + 0.1 * k, np.log(0.3)], 0.05 * k * np.ones((2, 2))) for k in range(5)
    ]
    assert _hammer(pop.value_and_grad, cases, 4, 300) == 0


def test_solve_of_one_network_problem_shared_between_threads():
    """``solve`` on one problem whose right-hand side calls a network: the network's scratch
    is per call (it was the problem's, shared by every thread)."""
    import numba

    from scichains.ode import ODEProblem, Tsit5

    chain = sc.SimpleChain(2, sc.Dense(16, "tanh"), sc.Dense(2))

    @numba.njit
    def f(du, u, p, t, k):
        nn.chain_forward(k, p, u, du)

    probs = [
        ODEProblem(
            f,
            np.array([1.0, 0.5]) * s,
            (0.0, 20.0),
            chain.init_params(seed=2, dtype=np.float64),
            kernel=chain.kernel(np.float64),
        )
        for s in (0.5, 1.0)
    ]
    shared = probs[1].kernel
    for prob in probs:
        prob.kernel = shared  # one network scratch for both problems and all threads
    ts = np.linspace(0.0, 20.0, 5)
    assert _hammer(lambda prob: solve(prob, Tsit5(), saveat=ts, rtol=1e-10).u, probs, 4, 100) == 0
