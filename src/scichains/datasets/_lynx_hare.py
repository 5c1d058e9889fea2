"""The Hudson Bay lynx and snowshoe hare pelt counts, 1900-1920 (shipped with the package)."""

from __future__ import annotations

import csv
from importlib import resources

import numpy as np


def load_lynx_hare() -> np.ndarray:
    """The Hudson's Bay Company pelt counts of snowshoe hare and Canadian lynx, 1900-1920.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(21, 3)``: one row a year (1900..1920), columns year, hare, lynx;
        the counts are in thousands of pelts.

    The table is MacLulich (1937) as reproduced in Odum (1953), *Fundamentals of Ecology*,
    and widely since (Bob Carpenter's Stan case study "Predator-Prey Population Dynamics",
    the UDE paper of Rackauckas et al. 2020). Provenance: ``scichains/datasets/data/README.md``.
    """
    with resources.files("scichains.datasets").joinpath("data/lynx_hare.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    return np.array([[float(r["Year"]), float(r["Hare"]), float(r["Lynx"])] for r in rows])
