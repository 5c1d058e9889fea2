"""Theophylline hybrid: a small network for the absorption inside the population model, by FOCE-I.

The classical model (examples/theophylline.py) absorbs at the rate ``ka depot``. Here the
absorption rate is ``ka g(t) depot`` with ``ka = exp(tka + eta_ka)`` and

    g(t) = K / (1 + (K - 1) exp(-(z(t) - z(0)))),   z(t) = sum_j w2_j tanh(w1_j t / 10 + b1_j)

a network 1 -> H (tanh) -> 1 of time shared by all subjects, squashed into (0, K) and
normalised so that g(0) = 1 whatever the weights: ``ka`` stays the absorption rate constant
at the time of the dose (the identifiability aid; the network only shapes how it changes
afterwards, e.g. a slow start or a speed-up). The network's 3 H weights are fixed effects,
written into the individual-parameter block (SymPy, so the FOCE-I gradient stays exact)
with an L2 prior ``lambda sum w^2`` (``pk.fit(l2=...)``); CL, V and the random effects, the
residual error and the data are those of the classical model.

The script fits the classical model and the hybrid from two seeds of the initial weights,
and prints OFV, AIC = OFV + 2 k (k: estimated parameters, weights included; the prior is not
in the OFV), the typical values of each seed and their relative differences, and a VPC
summary (observed 5/50/95th percentiles outside the simulated 95% intervals, out of the
bins x 3). ``--plot out.png`` draws both VPCs.

python examples/theophylline_hybrid.py [--seeds 0 1] [--hidden 2] [--l2 0.5] [--plot out.png]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import sympy as sp
import theophylline as classical

from scichains import pk

K = 4.0  # g(t) in (0, K): at most a K-fold speed-up of the absorption


def hybrid_model(hidden: int = 2):
    """``(PKModel, weight symbols)``; initial weights 0 (g = 1: the classical model)."""
    depot, center, ka, cl, v, t = sp.symbols("depot center ka cl v t")
    tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
    w1 = sp.symbols(f"w1_0:{hidden}")
    b1 = sp.symbols(f"b1_0:{hidden}")
    w2 = sp.symbols(f"w2_0:{hidden}")
    weights = [*w1, *b1, *w2]
    # the weights enter the ODE as individual parameters equal to the typical values
    nw = {w: sp.Symbol(f"nn_{w}") for w in weights}

    def z(tt):
        return sum(nw[w2[j]] * sp.tanh(nw[w1[j]] * tt + nw[b1[j]]) for j in range(hidden))

    g = K / (1 + (K - 1) * sp.exp(-(z(t / 10) - z(0))))
    individual = {ka: sp.exp(tka + eka), cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev)}
    individual.update({nw[w]: w for w in weights})
    theta = {tka: 0.45, tcl: 1.0, tv: 3.45}
    theta.update({w: 0.0 for w in weights})
    model = pk.PKModel(
        states=[depot, center],
        odes=[-ka * g * depot, ka * g * depot - cl / v * center],
        individual=individual,
        theta=theta,
        eta=[eka, ecl, ev],
        omega=[0.6, 0.3, 0.1],
        observe=center / v,
        error=pk.Additive(0.7),
        t=t,
    )
    return model, weights


def start(model, weights, seed: int, scale: float = 0.3) -> np.ndarray:
    """The initial vector with the weights drawn from ``N(0, scale^2)`` (``seed``)."""
    x0 = model.pack()
    rng = np.random.default_rng(seed)
    x0[3 : 3 + len(weights)] = scale * rng.standard_normal(len(weights))
    return x0


def typical(fit) -> np.ndarray:
    """ka (1/h, at the dose), CL (L/h), V (L)."""
    return np.exp([fit.theta["tka"], fit.theta["tcl"], fit.theta["tv"]])


def vpc_misses(v) -> int:
    """Observed percentiles outside their simulated intervals (over bins and percentiles)."""
    out = (v.observed < v.simulated_low) | (v.observed > v.simulated_high)
    return int(np.sum(out & np.isfinite(v.observed)))


def main(argv=None, log=print):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--hidden", type=int, default=2)
    ap.add_argument("--l2", type=float, default=0.5, help="lambda of the prior on the weights")
    ap.add_argument("--vpc", type=int, default=200, help="VPC replicates")
    ap.add_argument("--plot", default=None)
    args = ap.parse_args(argv)
    data = pk.theophylline()
    m0 = classical.classical_model()
    f0 = pk.fit(m0, data)
    t0 = time.perf_counter()
    model, weights = hybrid_model(args.hidden)
    log(f"hybrid model generated in {time.perf_counter() - t0:.1f} s ({model.sens.size} ODEs)")
    fits = []
    for seed in args.seeds:
        f = pk.fit(model, data, x0=start(model, weights, seed), l2={w: args.l2 for w in weights})
        fits.append(f)
        log(
            f"  seed {seed}: OFV {f.ofv:.3f} (+ prior {f.penalty:.3f}), {f.message} "
            f"{f.n_evaluations} evaluations, {f.seconds:.1f} s"
        )
    best = min(fits, key=lambda f: f.ofv + f.penalty)
    rows = {}
    for name, m, f in (("classical", m0, f0), ("hybrid", model, best)):
        v = pk.vpc(m, data, f, n_sim=args.vpc, seed=0)
        rows[name] = {
            "ofv": f.ofv,
            "k": m.size,
            "aic": f.ofv + 2 * m.size,
            "typical": typical(f),
            "omega_cv": f.omega_cv(),
            "add": f.sd["add"],
            "vpc_misses": vpc_misses(v),
            "vpc_cells": int(np.sum(np.isfinite(v.observed))),
            "vpc": v,
        }
    for name, r in rows.items():
        ka, cl, vv = r["typical"]
        log(
            f"{name:9s}: OFV {r['ofv']:8.3f}, AIC {r['aic']:8.3f} (k = {r['k']}); ka {ka:.3f} 1/h, "
            f"CL {cl:.3f} L/h, V {vv:.2f} L; BSV {np.round(r['omega_cv'], 1)} %CV; add "
            f"{r['add']:.3f} mg/L; VPC: {r['vpc_misses']} of {r['vpc_cells']} observed "
            "percentiles outside the simulated 95% intervals"
        )
    spread = None
    if len(fits) > 1:
        tv = np.array([typical(f) for f in fits])
        spread = np.max(np.abs(tv / tv[0] - 1), axis=0)
        log(
            "typical values by seed (ka, CL, V): "
            + "; ".join(f"{s}: {np.round(t, 4)}" for s, t in zip(args.seeds, tv))
            + f"; largest relative difference {np.round(100 * spread, 2)} %"
        )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
        for ax, (name, r) in zip(axes, rows.items()):
            r["vpc"].plot(ax=ax)
            ax.set_title(f"{name}: OFV {r['ofv']:.1f}, AIC {r['aic']:.1f}")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        log(f"figure: {args.plot}")
    return rows, fits, spread, model


if __name__ == "__main__":
    main()
