"""NeuralODE: du/dt = chain(u; p), fitted through the discrete adjoint."""

from __future__ import annotations

import numba
import numpy as np

from ..adjoint._discrete import discrete_adjoint, find_save_positions, squared_error
from ..adjoint._sensealg import DiscreteAdjoint
from ..nn import chain_forward, chain_vjp
from ..nn._chain import SimpleChain
from ..ode._kernels import RHS_SIGNATURE, VJP_SIGNATURE, integrate
from ..ode._solution import ODESolveError, ReturnCode
from ..ode._tableaus import ExplicitRK, Tsit5


@numba.cfunc(RHS_SIGNATURE, cache=True)
def _neural_rhs(du, u, p, t, k):
    chain_forward(k, p, u, du)


@numba.cfunc(VJP_SIGNATURE, cache=True)
def _neural_vjp(v, u, p, t, k, ubar, pbar):
    chain_vjp(k, p, u, v, ubar, pbar)


class NeuralODE:
    """A neural ODE du/dt = chain(u; p) on ``tspan``, observed at ``saveat``.

    Parameters
    ----------
    chain : SimpleChain with input and output of the state's size ``n``
    tspan : (t0, t1)
    saveat : times (sorted in the direction of integration) where the solution is returned
    solver : an explicit RK method (default Tsit5)
    sensealg : DiscreteAdjoint() (the only one so far)
    rtol, atol, max_steps : as in :func:`scichains.ode.solve`

    ``p`` is the chain's flat parameter vector (float64).
    """

    def __init__(
        self,
        chain: SimpleChain,
        tspan,
        saveat,
        solver: ExplicitRK = Tsit5,
        sensealg=None,
        rtol: float = 1e-6,
        atol: float = 1e-8,
        max_steps: int = 100_000,
    ):
        if not isinstance(chain, SimpleChain):
            raise TypeError("NeuralODE needs a SimpleChain")
        if chain.input_shape != (chain.n_out,):
            raise ValueError(
                f"the chain must map the state to its derivative: input shape "
                f"{chain.input_shape}, output shape {chain.output_shape()}"
            )
        if not isinstance(solver, ExplicitRK):
            raise TypeError(f"unknown solver {solver!r}")
        if not solver.adaptive:
            raise ValueError(
                "NeuralODE uses adaptive solvers; fixed-step methods are not supported"
            )
        self.sensealg = DiscreteAdjoint() if sensealg is None else sensealg
        if not isinstance(self.sensealg, DiscreteAdjoint):
            raise NotImplementedError(f"{self.sensealg!r} is not available yet")
        self.chain = chain
        self.n = chain.n_out
        t0, t1 = float(tspan[0]), float(tspan[1])
        if t0 == t1:
            raise ValueError("tspan has zero length")
        self.tspan = (t0, t1)
        direction = 1.0 if t1 > t0 else -1.0
        self.saveat = np.ascontiguousarray(saveat, dtype=np.float64)
        if self.saveat.ndim != 1 or self.saveat.size == 0:
            raise ValueError("saveat must be a non-empty vector of times")
        lo, hi = min(t0, t1), max(t0, t1)
        if np.any((self.saveat < lo) | (self.saveat > hi)):
            raise ValueError(f"saveat has times outside tspan {tspan}")
        if np.any(direction * np.diff(self.saveat) <= 0):
            raise ValueError("saveat must be strictly increasing in the direction of integration")
        self.solver = solver
        self.rtol, self.atol, self.max_steps = float(rtol), float(atol), int(max_steps)
        stops = np.unique(np.concatenate([self.saveat, [t1]]))
        self._stops = np.ascontiguousarray(stops if direction > 0 else stops[::-1])
        self._tab = solver.arrays()
        self._kernel = chain.kernel(np.float64)
        cap = self.max_steps + 2 * self._stops.size + 2
        self._ts = np.empty(cap)
        self._us = np.empty((cap, self.n))
        self._fs = np.empty((cap, self.n))
        self._stats = np.zeros(4, dtype=np.int64)
        s = solver.stages
        self._kstore = np.empty((cap, s, self.n))
        self._ws = np.zeros((2 * s + 3, self.n))
        # everything the kernels need besides (u0, p, data), made once
        ns = self._stops.size
        self._no_jumps = (
            np.full(ns, -1, dtype=np.int64),
            np.zeros(ns, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0),
        )
        self._dtmin = 1e-14 * max(1.0, abs(t1 - t0))
        self._ctrl = solver.error_order + 1 if solver.adaptive else 0
        self._pos = np.zeros(self.saveat.size, dtype=np.int64)
        self._dl_du = np.zeros((self.saveat.size, self.n))
        self._pb = np.zeros(chain.num_params)

    def _forward(self, u0, p):
        u0 = np.ascontiguousarray(u0, dtype=np.float64)
        if u0.shape != (self.n,):
            raise ValueError(f"u0 must have shape ({self.n},), got {u0.shape}")
        if not np.all(np.isfinite(u0)):
            raise ValueError("u0 contains NaN or infinite values")
        if not isinstance(p, np.ndarray) or p.shape != (self.chain.num_params,):
            raise ValueError(f"p must be a vector of {self.chain.num_params} parameters")
        p = np.ascontiguousarray(p, dtype=np.float64)
        A, b, c, bt = self._tab
        code = integrate(
            _neural_rhs.address,
            self._kernel,
            u0,
            p,
            self.tspan[0],
            self.tspan[1],
            A,
            b,
            c,
            bt,
            self._ctrl,
            self.solver.fsal,
            self.rtol,
            self.atol,
            0.0,
            self._dtmin,
            self.max_steps,
            self._stops,
            *self._no_jumps,
            self._ts,
            self._us,
            self._fs,
            self._stats,
            self._kstore,
        )
        if code != 0:
            raise ODESolveError(_Failed(ReturnCode(code), self._ts[self._stats[0] - 1]))
        m = int(self._stats[0])
        pos = self._pos
        if not find_save_positions(self._ts, m, self.saveat, pos):
            raise RuntimeError("a save time is not among the stored steps")
        return p, m, pos

    def predict(self, u0, p) -> np.ndarray:
        """The solution at ``saveat``: a new array of shape ``(len(saveat), n)``."""
        _, _, pos = self._forward(u0, p)
        return self._us[pos].copy()

    def loss_and_grad(self, u0, p, data):
        """``(L, dL/dp)`` for ``L = sum over saveat of |u(t_i) - data_i|^2``.

        ``data`` has shape ``(len(saveat), n)``. The gradient is a new float64 array.
        """
        data = np.asarray(data, dtype=np.float64)
        if data.shape != (self.saveat.size, self.n):
            raise ValueError(f"data must have shape {(self.saveat.size, self.n)}, got {data.shape}")
        if not np.all(np.isfinite(data)):
            raise ValueError("data contains NaN or infinite values")
        p, m, pos = self._forward(u0, p)
        dl_du = self._dl_du
        loss = float(squared_error(self._us, pos, data, dl_du))
        pbar = np.empty_like(p)
        ubar = np.empty(self.n)
        A, b, c, _ = self._tab
        args = (
            _neural_vjp.address,
            self._kernel,
            p,
            A,
            b,
            c,
            self._ts,
            self._us,
            self._kstore,
            m,
            pos,
            dl_du,
            pbar,
            ubar,
            self._ws,
            self._pb,
        )
        discrete_adjoint(*args)
        self._last_adjoint_args = args
        self.last_du0 = ubar
        return loss, pbar


class _Failed:
    def __init__(self, status, t):
        self.status = status
        self.message = status.message
        self.t_reached = float(t)
