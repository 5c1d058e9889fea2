"""What state-dependent events cost (ode.Event).

1. An event that never fires: the same solve with and without it (Lotka-Volterra, Tsit5 and
   Rodas5P, rtol 1e-8; the condition u[0] + 1, never zero), checked at the step ends only (the
   default) and at 1 and 4 interior points per step. Whole ``solve`` calls (the event's
   set-up included); rounds alternate between the cases, in one process; medians and the
   ratio to the solve without events.
2. The bouncing ball (x'' = -9.81, restitution 0.8, 10 bounces, rtol 1e-10): the time of a
   solve, the right-hand-side calls against the same solve's steps, and the largest relative
   error of the event times against the closed form.
3. An ensemble of 10,000 bouncing balls (heights 0.5-2, restitutions 0.5-0.9, t in [0, 4],
   Tsit5, rtol 1e-8, 41 save times): ``solve_ensemble(..., events=...)`` on 1 and 2 threads
   against a Python loop of ``solve`` over the same trajectories (the first 500, scaled), and
   the same ensemble without events (the lane loop: the balls fall through the floor) for
   the price of the events.
4. An ensemble with an event that never fires: 20,000 Lotka-Volterra trajectories (Tsit5,
   rtol 1e-8, t in [0, 10], 21 save times) with and without it, on one thread, rounds
   alternating; the lane loop checks the conditions after each step (before, every
   trajectory of an ensemble with events ran on the scalar stepper), and the ratio.

Run: ``python benchmarks/events.py [sections]`` (e.g. ``3 4``; default all). Quote the
machine line printed first.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _machine as machine  # noqa: E402

from scichains import ode  # noqa: E402


@numba.njit
def lotka(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = -p[2] * u[1] + p[3] * u[0] * u[1]


@numba.njit
def never(u, t, p):
    return u[0] + 1.0


@numba.njit
def falling(du, u, p, t):
    du[0] = u[1]
    du[1] = -p[0]


@numba.njit
def ground(u, t, p):
    return u[0]


@numba.njit
def bounce(u, t, p):
    u[1] = -p[1] * u[1]


def alternate(fns, rounds=31, inner=20):
    """Median seconds per call of each function, the rounds alternating between them."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times[i].append((time.perf_counter() - t0) / inner)
    return [float(np.median(t)) for t in times]


def never_fires():
    prob = ode.ODEProblem(lotka, np.array([1.0, 1.0]), (0.0, 20.0), np.array([1.5, 1.0, 3.0, 1.0]))
    print("\n1. an event that never fires (Lotka-Volterra, t in [0, 20], rtol 1e-8): whole solves")
    for solver in (ode.Tsit5(), ode.Rodas5P()):
        kw = dict(rtol=1e-8, atol=1e-10)
        cases = {
            "none": None,
            "ends (default)": ode.Event(never),
            "1 interior point": ode.Event(never, interp_points=1),
            "4 interior points": ode.Event(never, interp_points=4),
        }
        base = ode.solve(prob, solver, **kw)
        for ev in cases.values():
            assert np.array_equal(ode.solve(prob, solver, events=ev, **kw).u, base.u)
        medians = alternate(
            [partial(ode.solve, prob, solver, events=ev, **kw) for ev in cases.values()]
        )
        print(f"  {solver.name} ({base.stats['naccept']} steps):")
        for name, t in zip(cases, medians):
            print(f"    {name:18s} {t * 1e6:9.1f} us  {t / medians[0]:.3f}x")


def bouncing_ball():
    g, e, x0 = 9.81, 0.8, 1.0
    v = np.sqrt(2 * g * x0)
    times = [np.sqrt(2 * x0 / g)]
    for _ in range(10):
        v *= e
        times.append(times[-1] + 2 * v / g)
    times = np.array(times)
    prob = ode.ODEProblem(falling, np.array([x0, 0.0]), (0.0, times[10] + 0.01), np.array([g, e]))
    event = ode.Event(ground, bounce, direction=-1)
    print("\n2. bouncing ball, 10 bounces after the first landing, rtol 1e-10")
    for solver in (ode.Tsit5(), ode.Rodas5P()):
        kw = dict(rtol=1e-10, atol=1e-12, events=event)
        sol = ode.solve(prob, solver, **kw)
        err = np.max(np.abs(sol.t_events[0] - times) / times)
        (t_solve,) = alternate([partial(ode.solve, prob, solver, **kw)], rounds=11)
        print(
            f"  {solver.name:8s} {t_solve * 1e6:8.1f} us per solve, {sol.t_events[0].size} events, "
            f"nf {sol.stats['nf']}, {sol.stats['naccept']} steps; event times: largest "
            f"relative error {err:.1e}"
        )


def ensemble_of_balls(m=10_000, looped=500):
    rng = np.random.default_rng(0)
    u0s = np.column_stack([rng.uniform(0.5, 2.0, m), np.zeros(m)])
    ps = np.column_stack([np.full(m, 9.81), rng.uniform(0.5, 0.9, m)])
    prob = ode.ODEProblem(falling, u0s[0], (0.0, 4.0), ps[0])
    eprob = ode.EnsembleProblem(prob, u0s=u0s, ps=ps)
    event = ode.Event(ground, bounce, direction=-1)
    kw = dict(saveat=np.linspace(0.0, 4.0, 41), rtol=1e-8, atol=1e-10)
    print(f"\n3. {m:,} bouncing balls, t in [0, 4], Tsit5, rtol 1e-8, 41 save times")
    one = ode.solve_ensemble(eprob, ode.Tsit5(), events=event, threads=1, **kw)
    two = ode.solve_ensemble(eprob, ode.Tsit5(), events=event, threads=2, **kw)
    assert np.array_equal(one.u, two.u) and one.success.all()
    counts = [len(t[0]) for t in one.t_events]
    single = [ode.ODEProblem(falling, u0s[i], (0.0, 4.0), ps[i]) for i in range(looped)]
    for i in (0, looped - 1):
        sol = ode.solve(single[i], ode.Tsit5(), events=event, **kw)
        assert np.array_equal(sol.t_events[0], one.t_events[i][0])

    def loop():
        for q in single:
            ode.solve(q, ode.Tsit5(), events=event, **kw)

    ode.solve_ensemble(eprob, ode.Tsit5(), **kw)  # compile the lane loop
    t1, t2, t_loop, t_none = alternate(
        [
            partial(ode.solve_ensemble, eprob, ode.Tsit5(), events=event, threads=1, **kw),
            partial(ode.solve_ensemble, eprob, ode.Tsit5(), events=event, threads=2, **kw),
            loop,
            partial(ode.solve_ensemble, eprob, ode.Tsit5(), **kw),
        ],
        rounds=7,
        inner=1,
    )
    t_loop *= m / looped
    print(
        f"  events per ball {min(counts)}-{max(counts)} (median {int(np.median(counts))}); "
        f"{one.naccept.sum():,} steps in all"
    )
    print(f"  solve_ensemble, events, 1 thread   {t1 * 1e3:8.1f} ms  ({t_loop / t1:.1f}x the loop)")
    print(f"  solve_ensemble, events, 2 threads  {t2 * 1e3:8.1f} ms  ({t1 / t2:.2f}x 1 thread)")
    print(f"  Python loop of solve (scaled)      {t_loop * 1e3:8.1f} ms")
    print(f"  solve_ensemble without events      {t_none * 1e3:8.1f} ms  (lane loop, no bounces)")


def ensemble_never_fires(m=20_000):
    rng = np.random.default_rng(0)
    u0s = 1.0 + 0.2 * rng.random((m, 2))
    ps = np.tile([1.5, 1.0, 3.0, 1.0], (m, 1))
    prob = ode.ODEProblem(lotka, u0s[0], (0.0, 10.0), ps[0])
    eprob = ode.EnsembleProblem(prob, u0s=u0s, ps=ps)
    kw = dict(saveat=np.linspace(0.0, 10.0, 21), rtol=1e-8, atol=1e-10, threads=1)
    print(f"\n4. {m:,} Lotka-Volterra trajectories, an event that never fires, 1 thread")
    plain = ode.solve_ensemble(eprob, ode.Tsit5(), **kw)
    with_ev = ode.solve_ensemble(eprob, ode.Tsit5(), events=ode.Event(never), **kw)
    assert np.array_equal(plain.u, with_ev.u)
    times = [[], []]
    for _ in range(15):
        for k, ev in enumerate((None, ode.Event(never))):
            t0 = time.perf_counter()
            ode.solve_ensemble(eprob, ode.Tsit5(), events=ev, **kw)
            times[k].append(time.perf_counter() - t0)
    a, b = np.array(times)
    print(f"  {plain.naccept.mean():.0f} steps per trajectory")
    print(f"  without events    {np.median(a) * 1e3:8.1f} ms")
    print(
        f"  never-firing event {np.median(b) * 1e3:7.1f} ms  (median of the rounds' ratios "
        f"{np.median(b / a):.3f}x; quartiles {np.quantile(b / a, 0.25):.3f}-"
        f"{np.quantile(b / a, 0.75):.3f})"
    )


def main():
    print(machine.describe())
    which = set(sys.argv[1:]) or {"1", "2", "3", "4"}
    if "1" in which:
        never_fires()
    if "2" in which:
        bouncing_ball()
    if "3" in which:
        ensemble_of_balls()
    if "4" in which:
        ensemble_never_fires()


if __name__ == "__main__":
    main()
