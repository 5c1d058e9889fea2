"""Stiff problems: work-precision tables on the Bari test set, the LU choice, gradient cost.

Problems: HIRES, OREGO, VDPOL (eps = 1e-6, i.e. mu = 1e6 in the scaled form) and POLLU, with
the test set's reference solutions, and ROBER (Robertson to t = 1e5, reference computed with
independent solvers) (``scichains.ode._testset``). Solvers: scichains Rodas5P
and Rosenbrock23 (compiled Rosenbrock, exact Jacobian), Kvaerno5 and KenCarp4 (compiled
ESDIRK, simplified Newton, exact Jacobian), RadauIIA5 (compiled RADAU5: simplified Newton
on the transformed real/complex system, exact Jacobian), Auto (AutoTsit5Rodas5P, the default of
``solve``: Tsit5 switching to Rodas5P where the problem is stiff) and CVODE_BDF (SUNDIALS'
CVODE called directly with compiled callbacks, exact Jacobian, normal mode to the save time);
scipy's ``solve_ivp`` with LSODA, BDF and Radau (the right-hand side is the same compiled
function, called from Python; scipy's own finite-difference Jacobian), and LSODA given the
exact Jacobian (``LSODA+J``). Every solve: ``atol = 1e-4 rtol``, only the end state kept
(``saveat=[t1]`` / ``t_eval=[t1]``); time = the median of repeats of the whole call, warm;
error = the largest relative error at ``t1`` over the components whose reference exceeds
1e-12 (POLLU's 16th is 4e-18).

The floor of issue 17: for each problem and rtol 1e-6 and 1e-10, the fastest run of a new
method (any rtol of the sweep) whose error is at most LSODA's at that rtol, against LSODA's
time.

``--lu``: the in-place LU of ``scichains.ode.stiff._linalg`` against LAPACK through numba's
``np.linalg.solve``, per factor + solve, n = 2..50. ``--grad``: loss + gradient of a
target-mediated drug disposition model with a network term (Rodas5P with its discrete adjoint,
the default, and with the interpolating adjoint; CVODE_BDF) against its forward solve.

Usage: python benchmarks/stiff.py [--lu] [--grad] [--quick] [--budget 0.3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _machine as machine  # noqa: E402


def median_time(fn, budget=0.3, max_reps=20):
    """The median wall time of ``fn()`` over repeats filling about ``budget`` seconds (at
    least 3 unless one call exceeds the budget); returns (seconds, last result)."""
    times = []
    out = None
    t_start = time.perf_counter()
    while len(times) < max_reps:
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - t_start
        if (len(times) >= 3 and spent > budget) or times[0] > budget:
            break
    return float(np.median(times)), out


def lu_table():
    import numba

    from scichains.ode.stiff._linalg import lu_factor_solve

    @numba.njit
    def ours(A, b, reps):
        n = A.shape[0]
        W = np.empty((n, n))
        x = np.empty(n)
        piv = np.empty(n, dtype=np.int64)
        acc = 0.0
        for _ in range(reps):
            W[:, :] = A
            x[:] = b
            lu_factor_solve(W, piv, x)
            acc += x[0]
        return acc

    @numba.njit
    def lapack(A, b, reps):
        acc = 0.0
        for _ in range(reps):
            x = np.linalg.solve(A, b)
            acc += x[0]
        return acc

    print("\n## LU factor + solve, per call (median of 5 runs of a compiled loop)")
    print("| n | scichains LU | np.linalg.solve (LAPACK) | ratio |")
    print("|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 8, 10, 20, 30, 50):
        A = rng.standard_normal((n, n)) + n * np.eye(n)
        b = rng.standard_normal(n)
        reps = max(200, int(2e6 / n**3))
        ours(A, b, 2)
        lapack(A, b, 2)
        t1 = np.median([_timed(ours, A, b, reps) for _ in range(5)]) / reps
        t2 = np.median([_timed(lapack, A, b, reps) for _ in range(5)]) / reps
        print(f"| {n} | {t1 * 1e9:,.0f} ns | {t2 * 1e9:,.0f} ns | {t2 / t1:.2f}x |")


def _timed(fn, *args):
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def work_precision(quick, budget):
    from scipy.integrate import solve_ivp

    from scichains import ode
    from scichains.ode._testset import PROBLEMS, relative_error
    from scichains.ode.cvode._sundials import jacobian_from_vjp

    sweep = [1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11]
    table_rtols = [1e-6, 1e-10]
    results = {}  # (problem, method, rtol) -> (seconds, error)
    for name, tp in PROBLEMS.items():
        prob = tp.problem()
        prob.ensure_vjp()
        t1 = tp.tspan[1]
        n = tp.u0.size
        p = prob.p
        f = tp.f

        def rhs(t, y, f=f, n=n, p=p):
            du = np.empty(n)
            f(du, y, p, t)
            return du

        e, pb, ubuf = np.zeros(n), np.zeros(0), np.empty(n)

        def jac(t, y, prob=prob, n=n, e=e, pb=pb, ubuf=ubuf, p=p):
            J = np.empty((n, n))
            ubuf[:] = y
            jacobian_from_vjp(prob.vjp_address, prob.kernel, ubuf, p, t, J, e, pb)
            return J

        def ours(solver, rtol, prob=prob, t1=t1, max_steps=10**7):
            sol = ode.solve(
                prob, solver, rtol=rtol, atol=1e-4 * rtol, saveat=[t1], max_steps=max_steps
            )
            assert sol.success, sol.message
            return sol.u[-1]

        def scipy_run(method, rtol, use_jac=False, tp=tp, rhs=rhs, jac=jac):
            kw = {"jac": jac} if use_jac else {}
            sol = solve_ivp(
                rhs,
                tp.tspan,
                tp.u0,
                method=method,
                rtol=rtol,
                atol=1e-4 * rtol,
                t_eval=[tp.tspan[1]],
                **kw,
            )
            assert sol.success, sol.message
            return sol.y[:, -1]

        runs = []
        for rtol in sweep:
            runs.append(("Rodas5P", rtol, lambda r=rtol: ours(ode.Rodas5P(), r)))
            runs.append(("Kvaerno5", rtol, lambda r=rtol: ours(ode.Kvaerno5(), r)))
            runs.append(("KenCarp4", rtol, lambda r=rtol: ours(ode.KenCarp4(), r)))
            runs.append(("RadauIIA5", rtol, lambda r=rtol: ours(ode.RadauIIA5(), r)))
            runs.append(("Auto", rtol, lambda r=rtol: ours(ode.AutoTsit5Rodas5P, r)))
            if rtol >= 1e-9:
                runs.append(("Rosenbrock23", rtol, lambda r=rtol: ours(ode.Rosenbrock23(), r)))
        for rtol in table_rtols if quick else sweep[1:-1]:
            runs.append(("LSODA", rtol, lambda r=rtol: scipy_run("LSODA", r)))
            runs.append(("LSODA+J", rtol, lambda r=rtol: scipy_run("LSODA", r, True)))
        for rtol in table_rtols:
            runs.append(
                ("CVODE_BDF", rtol, lambda r=rtol: ours(ode.CVODE_BDF(), r, max_steps=10**6))
            )
            runs.append(("scipy BDF", rtol, lambda r=rtol: scipy_run("BDF", r)))
            runs.append(("scipy Radau", rtol, lambda r=rtol: scipy_run("Radau", r)))
        for label, rtol, fn in runs:
            try:
                fn()  # warm: compile, trace, caches
            except AssertionError as e:  # a failed solve: reported, not timed
                results[(name, label, rtol)] = (float("nan"), str(e))
                continue
            sec, u_end = median_time(fn, budget=budget)
            results[(name, label, rtol)] = (sec, relative_error(u_end, tp.reference))
    return results, table_rtols


NEW_METHODS = ("Rodas5P", "Rosenbrock23", "Kvaerno5", "KenCarp4", "RadauIIA5", "Auto")
"""The scichains methods the floor counts (Auto: AutoTsit5Rodas5P, the default of solve)."""


def print_tables(results, table_rtols):
    problems = list(dict.fromkeys(k[0] for k in results))
    labels = list(dict.fromkeys(k[1] for k in results))
    print("\n## Work-precision: median time (relative error at t1), atol = 1e-4 rtol")
    for name in problems:
        rtols = sorted({k[2] for k in results if k[0] == name}, reverse=True)
        print(f"\n### {name}\n")
        print("| rtol | " + " | ".join(labels) + " |")
        print("|---|" + "---:|" * len(labels))
        for r in rtols:
            cells = []
            for lab in labels:
                v = results.get((name, lab, r))
                if v is None:
                    cells.append("")
                elif isinstance(v[1], str):
                    cells.append(f"failed: {v[1][:40]}")
                else:
                    cells.append(f"{v[0] * 1e3:,.2f} ms ({v[1]:.1e})")
            print(f"| {r:.0e} | " + " | ".join(cells) + " |")
    print("\n## The floor: the fastest new-method run at LSODA's accuracy or better")
    print(
        "| problem | rtol | LSODA | best new method (its rtol) | speed-up | same rtol: Rodas5P |"
        " same rtol: Kvaerno5 | CVODE_BDF / LSODA |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in problems:
        for r in table_rtols:
            ls = results.get((name, "LSODA", r))
            if ls is None:
                continue
            best = None
            for (pn, lab, rr), (sec, err) in results.items():
                ok = not isinstance(err, str)
                new = lab in NEW_METHODS
                if pn == name and new and ok and err <= ls[1]:
                    if best is None or sec < best[0]:
                        best = (sec, err, lab, rr)
            same = results[(name, "Rodas5P", r)]
            kv = results[(name, "Kvaerno5", r)]
            kvs = f"{ls[0] / kv[0]:.1f}x ({kv[1]:.1e})" if not isinstance(kv[1], str) else "failed"
            cv = results.get((name, "CVODE_BDF", r))
            cvs = f"{cv[0] / ls[0]:.2f}" if cv and not isinstance(cv[1], str) else "failed"
            bs = (
                "none"
                if best is None
                else f"{best[2]} {best[0] * 1e3:.2f} ms ({best[1]:.1e}, rtol {best[3]:.0e})"
            )
            sp = "" if best is None else f"{ls[0] / best[0]:.1f}x"
            print(
                f"| {name} | {r:.0e} | {ls[0] * 1e3:.2f} ms ({ls[1]:.1e}) | {bs} | {sp} | "
                f"{ls[0] / same[0]:.1f}x ({same[1]:.1e}) | {kvs} | {cvs} |"
            )


def gradient_cost(budget):
    import sympy as sp

    from scichains import Dense, SimpleChain
    from scichains.adjoint import DiscreteAdjoint, InterpolatingAdjoint, Objective, SquaredError
    from scichains.ode import CVODE_BDF, NetworkTerm, Rodas5P, SymbolicModel

    A, L, R, P = sp.symbols("A L R P")
    ka, kel, kon, koff, kint, ksyn, kdeg = sp.symbols("ka kel kon koff kint ksyn kdeg")
    chain = SimpleChain(1, Dense(8, "tanh"), Dense(1))
    U = NetworkTerm(chain, [L])
    eqs = [
        -ka * A,
        ka * A - kel * (1 + U[0] ** 2) * L - kon * L * R + koff * P,
        ksyn - kdeg * R - kon * L * R + koff * P,
        kon * L * R - (koff + kint) * P,
    ]
    model = SymbolicModel([A, L, R, P], [ka, kel, kon, koff, kint, ksyn, kdeg], eqs, network=U)
    w = chain.init_params(seed=3, dtype=np.float64) * 0.5
    p = model.pack(ka=1.0, kel=0.1, kon=100.0, koff=1.0, kint=0.5, ksyn=1.0, kdeg=0.1, network=w)
    prob = model.problem([0.0, 0.0, 10.0, 0.0], (0.0, 48.0), p)
    ts = np.linspace(0.5, 48.0, 40)
    doses = [(0.0, 0, 5.0), (12.0, 0, 5.0), (24.0, 0, 5.0), (36.0, 0, 5.0)]
    data = np.abs(np.random.default_rng(0).normal(1.0, 0.5, (ts.size, 4)))
    print(
        f"\n## Gradient cost: TMDD model with a network term ({p.size} parameters), "
        "4 doses, 40 save points, rtol 1e-6, atol 1e-8"
    )
    print(
        "| solver | sensitivity | loss (forward) | loss + gradient | ratio | forward steps "
        "| adjoint steps |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    runs = [
        (Rodas5P(), DiscreteAdjoint()),
        (Rodas5P(), InterpolatingAdjoint()),
        (CVODE_BDF(), InterpolatingAdjoint()),
    ]
    for solver, sensealg in runs:
        obj = Objective(prob, SquaredError(data), ts, solver=solver, sensealg=sensealg, jumps=doses)
        obj.value_and_grad(p)
        tf, _ = median_time(lambda obj=obj: obj.value(p), budget=budget)
        tg, _ = median_time(lambda obj=obj: obj.value_and_grad(p), budget=budget)
        st = obj.stats()
        print(
            f"| {solver.name} | {type(sensealg).__name__} | {tf * 1e3:.2f} ms | "
            f"{tg * 1e3:.2f} ms | {tg / tf:.2f} | "
            f"{st.get('steps', st.get('stored_steps', ''))} | {st.get('adjoint_steps', '')} |"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lu", action="store_true", help="the LU measurement too")
    ap.add_argument("--grad", action="store_true", help="the gradient cost too")
    ap.add_argument("--quick", action="store_true", help="LSODA at the table's rtols only")
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of repeats per point")
    args = ap.parse_args()
    print(machine.describe())
    if args.lu:
        lu_table()
    results, table_rtols = work_precision(args.quick, args.budget)
    print_tables(results, table_rtols)
    if args.grad:
        gradient_cost(args.budget)


if __name__ == "__main__":
    main()
