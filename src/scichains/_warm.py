"""Preparing worker processes: load the compiled kernels before timed work (``scichains.warm_up``).

An application of the library (a solve, an ensemble, a gradient), so it sits above
``scichains.parallel``, which imports nothing that solves.

numba compiles a kernel once per machine and keeps it in its on-disk cache: beside the
package's sources (``__pycache__``), or under ``NUMBA_CACHE_DIR`` when that is set. On a
cluster, point ``NUMBA_CACHE_DIR`` at node-local disk in the workers' environment (a shared
home directory would have every node writing the same files): the first worker of a node
compiles, the others load. :func:`warm_up` runs a tiny solve, ensemble and gradient on every
worker, so that loading (or the one-time compilation) happens there and not in the first
timed task.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ._jit import kernel
from .parallel import _executor as ex


@kernel
def _decay(du, u, p, t):
    for i in range(u.shape[0]):
        du[i] = -p[0] * u[i]


@kernel
def _decay_vjp(v, u, p, t, ubar, pbar):
    pbar[0] = 0.0
    for i in range(u.shape[0]):
        ubar[i] = -p[0] * v[i]
        pbar[0] -= v[i] * u[i]


def warm() -> dict:
    """Load (or compile) the kernels of a solve, an ensemble and a gradient in this process;
    returns ``{"seconds", "pid", "numba_cache_dir", "threading_layer"}``."""
    import numba

    from .adjoint import SquaredError, gradient
    from .ode import EnsembleProblem, ODEProblem, solve, solve_ensemble

    start = time.perf_counter()
    prob = ODEProblem(_decay, [1.0, 2.0], (0.0, 1.0), [0.5], vjp=_decay_vjp)
    solve(prob, saveat=[0.5, 1.0])
    solve_ensemble(EnsembleProblem(prob, u0s=np.ones((2, 2))), saveat=[0.5, 1.0], threads=1)
    gradient(prob, SquaredError(np.ones((2, 2))), [0.5, 1.0])
    try:
        layer = numba.threading_layer()
    except ValueError:
        layer = None
    return {
        "seconds": time.perf_counter() - start,
        "pid": os.getpid(),
        "numba_cache_dir": numba.config.CACHE_DIR or "(beside the sources)",
        "threading_layer": layer,
    }


def warm_up(executor=None) -> dict:
    """Run :func:`warm` on every worker of a ``dask.distributed.Client`` (``client.run``),
    once on another executor (``submit``), or here (``None``). Returns what each reported,
    keyed by worker address (``"local"`` otherwise): the seconds it took (the first time on
    a machine: the compilation; then the cache loads), its process id and cache directory.
    """
    executor = ex.check_executor(executor)
    if executor is None:
        return {"local": warm()}
    if ex.is_dask(executor):
        return dict(executor.run(warm))
    return {"executor": executor.submit(warm).result()}
