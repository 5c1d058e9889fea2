"""scichains._native: kernels called through their address (compiled once, not linked into
their callers)."""

import numba
import numpy as np
import pytest
from numba import prange
from numba.core.errors import TypingError

from scichains._jit import kernel, parallel_kernel
from scichains._native import Native, call_native, native, native_for

pytestmark = pytest.mark.whitebox


@kernel
def _scaled_row_sum(t, a, s):
    if s < 0:
        raise ValueError("s must not be negative")
    acc = 0.0
    for i in range(a.shape[1]):
        a[t, i] = a[t, i] * s + t
        acc += a[t, i]
    return acc


@kernel
def _serial(fn, a, s, out):
    for t in range(a.shape[0]):
        out[t] = call_native(fn, t, a, s)
    return out.sum()


@parallel_kernel
def _threaded(fn, a, s, out):
    for t in prange(a.shape[0]):
        out[t] = call_native(fn, t, a, s)
    return out.sum()


def _reference(a, s):
    b = a * s + np.arange(a.shape[0])[:, None]
    return b, b.sum(axis=1)


@pytest.mark.parametrize("caller", [_serial, _threaded])
def test_call_through_address_matches_numpy(caller):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7))
    want_a, want_rows = _reference(a, 1.5)
    fn = native_for(_scaled_row_sum, (0, a, 1.5))
    assert isinstance(fn, Native) and fn.address != 0
    out = np.zeros(5)
    total = caller(fn, a, 1.5, out)
    np.testing.assert_allclose(a, want_a, rtol=1e-15)
    np.testing.assert_allclose(out, want_rows, rtol=1e-14)
    assert total == pytest.approx(want_rows.sum(), rel=1e-14)


def test_made_once_per_signature():
    a = np.ones((2, 3))
    assert native_for(_scaled_row_sum, (0, a, 1.0)) is native_for(_scaled_row_sum, (3, a, 2.0))
    f32 = native_for(_scaled_row_sum, (0, a.astype(np.float32), 1.0))
    assert f32 is not native_for(_scaled_row_sum, (0, a, 1.0))
    sig = (numba.int64, numba.typeof(a), numba.float64)
    assert native(_scaled_row_sum, sig) is native_for(_scaled_row_sum, (0, a, 1.0))


def test_an_address_does_not_travel():
    import pickle

    fn = native_for(_scaled_row_sum, (0, np.ones((2, 3)), 1.0))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(fn)


def test_error_in_callee_reaches_caller():
    a = np.ones((2, 3))
    fn = native_for(_scaled_row_sum, (0, a, 1.0))
    with pytest.raises(ValueError, match="must not be negative"):
        _serial(fn, a, -1.0, np.zeros(2))


def test_mismatched_arguments_are_a_typing_error():
    a = np.ones((2, 3))
    # compiled for a float32 array: called with float64 arrays it must refuse, not run
    fn = native_for(_scaled_row_sum, (0, a.astype(np.float32), 1.0))
    with pytest.raises(TypingError, match="argument 1"):
        _serial(fn, a, 1.0, np.zeros(2))
    with pytest.raises(TypingError, match="Native function"):
        _serial(12345, a, 1.0, np.zeros(2))
