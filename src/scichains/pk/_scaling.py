"""The variables the fit's optimiser moves: fixed entries out, bounds mapped away, scaled.

For the free entries of the estimated vector ``x`` (see :meth:`PKModel.pack`):

- a typical value with bounds becomes unbounded: ``x = low + exp(v)`` (a lower bound),
  ``x = up - exp(v)`` (an upper bound), ``x = low + (up - low) / (1 + exp(-v))`` (both);
  other entries ``v = x``;
- ``v = v0 + s * u``: ``u = 0`` at the start, and ``s_k = sqrt(2 / sum_i (dOFV_i/dv_k)^2)``,
  from the subjects' gradients at the start: the sum of the outer products of the scores
  approximates the information, ``2 I`` the Hessian of the OFV (BHHH), so a unit of ``u_k``
  is about one standard error of ``v_k`` and the optimiser's first step, ``-dOFV/du``, is a
  diagonal Newton step, whatever the units of the parameter (``THETA(1) * WT`` with
  ``THETA(1)`` near 0.005, or its log). NONMEM scales its estimated vector to the initial
  values for the same purpose.
"""

from __future__ import annotations

import numpy as np

NONE, LOWER, UPPER, BOTH = 0, 1, 2, 3


class Scaling:
    """``x(u)`` and ``dOFV/du`` for the free entries ``free`` of ``x`` (the others stay at
    their values in ``x0``); ``low``, ``up``: bounds per entry of ``x`` (``-inf``/``inf``)."""

    def __init__(self, x0, free, low, up):
        self.x0 = np.array(x0, dtype=np.float64)
        self.free = np.asarray(free, dtype=np.int64)
        lo, hi = np.asarray(low, dtype=np.float64)[self.free], np.asarray(up)[self.free]
        self.low, self.up = lo, hi
        kind = np.full(self.free.size, NONE)
        kind[np.isfinite(lo) & ~np.isfinite(hi)] = LOWER
        kind[~np.isfinite(lo) & np.isfinite(hi)] = UPPER
        kind[np.isfinite(lo) & np.isfinite(hi)] = BOTH
        self.kind = kind
        self.v0 = self._v(self.x0[self.free])
        self.s = np.ones(self.free.size)

    # elementwise maps between the bounded x and the unbounded v
    def _v(self, xf):
        v = np.array(xf, dtype=np.float64)
        k, lo, hi = self.kind, self.low, self.up
        m = k == LOWER
        v[m] = np.log(xf[m] - lo[m])
        m = k == UPPER
        v[m] = np.log(hi[m] - xf[m])
        m = k == BOTH
        z = (xf[m] - lo[m]) / (hi[m] - lo[m])
        v[m] = np.log(z) - np.log1p(-z)
        return v

    def _x(self, v):
        """``(x_free, dx/dv)``."""
        x = np.array(v, dtype=np.float64)
        dx = np.ones_like(x)
        k, lo, hi = self.kind, self.low, self.up
        m = k == LOWER
        e = np.exp(v[m])
        x[m], dx[m] = lo[m] + e, e
        m = k == UPPER
        e = np.exp(v[m])
        x[m], dx[m] = hi[m] - e, -e
        m = k == BOTH
        z = 1.0 / (1.0 + np.exp(-v[m]))
        w = hi[m] - lo[m]
        x[m], dx[m] = lo[m] + w * z, w * z * (1.0 - z)
        return x, dx

    def x(self, u):
        """The estimated vector at ``u``."""
        x = self.x0.copy()
        x[self.free] = self._x(self.v0 + self.s * u)[0]
        return x

    def grad(self, u, gx):
        """``dOFV/du`` from ``dOFV/dx`` (``(size,)``) at ``u``."""
        dx = self._x(self.v0 + self.s * u)[1]
        return gx[self.free] * dx * self.s

    def u(self, x):
        """The ``u`` of an estimated vector ``x`` (whose fixed entries are ignored)."""
        return (self._v(np.asarray(x, dtype=np.float64)[self.free]) - self.v0) / self.s

    def rescale(self, x, gi):
        """Centre ``u = 0`` on ``x`` and set the scales from the subjects' OFV gradients
        ``gi`` (``(N, size)``) at ``x``; an entry without information (all its gradients
        zero or not finite) keeps a unit scale. Returns the new ``u`` of ``x`` (zeros)."""
        self.x0 = np.array(x, dtype=np.float64)
        self.v0 = self._v(self.x0[self.free])
        dx = self._x(self.v0)[1]
        gv = np.asarray(gi, dtype=np.float64)[:, self.free] * dx
        info = np.sum(gv * gv, axis=0)
        size = np.maximum(1.0, np.abs(self.v0))
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.sqrt(2.0 / info)
        ok = np.isfinite(s) & (s > 0)
        s = np.where(ok, s, 1.0)
        self.s = np.clip(s, 1e-12 * size, 1e4 * size)
        return np.zeros(self.free.size)
