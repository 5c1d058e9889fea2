"""scichains._checks: the compiled finiteness check agrees with numpy on every kind of array."""

import numpy as np
import pytest

from scichains._checks import all_finite

pytestmark = pytest.mark.whitebox


@pytest.mark.parametrize(
    "x",
    [
        np.zeros(0),
        np.arange(5.0),
        np.ones((3, 4)),
        np.ones((3, 4))[:, ::2],  # not contiguous: numpy's path
        np.arange(6, dtype=np.float32),  # another dtype: numpy's path
        np.arange(6),
    ],
)
def test_agrees_with_numpy(x):
    assert all_finite(x) is True
    if x.size and x.dtype.kind == "f":
        for bad in (np.nan, np.inf, -np.inf):
            y = x.copy()
            y.flat[-1] = bad
            assert all_finite(y) is bool(np.isfinite(y).all()) is False
            z = x.copy()
            z.flat[0] = bad
            assert all_finite(z) is False
