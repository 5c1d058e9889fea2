"""The bootstrap floor of issue 29: 200 Theophylline resamples refitted by FOCE-I on 2 Dask
workers at least 1.6x faster than on 1, with identical results for any worker count.

nlmixr2's one-compartment model (``pk_focei.py``), fitted once here; then ``pk.bootstrap(n=200,
seed=0)`` on ``LocalCluster(n_workers=k, threads_per_worker=1, processes=True)`` for k = 1
and 2, one cluster at a time (each first warmed by an untimed 4-resample bootstrap: the
workers build and compile the model). ``--local`` also times the refits in this process
(``executor=None``). Prints the machine, each run's wall time (``Bootstrap.seconds``), the
ratio, whether every resample's estimated vector and status agree bit for bit across the
runs, and the percentile intervals.

Usage: python benchmarks/pk_bootstrap.py [--n 200] [--local]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine as machine  # noqa: E402
from pk_focei import theophylline_model  # noqa: E402

from scichains import pk  # noqa: E402


def same(a, b) -> bool:
    return np.array_equal(a.x, b.x, equal_nan=True) and list(a.status) == list(b.status)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--local", action="store_true")
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    print(machine.describe())
    model, data = theophylline_model(), pk.theophylline()
    fit = pk.fit(model, data)
    print(f"fit: OFV {fit.ofv:.3f} ({fit.seconds:.2f} s)")
    runs = {}
    for k in (1, 2):
        cluster = LocalCluster(
            n_workers=k, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        client = Client(cluster)
        try:
            pk.bootstrap(model, data, fit, n=4, seed=1, executor=client, progress=False)
            runs[k] = pk.bootstrap(model, data, fit, n=args.n, seed=0, executor=client,
                                   progress=False)  # fmt: skip
        finally:
            client.close()
            cluster.close()
        b = runs[k]
        print(
            f"{k} worker(s): {b.seconds:.1f} s for {b.n} resamples "
            f"({b.seconds / b.n:.2f} s each), {b.n_failed} failed, {b.n_unconverged} unconverged"
        )
    if args.local:
        runs["here"] = pk.bootstrap(model, data, fit, n=args.n, seed=0, progress=False)
        print(f"in this process: {runs['here'].seconds:.1f} s")
    print(f"ratio 1 worker / 2 workers: {runs[1].seconds / runs[2].seconds:.2f}x (floor 1.6x)")
    print("identical for 1 and 2 workers:", same(runs[1], runs[2]))
    if "here" in runs:
        print("identical to the run in this process:", same(runs[1], runs["here"]))
    b = runs[2]
    for name, lo, hi, se in zip(b.names, b.low, b.high, b.se):
        print(f"  {name:>14}: 95% [{lo:.4f}, {hi:.4f}]  SE {se:.4f}")


if __name__ == "__main__":
    main()
