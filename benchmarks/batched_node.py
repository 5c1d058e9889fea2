"""Neural ODEs over batches of trajectories: scichains' defaults against diffrax + ``jax.vmap``
and torchdiffeq, the same problems, data, initial weights and tolerances.

One loss + gradient (sum over the trajectories and 30 save points of the squared error,
gradient with respect to the network's weights), float64, rtol 1e-6, atol 1e-8, for batches of
1, 16, 64 and 256 trajectories of three models:

- ``spiral``: n = 2, ``2 -> cube -> 50 tanh -> 2`` (252 weights), the data the spiral truth
  du/dt = (u^3) A from initial states around [2, 0] (``neural_ode.many_u0``);
- ``n16``: n = 16, ``16 -> 64 tanh -> 16`` (2,128 weights);
- ``n64``: n = 64, ``64 -> 32 tanh -> 64`` (4,192 weights); for these two the data come from a
  stable linear system du/dt = A u (a random rotation plus damping, seeded), exact by ``expm``.

Every library starts from scichains' ``init_params(seed=0)`` weights (copied into the peers'
layers) and reports its loss, so that they can be seen to agree (they differ at the
tolerance's level: each library takes its own steps). scichains: ``NeuralODE`` with its
defaults (Tsit5, discrete adjoint, ``lockstep="auto"``: the block size it picks is printed) on
numba's threads (2 here). diffrax: Tsit5 with a PID controller, ``RecursiveCheckpointAdjoint``
and ``BacksolveAdjoint``, the faster of the two reported, ``jax.vmap`` over the batch (each
trajectory with its own step sizes), jitted, XLA on the same threads. torchdiffeq: dopri5 (it
has no Tsit5) on the batch as one tensor (one step size, its RMS norm over the whole batch),
back-propagation through the solver and ``odeint_adjoint``, the faster reported. Medians of
at least ``--reps`` calls and half a second each, after a first call that compiles; each peer
runs in a process of its own (``PEER_THREADS``, default 2: pinned to that many CPUs).

Usage: python benchmarks/batched_node.py [--reps 5] [--models spiral,n16,n64]
       [--batches 1,16,64,256] [--peers diffrax,torch]
(peers missing from the environment are reported as SKIP).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _machine as machine  # noqa: E402

RTOL, ATOL = 1e-6, 1e-8
TSPAN = (0.0, 1.5)
SAVEAT = np.linspace(0.0, 1.5, 30)
MODELS = {"spiral": (2, 50), "n16": (16, 64), "n64": (64, 32)}  # state size, hidden width


def chain_of(name: str):
    """The scichains chain of model ``name``."""
    import scichains as sc

    n, h = MODELS[name]
    if name == "spiral":
        return sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(h, "tanh"), sc.Dense(2))
    return sc.SimpleChain(n, sc.Dense(h, "tanh"), sc.Dense(n))


def problem(name: str, m: int):
    """``(u0 (m, n), data (m, 30, n), [(W1, b1), (W2, b2)])``: the batch, its data and the
    initial weights (scichains' ``init_params(seed=0)``), the same for every library."""
    chain = chain_of(name)
    p = chain.init_params(seed=0, dtype=np.float64)
    v = chain.params(p)
    layers = [(v[i]["W"].copy(), v[i]["b"].copy()) for i in range(len(v)) if "W" in v[i]]
    if name == "spiral":
        import neural_ode as spiral

        u0 = spiral.many_u0(m) if m > 1 else spiral.U0[None, :].copy()
        data = np.stack([spiral.truth(u) for u in u0])
        return u0, data, layers
    from scipy.linalg import expm

    n = MODELS[name][0]
    rng = np.random.default_rng(n)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    skew = q @ np.kron(np.eye(n // 2), [[0.0, 2.0], [-2.0, 0.0]]) @ q.T
    a = skew - 0.3 * np.eye(n)
    u0 = rng.standard_normal((m, n))
    data = np.stack([[expm(a * t) @ u for t in SAVEAT] for u in u0])
    return u0, data, layers


def timed(fn, reps: int) -> tuple[float, int]:
    """Median seconds of ``fn()`` over at least ``reps`` calls and 0.5 s, and the count."""
    runs = []
    start = time.perf_counter()
    while len(runs) < reps or time.perf_counter() - start < 0.5:
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return float(np.median(runs)), len(runs)


def run_scichains(name: str, m: int, reps: int) -> dict:
    from scichains.models import NeuralODE

    u0, data, _ = problem(name, m)
    chain = chain_of(name)
    p = chain.init_params(seed=0, dtype=np.float64)
    node = NeuralODE(chain, TSPAN, SAVEAT, rtol=RTOL, atol=ATOL)
    args = (u0[0], p, data[0]) if m == 1 else (u0, p, data)
    t0 = time.perf_counter()
    loss, _ = node.loss_and_grad(*args)
    first = time.perf_counter() - t0
    sec, count = timed(lambda: node.loss_and_grad(*args), reps)
    return dict(loss=float(loss), sec=sec, count=count, first=first, how=_how(node, m))


def _how(node, m: int) -> str:
    k = node.lockstep_size(m) if m > 1 else None
    return "alone" if k is None else f"lockstep {k}"


def run_diffrax(name: str, m: int, reps: int) -> dict:
    import diffrax
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    u0, data, layers = problem(name, m)
    prm = tuple(jnp.asarray(a) for wb in layers for a in wb)
    cube = name == "spiral"
    ts = jnp.asarray(SAVEAT)

    def f(t, u, prm):
        w1, b1, w2, b2 = prm
        x = u**3 if cube else u
        return w2 @ jnp.tanh(w1 @ x + b1) + b2

    y0s, targets = jnp.asarray(u0), jnp.asarray(data)
    best = None
    for name, adjoint in (
        ("checkpoint", diffrax.RecursiveCheckpointAdjoint()),
        ("backsolve", diffrax.BacksolveAdjoint()),
    ):

        def one(prm, y0, target, adjoint=adjoint):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(f),
                diffrax.Tsit5(),
                t0=ts[0],
                t1=ts[-1],
                dt0=None,
                y0=y0,
                args=prm,
                saveat=diffrax.SaveAt(ts=ts),
                stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL),
                adjoint=adjoint,
                max_steps=100_000,
            )
            return jnp.sum((sol.ys - target) ** 2)

        def loss(prm, one=one):
            return jnp.sum(jax.vmap(one, in_axes=(None, 0, 0))(prm, y0s, targets))

        vg = jax.jit(jax.value_and_grad(loss))
        t0 = time.perf_counter()
        value, _ = jax.block_until_ready(vg(prm))
        first = time.perf_counter() - t0
        sec, count = timed(lambda vg=vg: jax.block_until_ready(vg(prm)), reps)
        if best is None or sec < best["sec"]:
            how = f"vmap {name}"
            best = dict(loss=float(value), sec=sec, count=count, first=first, how=how)
    return best


def run_torch(name: str, m: int, reps: int) -> dict:
    import torch
    from torchdiffeq import odeint, odeint_adjoint

    u0, data, layers = problem(name, m)
    cube = name == "spiral"

    class F(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.from_numpy(a.copy())) for wb in layers for a in wb]
            )

        def forward(self, t, u):
            w1, b1, w2, b2 = self.w
            x = u**3 if cube else u
            return torch.tanh(x @ w1.T + b1) @ w2.T + b2

    f = F()
    ts = torch.from_numpy(SAVEAT)
    y0, target = torch.from_numpy(u0), torch.from_numpy(data.transpose(1, 0, 2).copy())

    best = None
    for name, solve in (("backprop", odeint), ("adjoint", odeint_adjoint)):

        def call(solve=solve):
            f.zero_grad()
            ys = solve(f, y0, ts, rtol=RTOL, atol=ATOL, method="dopri5")
            loss = ((ys - target) ** 2).sum()
            loss.backward()
            return float(loss)

        t0 = time.perf_counter()
        value = call()
        first = time.perf_counter() - t0
        sec, count = timed(call, reps)
        if best is None or sec < best["sec"]:
            best = dict(loss=value, sec=sec, count=count, first=first, how=f"batch {name}")
    return best


def _confine(threads: int) -> None:
    """Pin this process to ``threads`` CPUs and set the peers' thread counts (before they are
    imported)."""
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) > threads:
            os.sched_setaffinity(0, set(cpus[:threads]))
    flags = [f"--xla_cpu_multi_thread_eigen={'false' if threads == 1 else 'true'}"]
    flags.append(f"intra_op_parallelism_threads={threads}")
    os.environ["XLA_FLAGS"] = " ".join(flags + [os.environ.get("XLA_FLAGS", "")]).strip()
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def worker(lib: str, models: list[str], batches: list[int], reps: int) -> None:
    """One library's grid, a JSON line per case (``{"skip": why}`` when it is missing)."""
    if lib != "scichains":
        _confine(int(os.environ.get("PEER_THREADS", "2")))
    try:
        run = {"scichains": run_scichains, "diffrax": run_diffrax, "torch": run_torch}[lib]
        if lib == "diffrax":
            import diffrax  # noqa: F401
        if lib == "torch":
            import torch
            import torchdiffeq  # noqa: F401

            torch.set_num_threads(int(os.environ.get("PEER_THREADS", "2")))
    except ImportError as e:
        print(json.dumps({"lib": lib, "skip": str(e)}), flush=True)
        return
    for name in models:
        for m in batches:
            out = run(name, m, reps)
            print(json.dumps({"lib": lib, "model": name, "m": m, **out}), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--models", default="spiral,n16,n64")
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--peers", default="diffrax,torch")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    models = [s for s in args.models.split(",") if s]
    batches = [int(s) for s in args.batches.split(",") if s]
    if args.worker:
        worker(args.worker, models, batches, args.reps)
        return
    print(machine.describe())
    print(f"float64, Tsit5 (torchdiffeq: dopri5), rtol {RTOL}, atol {ATOL}, 30 save points")
    results = {}
    for lib in ["scichains"] + [s for s in args.peers.split(",") if s]:
        cmd = [sys.executable, __file__, "--worker", lib, "--reps", str(args.reps)]
        cmd += ["--models", args.models, "--batches", args.batches]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        for line in proc.stdout.splitlines():
            r = json.loads(line)
            if "skip" in r:
                print(f"{lib}: SKIP ({r['skip']})")
                continue
            results[(lib, r["model"], r["m"])] = r
        if proc.returncode != 0:
            print(f"{lib} failed: {proc.stderr.strip().splitlines()[-1:]}")
    print(
        f"{'model':7s} {'m':>4s} {'library':10s} {'how':12s} {'ms':>9s} {'calls':>5s} "
        f"{'first s':>7s} {'loss':>14s} {'vs scichains':>12s}"
    )
    for name in models:
        for m in batches:
            ours = results.get(("scichains", name, m))
            for lib in ("scichains", "diffrax", "torch"):
                r = results.get((lib, name, m))
                if r is None:
                    continue
                ratio = f"{r['sec'] / ours['sec']:.2f}x" if ours and lib != "scichains" else ""
                print(
                    f"{name:7s} {m:4d} {lib:10s} {r['how']:12s} {r['sec'] * 1e3:9.3f} "
                    f"{r['count']:5d} {r['first']:7.1f} {r['loss']:14.8g} {ratio:>12s}"
                )


if __name__ == "__main__":
    main()
