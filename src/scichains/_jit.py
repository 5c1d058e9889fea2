"""The one place numba is configured.

Every compiled kernel in scichains is a module-level function decorated with :func:`kernel`
(or :func:`parallel_kernel`), so that numba's on-disk cache (``cache=True``) serves it in every new
process. Kernels never take jitted functions as arguments or hold them in closures: that defeats
the cache (numba issue #2956).

Flags, and why:

- ``fastmath`` without ``nnan``/``ninf``: ``reassoc`` lets LLVM vectorise reductions (dot
  products over the batch), ``contract`` fuses multiply-adds into FMA. The no-NaN/no-inf flags
  (and ``nsz``, which with ``reassoc`` also lets LLVM fold ``x - x`` to 0) are left out on
  purpose: with them LLVM folds ``isfinite`` checks to true and a diverging
  training run would go unnoticed.
- ``error_model="numpy"``: with numba's default ("python") every division carries a zero check that
  stops the surrounding loop from vectorising.
- ``boundscheck=False``: the Python API validates shapes before any kernel runs.

Set the environment variable ``SCICHAINS_DISABLE_CACHE=1`` to compile without the on-disk cache.

numba keys a cached kernel on its own file only, but a kernel's cached machine code includes the
kernels it calls from other files. After any source file of the package changes (an edit, an
upgrade), :func:`_drop_stale_cache` therefore removes the package's cached kernels once, at
import, so nothing stale is ever loaded.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numba

_CACHE = os.environ.get("SCICHAINS_DISABLE_CACHE", "0") not in ("1", "true", "yes")
FASTMATH = {"reassoc", "contract", "arcp", "afn"}
_PACKAGE = Path(__file__).resolve().parent


def _source_digest() -> str:
    """SHA-256 over the package's Python sources (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


SOURCE_DIGEST = _source_digest()
"""Digest of this package's sources: generated modules include it in their names, so that
their cached machine code never outlives the package code it was linked against."""


def _drop_stale_cache() -> None:
    """Delete cached kernels of this package when any of its sources changed since they were
    written (best effort: a read-only install is left alone)."""
    stamp = _PACKAGE / "__pycache__" / "numba-sources.sha256"
    want = SOURCE_DIGEST
    try:
        if stamp.exists() and stamp.read_text() == want:
            return
        for cache_dir in _PACKAGE.rglob("__pycache__"):
            for f in list(cache_dir.glob("*.nbi")) + list(cache_dir.glob("*.nbc")):
                f.unlink(missing_ok=True)
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(want)
    except OSError:
        pass


if _CACHE:
    _drop_stale_cache()

FLAGS = dict(cache=_CACHE, fastmath=FASTMATH, error_model="numpy", boundscheck=False, nogil=True)


def kernel(fn):
    """Compile ``fn`` as a serial, cached, nopython kernel."""
    return numba.njit(**FLAGS)(fn)


def inline_kernel(fn):
    """Compile ``fn`` as a kernel that numba inlines into its callers (at the IR level).

    For small helpers that take array slices: a slice passed to a separately compiled function
    costs calls into numba's reference counting, which dominate loops of a few dozen elements.
    """
    return numba.njit(inline="always", **FLAGS)(fn)


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
