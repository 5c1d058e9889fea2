"""JAX peer of benchmarks/matexp.py: same data, initial weights, loss and optimizer (Adam with
PyTorch's formula, written out). Prints 'RESULT <config> <seconds per 10,000 iterations>' for a
jitted update step called from Python and for lax.scan over the steps.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _matexp_data as data  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.threads == 1:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
        )
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("SKIP JAX not installed (pip install jax)")
        return
    X, Y, _, _ = data.dataset()
    N = X.shape[0]
    X, Y = jnp.asarray(X), jnp.asarray(Y)
    params = [(jnp.asarray(W), jnp.asarray(b)) for W, b in data.initial_weights()]
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 1e-3

    def loss_fn(params):
        h = X
        for i, (W, b) in enumerate(params):
            h = h @ W.T + b
            if i < len(params) - 1:
                h = jnp.tanh(h)
        r = h - Y
        return jnp.sum(r * r) / N

    def update(state, _):
        params, m, v, t = state
        loss, g = jax.value_and_grad(loss_fn)(params)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        step = lr / (1 - b1**t)
        bc2 = jnp.sqrt(1 - b2**t)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p - step * m / (jnp.sqrt(v) / bc2 + eps), params, m, v
        )
        return (params, m, v, t), loss

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state0 = (params, zeros, zeros, jnp.float32(0))

    step = jax.jit(update)
    state = state0
    for _ in range(20):
        state, loss = step(state, None)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    for _ in range(args.iters):
        state, loss = step(state, None)
    jax.block_until_ready(state)
    dt = time.perf_counter() - t0
    print(f"RESULT jax-jit {dt / args.iters * 10_000:.3f}  (loss {float(loss):.4f})")
    sys.stdout.flush()

    scan = jax.jit(lambda s: jax.lax.scan(update, s, None, length=args.iters))
    jax.block_until_ready(scan(state0))  # compile
    t0 = time.perf_counter()
    state, losses = scan(state0)
    jax.block_until_ready(state)
    dt = time.perf_counter() - t0
    print(f"RESULT jax-jit-scan {dt / args.iters * 10_000:.3f}  (loss {float(losses[-1]):.4f})")


if __name__ == "__main__":
    main()
