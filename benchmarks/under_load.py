"""How the threaded kernels degrade when another process wants a core (issue 31, item 4).

Three workloads on two threads: the matrix-exponential training step (``benchmarks/matexp.py``:
10,000 samples, full batch, Adam, float32) and a LeNet5 training step (256 random 28x28
images, float32), both on the calling thread and a helper taking chunks of each step
(``nn/_chunked.py``), and one loss + gradient of the spiral neural ODE over 64 trajectories
(``NeuralODE`` defaults: lockstep blocks on the compiled driver, the caller and a helper
thread taking blocks). Each is timed in
rounds that alternate three conditions: idle; beside a **steady** neighbour (a process spinning
on the last CPU without pause); beside a **bursty** one (spinning ``--burst-ms`` then sleeping
as long, like a browser or an editor). Each round is the median of ``--calls`` calls; the
figure reported per condition is the median over ``--rounds`` rounds and its ratio to idle.
The issue's floors: at most 1.6x idle with a steady neighbour, 2x with a bursty one.

Two more workloads (not in the default list) time L-BFGS, the second stage of the UDE recipe:
20 iterations on the spiral neural ODE (one trajectory, 252 weights) through
``scichains.fit``'s ``LBFGS`` stage (``lbfgs``: SciPy's L-BFGS-B with one BLAS thread,
``scichains._blas``) and through ``scipy.optimize.minimize`` called directly
(``lbfgs_scipy``: the BLAS threads the process has), per iteration.

Environment variables that matter are printed (``NUMBA_NUM_THREADS``,
``NUMBA_THREADING_LAYER``, ``OMP_WAIT_POLICY``, ``OMP_NUM_THREADS``,
``SCICHAINS_PIN_THREADS``); set them before the run to compare (e.g.
``SCICHAINS_PIN_THREADS=0``).

Usage: python benchmarks/under_load.py [--rounds 5] [--calls 20] [--burst-ms 5]
       [--workloads matexp,lenet5,node,lbfgs,lbfgs_scipy]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _machine as machine  # noqa: E402

SPIN = """
import os, sys, time
cpu = int(sys.argv[1]); burst = float(sys.argv[2])
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {cpu})
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < (burst if burst > 0 else 3600.0):
        pass
    time.sleep(burst)
"""


class Neighbour:
    """A process spinning on the last CPU: steadily (``burst_s == 0``) or in bursts."""

    def __init__(self, burst_s: float):
        cpu = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
        self.proc = subprocess.Popen([sys.executable, "-c", SPIN, str(cpu), str(burst_s)])
        time.sleep(0.2)  # started and spinning

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def matexp_step():
    import _matexp_data as data

    import scichains as sc

    X, Y, _, _ = data.dataset()
    chain = data.model()
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    p = chain.init_params(seed=0, dtype=np.float32)
    opt = sc.Adam(1e-3)
    sc.train_unbatched(p, cwl, X, opt, 2)  # compile
    return lambda: sc.train_unbatched(p, cwl, X, opt, 10), 10


def lenet5_step():
    import lenet5

    import scichains as sc

    rng = np.random.default_rng(0)
    X = rng.random((256, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 256)
    chain = lenet5.lenet5()
    cwl = chain.add_loss(sc.LogitCrossEntropyLoss(y))
    p = chain.init_params(seed=0)
    opt = sc.Adam(3e-4)
    sc.train_unbatched(p, cwl, X, opt, 1)  # compile
    return lambda: sc.train_unbatched(p, cwl, X, opt, 2), 2


def node_gradient():
    import neural_ode as spiral

    from scichains.models import NeuralODE

    u0 = spiral.many_u0(64)
    data = np.stack([spiral.truth(u) for u in u0])
    chain = spiral.model()
    p = chain.init_params(seed=0, dtype=np.float64)
    node = NeuralODE(chain, spiral.TSPAN, spiral.SAVEAT, rtol=spiral.RTOL, atol=spiral.ATOL)
    node.loss_and_grad(u0, p, data)  # compile
    return lambda: node.loss_and_grad(u0, p, data), 1


def _spiral_lbfgs_problem():
    import neural_ode as spiral

    from scichains.models import NeuralODE

    u0 = np.array(spiral.U0, dtype=np.float64)
    data = spiral.truth(u0)
    chain = spiral.model()
    p0 = chain.init_params(seed=0, dtype=np.float64)
    node = NeuralODE(chain, spiral.TSPAN, spiral.SAVEAT, rtol=spiral.RTOL, atol=spiral.ATOL)
    return (lambda q: node.loss_and_grad(u0, q, data)[:2]), p0


LBFGS_ITERS = 20


def lbfgs_stage():
    """20 iterations of ``scichains.fit``'s L-BFGS stage (one BLAS thread) on the spiral."""
    import scichains as sc

    fun, p0 = _spiral_lbfgs_problem()

    def run():
        res = sc.fit(fun, p0.copy(), sc.LBFGS(LBFGS_ITERS, gtol=0.0), progress=False)
        assert res.stages[0]["nit"] == LBFGS_ITERS, res.stages[0]

    run()  # compile
    return run, LBFGS_ITERS


def lbfgs_scipy():
    """The same 20 iterations by ``scipy.optimize.minimize`` called directly (BLAS threads as
    the process has them), the peer of ``lbfgs``."""
    import scipy.optimize

    fun, p0 = _spiral_lbfgs_problem()
    opts = {"maxiter": LBFGS_ITERS, "gtol": 0.0, "ftol": 0.0}

    def run():
        res = scipy.optimize.minimize(fun, p0.copy(), jac=True, method="L-BFGS-B", options=opts)
        assert res.nit == LBFGS_ITERS, res.message

    run()
    return run, LBFGS_ITERS


WORKLOADS = {
    "matexp": matexp_step,
    "lenet5": lenet5_step,
    "node": node_gradient,
    "lbfgs": lbfgs_stage,
    "lbfgs_scipy": lbfgs_scipy,
}


def one_round(fn, per: int, calls: int) -> float:
    """Median seconds per step (``fn`` runs ``per`` steps) over ``calls`` calls."""
    runs = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) / per)
    return float(np.median(runs))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--burst-ms", type=float, default=5.0)
    ap.add_argument("--workloads", default="matexp,lenet5,node")
    args = ap.parse_args(argv)
    import numba

    print(machine.describe())
    env = (
        "NUMBA_NUM_THREADS",
        "NUMBA_THREADING_LAYER",
        "OMP_WAIT_POLICY",
        "OMP_NUM_THREADS",
        "SCICHAINS_PIN_THREADS",
    )
    print("environment: " + ", ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in env))
    print(f"numba threads {numba.get_num_threads()}, layer in use: ", end="")
    for name in args.workloads.split(","):
        fn, per = WORKLOADS[name]()
        if name == args.workloads.split(",")[0]:
            print(numba.threading_layer())
        times = {"idle": [], "steady": [], "bursty": []}
        for _ in range(args.rounds):
            for cond in times:
                nb = None
                if cond != "idle":
                    nb = Neighbour(0.0 if cond == "steady" else args.burst_ms / 1e3)
                try:
                    times[cond].append(one_round(fn, per, args.calls))
                finally:
                    if nb is not None:
                        nb.stop()
        idle = np.median(times["idle"])
        line = [f"{name}: idle {idle * 1e3:.3f} ms per step"]
        for cond in ("steady", "bursty"):
            t = np.median(times[cond])
            line.append(f"{cond} {t * 1e3:.3f} ms ({t / idle:.2f}x)")
        print(", ".join(line) + f"  [median of {args.rounds} rounds x {args.calls} calls]")


if __name__ == "__main__":
    main()
