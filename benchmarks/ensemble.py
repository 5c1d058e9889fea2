"""Ensembles and population objectives: in-process threads, and Dask (issue 15).

1. 20,000 Lotka-Volterra solves (Tsit5, 50 save points, rtol 1e-6, atol 1e-8, initial states
   drawn uniformly from [1, 2]^2): ``solve_ensemble`` on 1 and 2 threads, against a Python
   loop over ``solve`` (timed on ``--loop`` of the trajectories, per solve).
2. The same ensemble on ``LocalCluster(n_workers=2, threads_per_worker=1)`` against
   ``LocalCluster(n_workers=1, threads_per_worker=1)``: one cluster alive at a time, in blocks
   of 1, 2, 2, 1, 1, 2, 2, 1 workers (``--blocks``; ``--rounds`` rounds each, ``--pk-rounds``
   for section 5); the saved states compared with the in-process run, bit for bit.
3. Objective + gradient of a 1,000-subject simulated population (one-compartment oral PK,
   random effects on ka, CL, V) in the same blocks, compared bit for bit with the in-process
   run.
4. The per-task costs behind the projection in the README (a no-op task's round trip, a no-op
   call to the chunk holders, the per-subject cost, the bytes a task returns), and the CPU
   an idle 2-worker cluster spends on Dask's own periodic work.
5. The FOCE-I objective + gradient (``scichains.pk.PopulationObjective``: each subject's EBE by
   Newton's method, its OFV term and exact outer gradient) of ``--pk-subjects`` subjects
   simulated from nlmixr2's Theophylline model, from the same warm starts each round, in
   process (before the clusters start) and in the same blocks, compared bit for bit.

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
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--pk-rounds", type=int, default=3, help="FOCE-I rounds per block")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--blocks",
        default="12211221",
        help="the Dask clusters' sizes, one alive at a time, in this order (digits 1 and 2)",
    )
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument(
        "--quiet-dask",
        action="store_true",
        help="make Dask's periodic work rarer (QUIET_DASK) before the clusters start",
    )
    args = ap.parse_args(argv)
    if args.quick:  # smaller defaults; what was given stays
        for name, value in dict(
            trajectories=2_000, subjects=100, loop=200, rounds=3, pk_rounds=2,
            pk_subjects=100, blocks="1221",
        ).items():  # fmt: skip
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    if set(args.blocks) != {"1", "2"}:
        ap.error(f"--blocks: digits 1 and 2, both, got {args.blocks!r}")

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

    def thread_rounds():
        t1s, t2s = [], []
        for _ in range(args.rounds):  # interleaved: the machine's speed drifts
            for k, ts_k in ((1, t1s), (2, t2s)):
                t = time.perf_counter()
                ode.solve_ensemble(eprob, solver, saveat=ts, threads=k)
                ts_k.append(time.perf_counter() - t)
        return t1s, t2s

    t1s, t2s = thread_rounds()
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

    # ---------------------------------------------------------------- 2-5. Dask
    import dask
    from distributed import Client, LocalCluster

    from scichains import warm_up

    if args.quiet_dask:
        dask.config.set(QUIET_DASK)
    model, subjects = simulated_subjects(args.subjects)
    kw = dict(rtol=1e-6, atol=1e-8)
    pop_local = Population(model, subjects, [0, 1, 2], OMEGA, **kw)
    z = pop_local.pack(THETA, 0.1 * rng.standard_normal((args.subjects, 3)))
    pop_local.value_and_grad(z)
    t_pop_local, _ = _median_time(lambda: pop_local.value_and_grad(z), args.rounds)
    v_ref, g_ref = pop_local.value_and_grad(z)
    pk_ref = _PKReference(args.pk_subjects)

    # One cluster at a time, in blocks of 1, 2, 2, 1, ... workers (for the host's drift): an
    # idle cluster's own periodic work (measured in section 4) would otherwise take CPU from
    # the one being timed, and on two cores there is none to spare.
    ens, pt, pkt = {1: [], 2: []}, {1: [], 2: []}, {1: [], 2: []}
    pkt["here"] = [pk_ref.evaluate(pk_ref.local)[0] for _ in range(2 * args.pk_rounds)]
    same = {"ensemble": {}, "population": {}, "FOCE-I": {}}
    setup = {1: [], 2: []}
    costs = None
    for k in [int(b) for b in args.blocks]:
        t = time.perf_counter()
        cl = LocalCluster(n_workers=k, threads_per_worker=1, processes=True, dashboard_address=":0")
        c = Client(cl)
        try:
            started = time.perf_counter() - t
            info = warm_up(c)
            # one untimed call each: a worker compiles the problem's own lane right-hand side
            # (a C-callable made per problem, not cached across processes) at its first ensemble
            t = time.perf_counter()
            ode.solve_ensemble(eprob, solver, saveat=ts, executor=c)
            first = time.perf_counter() - t
            t = time.perf_counter()
            pop = Population(model, subjects, [0, 1, 2], OMEGA, executor=c, **kw)
            scatter = time.perf_counter() - t
            t = time.perf_counter()
            pop.value_and_grad(z)  # the workers build their objectives
            build = time.perf_counter() - t
            pk_remote, pk_first = pk_ref.remote(c)
            setup[k].append((started, info, first, scatter, build, pk_first))
            # each phase's rounds back to back, so that a median is of like calls (one A/B:
            # 2-worker ensemble calls right after an in-process FOCE-I evaluation, which uses
            # both cores, 105 ms against 91 back to back; after a remote one, 82)
            for _ in range(args.rounds):
                t = time.perf_counter()
                sol = ode.solve_ensemble(eprob, solver, saveat=ts, executor=c)
                ens[k].append(time.perf_counter() - t)
                same["ensemble"][k] = same["ensemble"].get(k, True) and (
                    np.array_equal(sol.u, ref.u) and np.array_equal(sol.status, ref.status)
                )
                del sol
            for _ in range(args.rounds):
                t = time.perf_counter()
                v, g = pop.value_and_grad(z)
                pt[k].append(time.perf_counter() - t)
                same["population"][k] = same["population"].get(k, True) and (
                    v == v_ref and np.array_equal(g, g_ref)
                )
            for _ in range(args.pk_rounds):
                dt, ok = pk_ref.evaluate(pk_remote)
                pkt[k].append(dt)
                same["FOCE-I"][k] = same["FOCE-I"].get(k, True) and ok
            if k == 2 and costs is None:
                costs = _per_task_costs(c)
        finally:
            c.close()
            cl.close()

    e1, e2 = statistics.median(ens[1]), statistics.median(ens[2])
    print(f"\n2. the same {m:,} solves on Dask LocalCluster (processes, 1 thread per worker)")
    blocks = ", ".join(args.blocks)
    print(f"   one cluster at a time, blocks of {blocks} workers, {args.rounds} rounds each")
    print(f"   1 worker   {e1:8.3f} s (rounds {_fmt(ens[1])})")
    print(f"   2 workers  {e2:8.3f} s (rounds {_fmt(ens[2])})")
    print(f"   ratio: {e1 / e2:.2f}x (floor 1.6x); identical to in process: {same['ensemble']}")
    for k in (1, 2):
        for started, info, first, *_ in setup[k]:
            print(
                f"   {k} worker(s): cluster started {started:.2f} s, warm-up "
                + ", ".join(f"{v['seconds']:.2f}" for v in info.values())
                + f" s, first call (the workers compile the problem's lane function) {first:.2f} s"
            )

    p1, p2 = statistics.median(pt[1]), statistics.median(pt[2])
    n = args.subjects
    print(f"\n3. objective + gradient, {n:,}-subject population ({z.size:,} unknowns)")
    print(f"   in process {t_pop_local:8.3f} s ({t_pop_local / n * 1e6:.0f} us per subject)")
    print(f"   1 worker   {p1:8.3f} s (rounds {_fmt(pt[1])})")
    print(f"   2 workers  {p2:8.3f} s (rounds {_fmt(pt[2])})")
    print(f"   ratio: {p1 / p2:.2f}x (floor 1.6x); identical to in process: {same['population']}")
    for k in (1, 2):
        for *_, scatter, build, _ in setup[k]:
            print(
                f"   {k} worker(s): scatter + client-side checks {scatter:.2f} s, first "
                f"evaluation (workers build {n:,} objectives) {build:.2f} s"
            )

    rt, many, ra, idle = costs
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
    print(
        "   the idle cluster's own CPU (Dask's periodic work), ms per second: client process "
        f"(scheduler, nannies) {idle[0]:.1f}, workers " + ", ".join(f"{x:.1f}" for x in idle[1:])
    )

    med = {k: statistics.median(v) for k, v in pkt.items()}
    n = args.pk_subjects
    print(
        f"\n5. FOCE-I objective + gradient, {n:,} simulated subjects "
        f"({pk_ref.data.n_obs:,} samples), from the same warm starts each round"
    )
    print(f"   model and simulated data: {pk_ref.made:.2f} s")
    print(f"   in process, first evaluation (builds the system): {pk_ref.first:.2f} s")
    print(
        f"   in process {med['here']:8.3f} s ({med['here'] / n * 1e3:.2f} ms per subject; "
        f"rounds {_fmt(pkt['here'])})"
    )
    for k in (1, 2):
        print(f"   {k} worker(s) {med[k]:7.3f} s (rounds {_fmt(pkt[k])})")
    print(f"   ratio 1 worker / 2 workers: {med[1] / med[2]:.2f}x")
    print(f"   ratio in process / 2 workers: {med['here'] / med[2]:.2f}x")
    print(f"   OFV, gradient and EBEs identical to in process: {same['FOCE-I']}")
    for k in (1, 2):
        for *_, pk_first in setup[k]:
            print(f"   {k} worker(s): creation + first evaluation (workers build) {pk_first:.2f} s")
    # the host's state at the end: section 1's in-process ratio again (two cores' worth of
    # work in one process: what the 2-worker figures above can hope for at this moment)
    a, b = (statistics.median(x) for x in thread_rounds())
    print(f"\nhost check: in process, 1 thread / 2 threads again: {a / b:.2f}x")
    print(f"   load average: {_load()}")


QUIET_DASK = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
}
"""``--quiet-dask``: Dask's periodic work made rarer (see docs/guide/ensembles.md)."""


def _per_task_costs(c):
    """Section 4's figures, on client ``c``: no-op task round trips, 200 at once, no-op calls
    to chunk holders, and the idle cluster's CPU per second (psutil, when installed)."""
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
    del held
    time.sleep(1.0)  # the holders released before the idle cluster is measured
    try:
        import psutil
    except ImportError:  # pragma: no cover - distributed depends on it
        return rt, many, ra, [float("nan")]
    me = psutil.Process()
    procs = [me] + [psutil.Process(pid) for pid in sorted(c.run(os.getpid).values())]
    before = [sum(p.cpu_times()[:2]) for p in procs]
    time.sleep(3.0)
    idle = [(sum(p.cpu_times()[:2]) - b) / 3.0 * 1e3 for p, b in zip(procs, before)]
    return rt, many, ra, idle


class _PKReference:
    """Section 5's problem (see the docstring): the model, data and point, the in-process
    objective and its warm starts; ``remote(client)`` builds the objective on a cluster,
    ``evaluate(obj)`` times one objective + gradient from the same warm starts and compares
    it with the in-process one."""

    def __init__(self, n):
        from _ensemble_models import pk_population

        from scichains import pk

        self.pk = pk
        t = time.perf_counter()
        self.model, self.data, x = pk_population(n)
        self.made = time.perf_counter() - t
        self.x1 = x + 0.01  # an outer step away from the point that gave the warm starts
        self.local = pk.PopulationObjective(self.model, self.data)
        t = time.perf_counter()
        self.local.value_and_grad(x)  # the augmented system built (or loaded), the EBEs at x
        self.first = time.perf_counter() - t
        self.etas0 = self.local.etas.copy()
        self.local.etas = self.etas0.copy()
        self.v, self.g = self.local.value_and_grad(self.x1)
        self.etas1 = self.local.etas.copy()

    def remote(self, client):
        t = time.perf_counter()
        obj = self.pk.PopulationObjective(self.model, self.data, executor=client)
        self.evaluate(obj)  # the workers build the model and their chunks' objectives
        return obj, time.perf_counter() - t

    def evaluate(self, obj):
        obj.etas = self.etas0.copy()  # the same warm starts every round
        t = time.perf_counter()
        v, g = obj.value_and_grad(self.x1)
        dt = time.perf_counter() - t
        same = v == self.v and np.array_equal(g, self.g)
        return dt, same and np.array_equal(obj.etas, self.etas1)


def _noop(x):
    return x


def _fmt(xs):
    return ", ".join(f"{x:.3f}" for x in xs)


if __name__ == "__main__":
    main()
