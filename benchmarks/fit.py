"""scichains.fit against the hand-written loops it replaces: the same problem, the same initial
weights, the same optimizer settings; each pair must end at the same loss (printed), and the
loop's time is compared as a ratio of same-run medians (runs alternate, hand-written first).

1. The spiral neural ODE (notebooks/neural_ode_spiral.ipynb): SimpleChain(2, cube, Dense(50,
   tanh), Dense(2)), Tsit5 rtol 1e-6, 300 Adam steps (lr 0.05), one trajectory; the loop the
   notebook wrote against ``fit(..., [(Adam(0.05), 300)], keep="last")``.
2. The Lotka-Volterra UDE (examples/lotka_volterra_ude.py, noise seed 5678, training seed 1):
   Adam(0.1) for 200 steps, then L-BFGS (gtol 1e-10) through the interpolating adjoint; the
   example's former loop (a SciPy ``minimize`` with ``adjoint.ScipyFun``) against
   ``fit(obj, p, [(Adam(0.1), 200), LBFGS(maxiter, gtol=1e-10)])``. ``--lbfgs N`` caps the L-BFGS
   iterations (default 300: the full run takes ~1000 and minutes).

Usage: python benchmarks/fit.py [--reps 3] [--lbfgs 300] [--only spiral|lv]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.optimize

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

import _machine as machine  # noqa: E402

import scichains as sc  # noqa: E402


def spiral():
    from scipy.integrate import solve_ivp

    from scichains.models import NeuralODE

    A = np.array([[-0.1, 2.0], [-2.0, -0.1]])
    u0 = np.array([2.0, 0.0])
    ts = np.linspace(0.0, 1.5, 30)
    data = solve_ivp(lambda t, u: (u**3) @ A, (0, 1.5), u0, t_eval=ts, rtol=1e-10, atol=1e-12).y.T
    chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(50, "tanh"), sc.Dense(2))
    p0 = chain.init_params(seed=0, dtype=np.float64)
    node = NeuralODE(chain, (0.0, 1.5), ts)

    def hand():
        p = p0.copy()
        opt = sc.Adam(0.05)
        losses = []
        t0 = time.perf_counter()
        for _ in range(300):
            loss, g = node.loss_and_grad(u0, p, data)
            losses.append(loss)
            opt.step(p, g)
        dt = time.perf_counter() - t0
        return dt, node.loss_and_grad(u0, p, data)[0], p

    def with_fit():
        p = p0.copy()
        t0 = time.perf_counter()
        res = sc.fit(
            lambda q: node.loss_and_grad(u0, q, data),
            p,
            [(sc.Adam(0.05), 300)],
            keep="last",
            progress=False,
        )
        return time.perf_counter() - t0, res.loss, p

    return "spiral, 300 Adam steps", hand, with_fit


def lotka_volterra(lbfgs_iters: int):
    import lotka_volterra_ude as ex

    from scichains.adjoint import InterpolatingAdjoint, Objective, ScipyFun, SquaredError
    from scichains.ode import Tsit5

    data = ex.make_data(5678)
    model, chain = ex.ude_model()
    p0 = model.pack(network=chain.init_params(seed=1, dtype=np.float64))
    prob = model.problem(ex.U0, (0.0, 3.0), p0)
    obj = Objective(
        prob,
        SquaredError(data),
        ex.TS,
        solver=Tsit5(),
        rtol=1e-7,
        atol=1e-9,
        sensealg=InterpolatingAdjoint(),
    )

    def hand():  # the example's loop before scichains.fit
        p = p0.copy()
        opt = sc.Adam(0.1)
        t0 = time.perf_counter()
        for _ in range(200):
            loss, g, _ = obj.value_and_grad(p)
            opt.step(p, g)
        fun = ScipyFun(lambda q: obj.value_and_grad(q)[:2])
        res = scipy.optimize.minimize(
            fun,
            p,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": lbfgs_iters, "gtol": 1e-10},
        )
        return time.perf_counter() - t0, float(res.fun), res.x

    def with_fit():
        p = p0.copy()
        t0 = time.perf_counter()
        res = sc.fit(
            obj, p, [(sc.Adam(0.1), 200), sc.LBFGS(lbfgs_iters, gtol=1e-10)], progress=False
        )
        return time.perf_counter() - t0, res.loss, p

    return f"Lotka-Volterra UDE, Adam 200 + L-BFGS <= {lbfgs_iters}", hand, with_fit


def compare(label, hand, with_fit, reps):
    hand()  # compile / warm
    with_fit()
    th, tf = [], []
    for _ in range(reps):
        dt, loss_h, p_h = hand()
        th.append(dt)
        dt, loss_f, p_f = with_fit()
        tf.append(dt)
    mh, mf = statistics.median(th), statistics.median(tf)
    same = "identical" if np.array_equal(p_h, p_f) else f"max |dp| {np.abs(p_h - p_f).max():.2e}"
    print(
        f"{label}: hand-written {mh:.3f} s, fit {mf:.3f} s (median of {reps}; fit/hand "
        f"{mf / mh:.3f}); final loss hand {loss_h:.10g}, fit {loss_f:.10g}; parameters {same}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lbfgs", type=int, default=300)
    ap.add_argument("--only", choices=("spiral", "lv"), default=None)
    args = ap.parse_args(argv)
    print(machine.describe())
    if args.only in (None, "spiral"):
        compare(*spiral(), args.reps)
    if args.only in (None, "lv"):
        compare(*lotka_volterra(args.lbfgs), args.reps)


if __name__ == "__main__":
    main()
