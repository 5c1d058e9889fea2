"""scichains: scientific machine learning with small neural networks on the CPU.

Subpackages: ``scichains.nn`` (imported here); ``scichains.ode``, ``scichains.adjoint``,
``scichains.models``, ``scichains.datasets``, ``scichains.discovery``, ``scichains.pk``
(population PK: event tables, FOCE-I) and ``scichains.parallel`` (ensembles, sweeps and Dask)
are imported on first
access (``sc.ode``, as in numpy and scipy), or explicitly: they load compiled solver kernels,
which ``import scichains`` alone does not pay for.
"""

import importlib as _importlib

from . import nn
from ._fit import LBFGS, FitInfo, FitResult, fit
from .nn import (
    SGD,
    AbsoluteLoss,
    Activation,
    Adam,
    AdamW,
    Conv,
    Dense,
    Dropout,
    Flatten,
    FrontLastPenalty,
    L1Penalty,
    L2Penalty,
    LogitCrossEntropyLoss,
    MaxPool,
    SimpleChain,
    SquaredLoss,
    accuracy_and_loss,
    loss_and_grad,
    train_batched,
    train_unbatched,
    valgrad,
)

__version__ = "0.1.0"

#: the subpackages imported on first attribute access
_LAZY = ("adjoint", "datasets", "discovery", "models", "ode", "parallel", "pk")


def warm_up(executor=None) -> dict:
    """Load (or, the first time on a machine, compile) the kernels of a solve, an ensemble and
    a gradient on every worker of a ``dask.distributed.Client`` (``client.run``), once on
    another executor (``submit``), or in this process (``None``), before timed work.

    Returns what each reported, keyed by worker address (``"local"`` here, ``"executor"`` for
    a ``submit`` executor): ``{"seconds", "pid", "numba_cache_dir", "threading_layer"}``.
    Point ``NUMBA_CACHE_DIR`` at node-local disk on a cluster: the first worker of a node
    compiles, the others load.
    """
    from ._warm import warm_up as run  # loads the solvers when called, not on import

    return run(executor)


def __getattr__(name: str):
    if name in _LAZY:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AbsoluteLoss",
    "Activation",
    "Adam",
    "AdamW",
    "Conv",
    "Dense",
    "Dropout",
    "Flatten",
    "FitInfo",
    "FitResult",
    "FrontLastPenalty",
    "L1Penalty",
    "L2Penalty",
    "LBFGS",
    "LogitCrossEntropyLoss",
    "MaxPool",
    "SGD",
    "SimpleChain",
    "SquaredLoss",
    "accuracy_and_loss",
    "fit",
    "loss_and_grad",
    "nn",
    "train_batched",
    "train_unbatched",
    "valgrad",
    "__version__",
    "warm_up",
]
