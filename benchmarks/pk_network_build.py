"""Build time of a PK model with a network in its dynamics, from cold caches.

The model: Theophylline's one-compartment model whose absorption rate is
``ka depot exp(nn(depot / 320, eta_nn))``, ``nn`` a SimpleChain 2 -> H (tanh) -> 1 (``H``:
``--hidden``, default 5; 0: 2 -> 1 (tanh)) with a random effect as its second input
(DeepPumas style). Each round runs in a fresh process with empty caches (``NUMBA_CACHE_DIR``
and ``SCICHAINS_CACHE`` in a new temporary directory), and times: the model (SymPy expansion
of the network), the FOCE-I sensitivity system (``model.directional(2)``: SymPy generation
and numba compilation; with ``--laplace`` the third-order one as well) and the first OFV and
gradient on the first three subjects. ``import`` (the package's own kernels, compiled with
the cold cache) is listed apart and left out of the total. Prints the machine and the
median of ``--rounds`` rounds.

Usage: python benchmarks/pk_network_build.py [--hidden 5] [--rounds 1] [--laplace]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import sympy as sp
import scichains as sc
from scichains import pk
timings = {"import": time.perf_counter() - t0}
hidden, laplace = int(sys.argv[1]), sys.argv[2] == "1"
t0 = time.perf_counter()
depot, center, ka, cl, v, z = sp.symbols("depot center ka cl v z")
tka, tcl, tv = sp.symbols("tka tcl tv")
ecl, ev, enn = sp.symbols("eta_cl eta_v eta_nn")
if hidden:
    chain = sc.SimpleChain(2, sc.Dense(hidden, "tanh"), sc.Dense(1))
else:
    chain = sc.SimpleChain(2, sc.Dense(1, "tanh"))
w = chain.init_params(seed=0, dtype=np.float64) * 0.3
net = pk.Network(chain, [depot / 320, z], name="nn", weights=w)
rate = ka * depot * sp.exp(net[0])
model = pk.PKModel(
    states=[depot, center],
    odes=[-rate, rate - cl / v * center],
    individual={ka: sp.exp(tka), cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev), z: enn},
    theta={tka: 0.45, tcl: 1.0, tv: 3.45},
    eta=[ecl, ev, enn],
    omega=[0.1, 0.02, 0.5],
    observe=center / v,
    error=pk.Additive(0.7),
    networks=[net],
)
timings["model"] = time.perf_counter() - t0
t0 = time.perf_counter()
sys2 = model.directional(2)
timings["system2"] = time.perf_counter() - t0
sizes = {"system2": sys2.size}
if laplace:
    t0 = time.perf_counter()
    sizes["system3"] = model.directional(3).size
    timings["system3"] = time.perf_counter() - t0
data = pk.theophylline()
data = pk.EventData(data.subjects[:3], data.covariates)
t0 = time.perf_counter()
obj = pk.PopulationObjective(model, data, sensitivities="directions")
f, g = obj.value_and_grad(model.pack())
timings["first_ofv_grad"] = time.perf_counter() - t0
print(json.dumps({"timings": timings, "sizes": sizes, "ofv": f, "weights": model.p - 3}))
"""


def one_round(hidden: int, laplace: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=f"{tmp}/numba", SCICHAINS_CACHE=f"{tmp}/sc")
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(hidden), "1" if laplace else "0"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    import _machine as machine

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--laplace", action="store_true")
    args = ap.parse_args(argv)
    print(machine.describe())
    rounds = [one_round(args.hidden, args.laplace) for _ in range(args.rounds)]
    r0 = rounds[0]
    arch = f"2 -> {args.hidden} (tanh) -> 1" if args.hidden else "2 -> 1 (tanh)"
    print(f"network {arch}: {r0['weights']} weights; systems {r0['sizes']}")
    for key in r0["timings"]:
        vals = [r["timings"][key] for r in rounds]
        print(f"  {key:15s} median {statistics.median(vals):7.2f} s  (rounds: {vals})")
    total = [sum(v for k, v in r["timings"].items() if k != "import") for r in rounds]
    med = statistics.median(total)
    print(f"  total build     median {med:7.2f} s; OFV(3 subjects) {r0['ofv']:.6f}")


if __name__ == "__main__":
    main()
