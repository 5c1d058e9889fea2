"""What a measured input costs (ode.Interpolation, ODEProblem(inputs=)).

1. Per right-hand-side call: the C-callable the solvers call, called from a compiled loop as
   the stepping loop calls it (``call_rhs``), for ``f(du, u, p, t, x)`` with an input against
   the same arithmetic in ``f(du, u, p, t)`` reading the input's value from ``p``; the call
   times spread over the time span (the binary search sees every interval). Per kind, for
   21 and 10,001 samples, 1 and 4 channels; rounds alternate between the cases in one
   process; medians in ns per call.
2. Compile cost: ``ODEProblem(...)`` for a freshly defined right-hand side with and without
   ``inputs=`` (both compile the user's function and its C adapter; with inputs also the
   evaluating adapter), and the first gradient's automatic vjp (``ensure_vjp``); medians of
   a few fresh functions.

Run: ``python benchmarks/inputs.py``. Quote the machine line printed first.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _machine as machine  # noqa: E402

from scichains import ode  # noqa: E402
from scichains.ode._abi import NO_NETWORK, call_rhs, rhs_function  # noqa: E402

CALLS = 200_000


@numba.njit
def call_loop(address, du, u, p, t1, k, calls):
    fn = rhs_function(address)
    acc = 0.0
    for i in range(calls):
        call_rhs(fn, du, u, p, t1 * (i / calls), k)
        acc += du[0]
    return acc


@numba.njit
def with_input(du, u, p, t, x):
    s = 0.0
    for j in range(x.shape[0]):
        s += x[j]
    du[0] = -p[0] * u[0] + s


@numba.njit
def without_input(du, u, p, t):
    s = 0.0
    for j in range(1, p.shape[0]):
        s += p[j]
    du[0] = -p[0] * u[0] + s


def per_call(rounds=15):
    print("\n1. per right-hand-side call (ns), C-callable called as the stepping loop calls it")
    print(f"{'kind':>9} {'samples':>8} {'m':>2} {'without':>8} {'with':>8} {'input':>8}")
    du, u = np.zeros(1), np.array([1.0])
    for n in (21, 10_001):
        for m in (1, 4):
            ts = np.linspace(0.0, 100.0, n)
            values = np.sin(ts[:, None] * np.arange(1, m + 1))
            base = ode.ODEProblem(without_input, u, (0.0, 100.0), np.full(1 + m, 0.5))
            for kind in ("constant", "linear", "cubic", "akima"):
                interp = ode.Interpolation(ts, values, kind=kind)
                prob = ode.ODEProblem(with_input, u, (0.0, 100.0), np.array([0.5]), inputs=interp)
                cases = [(base.f_address, base.p), (prob.f_address, prob.p)]
                for a, q in cases:
                    call_loop(a, du, u, q, 100.0, NO_NETWORK, 10)
                times = [[], []]
                for _ in range(rounds):
                    for i, (a, q) in enumerate(cases):
                        t0 = time.perf_counter()
                        call_loop(a, du, u, q, 100.0, NO_NETWORK, CALLS)
                        times[i].append((time.perf_counter() - t0) / CALLS * 1e9)
                w0, w1 = (float(np.median(t)) for t in times)
                print(f"{kind:>9} {n:>8} {m:>2} {w0:>8.1f} {w1:>8.1f} {w1 - w0:>+8.1f}")


_SOURCE = """
import numba
@numba.njit
def rhs(du, u, p, t{x}):
    du[0] = -p[0] * u[0] + {forcing}
"""


def fresh(with_inputs: bool):
    scope: dict = {}
    forcing = "x[0]" if with_inputs else "p[1]"
    exec(_SOURCE.format(x=", x" if with_inputs else "", forcing=forcing), scope)  # noqa: S102
    return scope["rhs"]


def compile_cost(repeat=5):
    print("\n2. compile cost (s, medians of fresh functions)")
    ts = np.linspace(0.0, 10.0, 101)
    interp = ode.Interpolation(ts, np.sin(ts))
    u0 = np.array([1.0])
    rows = {}
    for label, with_inputs in (("without inputs", False), ("with inputs", True)):
        build, vjp = [], []
        for _ in range(repeat):
            f = fresh(with_inputs)
            t0 = time.perf_counter()
            if with_inputs:
                prob = ode.ODEProblem(f, u0, (0.0, 10.0), np.array([0.7]), inputs=interp)
            else:
                prob = ode.ODEProblem(f, u0, (0.0, 10.0), np.array([0.7, 0.1]))
            t1 = time.perf_counter()
            prob.ensure_vjp()
            t2 = time.perf_counter()
            build.append(t1 - t0)
            vjp.append(t2 - t1)
        rows[label] = (float(np.median(build)), float(np.median(vjp)))
        print(f"{label:>15}: ODEProblem {rows[label][0]:.2f} s, first vjp {rows[label][1]:.2f} s")


if __name__ == "__main__":
    print(machine.describe())
    per_call()
    compile_cost()
