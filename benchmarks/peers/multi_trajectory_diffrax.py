"""diffrax peer of the many-trajectory line of benchmarks/neural_ode.py: the spiral neural ODE
from 16 initial conditions (``neural_ode.many_u0``), one loss + gradient summed over them, the
16 solves batched by ``jax.vmap``; float64, Tsit5, the same tolerances and initial weights.

Prints the median ms of one jitted loss + gradient (after the first, compiling call) and the
compile time; 'SKIP ...' when jax or diffrax is not installed. ``PEER_THREADS`` (default 2):
the process is confined to that many CPUs (``os.sched_setaffinity``, where the system has it)
and XLA's intra-op threads to as many; 1 also turns off Eigen's threading.

Usage: python benchmarks/peers/multi_trajectory_diffrax.py [--reps 100] [--m 16]
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _confine(threads: int) -> str:
    """Pin the process to ``threads`` CPUs and set XLA's flags before jax is imported; a
    description of what was done."""
    done = "not pinned"
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) > threads:
            os.sched_setaffinity(0, set(cpus[:threads]))
        done = f"pinned to CPUs {sorted(os.sched_getaffinity(0))}"
    flags = [f"--xla_cpu_multi_thread_eigen={'false' if threads == 1 else 'true'}"]
    flags.append(f"intra_op_parallelism_threads={threads}")
    os.environ["XLA_FLAGS"] = " ".join(flags + [os.environ.get("XLA_FLAGS", "")]).strip()
    return done


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--m", type=int, default=16)
    args = ap.parse_args(argv)
    threads = int(os.environ.get("PEER_THREADS", "2"))
    pinned = _confine(threads)
    try:
        import diffrax
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("SKIP jax/diffrax not installed (pip install jax diffrax)")
        return
    import neural_ode as bench
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    u0 = bench.many_u0(args.m)
    data = np.stack([bench.truth(u) for u in u0])
    chain = bench.model()
    p = chain.init_params(seed=0, dtype=np.float64)
    v = chain.params(p)
    params = tuple(jnp.asarray(v[i][k]) for i in (1, 2) for k in ("W", "b"))
    ts = jnp.asarray(bench.SAVEAT)
    y0s = jnp.asarray(u0)
    targets = jnp.asarray(data)

    def f(t, u, prm):
        W1, b1, W2, b2 = prm
        return W2 @ jnp.tanh(W1 @ (u**3) + b1) + b2

    def one(prm, y0, target):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(f),
            diffrax.Tsit5(),
            t0=ts[0],
            t1=ts[-1],
            dt0=None,
            y0=y0,
            args=prm,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=bench.RTOL, atol=bench.ATOL),
            adjoint=diffrax.RecursiveCheckpointAdjoint(),
            max_steps=100_000,
        )
        return jnp.sum((sol.ys - target) ** 2)

    def loss(prm):
        return jnp.sum(jax.vmap(one, in_axes=(None, 0, 0))(prm, y0s, targets))

    vg = jax.jit(jax.value_and_grad(loss))
    t0 = time.perf_counter()
    value, _ = jax.block_until_ready(vg(params))
    compile_s = time.perf_counter() - t0
    runs = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        jax.block_until_ready(vg(params))
        runs.append(time.perf_counter() - t0)
    print(
        f"diffrax Tsit5 RecursiveCheckpoint float64, jax.vmap over {args.m} trajectories "
        f"({threads} threads, {pinned}): {np.median(runs) * 1e3:.3f} ms per loss + gradient "
        f"over {args.reps} calls (loss {float(value):.6g}; first call with compilation "
        f"{compile_s:.1f} s)"
    )


if __name__ == "__main__":
    main()
