import numpy as np
import pytest

import scichains as sc
from scichains.nn._activations import ACTIVATIONS

from .reference import act


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_float32_approximation_accuracy(name):
    z = np.linspace(-12, 12, 20001)
    chain = sc.SimpleChain(1, sc.Activation(name))
    p = chain.init_params(dtype=np.float32)
    y32 = chain(z[:, None].astype(np.float32), p)[:, 0].astype(np.float64)
    y64 = chain(z[:, None], p.astype(np.float64))[:, 0]
    ref, _ = act(name, z)
    np.testing.assert_allclose(y64, ref, rtol=1e-14, atol=1e-14)
    # float32 rounding of the input itself moves the function by |f'(z)| * eps32 * |z|
    zf = z.astype(np.float32).astype(np.float64)
    ref32, d32 = act(name, zf)
    err = np.abs(y32 - ref32)
    tol = 1e-6 * np.maximum(1.0, np.abs(ref32))
    assert np.all(err <= tol), (name, err.max(), zf[np.argmax(err - tol)])
