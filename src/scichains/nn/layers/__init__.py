"""The layers a chain is made of: each module holds a descriptor and its compiled kernels."""

from __future__ import annotations

from .base import Layer, LayerCode
from .conv import Conv
from .dense import Dense
from .elementwise import Activation, Dropout, Flatten
from .pool import MaxPool

#: every layer kind that :func:`scichains.nn.load` can rebuild, by ``Layer.name``
LAYERS: dict[str, type[Layer]] = {
    cls.name: cls for cls in (Dense, Activation, Dropout, Flatten, Conv, MaxPool)
}


def register_layer(cls: type[Layer]) -> type[Layer]:
    """Make a layer class known to :func:`scichains.nn.load` under ``cls.name`` (a decorator).

    A chain with such a layer can be saved only when ``cls(**layer.config())`` rebuilds a layer
    the kernels see as the same (:func:`scichains.nn.save` checks this).
    """
    LAYERS[cls.name] = cls
    return cls


__all__ = [
    "LAYERS",
    "Activation",
    "Conv",
    "Dense",
    "Dropout",
    "Flatten",
    "Layer",
    "LayerCode",
    "MaxPool",
    "register_layer",
]
