"""Work buffers in huge pages (scichains.nn._memory)."""

import mmap
import sys

import numpy as np
import pytest

from scichains.nn import _memory


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 51720), (3, 7), (1, (1 << 20) + 3)])
def test_zeros_huge_is_a_zeroed_writeable_array(shape, dtype):
    a = _memory.zeros_huge(shape, dtype)
    assert a.shape == shape and a.dtype == dtype
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.aligned
    assert not a.any()
    a[...] = np.arange(a.size, dtype=dtype).reshape(shape)  # every element writable
    assert a[-1, -1] == dtype(a.size - 1)


def test_large_buffers_start_at_a_huge_page_boundary():
    big = _memory.zeros_huge((2, 51720), np.float32)  # 404 KB: a matexp work buffer
    small = _memory.zeros_huge((8, 8), np.float32)
    assert small.nbytes < _memory.HUGE_MIN_BYTES
    if sys.platform.startswith("linux") and hasattr(mmap, "MADV_HUGEPAGE"):
        assert big.ctypes.data % (2 << 20) == 0


def test_buffers_outlive_their_creator():
    views = [_memory.zeros_huge((300, 300), np.float64)[5] for _ in range(3)]
    for v in views:
        v[:] = 1.0
    assert all(v.sum() == 300.0 for v in views)


def test_training_keeps_its_work_buffers_in_huge_pages():
    import scichains as sc
    from scichains.nn import _train

    rng = np.random.default_rng(0)
    X = rng.standard_normal((10_000, 4)).astype(np.float32)
    Y = rng.standard_normal((10_000, 4)).astype(np.float32)
    chain = sc.SimpleChain(4, sc.Dense(32, "tanh"), sc.Dense(16, "tanh"), sc.Dense(4))
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    tr = _train._Trainer(chain.init_params(seed=0), cwl, X, sc.Adam(), 1, None, pretile=True)
    assert tr.work.nbytes >= _memory.HUGE_MIN_BYTES and tr.XYt.nbytes >= _memory.HUGE_MIN_BYTES
    if sys.platform.startswith("linux") and hasattr(mmap, "MADV_HUGEPAGE"):
        assert tr.work.ctypes.data % (2 << 20) == 0
        assert tr.XYt.ctypes.data % (2 << 20) == 0
