"""What a worker process keeps between tasks: :func:`worker_cached` holds what a worker rebuilt
(problems, objectives) under a token, so it is rebuilt once per worker process, not once per
task. What rebuilds a problem (``ProblemSpec``, ``FunctionRef``) lives with the ensembles in
:mod:`scichains.ode.ensemble._spec`: nothing here imports the solvers.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 64
_BUILDING: dict = {}


def worker_cached(key, make: Callable[[], object]):
    """``make()`` once per process for ``key`` (the most recent :data:`_CACHE_SIZE` kept);
    threads of one worker asking at once wait for one build."""
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        lock = _BUILDING.setdefault(key, threading.Lock())
    with lock:
        with _CACHE_LOCK:
            if key in _CACHE:
                return _CACHE[key]
        value = make()
        with _CACHE_LOCK:
            _CACHE[key] = value
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
            _BUILDING.pop(key, None)
        return value


def new_token() -> str:
    return uuid.uuid4().hex


def as_rows(x, name: str, width: int | None) -> np.ndarray:
    """``x`` as a C-contiguous float64 array of shape ``(rows, width)``, finite, else a
    ``ValueError`` naming ``name`` and the first bad row."""
    from ..nn._validate import as_real

    a = as_real(x, name)
    if a.ndim != 2 or (width is not None and a.shape[1] != width) or a.shape[0] == 0:
        want = f"(m, {width})" if width is not None else "(m, k)"
        raise ValueError(f"{name} must have shape {want}, one row per trajectory; got {a.shape}")
    bad = ~np.isfinite(a)
    if bad.any():
        i = int(np.argwhere(bad)[0][0])
        raise ValueError(f"{name} contains NaN or infinite values (first in row {i})")
    return np.ascontiguousarray(a, dtype=np.float64)
