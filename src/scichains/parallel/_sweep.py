"""Many independent fits (multi-start, hyperparameter sweeps) as futures, ranked."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import _executor as ex


@dataclass
class SweepResult:
    """One run of a :func:`sweep`.

    ``index``: its position in ``configs``; ``config``: what it was given; ``result``: what
    ``fit`` returned (``None`` if it raised); ``score``: ``key(result)`` (``inf`` for a
    failed run or a NaN score); ``error``: the exception ``fit`` raised, or ``None``;
    ``seconds``: its run time where it ran."""

    index: int
    config: Any
    result: Any
    score: float
    error: BaseException | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None


def _timed(fit: Callable, config):
    start = time.perf_counter()
    try:
        result = fit(config)
    except Exception as e:  # noqa: BLE001 - handed back as data (sweep's errors=)
        return None, e, time.perf_counter() - start
    return result, None, time.perf_counter() - start


def default_key(result) -> float:
    """The score of a fit's result: ``result.fun`` (``scipy.optimize.OptimizeResult``),
    ``result["fun"]`` or ``result["loss"]`` (a dict), or the result itself as a float."""
    if hasattr(result, "fun"):
        return float(result.fun)
    if isinstance(result, dict):
        for name in ("fun", "loss", "value"):
            if name in result:
                return float(result[name])
    return float(result)


def sweep(
    fit: Callable[[Any], Any],
    configs: Iterable,
    executor=None,
    key: Callable[[Any], float] | None = None,
    errors: str = "keep",
) -> list[SweepResult]:
    """Run ``fit(config)`` for every config (seeds, initial points, hyperparameters) and
    return every run as a :class:`SweepResult`, best first.

    Parameters
    ----------
    fit : a function of one argument; with Dask it runs on a worker, so it must be
        picklable (a module-level function; one defined in ``__main__`` is pickled by value)
    configs : the arguments, one run each
    executor : None (one after another, here), a ``dask.distributed.Client`` (each run a
        future, submitted with ``pure=False``: identical-looking runs are all run, never
        deduplicated; collected with ``distributed.as_completed``) or any object with
        ``submit``/``map`` (``concurrent.futures`` executors: ``concurrent.futures.
        as_completed``)
    key : the score to rank by, lower first (default :func:`default_key`: ``result.fun``)
    errors : ``"keep"`` (default): a run that raises is kept, last, with its exception in
        ``error`` and score ``inf``, the others go on; ``"raise"``: the exception of the
        failed run with the lowest index is raised once all runs ended

    Ranking: by score, ties and failures in index order, so the order does not depend on
    which run finished first.
    """
    if errors not in ("keep", "raise"):
        raise ValueError(f"errors must be 'keep' or 'raise', got {errors!r}")
    if not callable(fit):
        raise TypeError(f"fit must be callable, got {type(fit).__name__}")
    executor = ex.check_executor(executor)
    key = default_key if key is None else key
    configs = list(configs)
    done: dict[int, tuple] = {}
    if executor is None:
        for i, c in enumerate(configs):
            done[i] = _timed(fit, c)
    else:
        futures = {ex.submit(executor, _timed, fit, c): i for i, c in enumerate(configs)}
        if ex.is_dask(executor):
            from distributed import as_completed
        else:
            from concurrent.futures import as_completed
        for fut in as_completed(list(futures)):
            done[futures[fut]] = fut.result()
    out = []
    for i, c in enumerate(configs):
        result, error, seconds = done[i]
        score = math.inf
        if error is None:
            try:
                score = float(key(result))
            except Exception as e:  # noqa: BLE001 - a result the key cannot score
                error = e
        if math.isnan(score):
            score = math.inf
        out.append(SweepResult(i, c, result, score, error, seconds))
    if errors == "raise":
        for r in out:
            if r.error is not None:
                raise r.error
    out.sort(key=lambda r: (r.error is not None, r.score, r.index))
    return out
