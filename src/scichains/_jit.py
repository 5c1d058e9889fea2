"""The one place numba is configured.

Every compiled kernel in scichains is a module-level function decorated with :func:`kernel`
(or :func:`parallel_kernel`), so that numba's on-disk cache (``cache=True``) serves it in every new
process. Kernels never take jitted functions as arguments or hold them in closures: that defeats
the cache (numba issue #2956).

Flags, and why:

- ``fastmath=True``: lets LLVM reassociate reductions (dot products over the batch) and contract
  multiply-adds into FMA; both are needed for the loops to vectorise.
- ``error_model="numpy"``: with numba's default ("python") every division carries a zero check that
  stops the surrounding loop from vectorising.
- ``boundscheck=False``: the Python API validates shapes before any kernel runs.

Set the environment variable ``SCICHAINS_DISABLE_CACHE=1`` to compile without the on-disk cache.
"""

from __future__ import annotations

import os

import numba

_CACHE = os.environ.get("SCICHAINS_DISABLE_CACHE", "0") not in ("1", "true", "yes")
FLAGS = dict(cache=_CACHE, fastmath=True, error_model="numpy", boundscheck=False, nogil=True)


def kernel(fn):
    """Compile ``fn`` as a serial, cached, nopython kernel."""
    return numba.njit(**FLAGS)(fn)


def parallel_kernel(fn):
    """Compile ``fn`` as a cached kernel whose ``prange`` loops run on numba's thread pool."""
    return numba.njit(parallel=True, **FLAGS)(fn)


def max_threads() -> int:
    """The number of threads numba's pool was started with (the cores available)."""
    return int(numba.config.NUMBA_NUM_THREADS)


def resolve_threads(threads: int | None) -> int:
    """Validate a ``threads=`` argument; ``None`` means every core numba may use."""
    if threads is None:
        return max_threads()
    if isinstance(threads, bool) or not isinstance(threads, (int,)) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if threads > max_threads():
        raise ValueError(
            f"threads={threads} exceeds the {max_threads()} threads numba was started with "
            "(set NUMBA_NUM_THREADS before importing numba to allow more)"
        )
    return int(threads)
