"""Population PK of the Theophylline data: FOCE-I fit of the classical one-compartment model.

The 12 subjects of R's ``Theoph`` (one oral dose each, in mg: dose per kg times weight, into
the depot at t = 0; 132 concentrations in mg/L). The model is nlmixr2's one-compartment
model of these data:

    ka = exp(tka + eta_ka), CL = exp(tcl + eta_cl), V = exp(tv + eta_v)
    depot' = -ka depot,  center' = ka depot - (CL / V) center,  C = center / V
    DV = C + eps, eps ~ N(0, add^2); eta ~ N(0, Omega), Omega diagonal

fitted by FOCE-I (``scichains.pk.fit``: exact outer gradient, BFGS), then the covariance step
(sandwich standard errors), shrinkage and, with ``--vpc N``, a visual predictive check.

python -m scichains run theophylline [--json] [--vpc 200] [--plot out.png]

``--json`` prints only ``{"ofv", "theta": {"ka", "cl", "v"} (1/h, L/h, L), "omega_cv": {"ka",
"cl", "v"} (percent, 100 sqrt(exp(omega_kk) - 1)), "sigma": {"add"} (mg/L), "seconds"}``
(``seconds``: the wall time of the fit, model generation and compilation excluded).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import sympy as sp

from scichains import pk

NAMES = ("ka", "cl", "v")


def classical_model() -> pk.PKModel:
    """nlmixr2's one-compartment model (log-normal ka, CL, V; additive error), started from
    nlmixr2's initial values."""
    depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
    tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
    return pk.PKModel(
        states=[depot, center],  # the dose (CMT 1) goes into the depot, as an amount (mg)
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={ka: sp.exp(tka + eka), cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev)},
        theta={tka: 0.45, tcl: 1.0, tv: 3.45},  # log 1/h, log L/h, log L
        eta=[eka, ecl, ev],
        omega=[0.6, 0.3, 0.1],
        observe=center / v,  # mg/L
        error=pk.Additive(0.7),
    )


def summary(fit: pk.FitResult) -> dict:
    """The result in natural units (what ``--json`` prints)."""
    theta = np.exp([fit.theta["tka"], fit.theta["tcl"], fit.theta["tv"]])
    return {
        "ofv": fit.ofv,
        "theta": dict(zip(NAMES, map(float, theta))),
        "omega_cv": dict(zip(NAMES, map(float, fit.omega_cv()))),
        "sigma": {"add": fit.sd["add"]},
        "seconds": fit.seconds,
    }


def run(vpc: int = 0):
    """Fit, covariance step, shrinkage (and a VPC with ``vpc`` replicates): a dict."""
    model = classical_model()
    data = pk.theophylline()
    fit = pk.fit(model, data, method="focei")
    if not fit.success:
        raise RuntimeError(f"the FOCE-I fit did not converge: {fit.message}")
    out = {"model": model, "data": data, "fit": fit, "summary": summary(fit)}
    if vpc:
        out["vpc"] = pk.vpc(model, data, fit, n_sim=vpc)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print only the result, as JSON")
    ap.add_argument("--vpc", type=int, default=0, help="VPC with this many replicates")
    ap.add_argument("--plot", default=None, help="write goodness-of-fit (and VPC) figures here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = run(vpc=args.vpc)
    s = res["summary"]
    if args.json:
        print(json.dumps(s))
        return s
    model, data, fit = res["model"], res["data"], res["fit"]
    print(f"{len(data)} subjects, {data.n_obs} concentrations; FOCE-I, additive error")
    print(
        f"OFV {fit.ofv:.3f} (NONMEM convention; -2 log L = {fit.minus2ll:.3f}); "
        f"{fit.n_evaluations} evaluations, fit {fit.seconds:.2f} s "
        f"({time.perf_counter() - t0:.1f} s with model generation and compilation)"
    )
    cov = pk.covariance(model, data, fit)
    shrink = pk.shrinkage(fit)
    units = {"ka": "1/h", "cl": "L/h", "v": "L"}
    print("             estimate   RSE%   BSV(CV%)  shrinkage(SD)%")
    for k, name in enumerate(NAMES):
        # RSE of exp(theta) by the delta method equals the SE of theta (log scale), in percent
        print(
            f"  {name:3s} {units[name]:4s} {s['theta'][name]:8.4g} {100 * cov.se_theta[k]:6.1f}"
            f"   {s['omega_cv'][name]:7.1f}   {shrink[k]:7.1f}"
        )
    print(f"  add  mg/L {s['sigma']['add']:8.4g} {100 * cov.se_sd[0] / fit.sd['add']:6.1f}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        fig = pk.gof_plot(pk.residuals(model, data, fit))
        fig.savefig(args.plot, dpi=100)
        print(f"figure: {args.plot}")
        if "vpc" in res:
            import matplotlib.pyplot as plt

            ax = res["vpc"].plot()
            path = args.plot.rsplit(".", 1)
            vpc_path = f"{path[0]}_vpc.{path[1]}" if len(path) == 2 else args.plot + "_vpc"
            ax.figure.savefig(vpc_path, dpi=100)
            plt.close(ax.figure)
            print(f"figure: {vpc_path}")
    return s


if __name__ == "__main__":
    main()
