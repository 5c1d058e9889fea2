"""scichains.parallel: running scichains work on executors (this process, Dask, any
``submit``/``map`` executor).

Ensembles (:func:`scichains.ode.solve_ensemble`), ensemble gradients
(:class:`scichains.adjoint.EnsembleObjective`) and population objectives
(:class:`scichains.models.Population`) take ``executor=``; :func:`sweep` runs independent
fits (multi-start, hyperparameter sweeps) as futures and ranks them; :func:`scichains.warm_up`
loads the compiled kernels on every Dask worker before timed work. Nothing here imports Dask until
a Dask client is used: ``pip install scichains[dask]``.
"""

from ._executor import batch_bounds, is_dask, require_dask
from ._sweep import SweepResult, default_key, sweep

__all__ = [
    "SweepResult",
    "batch_bounds",
    "default_key",
    "is_dask",
    "require_dask",
    "sweep",
]
