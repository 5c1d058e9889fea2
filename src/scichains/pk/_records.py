"""The records of an event table: doses, subjects and the table (what :func:`read_events`
makes; the reader is :mod:`._events`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ._table import EventTableError


@dataclass(frozen=True)
class Dose:
    """One dose: ``amount`` into state ``state`` (0-based) at ``time``; ``duration > 0`` makes
    it a zero-order infusion of rate ``amount / duration`` (0: a bolus). ``row``: the source
    record (1-based data row; repeats from ``ADDL`` share their record's row).
    ``ss_interval > 0``: a steady-state dose (``SS=1``, ``II``): the state just before it is
    the periodic steady state of this dose given every ``ss_interval``; with ``ss_add``
    (``SS=2``) that steady state is added to the state instead. ``modelled``: 0, or a
    zero-order input whose duration (``-2``: ``RATE=-2``, ``PKModel(duration=...)``) or rate
    (``-1``: ``RATE=-1``, ``PKModel(rate=...)``) the model gives (``duration`` is 0 here)."""

    time: float
    amount: float
    state: int
    duration: float = 0.0
    row: int = 0
    ss_interval: float = 0.0
    ss_add: bool = False
    modelled: int = 0

    @property
    def rate(self) -> float:
        return self.amount / self.duration if self.duration > 0 else 0.0


@dataclass
class Subject:
    """One subject's events, as :func:`read_events` makes them.

    Attributes
    ----------
    id : the subject's ``ID`` as read: an int for a whole number (``1``, ``1.0``), else a
        float or the text
    doses : the :class:`Dose` records, in time order (``ADDL`` repeats included)
    times : observation times, float64, shape ``(n_obs,)``, non-decreasing (replicates at
        one time allowed)
    dv : the observations at ``times``, float64, shape ``(n_obs,)``
    rows : the source rows (1-based) of the observations, int64, shape ``(n_obs,)``
    covariates : ``{name: value}`` at the subject's first record (NaN where missing there)
    covariate_changes : the names whose value changes within the subject
    covariate_history : ``(time, row, {name: value})`` at each record where a value changes,
        the values in effect from that time on (last observation carried forward; a missing
        value carries the previous one forward)
    cens : the censoring of each observation, shape ``(n_obs,)`` (``CENS``): 0 observed, 1
        below its ``dv`` (the LLOQ: M3), -1 above it; None: none censored
    limit : the other end of a censored observation's interval, shape ``(n_obs,)``
        (``LIMIT``: ``(limit, dv)`` for ``cens`` 1, ``(dv, limit)`` for -1; NaN or infinite:
        none); None: no limits
    dvid : the ``DVID`` (endpoint) of each observation, int64, shape ``(n_obs,)``; None when
        the table has no ``DVID`` column
    resets : the times of the subject's reset events (``EVID`` 3 and 4), ascending; the
        doses before each are already cut there (``doses`` holds what is given)
    n_obs : the number of observations
    n_censored : the number of censored observations
    """

    id: object
    doses: list[Dose]
    times: np.ndarray
    dv: np.ndarray
    rows: np.ndarray
    covariates: dict = field(default_factory=dict)
    covariate_changes: tuple = ()
    covariate_history: tuple = ()
    cens: np.ndarray | None = None
    limit: np.ndarray | None = None
    dvid: np.ndarray | None = None
    resets: tuple = ()

    @property
    def n_obs(self) -> int:
        return int(self.times.size)

    @property
    def n_censored(self) -> int:
        return 0 if self.cens is None else int(np.count_nonzero(self.cens))


@dataclass
class EventData:
    """An event table read into subjects (:func:`read_events`, :func:`theophylline`).

    Attributes
    ----------
    subjects : list of :class:`Subject`, in order of first appearance in the table
    covariates : the covariate column names (upper case), a tuple of str
    n_obs : the number of observations over all subjects

    ``len(data)`` is the number of subjects.
    """

    subjects: list[Subject]
    covariates: tuple

    @property
    def n_obs(self) -> int:
        return sum(s.n_obs for s in self.subjects)

    @property
    def n_censored(self) -> int:
        """The number of censored observations (``CENS`` not 0)."""
        return sum(s.n_censored for s in self.subjects)

    @property
    def dvids(self) -> tuple | None:
        """The ``DVID`` values of the observations (sorted, each once), or None when the
        subjects have none (no ``DVID`` column)."""
        if all(s.dvid is None for s in self.subjects):
            return None
        vals = [s.dvid for s in self.subjects if s.dvid is not None]
        return tuple(int(v) for v in np.unique(np.concatenate(vals))) if vals else ()

    def __len__(self) -> int:
        return len(self.subjects)

    def with_observations(self, dv) -> EventData:
        """A copy whose observations are ``dv`` (shape ``(n_obs,)``, subjects in data order:
        one replicate of :func:`simulate`, for a simulation study); doses, times,
        covariates, censoring flags and endpoints are the same (censor simulated values
        yourself: a censored observation's new DV is its limit). ``ValueError`` for another
        shape, a value that is not finite, or a censored observation's DV on the wrong side of
        its ``LIMIT``."""
        import dataclasses

        dv = np.asarray(dv, dtype=np.float64)
        if dv.shape != (self.n_obs,):
            raise ValueError(f"dv must have shape ({self.n_obs},), got {dv.shape}")
        if not np.all(np.isfinite(dv)):
            raise ValueError("dv must be finite")
        out, k = [], 0
        for s in self.subjects:
            new = dv[k : k + s.n_obs].copy()
            if s.cens is not None and s.limit is not None:
                for j in np.flatnonzero(s.cens):
                    wrong = limit_side(s.cens[j], s.limit[j], new[j])
                    if wrong:
                        raise ValueError(
                            f"subject ID {s.id}, row {s.rows[j]}: the new DV {new[j]:g} of a "
                            f"censored observation is not inside its interval: {wrong}"
                        )
            out.append(dataclasses.replace(s, dv=new))
            k += s.n_obs
        return EventData(out, self.covariates)

    def check_states(self, n_states: int) -> None:
        """Raise :class:`EventTableError` for a dose into a compartment the model lacks."""
        for s in self.subjects:
            for d in s.doses:
                if not 0 <= d.state < n_states:
                    raise EventTableError(
                        f"subject ID {s.id}, row {d.row}: CMT {d.state + 1} is not a compartment "
                        f"of the model (it has {n_states}: CMT 1..{n_states})"
                    )


def limit_side(cens: float, limit: float, dv: float) -> str:
    """What is wrong with a censored observation's ``LIMIT`` (the other end of its interval:
    below ``DV`` for ``CENS=1``, above it for ``-1``; a missing or infinite one is none), or
    ``""``."""
    if cens == 1.0 and math.isfinite(limit) and limit >= dv:
        return (
            f"LIMIT {limit:g} must be below DV {dv:g} for CENS=1 (the observation lies in "
            "(LIMIT, DV))"
        )
    if cens == -1.0 and math.isfinite(limit) and limit <= dv:
        return (
            f"LIMIT {limit:g} must be above DV {dv:g} for CENS=-1 (the observation lies in "
            "(DV, LIMIT))"
        )
    return ""
