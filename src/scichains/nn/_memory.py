"""Work buffers in transparent huge pages (Linux), for the buffers that training keeps.

A matrix-exponential training step (4 -> 32 -> 16 -> 4, 10,000 samples) streams ~0.5 MB of
work rows and pre-tiled data per step through the 1 MB second-level cache, which is indexed by
physical address. In 4 KB pages the physical layout is luck: in one process, trainers with
identical buffers ran from 570 to 645 us per step depending on where their pages landed (one
thread, AMD EPYC Zen 4, steps alternated between trainers). In one 2 MB page the layout is
contiguous and every trainer ran at the fast end (579-589 us): the same speed as a lucky
allocation, without the ~10% spread from run to run.
"""

from __future__ import annotations

import mmap

import numpy as np

_HUGE_PAGE = 2 << 20
#: Smaller buffers stay in ordinary pages (a huge page would be mostly empty).
HUGE_MIN_BYTES = 128 << 10


def zeros_huge(shape: tuple[int, ...], dtype) -> np.ndarray:
    """``np.zeros(shape, dtype)``, starting at a 2 MB boundary of an anonymous mapping whose
    kernel is asked for transparent huge pages (``madvise(MADV_HUGEPAGE)``).

    Falls back to ``np.zeros`` for buffers under :data:`HUGE_MIN_BYTES`, where the platform has
    no ``MADV_HUGEPAGE``, or when the mapping or the advice fails; the kernel itself falls back
    to ordinary pages when it has no huge page to give (or transparent huge pages are off).
    The result is C-contiguous and writeable; the mapping lives as long as the array.
    """
    dt = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < HUGE_MIN_BYTES or advice is None:
        return np.zeros(shape, dt)
    # whole huge pages from the first 2 MB boundary on, whatever the mapping's alignment
    span = -(-nbytes // _HUGE_PAGE) * _HUGE_PAGE
    try:
        # private: a shared anonymous mapping is shmem, whose huge pages are a separate setting
        flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20)
        m = mmap.mmap(-1, span + _HUGE_PAGE, flags=flags)
        m.madvise(advice)
    except (OSError, ValueError):
        return np.zeros(shape, dt)
    raw = np.frombuffer(m, dtype=np.uint8)  # anonymous memory: zeroed
    off = (-raw.ctypes.data) % _HUGE_PAGE
    return raw[off : off + nbytes].view(dt).reshape(shape)
