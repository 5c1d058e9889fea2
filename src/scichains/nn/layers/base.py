"""The layer protocol: stateless descriptors (configuration only) that a chain composes.

Every layer implements:

- ``output_shape(in_shape)``: the per-sample output shape, raising ``ValueError`` when the input
  shape does not fit the layer;
- ``param_shapes(in_shape)``: ``[(name, shape), ...]`` in the order they sit in the flat vector;
- ``init(views, in_shape, rng)``: fill this layer's named parameter views in place;
- ``encode(in_shape)``: a :class:`LayerCode` telling the compiled kernels what to run (kind,
  activation, a real option, whether derivative rows are stored, layer-specific integers such
  as a convolution's geometry);
- ``config()``: a JSON-serialisable description, and ``LAYERS[name](**config)`` rebuilds it.

Each layer kind's compiled kernels sit beside its descriptor (``dense.py``, ``conv.py``,
``pool.py``, ``elementwise.py``), as two functions with the signatures of
:mod:`scichains.nn._dispatch` that the chain interpreters call through their addresses.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .._activations import IDENTITY


class LayerCode(NamedTuple):
    """A layer as the kernels see it (one row of the chain's ``spec``)."""

    kind: int
    act: int = IDENTITY
    rate: float = 0.0
    needs_derivative: bool = False
    extra: tuple[int, ...] = ()
    #: an index table for the kernels (appended to the chain's ``meta``; its offset there
    #: goes to the first extra field)
    table: np.ndarray | None = None
    #: rows of scratch space the kernels need (their first row goes to ``spec[l, S_SCRATCH]``)
    scratch: int = 0


class Layer:
    """Base class of the layer descriptors."""

    name = "layer"

    def output_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def param_shapes(self, in_shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
        return []

    def init(self, views: dict, in_shape: tuple[int, ...], rng: np.random.Generator) -> None:
        return None

    def encode(self, in_shape: tuple[int, ...]) -> LayerCode:
        raise NotImplementedError

    def config(self) -> dict:
        return {}

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.config() == other.config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(sorted(self.config().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"


def _flat_size(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


def _pair(v, what):
    if isinstance(v, (int, np.integer)):
        v = (int(v), int(v))
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise ValueError(f"{what} must be an int or a pair of ints, got {v!r}")
    return v


def _image_shape(layer, in_shape):
    if len(in_shape) != 3:
        raise ValueError(
            f"{layer.name} expects images of shape (channels, height, width), got per-sample "
            f"shape {in_shape}"
        )
    return in_shape
