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

Vector width: the dense kernels hold explicit SIMD vectors (``nn/_simd.py``) of
:data:`VECTOR_BYTES` bytes, chosen from the CPU numba compiles for (``NUMBA_CPU_NAME`` /
``NUMBA_CPU_FEATURES`` when set, else the host): 32 bytes with AVX2 or AVX-512 (see
:func:`vector_bytes` for why not 64 on AVX-512), 16 bytes elsewhere (SSE, NEON: LLVM lowers
the vectors for any target). ``SCICHAINS_VECTOR_BYTES=16|32|64`` overrides the choice (the
tests force 16 to check the portable path). numba's cache is keyed by CPU name and features,
so a cache written on one CPU is never loaded on another; the width is part of the source
stamp below, so a cache written with another width is dropped.

numba keys a cached kernel on its own file only, but a kernel's cached machine code includes the
kernels it calls from other files. After any source file of the package changes (an edit, an
upgrade), :func:`_drop_stale_cache` therefore removes the package's cached kernels once, at
import, so nothing stale is ever loaded.
"""

from __future__ import annotations

import hashlib
import os
import threading
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


def _cpu_features() -> str:
    """The features numba compiles for, as LLVM writes them (``+avx2,+fma,-avx512f,...``)."""
    forced = numba.config.CPU_FEATURES
    if forced:
        return str(forced)
    from llvmlite import binding as llvm

    return llvm.get_host_cpu_features().flatten()


def vector_bytes() -> int:
    """Bytes per SIMD vector of the dense kernels on this CPU (or ``SCICHAINS_VECTOR_BYTES``).

    AVX-512 machines get 32 bytes too: measured on an Intel Xeon (AVX-512), 64-byte vectors
    made the matrix-exponential training step 6-10% slower at the best tile width and 2x
    slower without retuning; on an AMD Zen 4 (whose 512-bit instructions run as two 256-bit
    halves) 3.91-4.10 s per 10,000 steps against 3.89 s (``benchmarks/README.md``). Set the
    variable to compare on another machine.
    """
    env = os.environ.get("SCICHAINS_VECTOR_BYTES", "").strip()
    if env:
        if env not in ("16", "32", "64"):
            raise ValueError(f"SCICHAINS_VECTOR_BYTES must be 16, 32 or 64, got {env!r}")
        return int(env)
    features = set(_cpu_features().split(","))
    return 32 if "+avx2" in features else 16


VECTOR_BYTES = vector_bytes()


def _cache_root() -> Path:
    """Where numba writes this package's cache: beside the sources, or under
    ``NUMBA_CACHE_DIR`` when that is set."""
    if numba.config.CACHE_DIR:
        return Path(numba.config.CACHE_DIR)
    return _PACKAGE


def _drop_stale_cache() -> None:
    """Delete cached kernels of this package when any of its sources (or the vector width)
    changed since they were written (best effort: a read-only install is left alone)."""
    root = _cache_root()
    stamp = root / ("__pycache__" if root == _PACKAGE else "") / "scichains-sources.sha256"
    want = f"{SOURCE_DIGEST} vector-bytes={VECTOR_BYTES}"
    try:
        if stamp.exists() and stamp.read_text() == want:
            return
        if root == _PACKAGE:
            dirs = list(_PACKAGE.rglob("__pycache__"))
        else:  # one folder per source folder, named as numba's _UserProvidedCacheLocator does
            dirs = [
                root / f"{d.name}_{hashlib.sha1(str(d).encode()).hexdigest()}"
                for d in {f.parent for f in _PACKAGE.rglob("*.py")}
            ]
        for cache_dir in dirs:
            for f in list(cache_dir.glob("*.nbi")) + list(cache_dir.glob("*.nbc")):
                f.unlink(missing_ok=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(want)
    except OSError:
        pass


if _CACHE:
    _drop_stale_cache()

FLAGS = dict(cache=_CACHE, fastmath=FASTMATH, error_model="numpy", boundscheck=False, nogil=True)
CFUNC_FLAGS = {k: v for k, v in FLAGS.items() if k != "nogil"}
"""The flags of the C-callables (``numba.cfunc``), which take no ``nogil``."""


def function_from_address(fntype, name):
    """An intrinsic turning the integer address of a C-callable (``numba.cfunc``) of type
    ``fntype`` (a ``numba.types.FunctionType``) into a first-class function value compiled
    code can call.

    Passing a dispatcher as a ``FunctionType`` argument costs ~60 us of unboxing per call from
    Python, and a jitted function held in a closure defeats the cache; an integer address
    costs nothing and caches. Built on numba's data model for first-class functions (fields
    ``c_addr``, ``py_addr``, ``jit_addr``).
    """
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    def impl(typingctx, addr):
        sig = fntype(types.int64)

        def codegen(context, builder, signature, args):
            sfunc = cgutils.create_struct_proxy(signature.return_type)(context, builder)
            llvoidptr = context.get_value_type(types.voidptr)
            sfunc.c_addr = builder.inttoptr(args[0], llvoidptr)
            sfunc.py_addr = cgutils.get_null_value(llvoidptr)
            sfunc.jit_addr = cgutils.get_null_value(llvoidptr)
            return sfunc._getvalue()

        return sig, codegen

    impl.__name__ = impl.__qualname__ = name
    return intrinsic(impl)


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


_PARALLEL_LOCK = threading.Lock()
_SERIALISE_LAUNCHES: list[bool] = []  # [True/False] once numba has picked its threading layer


def parallel_lock() -> threading.Lock | None:
    """The lock to hold around a call into the parallel (``prange``) kernels, or ``None``.

    numba's ``omp`` and ``tbb`` threading layers take launches from several Python threads
    at once; the ``workqueue`` layer does not (it aborts the process: "Concurrent access has
    been detected"), so under it launches are serialised. Until the first launch has
    started a layer, launches are serialised too (the layer is not known yet).
    """
    if _SERIALISE_LAUNCHES:
        return _PARALLEL_LOCK if _SERIALISE_LAUNCHES[0] else None
    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet
        return _PARALLEL_LOCK
    _SERIALISE_LAUNCHES.append(layer == "workqueue")
    return parallel_lock()
