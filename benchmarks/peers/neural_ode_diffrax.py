"""diffrax peer of benchmarks/neural_ode.py: same problem, tolerances and initial weights.

Prints one line per configuration: median ms of one jitted loss + gradient (after the first,
compiling call), and the compile time. 'SKIP ...' when diffrax is not installed.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    threads = os.environ.get("PEER_THREADS", "1")
    if threads == "1":
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    try:
        import diffrax
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("SKIP diffrax not installed (pip install diffrax)")
        return
    import neural_ode as bench
    import numpy as np

    data = bench.truth()
    chain = bench.model()
    p = chain.init_params(seed=0, dtype=np.float64)
    v = chain.params(p)
    for dtype, x64 in (("float64", True), ("float32", False)):
        jax.config.update("jax_enable_x64", x64)
        dt = jnp.float64 if x64 else jnp.float32
        params = (
            jnp.asarray(v[1]["W"], dt),
            jnp.asarray(v[1]["b"], dt),
            jnp.asarray(v[2]["W"], dt),
            jnp.asarray(v[2]["b"], dt),
        )
        ts = jnp.asarray(bench.SAVEAT, dt)
        y0 = jnp.asarray(bench.U0, dt)
        target = jnp.asarray(data, dt)

        def f(t, u, prm):
            W1, b1, W2, b2 = prm
            return W2 @ jnp.tanh(W1 @ (u**3) + b1) + b2

        for solver_name, solver in (("Tsit5", diffrax.Tsit5()), ("Dopri5", diffrax.Dopri5())):
            for adj_name, adj in (
                ("RecursiveCheckpoint", diffrax.RecursiveCheckpointAdjoint()),
                ("Backsolve", diffrax.BacksolveAdjoint()),
            ):
                if solver_name == "Dopri5" and adj_name == "Backsolve":
                    continue

                def loss(prm, solver=solver, adj=adj, ts=ts, y0=y0, target=target):
                    sol = diffrax.diffeqsolve(
                        diffrax.ODETerm(f),
                        solver,
                        t0=ts[0],
                        t1=ts[-1],
                        dt0=None,
                        y0=y0,
                        args=prm,
                        saveat=diffrax.SaveAt(ts=ts),
                        stepsize_controller=diffrax.PIDController(rtol=bench.RTOL, atol=bench.ATOL),
                        adjoint=adj,
                        max_steps=100_000,
                    )
                    return jnp.sum((sol.ys - target) ** 2)

                vg = jax.jit(jax.value_and_grad(loss))
                t0 = time.perf_counter()
                jax.block_until_ready(vg(params))
                compile_s = time.perf_counter() - t0
                runs = []
                for _ in range(100):
                    t0 = time.perf_counter()
                    jax.block_until_ready(vg(params))
                    runs.append(time.perf_counter() - t0)
                print(
                    f"diffrax {solver_name} {adj_name} {dtype} ({threads} thread): "
                    f"{np.median(runs) * 1e3:.3f} ms per loss + gradient "
                    f"(first call with compilation {compile_s:.1f} s)"
                )
                sys.stdout.flush()


if __name__ == "__main__":
    main()
