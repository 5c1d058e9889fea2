"""scichains: scientific machine learning with small neural networks on the CPU.

Subpackages: ``scichains.nn`` (imported here), ``scichains.ode``, ``scichains.adjoint`` and
``scichains.models`` (import them explicitly; they load compiled solver kernels).
"""

from . import nn
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

__all__ = [
    "AbsoluteLoss",
    "Activation",
    "Adam",
    "AdamW",
    "Conv",
    "Dense",
    "Dropout",
    "Flatten",
    "FrontLastPenalty",
    "L1Penalty",
    "L2Penalty",
    "LogitCrossEntropyLoss",
    "MaxPool",
    "SGD",
    "SimpleChain",
    "SquaredLoss",
    "accuracy_and_loss",
    "loss_and_grad",
    "nn",
    "train_batched",
    "train_unbatched",
    "valgrad",
    "__version__",
]
