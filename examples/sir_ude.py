"""Discovering the infection term of an SIR epidemic with a universal differential equation.

Truth: S' = -beta S I, I' = beta S I - gamma I, R' = gamma I (beta = 0.4, gamma = 0.1, S, I, R
fractions of the population), observed daily on [0, 40] with Gaussian noise of 5% of each
state's mean. The UDE keeps the recovery (gamma I, known) and replaces the infection term
beta S I by a network U(S, I) (2 -> 8 -> 8 -> 1, tanh): S' = -U, I' = U - gamma I,
R' = gamma I. After Adam and L-BFGS, ``scichains.discovery.select_structure`` takes STLSQ
candidates for U from the network on quadratic polynomials of S and I, refits each to the
data through the adjoint, scores it by BIC plus 2 per term and searches stepwise; the
selected structure becomes a SymbolicModel (``to_symbolic_model``) that is extrapolated.

python examples/sir_ude.py [--quick] [--seed N] [--seeds N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import sympy as sp

import scichains as sc
from scichains.adjoint import Objective, SquaredError
from scichains.discovery import PolynomialLibrary, select_structure
from scichains.ode import NetworkTerm, SymbolicModel, solve

BETA, GAMMA = 0.4, 0.1
U0 = np.array([0.99, 0.01, 0.0])
TS = np.linspace(0.0, 40.0, 41)
S, I, R = sp.symbols("S I R")
LIBRARY = PolynomialLibrary(degree=2)


def truth_model():
    b, g = sp.symbols("beta gamma")
    return SymbolicModel([S, I, R], [b, g], [-b * S * I, b * S * I - g * I, g * I])


def simulate_truth(t):
    m = truth_model()
    prob = m.problem(U0, (0.0, float(t[-1])), m.pack(beta=BETA, gamma=GAMMA))
    return solve(prob, saveat=t, rtol=1e-10, atol=1e-12, throw=True).u


def make_data(seed: int = 0):
    """Noisy observations: Gaussian noise with standard deviation 5% of each state's mean."""
    clean = simulate_truth(TS)
    rng = np.random.default_rng(seed)
    return clean + 0.05 * clean.mean(axis=0) * rng.standard_normal(clean.shape)


def ude_model():
    chain = sc.SimpleChain(2, sc.Dense(8, "tanh"), sc.Dense(8, "tanh"), sc.Dense(1))
    U = NetworkTerm(chain, [S, I])
    model = SymbolicModel([S, I, R], [], [-U[0], U[0] - GAMMA * I, GAMMA * I], network=U)
    return model, chain


def train(model, chain, data, adam_iters=300, lbfgs_iters=3000, seed=1, log=print):
    p = model.pack(network=chain.init_params(seed=seed, dtype=np.float64))
    obj = Objective(
        model.problem(U0, (0.0, TS[-1]), p), SquaredError(data), TS, rtol=1e-7, atol=1e-9
    )

    def report(info):  # scichains.fit calls it at every iterate
        if info.stage == 0 and info.iteration % 100 == 0:
            log(f"  Adam {info.iteration:4d}: loss {info.loss:.5f}")

    res = sc.fit(
        obj,
        p,
        [(sc.Adam(0.01), adam_iters), sc.LBFGS(lbfgs_iters, gtol=1e-10)],
        callback=report,
        progress=False,
    )
    log(
        f"  L-BFGS: loss {res.loss:.3g} after {res.stages[-1]['nit']} iterations; "
        f"{res.seconds:.1f} s in all"
    )
    return p


def discover(model, p, data):
    """The search for U's terms on the data (see ``scichains.discovery.select_structure``)."""
    return select_structure(model, p, LIBRARY, data, TS, U0)


def beta_of(structure):
    """The recovered beta if the structure is exactly U = beta S I, else None."""
    (terms,) = structure.terms().values()
    return terms["S*I"] if set(terms) == {"S*I"} else None


def run(seed, quick=False, log=print):
    data = make_data(seed)
    model, chain = ude_model()
    p = train(model, chain, data, lbfgs_iters=200 if quick else 3000, log=log)
    result = discover(model, p, data)
    return result.best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the noise")
    ap.add_argument("--seeds", type=int, default=None, help="run noise seeds 0..N-1")
    args = ap.parse_args(argv)
    seeds = [args.seed] if args.seeds is None else list(range(args.seeds))
    found = []
    for seed in seeds:
        t0 = time.perf_counter()
        best = run(seed, args.quick, log=print if args.seeds is None else (lambda s: None))
        beta = beta_of(best)
        ok = beta is not None and abs(beta - BETA) <= 0.05 * BETA
        found.append((best, beta, ok))
        print(
            f"seed {seed} ({time.perf_counter() - t0:.0f} s): {best.equations()[1]}; "
            f"{'beta within 5%' if ok else 'NOT beta S I within 5%'}",
            flush=True,
        )
    best = found[-1][0]
    model, q = best.to_symbolic_model()
    t_long = np.linspace(0.0, 100.0, 201)
    sol = solve(model.problem(U0, (0.0, 100.0), q), saveat=t_long, rtol=1e-8, atol=1e-10)
    err = float(np.abs(sol.u - simulate_truth(t_long)).max()) if sol.success else np.inf
    print(f"discovered model extrapolated to t = 100: max abs deviation from the truth {err:.3g}")
    if args.seeds is not None:
        print(f"{sum(ok for _, _, ok in found)}/{len(found)} seeds recover beta S I within 5%")
    return found, err


if __name__ == "__main__":
    main()
