"""Gradient cost of a plain compiled right-hand side (automatic derivatives: by symbolic
tracing, the default, and by the complex step, the fallback for code that cannot be traced)
against the same model as a SymbolicModel (generated exact derivatives).

Three models: Lotka-Volterra (2 states, 4 parameters), a chain of 20 compartments with
saturable transfer (20 states, 21 parameters), and a universal differential equation whose
right-hand side calls a network through ``nn.chain_forward`` (against SymbolicModel with a
NetworkTerm). Loss: squared error at 11 save points; Tsit5,
rtol 1e-8; the default sensitivity method (the discrete adjoint). Prints the median time of
one loss + gradient for each and the ratios to SymbolicModel.

Usage: python benchmarks/autodiff.py [--reps 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np
import sympy as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine as machine  # noqa: E402

from scichains import Dense, SimpleChain, nn  # noqa: E402
from scichains.adjoint import Objective, SquaredError  # noqa: E402
from scichains.ode import NetworkTerm, ODEProblem, SymbolicModel  # noqa: E402

N = 20


@numba.njit
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = p[2] * u[0] * u[1] - p[3] * u[1]


@numba.njit
def transit_chain(du, u, p, t):
    """``du_i = k_{i-1} u_{i-1} / (1 + u_{i-1}) - k_i u_i / (1 + u_i)``, outflow ``p[N]``."""
    n = u.shape[0]
    inflow = 0.0
    for i in range(n):
        out = p[i] * u[i] / (1.0 + u[i])
        du[i] = inflow - out
        inflow = out
    du[n - 1] -= p[n] * u[n - 1]


@numba.njit
def ude(du, u, p, t, k):
    """Lotka-Volterra's linear terms plus a network of the state (parameters ``p[2:]``)."""
    out = np.empty(2)
    nn.chain_forward(k, p[2:], u, out)
    du[0] = p[0] * u[0] + out[0]
    du[1] = -p[1] * u[1] + out[1]


def symbolic_ude(chain):
    x, y, a, d = sp.symbols("x y a d")
    term = NetworkTerm(chain, [x, y])
    return SymbolicModel([x, y], [a, d], [a * x + term[0], -d * y + term[1]], term)


def symbolic_lv():
    x, y, a, b, c, d = sp.symbols("x y a b c d")
    return SymbolicModel([x, y], [a, b, c, d], [a * x - b * x * y, c * x * y - d * y])


def symbolic_chain():
    u = sp.symbols(f"u0:{N}")
    k = sp.symbols(f"k0:{N + 1}")
    eqs, inflow = [], 0
    for i in range(N):
        out = k[i] * u[i] / (1 + u[i])
        eqs.append(inflow - out)
        inflow = out
    eqs[-1] -= k[N] * u[N - 1]
    return SymbolicModel(list(u), list(k), eqs)


def median_ms(obj, p, reps):
    obj.value_and_grad(p)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        obj.value_and_grad(p)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args(argv)
    print(machine.describe())
    ts = np.linspace(0.0, 5.0, 11)
    cases = [  # (name, compiled RHS, the same as a SymbolicModel, u0, p)
        ("Lotka-Volterra", lotka_volterra, symbolic_lv(), np.ones(2), [1.5, 1.0, 1.0, 3.0]),
        (
            "transit chain, 20 states",
            transit_chain,
            symbolic_chain(),
            np.r_[5.0, np.zeros(N - 1)],
            np.r_[np.linspace(1.0, 2.0, N), 0.3],
        ),
    ]
    for name, f, model, u0, p in cases:
        p = np.asarray(p, dtype=np.float64)
        traced = ODEProblem(f, u0, (0.0, 5.0), p)
        traced.ensure_vjp()
        cstep = ODEProblem(f, u0, (0.0, 5.0), p)
        cstep.ensure_vjp(method="complex step")
        assert traced.derivatives == "traced" and cstep.derivatives == "complex step"
        compare(
            name,
            {"traced": traced, "complex step": cstep},
            model.problem(u0, (0.0, 5.0), p),
            p,
            ts,
            args.reps,
        )
    # a universal differential equation: a network called from the user's own @njit code
    chain = SimpleChain(2, Dense(16, "tanh"), Dense(16, "tanh"), Dense(2))
    p = np.r_[1.3, 1.8, chain.init_params(seed=0, dtype=np.float64)]
    u0 = np.array([0.44, 4.6])
    traced = ODEProblem(ude, u0, (0.0, 5.0), p, kernel=chain.kernel(np.float64))
    traced.ensure_vjp()
    compare(
        f"UDE (network 2-16-16-2 via nn.chain_forward, {chain.num_params} weights)",
        {"traced": traced},
        symbolic_ude(chain).problem(u0, (0.0, 5.0), p),
        p,
        ts,
        args.reps,
    )


def compare(name, autos, sym_prob, p, ts, reps):
    """Time loss + gradient of each automatic problem against the SymbolicModel one."""
    data = np.zeros((ts.size, sym_prob.u0.size))
    kw = dict(rtol=1e-8, atol=1e-10)
    objs = {key: Objective(prob, SquaredError(data), ts, **kw) for key, prob in autos.items()}
    objs["SymbolicModel"] = Objective(sym_prob, SquaredError(data), ts, **kw)
    gs = objs["SymbolicModel"].value_and_grad(p)[1]
    times = {}
    for _ in range(3):  # interleaved rounds: a slow moment of the machine hits them all
        for key, obj in objs.items():
            times.setdefault(key, []).append(median_ms(obj, p, reps // 3))
    tsym = float(np.median(times["SymbolicModel"]))
    print(f"{name}: SymbolicModel {tsym:.3f} ms per loss + gradient")
    for key in autos:
        g = objs[key].value_and_grad(p)[1]
        err = float(np.max(np.abs(g - gs)) / max(1e-300, np.max(np.abs(gs))))
        ta = float(np.median(times[key]))
        print(
            f"  automatic, {key}: {ta:.3f} ms, ratio {ta / tsym:.2f}; gradient agrees "
            f"with SymbolicModel's to {err:.1e} (relative)"
        )


if __name__ == "__main__":
    main()
