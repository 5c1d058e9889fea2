"""The table of a replicate study: how close the estimates of many simulated data sets come
to the truth they were simulated from."""

from __future__ import annotations

import numpy as np


def print_recovery(names, truth, estimates, indent: str = "  ") -> None:
    """Per parameter: the truth, the mean over the replicates, the replicates' SD (the Monte
    Carlo spread), the bias in units of it, the mean's Monte Carlo standard error
    (SD / sqrt(n)) and ``z = (mean - truth) / SE``. ``estimates``: ``(n, len(names))``; a
    column of NaN (a parameter the fitted model lacks) is left out."""
    e = np.asarray(estimates, dtype=np.float64)
    n = e.shape[0]
    mean = e.mean(axis=0)
    sd = e.std(axis=0, ddof=1)
    se = sd / np.sqrt(n)
    print(
        f"{indent}{'parameter':10s} {'truth':>8s} {'mean':>8s} {'SD':>8s} {'bias/SD':>8s} "
        f"{'MC SE':>8s} {'z':>7s}"
    )
    for k, name in enumerate(names):
        if np.isnan(mean[k]):
            continue
        bias = mean[k] - truth[k]
        with np.errstate(divide="ignore", invalid="ignore"):
            print(
                f"{indent}{name:10s} {truth[k]:8.4f} {mean[k]:8.4f} {sd[k]:8.4f} "
                f"{bias / sd[k]:8.2f} {se[k]:8.4f} {bias / se[k]:7.2f}"
            )
