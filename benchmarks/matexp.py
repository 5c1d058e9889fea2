"""The SimpleChains.jl blog benchmark: learn the 2x2 matrix exponential with a small MLP.

4 -> Dense(32, tanh) -> Dense(16, tanh) -> Dense(4), 10,000 training samples, full batch,
Adam(1e-3), squared loss (mean over samples); three rounds of 10,000 iterations, printing the
time of each round and the train/test loss after it. Then: GFLOP/s (multiply-adds of forward
and backward, 2 flop each), the fraction of this machine's FP32 peak (measured at the end of the
run by ``_peak.py``: independent FMAs on the widest vectors, all threads), time to the first step in
a fresh process (warm cache, and with --compile-times a cold cache too), the single-vector
forward+vjp time of a 2 -> 50 (tanh) -> 2 chain, and with --peers the PyTorch/JAX versions in
benchmarks/peers/ run side by side.

Usage: python benchmarks/matexp.py [--iters 10000] [--rounds 3] [--threads 2] [--peers]
       [--compile-times]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _machine as machine  # noqa: E402
import _matexp_data as data  # noqa: E402
import _peak  # noqa: E402
from _fresh import seconds_in_fresh_process  # noqa: E402

FIRST_STEP = """
import time; t0 = time.perf_counter()
import numpy as np, scichains as sc
chain = sc.SimpleChain(4, sc.Dense(32, "tanh"), sc.Dense(16, "tanh"), sc.Dense(4))
X = np.random.default_rng(0).standard_normal((10000, 4)).astype(np.float32)
cwl = chain.add_loss(sc.SquaredLoss(X))
p = chain.init_params()
sc.train_unbatched(p, cwl, X, sc.Adam(), 1)
print(time.perf_counter() - t0)
"""


def first_step_seconds(cache_dir=None) -> float:
    return seconds_in_fresh_process(FIRST_STEP, cache_dir)


def single_vector_ns(reps: int = 200_000) -> dict:
    """Median ns per call of chain_forward and chain_vjp (which includes the forward pass) on
    a 2 -> 50 (tanh) -> 2 chain, called in a loop from @njit code, per dtype."""
    import numba

    import scichains as sc
    from scichains import nn

    @numba.njit
    def loop(k, p, x, v, out, xb, pb, reps, with_vjp):
        s = 0.0
        for _ in range(reps):
            x[0] += 1e-9
            if with_vjp:
                nn.chain_vjp(k, p, x, v, xb, pb)  # runs the forward pass too
                s += xb[0]
            else:
                nn.chain_forward(k, p, x, out)
                s += out[0]
        return s

    chain = sc.SimpleChain(2, sc.Dense(50, "tanh"), sc.Dense(2))
    res = {}
    for dtype in (np.float32, np.float64):
        p = chain.init_params(dtype=dtype)
        k = chain.kernel(dtype)
        x = np.array([0.3, -0.2], dtype)
        v = np.ones(2, dtype)
        out, xb, pb = np.zeros(2, dtype), np.zeros(2, dtype), np.zeros_like(p)
        for with_vjp in (False, True):
            loop(k, p, x, v, out, xb, pb, 10, with_vjp)
            ts = []
            for _ in range(7):
                t0 = time.perf_counter()
                loop(k, p, x, v, out, xb, pb, reps, with_vjp)
                ts.append((time.perf_counter() - t0) / reps * 1e9)
            res[(np.dtype(dtype).name, with_vjp)] = float(np.median(ts))
    return res


def run_peer(script: str, iters: int, threads: int) -> list[tuple[str, float]]:
    """Run a peer script; it prints lines 'RESULT <name> <seconds per 10k steps>'."""
    try:
        out = subprocess.run(
            [
                sys.executable,
                str(HERE / "peers" / script),
                "--iters",
                str(iters),
                "--threads",
                str(threads),
            ],
            capture_output=True,
            text=True,
            timeout=3600,
        )
    except subprocess.TimeoutExpired:
        return []
    results = []
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            _, name, sec = line.split()[:3]
            results.append((name, float(sec)))
        elif line.startswith("SKIP "):
            print(f"  {script}: {line[5:]}")
    if out.returncode != 0 and not results:
        print(f"  {script} failed: {out.stderr.strip().splitlines()[-1:]}")
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--peers", action="store_true", help="also run PyTorch/JAX if installed")
    ap.add_argument("--peer-iters", type=int, default=2_000)
    ap.add_argument("--compile-times", action="store_true", help="measure a cold cache too")
    args = ap.parse_args(argv)

    import numba

    import scichains as sc
    from scichains import nn

    threads = args.threads or numba.config.NUMBA_NUM_THREADS
    X, Y, Xt, Yt = data.dataset()
    N = X.shape[0]
    chain = data.model()
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p = chain.init_params(seed=0, dtype=np.float32)
    opt = sc.Adam(1e-3)
    print(
        f"scichains matrix-exponential benchmark: {chain.num_params} parameters, N = {N}, "
        f"full batch, Adam(1e-3), float32, {threads} thread(s)"
    )
    print(machine.describe())
    t0 = time.perf_counter()
    sc.train_unbatched(p, cwl, X, opt, 1, threads=threads)
    print(
        f"first call in this process (compile or cache load + 1 step): "
        f"{time.perf_counter() - t0:.2f} s"
    )
    round_times = []
    for r in range(args.rounds):
        t0 = time.perf_counter()
        sc.train_unbatched(p, cwl, X, opt, args.iters, threads=threads)
        dt = time.perf_counter() - t0
        round_times.append(dt)
        ltr = nn.evaluate_loss(cwl, X, p)
        lte = nn.evaluate_loss(cwl, Xt, p, targets=Yt)
        print(
            f"round {r + 1}: {args.iters} iterations in {dt:.2f} s "
            f"({dt / args.iters * 1e3:.3f} ms/step); train loss {ltr:.5f}, test loss {lte:.5f}"
        )
    med = float(np.median(round_times))
    per10k = med / args.iters * 10_000
    gflops = data.MACS_STEP * 2 * N * args.iters / med / 1e9
    peak, how = _peak.describe_peak(threads)  # measured now, on this machine
    print(how)
    print(
        f"median: {per10k:.2f} s per 10,000 iterations; {gflops:.1f} GFLOP/s "
        f"({data.MACS_STEP} multiply-adds per sample and step) = {100 * gflops / peak:.0f}% "
        f"of the measured FP32 peak of {threads} thread(s), {peak:.0f} GFLOP/s"
    )

    warm = first_step_seconds(None)
    print(f"time to first step, fresh process, warm cache: {warm:.2f} s")
    if args.compile_times:
        with tempfile.TemporaryDirectory() as d:
            cold = first_step_seconds(d)
        print(f"time to first step, fresh process, cold cache: {cold:.2f} s")
    sv = single_vector_ns()
    for dt in ("float32", "float64"):
        print(
            f"single vector, 2 -> 50 (tanh) -> 2, {dt}, called from @njit code: forward "
            f"{sv[(dt, False)]:.0f} ns, forward + vjp {sv[(dt, True)]:.0f} ns"
        )

    if args.peers:
        print(
            f"\npeers ({args.peer_iters} iterations each, same data, initial weights, loss, "
            f"optimizer; {threads} thread(s)); seconds per 10,000 iterations:"
        )
        rows = [("scichains", per10k)]
        for script in ("matexp_torch.py", "matexp_jax.py"):
            rows += run_peer(script, args.peer_iters, threads)
        for name, sec in rows:
            print(f"  {name:<24s} {sec:8.2f} s   ratio to scichains {sec / per10k:6.2f}x")


if __name__ == "__main__":
    main()
