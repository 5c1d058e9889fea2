"""The forced linear ODE x' = -k x + u(t) with a measured input u, and its closed-form
solution (test_inputs.py and tests/adjoint/test_inputs_gradient.py)."""

import numba
import numpy as np

TS = np.linspace(0.0, 10.0, 21)
SIGNAL = np.sin(1.3 * TS) + 0.2 * TS


@numba.njit
def forced(du, u, p, t, x):
    du[0] = -p[0] * u[0] + x[0]


def convolution(k, x0, ts, values, kind, T):
    """The exact solution of x' = -k x + u(t) at the sorted times T, u linear (or constant)
    between the samples: on each piece u = a + b s, x(t_i + s) = e^{-ks} x_i + a (1 -
    e^{-ks}) / k + b (s / k - (1 - e^{-ks}) / k^2)."""
    out = np.empty(T.size)
    x = x0
    for i in range(ts.size - 1):
        a = values[i]
        b = 0.0 if kind == "constant" else (values[i + 1] - values[i]) / (ts[i + 1] - ts[i])

        def at(s, x=x, a=a, b=b):
            e = np.exp(-k * s)
            return e * x + a * (1.0 - e) / k + b * (s / k - (1.0 - e) / k**2)

        inside = (T >= ts[i]) & (T <= ts[i + 1])
        out[inside] = at(T[inside] - ts[i])
        x = at(ts[i + 1] - ts[i])
    return out
