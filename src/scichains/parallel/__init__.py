"""scichains.parallel: running scichains work on executors (this process, Dask, any
``submit``/``map`` executor).

Ensembles (:func:`scichains.ode.solve_ensemble`), ensemble gradients
(:class:`scichains.adjoint.EnsembleObjective`) and population objectives
(:class:`scichains.models.Population`) take ``executor=``; :func:`sweep` runs independent
fits as futures; :func:`warm_up` loads the compiled kernels on every Dask worker before timed
work. Dask is optional: ``pip install scichains[dask]``.
"""

from ._executor import batch_bounds, is_dask

__all__ = ["batch_bounds", "is_dask"]
