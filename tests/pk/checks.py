"""Checks shared by the pk tests."""

import numpy as np


def gradient_matches_central_differences(obj, x):
    """``obj.value_and_grad(x)``'s gradient against central differences of ``obj.value``
    (step 1e-4 per entry; rtol and atol 2e-5, asserted); returns the gradient."""
    _, g = obj.value_and_grad(x)
    fd = np.zeros_like(x)
    for k in range(x.size):
        e = np.eye(x.size)[k] * 1e-4
        fd[k] = (obj.value(x + e) - obj.value(x - e)) / 2e-4
    np.testing.assert_allclose(g, fd, rtol=2e-5, atol=2e-5)
    return g


def central(fun, ph, idx, h, relative=False):
    """Central differences of ``fun`` along the entries ``idx`` of ``ph`` (1 to 3 of them),
    step ``h`` (``relative``: ``h`` times each entry)."""
    if not idx:
        return fun(ph)
    step = h * ph[idx[-1]] if relative else h
    e = np.eye(ph.size)[idx[-1]] * step
    rest = idx[:-1]
    return (central(fun, ph + e, rest, h, relative) - central(fun, ph - e, rest, h, relative)) / (
        2 * step
    )
