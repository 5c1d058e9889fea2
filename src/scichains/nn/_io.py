"""Save and load parameters together with the chain's description (npz, no pickle)."""

from __future__ import annotations

import json
import os

import numpy as np

from ._activations import get_activation
from ._chain import SimpleChain
from ._layers import LAYERS
from ._validate import check_params

_FORMAT = "scichains.nn/1"


def save(path: str | os.PathLike, chain: SimpleChain, p: np.ndarray) -> None:
    """Write ``p`` and ``chain.describe()`` to an ``.npz`` file."""
    p = check_params(chain, p)
    desc = json.dumps({"format": _FORMAT, **chain.describe()})
    np.savez(path, params=p, chain=np.array(desc))


def chain_from_description(desc: dict) -> SimpleChain:
    layers = []
    for cfg in desc["layers"]:
        cfg = dict(cfg)
        kind = cfg.pop("type")
        if kind not in LAYERS:
            raise ValueError(f"unknown layer type {kind!r} in saved chain")
        for key in ("activation", "fn"):
            if key in cfg:
                cfg[key] = get_activation(cfg[key])
        layers.append(LAYERS[kind](**cfg))
    return SimpleChain(tuple(desc["input_shape"]), *layers)


def load(path: str | os.PathLike, chain: SimpleChain | None = None):
    """Read a file written by :func:`save`; returns ``(chain, p)``.

    When ``chain`` is given, the file must describe the same chain, else ``ValueError``.
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
