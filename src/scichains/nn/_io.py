"""Save and load parameters together with the chain's description (npz, no pickle)."""

from __future__ import annotations

import json
import os

import numpy as np

from ._activations import get_activation
from ._chain import SimpleChain
from ._validate import check_params
from .layers import LAYERS

_FORMAT = "scichains.nn/1"


def save(path: str | os.PathLike, chain: SimpleChain, p: np.ndarray) -> None:
    """Write ``p`` (shape ``(num_params,)``) and ``chain.describe()`` to an ``.npz`` file.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (overwritten if it exists); as with ``numpy.savez``, a file name
        without the ``.npz`` suffix gets it appended.
    chain : SimpleChain
        The chain whose parameters ``p`` are; anything else raises ``TypeError``.
    p : numpy.ndarray
        The parameters, shape ``(num_params,)``, float32 or float64 (stored in that dtype);
        checked as everywhere (``TypeError``/``ValueError``).

    Raises ``ValueError`` before writing when :func:`load` could not rebuild the chain: a layer
    class not registered with :func:`register_layer`, or whose ``config()`` does not describe
    it fully (an activation known only by object, not by name, for one).
    """
    if not isinstance(chain, SimpleChain):
        raise TypeError(f"save needs a SimpleChain, got {type(chain).__name__}")
    p = check_params(chain, p)
    try:
        desc = json.dumps({"format": _FORMAT, **chain.describe()})
    except TypeError as e:
        raise ValueError(f"this chain cannot be saved: a layer's config() is not JSON ({e})") from e
    _check_rebuilds(chain, json.loads(desc))
    np.savez(path, params=p, chain=np.array(desc))


def _layer_from_config(cfg: dict):
    cfg = dict(cfg)
    kind = cfg.pop("type")
    if kind not in LAYERS:
        raise ValueError(f"unknown layer type {kind!r} in saved chain")
    for key in ("activation", "fn"):
        if key in cfg:
            cfg[key] = get_activation(cfg[key])
    return LAYERS[kind](**cfg)


def _check_rebuilds(chain: SimpleChain, desc: dict) -> None:
    """``ValueError`` naming the first layer that :func:`load` would not rebuild as it is."""
    for i, (layer, cfg) in enumerate(zip(chain.layers, desc["layers"])):
        why = None
        if LAYERS.get(layer.name) is not type(layer):
            why = (
                f"its class {type(layer).__name__} is not registered under the name "
                f"{layer.name!r} (decorate it with scichains.nn.register_layer)"
            )
        else:
            try:
                again = _layer_from_config(cfg)
            except (TypeError, ValueError) as e:
                why = f"{type(layer).__name__}(**config()) fails: {e}"
            else:
                shape = chain.shapes[i]
                if (
                    type(again) is not type(layer)
                    or again != layer
                    or getattr(again, "seed", 0) != getattr(layer, "seed", 0)
                    or again.output_shape(shape) != layer.output_shape(shape)
                    or again.param_shapes(shape) != layer.param_shapes(shape)
                    or not _same_code(again.encode(shape), layer.encode(shape))
                ):
                    why = "its config() does not describe it fully (the rebuilt layer differs)"
        if why is not None:
            raise ValueError(f"this chain cannot be saved: layer {i} ({layer!r}): {why}")


def _same_code(a, b) -> bool:
    tables = (a.table is None and b.table is None) or (
        a.table is not None and b.table is not None and np.array_equal(a.table, b.table)
    )
    return a._replace(table=None) == b._replace(table=None) and tables


def chain_from_description(desc: dict) -> SimpleChain:
    """The chain that ``desc`` (``chain.describe()``, as :func:`save` writes it) describes."""
    layers = [_layer_from_config(cfg) for cfg in desc["layers"]]
    return SimpleChain(tuple(desc["input_shape"]), *layers)


def load(path: str | os.PathLike, chain: SimpleChain | None = None):
    """Read a file written by :func:`save`; returns ``(chain, p)``.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file written by :func:`save` (read without pickle). A file without the
        saved parameters and chain description, or of another format version, raises
        ``ValueError``; a missing file ``FileNotFoundError`` (from ``numpy.load``).
    chain : SimpleChain, optional
        When given, the file must describe the same chain, else ``ValueError``; it is then the
        chain returned. By default the chain is rebuilt from the file.

    Returns
    -------
    tuple
        ``(chain, p)``: the chain and a new parameter array of shape ``(num_params,)`` in the
        dtype it was saved in.
    """
    with np.load(path, allow_pickle=False) as f:
        if "params" not in f or "chain" not in f:
            raise ValueError(f"{os.fspath(path)} is not a scichains parameter file")
        desc = json.loads(str(f["chain"]))
        p = np.array(f["params"])
    if desc.get("format") != _FORMAT:
        raise ValueError(f"{os.fspath(path)}: unsupported format {desc.get('format')!r}")
    saved = chain_from_description(desc)
    if chain is not None and chain.describe() != saved.describe():
        raise ValueError(
            f"{os.fspath(path)} holds parameters for a different chain:\n  saved: {saved!r}\n"
            f"  expected: {chain!r}"
        )
    check_params(saved, p)
    return (chain if chain is not None else saved), p
