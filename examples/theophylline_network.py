"""Theophylline with a network in the dynamics: DeepPumas-style absorption, by FOCE-I.

The classical model (examples/theophylline.py) absorbs at the rate ``ka depot``. Here the
absorption flux is ``ka depot exp(nn(t / 10, eta_ka) - nn(0, eta_ka))``: a
:class:`scichains.pk.Network` (a ``SimpleChain`` 2 -> H (tanh) -> 1 (tanh), no output
bias) whose inputs are the time since the dose and the subject's random effect on ``ka``,
so the shape of the absorption over time differs between subjects through their random
effect (as DeepPumas feeds random effects into networks). The output's tanh bounds the
factor in (exp(-2), exp(2)): without it the line search visits weights where the factor is
huge and the ODE stiff (explicit steps by the hundred thousand).

The network is anchored at ``t = 0`` (``Network(..., anchor={t: 0})``): its term is zero at
the dose whatever the weights and whatever ``eta_ka``, so ``ka = exp(tka + eta_ka)`` stays
the absorption rate constant at the dose (the identifiability aid), and zero weights give
the classical model exactly. The weights are typical values of the model with an L2 prior
``lambda sum w^2`` (``pk.fit(l2={"nn": lambda})``); FOCE-I with the exact gradient (the
sensitivities of the network's SymPy expansion along the random effects and the typical
values); CL, V, the random effects, the residual error and the data are those of the
classical model, whose estimates start the hybrid.

The script fits the classical model and the hybrid from two seeds of the initial weights,
and prints OFV, AIC = OFV + 2 k (k: estimated parameters, weights included; the prior is not
in the OFV), the typical values of each seed and their largest relative difference, the
build time of the hybrid's compiled sensitivity system and each fit's time.

python examples/theophylline_network.py [--seeds 0 1] [--hidden 3] [--l2 1.0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import sympy as sp
import theophylline as classical

import scichains as sc
from scichains import pk


def network_model(hidden: int = 3, seed: int = 0, scale: float = 0.3) -> pk.PKModel:
    """The hybrid: initial weights ``scale * chain.init_params(seed)``; the other initial
    values are the classical model's."""
    depot, center, ka, cl, v, t, z = sp.symbols("depot center ka cl v t z")
    tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
    chain = sc.SimpleChain(2, sc.Dense(hidden, "tanh"), sc.Dense(1, "tanh", bias=False))
    w = scale * chain.init_params(seed=seed, dtype=np.float64)
    net = pk.Network(chain, [t / 10, z], name="nn", weights=w, anchor={t: 0})
    rate = ka * depot * sp.exp(net[0])
    return pk.PKModel(
        states=[depot, center],
        odes=[-rate, rate - cl / v * center],
        individual={ka: sp.exp(tka + eka), cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev), z: eka},
        theta={tka: 0.45, tcl: 1.0, tv: 3.45},
        eta=[eka, ecl, ev],
        omega=[0.6, 0.3, 0.1],
        observe=center / v,
        error=pk.Additive(0.7),
        networks=[net],
        t=t,
    )


def start(model: pk.PKModel, classical_fit: pk.FitResult) -> np.ndarray:
    """The hybrid's initial vector: the classical estimates and the model's initial weights."""
    x0 = model.pack()
    x0[:3] = classical_fit.x[:3]
    x0[model.p :] = classical_fit.x[3:]  # omega and the residual error
    return x0


def typical(fit: pk.FitResult) -> np.ndarray:
    """ka (1/h, at the dose), CL (L/h), V (L)."""
    return np.exp([fit.theta["tka"], fit.theta["tcl"], fit.theta["tv"]])


def main(argv=None, log=print):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--hidden", type=int, default=3)
    ap.add_argument("--l2", type=float, default=1.0, help="lambda of the prior on the weights")
    ap.add_argument("--method", default="focei", choices=["focei", "laplace"])
    args = ap.parse_args(argv)
    data = pk.theophylline()
    m0 = classical.classical_model()
    f0 = pk.fit(m0, data, method=args.method)
    fits, models = [], []
    for seed in args.seeds:
        t0 = time.perf_counter()
        model = network_model(args.hidden, seed=seed)
        system = model.directional(3 if args.method == "laplace" else 2)
        build = time.perf_counter() - t0
        f = pk.fit(model, data, method=args.method, x0=start(model, f0), l2={"nn": args.l2})
        fits.append(f)
        models.append(model)
        log(
            f"  seed {seed}: built in {build:.1f} s ({system.size} ODEs); OFV {f.ofv:.3f} "
            f"(+ prior {f.penalty:.3f}), {f.message} (status {f.status}), "
            f"{f.n_evaluations} evaluations, {f.seconds:.1f} s"
        )
    best = int(np.argmin([f.ofv + f.penalty for f in fits]))
    rows = {}
    for name, m, f in (("classical", m0, f0), ("network", models[best], fits[best])):
        rows[name] = {
            "ofv": f.ofv,
            "k": m.size,
            "aic": f.ofv + 2 * m.size,
            "typical": typical(f),
            "omega_cv": f.omega_cv(),
            "add": f.sd["add"],
            "seconds": f.seconds,
        }
    for name, r in rows.items():
        ka, cl, vv = r["typical"]
        log(
            f"{name:9s}: OFV {r['ofv']:8.3f}, AIC {r['aic']:8.3f} (k = {r['k']}); ka {ka:.3f} 1/h, "
            f"CL {cl:.3f} L/h, V {vv:.2f} L; BSV {np.round(r['omega_cv'], 1)} %CV; add "
            f"{r['add']:.3f} mg/L; fit {r['seconds']:.1f} s"
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
    return rows, fits, spread, models


if __name__ == "__main__":
    main()
