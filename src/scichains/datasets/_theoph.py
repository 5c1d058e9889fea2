"""The Theophylline pharmacokinetic data set (shipped with the package)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

import numpy as np


@dataclass
class Subject:
    """One subject of the Theophylline data, as :func:`load_theophylline` returns it.

    Attributes
    ----------
    id : int
        The subject number (1..12).
    weight : float
        Body weight (kg).
    dose : float
        The oral dose (mg/kg), given at time 0.
    times : numpy.ndarray
        Observation times (h), float64, shape ``(k,)``.
    conc : numpy.ndarray
        Observed concentrations (mg/L), float64, shape ``(k,)``.
    """

    id: int
    weight: float
    dose: float
    times: np.ndarray
    conc: np.ndarray


def load_theophylline() -> list[Subject]:
    """The 12 subjects of R's ``Theoph`` data (Boeckmann, Sheiner and Beal, NONMEM Users
    Guide Part V, 1994), in subject order. Attribution: ``scichains/datasets/data/README.md``.
    """
    rows = []
    with resources.files("scichains.datasets").joinpath("data/theoph.csv").open() as fh:
        for r in csv.DictReader(fh):
            rows.append(r)
    subjects = []
    for sid in sorted({int(r["Subject"]) for r in rows}):
        mine = [r for r in rows if int(r["Subject"]) == sid]
        subjects.append(
            Subject(
                id=sid,
                weight=float(mine[0]["Wt"]),
                dose=float(mine[0]["Dose"]),
                times=np.array([float(r["Time"]) for r in mine]),
                conc=np.array([float(r["conc"]) for r in mine]),
            )
        )
    return subjects
