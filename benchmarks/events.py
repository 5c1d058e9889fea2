"""What state-dependent events cost (ode.Event).

1. An event that never fires: the same solve with and without it (Lotka-Volterra, Tsit5 and
   Rodas5P, rtol 1e-8; the condition u[0] + 1, never zero), checked at the step ends only (the
   default) and at 1 and 4 interior points per step. Whole ``solve`` calls (the event's
   set-up included); rounds alternate between the cases, in one process; medians and the
   ratio to the solve without events.
2. The bouncing ball (x'' = -9.81, restitution 0.8, 10 bounces, rtol 1e-10): the time of a
   solve, the right-hand-side calls against the same solve's steps, and the largest relative
   error of the event times against the closed form.

Run: ``python benchmarks/events.py``. Quote the machine line printed first.
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


def main():
    print(machine.describe())
    never_fires()
    bouncing_ball()


if __name__ == "__main__":
    main()
