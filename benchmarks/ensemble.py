"""Ensembles and population objectives: in-process threads, and Dask (issue 15).

1. 20,000 Lotka-Volterra solves (Tsit5, 50 save points, rtol 1e-6, atol 1e-8, initial states
   drawn uniformly from [1, 2]^2): ``solve_ensemble`` on 1 and 2 threads, against a Python
   loop over ``solve`` (timed on ``--loop`` of the trajectories, per solve).
2. The same ensemble on ``LocalCluster(n_workers=2, threads_per_worker=1)`` against
   ``LocalCluster(n_workers=1, threads_per_worker=1)``, rounds interleaved; the saved states
   compared with the in-process run, bit for bit.
3. Objective + gradient of a 1,000-subject simulated population (one-compartment oral PK,
   random effects on ka, CL, V) on the same two clusters and in process, compared bit for bit.
4. The per-task costs behind the projection in the README (a no-op task's round trip, a no-op
   call to the chunk holders, the per-subject cost, the bytes a task returns).
5. The FOCE-I objective + gradient (``scichains.pk.PopulationObjective``: each subject's EBE by
   Newton's method, its OFV term and exact outer gradient) of ``--pk-subjects`` subjects
   simulated from nlmixr2's Theophylline model, from the same warm starts each round, in
   process and on the two clusters, compared bit for bit.

Every ratio is taken from rounds of the same run (medians). Run: ``python benchmarks/ensemble.py``
(``--quick`` for a smaller, faster check).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _ensemble_models import OMEGA, THETA, lotka_volterra, simulated_subjects  # noqa: E402
from _machine import describe  # noqa: E402


def _median_time(fn, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "n/a"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=20_000)
    ap.add_argument("--subjects", type=int, default=1_000)
    ap.add_argument("--pk-subjects", type=int, default=200)
    ap.add_argument("--loop", type=int, default=2_000, help="solves timed in the Python loop")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-dask", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.trajectories, args.subjects, args.loop, args.rounds = 2_000, 100, 200, 3
        args.pk_subjects = 100

    import numba

    from scichains import ode
    from scichains.models import Population

    print(describe())
    print(f"load average at start: {_load()}; numba threads: {numba.config.NUMBA_NUM_THREADS}")
    rng = np.random.default_rng(0)
    m = args.trajectories
    u0s = 1.0 + rng.random((m, 2))
    ts = np.linspace(0.0, 10.0, 50)
    prob = ode.ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 10.0), [1.5, 1.0, 1.0, 3.0])
    eprob = ode.EnsembleProblem(prob, u0s=u0s)
    solver = ode.Tsit5()

    # ---------------------------------------------------------------- 1. in process
    ref = ode.solve_ensemble(eprob, solver, saveat=ts)  # compile / load, and the reference
    t1s, t2s = [], []
    for _ in range(args.rounds):  # interleaved: the machine's speed drifts
        t1s.append(
            _median_time(lambda: ode.solve_ensemble(eprob, solver, saveat=ts, threads=1), 1)[0]
        )
        t2s.append(
            _median_time(lambda: ode.solve_ensemble(eprob, solver, saveat=ts, threads=2), 1)[0]
        )
    t1, t2 = statistics.median(t1s), statistics.median(t2s)
    n_loop = min(args.loop, m)

    def loop():
        for i in range(n_loop):
            prob.u0 = u0s[i]
            ode.solve(prob, solver, saveat=ts)

    loop()  # warm
    per_solve, _ = _median_time(loop, 3)
    per_solve /= n_loop
    t_loop = per_solve * m
    same = all(
        np.array_equal(ode.solve_ensemble(eprob, solver, saveat=ts, threads=k).u, ref.u)
        for k in (1, 2)
    )
    print(f"\n1. {m:,} Lotka-Volterra solves, Tsit5, {ts.size} save points, in process")
    print(f"   mean steps {ref.naccept.mean():.1f}, f evaluations {ref.nf.mean():.1f}")
    print(f"   1 thread   {t1:8.3f} s  ({t1 / m * 1e6:.2f} us per trajectory; rounds {_fmt(t1s)})")
    print(f"   2 threads  {t2:8.3f} s  ({t2 / m * 1e6:.2f} us per trajectory; rounds {_fmt(t2s)})")
    print(
        f"   Python loop over solve: {per_solve * 1e6:.1f} us per solve (median of 3 loops of "
        f"{n_loop}) -> {t_loop:.2f} s for {m:,}"
    )
    print(f"   ratio 1 thread / 2 threads: {t1 / t2:.2f}x (floor 1.7x)")
    print(f"   ratio Python loop / 2 threads: {t_loop / t2:.1f}x (floor 20x)")
    print(f"   identical for 1 and 2 threads: {same}")
    print(f"   load average: {_load()}")
    if args.no_dask:
        return

    # ---------------------------------------------------------------- 2-4. Dask
    from distributed import Client, LocalCluster

    from scichains.parallel import warm_up

    model, subjects = simulated_subjects(args.subjects)
    z = None
    kw = dict(rtol=1e-6, atol=1e-8)
    pop_local = Population(model, subjects, [0, 1, 2], OMEGA, **kw)
    z = pop_local.pack(THETA, 0.1 * rng.standard_normal((args.subjects, 3)))
    pop_local.value_and_grad(z)
    t_pop_local, _ = _median_time(lambda: pop_local.value_and_grad(z), args.rounds)
    v_ref, g_ref = pop_local.value_and_grad(z)

    clusters = {}
    try:
        for k in (1, 2):
            cl = LocalCluster(
                n_workers=k, threads_per_worker=1, processes=True, dashboard_address=":0"
            )
            clusters[k] = (cl, Client(cl))
        for k, (_, c) in clusters.items():
            info = warm_up(c)
            print(
                f"\nwarm-up, {k} worker(s): "
                + ", ".join(f"{v['seconds']:.2f} s" for v in info.values())
            )
        # one untimed call each: a worker compiles the problem's own lane right-hand side
        # (a C-callable made per problem, not cached across processes) at its first ensemble
        first = {}
        for k, (_, c) in clusters.items():
            t = time.perf_counter()
            ode.solve_ensemble(eprob, solver, saveat=ts, executor=c)
            first[k] = time.perf_counter() - t
        ens = {1: [], 2: []}
        same_ens = {}
        for _ in range(args.rounds):
            for k, (_, c) in clusters.items():
                t = time.perf_counter()
                sol = ode.solve_ensemble(eprob, solver, saveat=ts, executor=c)
                ens[k].append(time.perf_counter() - t)
                same_ens[k] = np.array_equal(sol.u, ref.u) and np.array_equal(
                    sol.status, ref.status
                )
        e1, e2 = statistics.median(ens[1]), statistics.median(ens[2])
        print(f"\n2. the same {m:,} solves on Dask LocalCluster (processes, 1 thread per worker)")
        print(f"   1 worker   {e1:8.3f} s (rounds {_fmt(ens[1])})")
        print(f"   2 workers  {e2:8.3f} s (rounds {_fmt(ens[2])})")
        print(f"   ratio: {e1 / e2:.2f}x (floor 1.6x); identical to in process: {same_ens}")
        print(
            "   first call (untimed above; the workers compile the problem's lane function): "
            + ", ".join(f"{k} worker(s) {v:.2f} s" for k, v in first.items())
        )

        pops, build = {}, {}
        for k, (_, c) in clusters.items():
            t = time.perf_counter()
            pops[k] = Population(model, subjects, [0, 1, 2], OMEGA, executor=c, **kw)
            build[k] = time.perf_counter() - t
            t = time.perf_counter()
            pops[k].value_and_grad(z)  # the workers build their objectives
            build[k] = (build[k], time.perf_counter() - t)
        pt = {1: [], 2: []}
        same_pop = {}
        for _ in range(args.rounds):
            for k in clusters:
                t = time.perf_counter()
                v, g = pops[k].value_and_grad(z)
                pt[k].append(time.perf_counter() - t)
                same_pop[k] = v == v_ref and np.array_equal(g, g_ref)
        p1, p2 = statistics.median(pt[1]), statistics.median(pt[2])
        n = args.subjects
        print(f"\n3. objective + gradient, {n:,}-subject population ({z.size:,} unknowns)")
        print(f"   in process {t_pop_local:8.3f} s ({t_pop_local / n * 1e6:.0f} us per subject)")
        print(f"   1 worker   {p1:8.3f} s (rounds {_fmt(pt[1])})")
        print(f"   2 workers  {p2:8.3f} s (rounds {_fmt(pt[2])})")
        print(f"   ratio: {p1 / p2:.2f}x (floor 1.6x); identical to in process: {same_pop}")
        for k in clusters:
            print(
                f"   {k} worker(s): scatter + client-side checks {build[k][0]:.2f} s, first "
                f"evaluation (workers build {n:,} objectives) {build[k][1]:.2f} s"
            )

        # 4. per-task costs
        c = clusters[2][1]
        rt = []
        for _ in range(30):
            t = time.perf_counter()
            c.submit(_noop, 1, pure=False).result()
            rt.append(time.perf_counter() - t)
        many = []
        for _ in range(3):
            t = time.perf_counter()
            c.gather([c.submit(_noop, i, pure=False) for i in range(200)])
            many.append((time.perf_counter() - t) / 200)
        from scichains.parallel._executor import ScatteredChunks

        held = ScatteredChunks(c, [0, 1])  # one chunk holder (actor) per worker
        ra = []
        for _ in range(30):
            t = time.perf_counter()
            held.run(_noop)
            ra.append(time.perf_counter() - t)
        bytes_per_task = lambda b: 8 * (-(-b // 16) * (1 + 3) + b * 3)  # noqa: E731
        print("\n4. per-task costs (2-worker cluster)")
        print(f"   one no-op task, submit to result: median {statistics.median(rt) * 1e3:.2f} ms")
        print(f"   200 no-op tasks at once: {statistics.median(many) * 1e3:.3f} ms per task")
        print(
            "   one no-op call to both chunk holders (the actors that Population and "
            f"EnsembleObjective use): median {statistics.median(ra) * 1e3:.2f} ms"
        )
        print(
            f"   per subject, objective + gradient: {t_pop_local / n * 1e6:.0f} us (in process), "
            f"{p1 / n * 1e6:.0f} us (one worker, including transfer)"
        )
        print(f"   a task's result for 1,563 subjects: {bytes_per_task(1563) / 1e3:.1f} kB")
        print(f"   load average: {_load()}")

        _pk_section(args, {k: c for k, (_, c) in clusters.items()})
    finally:
        for cl, c in clusters.values():
            c.close()
            cl.close()


def _pk_section(args, clients):
    """5. FOCE-I objective + gradient in process and on the clusters (see the docstring)."""
    from _ensemble_models import pk_population

    from scichains import pk

    n = args.pk_subjects
    t = time.perf_counter()
    model, data, x = pk_population(n)
    print(f"\n5. FOCE-I objective + gradient, {n:,} simulated subjects ({data.n_obs:,} samples)")
    print(f"   model and simulated data: {time.perf_counter() - t:.2f} s")
    x1 = x + 0.01  # an outer step away from the point that gave the warm starts
    local = pk.PopulationObjective(model, data)
    t = time.perf_counter()
    local.value_and_grad(x)  # the augmented system built (or loaded), the EBEs at x
    print(f"   in process, first evaluation (builds the system): {time.perf_counter() - t:.2f} s")
    etas0 = local.etas.copy()

    def evaluate(obj):
        obj.etas = etas0.copy()  # the same warm starts every round
        t = time.perf_counter()
        value = obj.value_and_grad(x1)
        return time.perf_counter() - t, value

    remote, first = {}, {}
    for k, c in clients.items():
        t = time.perf_counter()
        remote[k] = pk.PopulationObjective(model, data, executor=c)
        evaluate(remote[k])  # the workers build the model and their chunks' objectives
        first[k] = time.perf_counter() - t
    times = {"here": [], **{k: [] for k in remote}}
    same = {k: True for k in remote}
    for _ in range(args.rounds):  # interleaved
        dt, (v_ref, g_ref) = evaluate(local)
        times["here"].append(dt)
        for k, obj in remote.items():
            dt, (v, g) = evaluate(obj)
            times[k].append(dt)
            same[k] &= v == v_ref and np.array_equal(g, g_ref)
            same[k] &= np.array_equal(obj.etas, local.etas)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"   in process {med['here']:8.3f} s ({med['here'] / n * 1e3:.2f} ms per subject; "
        f"rounds {_fmt(times['here'])})"
    )
    for k in remote:
        print(f"   {k} worker(s) {med[k]:7.3f} s (rounds {_fmt(times[k])})")
    if 1 in med and 2 in med:
        print(f"   ratio 1 worker / 2 workers: {med[1] / med[2]:.2f}x")
    print(f"   ratio in process / 2 workers: {med['here'] / med.get(2, np.nan):.2f}x")
    print(f"   OFV, gradient and EBEs identical to in process: {same}")
    for k in remote:
        print(f"   {k} worker(s): creation + first evaluation (workers build) {first[k]:.2f} s")
    print(f"   load average: {_load()}")


def _noop(x):
    return x


def _fmt(xs):
    return ", ".join(f"{x:.3f}" for x in xs)


if __name__ == "__main__":
    main()
