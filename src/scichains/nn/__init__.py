"""scichains.nn: small neural networks as flat parameter vectors and fused compiled kernels."""

from ._activations import (
    ActivationFunction,
    abs2,
    cube,
    elu,
    gelu,
    identity,
    rbf,
    relu,
    sigmoid,
    softplus,
    swish,
    tanh,
)
from ._chain import ChainKernel, SimpleChain
from ._io import load, save
from ._kernels import chain_forward, chain_vjp
from ._layers import Activation, Dense, Dropout, Flatten, Layer, LayerCode, register_layer
from ._loss import (
    AbsoluteLoss,
    ChainWithLoss,
    FrontLastPenalty,
    L1Penalty,
    L2Penalty,
    LogitCrossEntropyLoss,
    SquaredLoss,
    accuracy_and_loss,
    evaluate_loss,
    loss_and_grad,
    valgrad,
)
from ._optim import SGD, Adam, AdamW, Optimizer
from ._train import NonFiniteLossError, train_batched, train_unbatched

silu = swish

__all__ = [
    "AbsoluteLoss",
    "Activation",
    "ActivationFunction",
    "Adam",
    "AdamW",
    "ChainKernel",
    "ChainWithLoss",
    "Dense",
    "Dropout",
    "Flatten",
    "FrontLastPenalty",
    "L1Penalty",
    "L2Penalty",
    "Layer",
    "LayerCode",
    "LogitCrossEntropyLoss",
    "NonFiniteLossError",
    "Optimizer",
    "SGD",
    "SimpleChain",
    "SquaredLoss",
    "abs2",
    "accuracy_and_loss",
    "chain_forward",
    "chain_vjp",
    "cube",
    "elu",
    "evaluate_loss",
    "gelu",
    "identity",
    "load",
    "loss_and_grad",
    "rbf",
    "register_layer",
    "relu",
    "save",
    "sigmoid",
    "silu",
    "softplus",
    "swish",
    "tanh",
    "train_batched",
    "train_unbatched",
    "valgrad",
]
