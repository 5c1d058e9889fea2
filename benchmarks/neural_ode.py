"""The spiral neural ODE (SciMLSensitivity's docs, torchdiffeq's demo): loss + gradient timing.

u0 = [2, 0]; the truth du/dt = (u^3) A with A = [[-0.1, 2.0], [-2.0, -0.1]] on [0, 1.5],
30 evenly spaced save points. Model: SimpleChain(2, Activation("cube"), Dense(50, "tanh"),
Dense(2)); loss: sum of squared differences over the save points; Tsit5, rtol 1e-6, atol 1e-8;
float64; gradients by the discrete adjoint. Prints the median time of one loss + gradient,
then 300 Adam steps (lr 0.05) with the final loss, then the time to the first gradient in a
fresh process (warm cache, and with --compile-times a cold one). Many trajectories: 16 initial
conditions ([2, 0] scaled and rotated), one loss + gradient over all of them (data: the truth from
each), threads 1 and 2, each trajectory solved alone and in lockstep blocks of 16 and 8
(``--only-trajectories`` runs those lines alone; the issue's floor: the 2-thread time >= 3x
faster than diffrax with ``jax.vmap`` over the 16, float64, same tolerances:
peers/multi_trajectory_diffrax.py). With --peers, runs peers/neural_ode_diffrax.py,
peers/neural_ode_torchdiffeq.py and peers/multi_trajectory_diffrax.py (PEER_THREADS=2) when
installed (with --only-trajectories, the last alone).

Usage: python benchmarks/neural_ode.py [--reps 200] [--peers] [--compile-times]
       [--only-trajectories]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _machine as machine  # noqa: E402
from _fresh import seconds_in_fresh_process  # noqa: E402

A_TRUE = np.array([[-0.1, 2.0], [-2.0, -0.1]])
U0 = np.array([2.0, 0.0])
TSPAN = (0.0, 1.5)
SAVEAT = np.linspace(0.0, 1.5, 30)
RTOL, ATOL = 1e-6, 1e-8


def many_u0(m: int = 16) -> np.ndarray:
    """``m`` initial conditions: [2, 0] rotated by ``2 pi i / m`` and scaled by 0.75 to 1.25."""
    angle = 2 * np.pi * np.arange(m) / m
    scale = np.linspace(0.75, 1.25, m)
    return 2.0 * scale[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)


def truth(u0=U0):
    from scipy.integrate import solve_ivp

    sol = solve_ivp(
        lambda t, u: (u**3) @ A_TRUE,
        TSPAN,
        u0,
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
        t_eval=SAVEAT,
    )
    return sol.y.T


def model():
    import scichains as sc

    return sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(50, "tanh"), sc.Dense(2))


FIRST_GRADIENT = """
import time; t0 = time.perf_counter()
import numpy as np, scichains as sc
from scichains.models import NeuralODE
chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(50, "tanh"), sc.Dense(2))
ts = np.linspace(0, 1.5, 30)
node = NeuralODE(chain, (0.0, 1.5), ts, rtol=1e-6, atol=1e-8)
p = chain.init_params(dtype=np.float64)
node.loss_and_grad(np.array([2.0, 0.0]), p, np.zeros((30, 2)))
print(time.perf_counter() - t0)
"""


def first_gradient(cache_dir=None) -> float:
    return seconds_in_fresh_process(FIRST_GRADIENT, cache_dir)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--compile-times", action="store_true")
    ap.add_argument("--only-trajectories", action="store_true")
    args = ap.parse_args(argv)

    import scichains as sc
    from scichains.models import NeuralODE

    data = truth()
    chain = model()
    p = chain.init_params(seed=0, dtype=np.float64)
    from scichains.adjoint import (
        BacksolveAdjoint,
        DiscreteAdjoint,
        ForwardSensitivity,
        InterpolatingAdjoint,
        QuadratureAdjoint,
    )

    if args.only_trajectories:
        many_trajectories(chain, p, args.reps)
        if args.peers:
            run_peers(["multi_trajectory_diffrax.py"], args.reps)
        return

    print(
        f"spiral neural ODE: {chain.num_params} parameters, Tsit5, rtol {RTOL}, atol {ATOL}, "
        f"{SAVEAT.size} save points, float64, 1 thread"
    )
    print(machine.describe())
    methods = (
        DiscreteAdjoint(),
        InterpolatingAdjoint(),
        QuadratureAdjoint(),
        BacksolveAdjoint(),
        ForwardSensitivity(),
        InterpolatingAdjoint(checkpointing=True),
    )
    for sensealg in methods:
        node = NeuralODE(chain, TSPAN, SAVEAT, rtol=RTOL, atol=ATOL, sensealg=sensealg)
        t0 = time.perf_counter()
        node.loss_and_grad(U0, p, data)
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            loss, g = node.loss_and_grad(U0, p, data)
            times.append(time.perf_counter() - t0)
        stats = node._obj.stats()
        extra = ""
        if "vjp_calls" in stats:
            extra = f", adjoint: {stats['adjoint_steps']} steps, {stats['vjp_calls']} vjps"
        name = type(sensealg).__name__
        if getattr(sensealg, "checkpointing", False):
            name += "(checkpointing=True)"
        print(
            f"{name}: loss + gradient median {np.median(times) * 1e3:.3f} ms "
            f"over {args.reps} calls ({stats['steps']} accepted steps forward{extra}); "
            f"first call in this process {first:.2f} s"
        )
    node = NeuralODE(chain, TSPAN, SAVEAT, rtol=RTOL, atol=ATOL, sensealg=DiscreteAdjoint())
    fwd = []
    for _ in range(args.reps):
        t1 = time.perf_counter()
        node.predict(U0, p)
        fwd.append(time.perf_counter() - t1)
    print(f"forward solve alone: median {np.median(fwd) * 1e3:.3f} ms")

    opt = sc.Adam(0.05)
    q = p.copy()
    t0 = time.perf_counter()
    for _ in range(300):
        loss, g = node.loss_and_grad(U0, q, data)
        opt.step(q, g)
    dt = time.perf_counter() - t0
    print(
        f"300 Adam(0.05) steps (DiscreteAdjoint): {dt:.2f} s; loss "
        f"{node.loss_and_grad(U0, p, data)[0]:.4f} -> {node.loss_and_grad(U0, q, data)[0]:.4f}"
    )
    many_trajectories(chain, p, args.reps)
    print(f"time to first gradient, fresh process, warm cache: {first_gradient(None):.2f} s")
    if args.compile_times:
        with tempfile.TemporaryDirectory() as d:
            print(f"time to first gradient, fresh process, cold cache: {first_gradient(d):.2f} s")
    if args.peers:
        run_peers(
            ["neural_ode_diffrax.py", "neural_ode_torchdiffeq.py", "multi_trajectory_diffrax.py"],
            args.reps,
        )


def run_peers(scripts, reps: int) -> None:
    """Run the peer scripts (same interpreter), printing their lines indented; the
    many-trajectory peer with ``--reps`` and ``PEER_THREADS=2`` unless set."""
    for script in scripts:
        cmd = [sys.executable, str(HERE / "peers" / script)]
        env = dict(os.environ)
        if script == "multi_trajectory_diffrax.py":
            cmd += ["--reps", str(reps)]
            env.setdefault("PEER_THREADS", "2")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
        for line in out.stdout.splitlines():
            print(f"  {line}")
        if out.returncode != 0:
            print(f"  {script} failed: {out.stderr.strip().splitlines()[-1:]}")


def many_trajectories(chain, p, reps: int, m: int = 16) -> None:
    """Median time of one loss + gradient over ``m`` trajectories, threads 1 and 2: each
    trajectory solved on its own, and in lockstep blocks (``NeuralODE(lockstep=k)``: the
    network on a block's states at once) of ``m`` and of ``m // 2``."""
    from scichains.adjoint import DiscreteAdjoint
    from scichains.models import NeuralODE

    u0 = many_u0(m)
    data = np.stack([truth(u) for u in u0])
    for lockstep in (None, m, m // 2):
        node = NeuralODE(
            chain,
            TSPAN,
            SAVEAT,
            rtol=RTOL,
            atol=ATOL,
            sensealg=DiscreteAdjoint(),
            lockstep=lockstep,
        )
        results = {}
        for threads in (1, 2):
            node.loss_and_grad(u0, p, data, threads=threads)  # compile, make the buffers
        times = {1: [], 2: []}
        for _ in range(reps):  # interleaved: a slow moment of the machine hits both
            for threads in (1, 2):
                t0 = time.perf_counter()
                loss, g = node.loss_and_grad(u0, p, data, threads=threads)
                times[threads].append(time.perf_counter() - t0)
                results[threads] = (loss, g)
        same = results[1][1].tobytes() == results[2][1].tobytes()
        t1, t2 = np.median(times[1]), np.median(times[2])
        how = "each solved alone" if lockstep is None else f"lockstep blocks of {lockstep}"
        print(
            f"{m} trajectories (DiscreteAdjoint, {how}), one loss + gradient: median "
            f"{t1 * 1e3:.3f} ms on 1 thread, {t2 * 1e3:.3f} ms on 2 threads ({t1 / t2:.2f}x) "
            f"over {reps} calls (loss {results[2][0]:.6g}); identical for 1 and 2 threads: "
            f"{same}"
        )


if __name__ == "__main__":
    main()
