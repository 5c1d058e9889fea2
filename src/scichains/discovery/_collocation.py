"""Collocation (two-stage) fitting of an ODE's parameters to sampled states and their estimated
derivatives: the warm start of a UDE before the adjoint refinement.

The loss compares the right-hand side at the (smoothed) samples with the derivatives estimated
from them, ``L(p) = sum_i sum_j w_j (f_j(X_i, p, t_i) - dX_ij)^2``: no ODE is solved, so a
loss and its gradient cost one right-hand-side call and one vjp per sample. This is the
two-stage method of DiffEqFlux's ``collocate_data`` (Roesch, Rackauckas and Stumpf,
"Collocation based training of neural ordinary differential equations", Statistical
Applications in Genetics and Molecular Biology 20(2), 2021), with the derivatives estimated by
:func:`scichains.discovery.derivatives`.
"""

from __future__ import annotations

import numba
import numpy as np

from .._blas import minimize_lbfgsb
from .._jit import FLAGS
from ..ode._abi import call_rhs, rhs_function, vjp_from_address
from ..ode._problem import ODEProblem, _check_p
from ._derivatives import METHODS, _check_samples, derivatives


@numba.njit(**FLAGS)
def _collocation_loss(faddr, vaddr, k, p, ts, X, dX, w, du, u, v, ub, pb, grad, want_grad):
    """``sum_i sum_j w_j (f_j(X_i, p, ts_i) - dX_ij)^2``; with ``want_grad`` its gradient
    with respect to ``p`` written into ``grad``. Returns ``(value, i)``: ``i`` is -1, or the
    first sample whose right-hand side or vjp failed (a status other than 0)."""
    f = rhs_function(faddr)
    m, n = X.shape
    total = 0.0
    if want_grad:
        grad[:] = 0.0
    for i in range(m):
        for j in range(n):
            u[j] = X[i, j]
        if call_rhs(f, du, u, p, ts[i], k) != 0:
            return np.nan, i
        for j in range(n):
            r = du[j] - dX[i, j]
            total += w[j] * r * r
            v[j] = 2.0 * w[j] * r
        if want_grad:
            if vjp_from_address(vaddr)(v, u, p, ts[i], k, ub, pb) != 0:
                return np.nan, i
            for q in range(grad.shape[0]):
                grad[q] += pb[q]
    return total, -1


def _smoothed(t: np.ndarray, X: np.ndarray, lam) -> tuple[np.ndarray, np.ndarray]:
    """``(states, derivatives)`` at ``t`` of the cubic smoothing splines of the columns of
    ``X`` (the penalty ``lam``, ``None``: generalised cross-validation), as
    :func:`~scichains.discovery.derivatives` fits them."""
    from ._gcv import smoothing_splines

    splines = smoothing_splines(t, X, lam)
    Xs = np.stack([s(t) for s in splines], axis=1)
    dX = np.stack([s.derivative()(t) for s in splines], axis=1)
    return np.ascontiguousarray(Xs), np.ascontiguousarray(dX)


class CollocationObjective:
    """The collocation loss of ``prob``'s parameters on samples and their derivatives, and its
    exact gradient (the problem's vjp summed over the samples).

    ``L(p) = sum_i sum_j w_j (f_j(Xs_i, p, t_i) - dX_ij)^2``, ``Xs`` the states the right-hand
    side is evaluated at (the smoothing spline's values at ``t`` by default, else the samples)
    and ``dX`` the derivative estimates (:func:`scichains.discovery.derivatives`). The loss is
    a plain sum over samples and states (units of the derivatives squared); ``weights`` rescale
    the states, ``normalize=True`` chooses ``w_j = 1 / mean_i(dX_ij^2)`` (each state's
    derivatives count equally whatever their scale).

    Parameters
    ----------
    prob : ODEProblem
        Any problem with a compiled right-hand side (e.g. ``SymbolicModel(...).problem(...)``,
        a UDE with a ``NetworkTerm``); its vjp is made if it has none
        (:meth:`~scichains.ode.ODEProblem.ensure_vjp`). Its ``u0`` and ``tspan`` are not used;
        ``p`` is what :meth:`value_and_grad` varies (all of it: the network and any physical
        parameters, the vector the adjoint refinement trains).
    t : array_like, shape ``(m,)``
        Sample times, strictly increasing.
    X : array_like, shape ``(m, n)``
        Samples of the ``n`` states (finite).
    dX : array_like, shape ``(m, n)``, optional
        The derivatives at ``t``. Default: estimated from ``X`` with ``method``.
    method : str
        The derivative estimator (:func:`~scichains.discovery.derivatives`), default
        ``"spline"``; ``options`` are its options (``lam`` etc.).
    smooth_states : bool
        With the spline (the default), evaluate ``f`` at the smoothing spline's values rather
        than at the noisy samples (default ``True``). The other methods use the samples.
    weights : array_like, shape ``(n,)``, optional
        Per-state weights ``w_j >= 0`` (default ones).
    normalize : bool
        ``w_j = 1 / mean_i(dX_ij^2)`` (times ``weights`` if given).

    Attributes
    ----------
    t, states, dX, weights : numpy.ndarray
        The times ``(m,)``, the states ``f`` is evaluated at ``(m, n)``, the derivative
        targets ``(m, n)`` and the weights ``(n,)``.

    Not thread-safe: one objective per thread (the buffers and the network's scratch are the
    objective's and the problem's).
    """

    def __init__(
        self,
        prob: ODEProblem,
        t,
        X,
        dX=None,
        *,
        method: str = "spline",
        smooth_states: bool = True,
        weights=None,
        normalize: bool = False,
        **options,
    ):
        if not isinstance(prob, ODEProblem):
            raise TypeError(f"prob must be a scichains.ode.ODEProblem, got {type(prob).__name__}")
        if prob.f_address == 0:
            raise TypeError(
                "collocation needs a compiled right-hand side (@numba.njit or SymbolicModel); "
                "this problem's is a plain Python function"
            )
        if prob.inputs is not None:
            raise ValueError("collocation of a problem with inputs= is not supported yet")
        t, X, _ = _check_samples(t, X)
        n = prob.u0.size
        if X.shape[1] != n:
            raise ValueError(f"X must have shape ({t.size}, {n}) for this problem, got {X.shape}")
        if dX is None:
            if method not in METHODS:
                raise ValueError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
            if method == "spline" and smooth_states:
                extra = set(options) - {"lam"}
                if extra:
                    raise TypeError(
                        f"method 'spline' takes the options ['lam'], got {sorted(extra)}"
                    )
                X, dX = _smoothed(t, X, options.get("lam"))
            else:
                dX = derivatives(t, X, method, **options)
        else:
            if options:
                raise TypeError(f"derivative options {sorted(options)} given with dX")
            dX = np.asarray(dX, dtype=np.float64)
            if dX.shape != X.shape:
                raise ValueError(f"dX must have the shape of X, {X.shape}, got {dX.shape}")
            if not np.all(np.isfinite(dX)):
                raise ValueError("dX has NaN or infinite values")
        w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"weights must have shape ({n},), got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and non-negative")
        if normalize:
            scale = np.mean(dX**2, axis=0)
            w = w / np.where(scale > 0, scale, 1.0)
        prob.ensure_vjp()
        self.prob = prob
        self.t = t
        self.states = np.ascontiguousarray(X)
        self.dX = np.ascontiguousarray(dX)
        self.weights = np.ascontiguousarray(w)
        m = prob.p.size
        self._du, self._u, self._v, self._ub = (np.empty(n) for _ in range(4))
        self._pb = np.empty(m)
        self._grad = np.empty(m)

    @property
    def num_params(self) -> int:
        """The length of ``p``: the problem's parameters."""
        return self.prob.p.size

    def _run(self, p, want_grad: bool) -> float:
        p = _check_p(p)
        if p.size != self.num_params:
            raise ValueError(f"p must have {self.num_params} entries, got {p.size}")
        prob = self.prob
        value, i = _collocation_loss(
            prob.f_address,
            prob.vjp_address,
            prob.kernel,
            p,
            self.t,
            self.states,
            self.dX,
            self.weights,
            self._du,
            self._u,
            self._v,
            self._ub,
            self._pb,
            self._grad,
            want_grad,
        )
        if i >= 0:
            u = self.states[i].copy()
            du = np.empty_like(u)
            prob.rhs(du, u, float(self.t[i]), p)  # raises the user's exception, if any
            raise RuntimeError(
                f"the right-hand side or its vjp failed at sample {i} (t = {self.t[i]!r})"
            )
        return float(value)

    def value(self, p) -> float:
        """The loss at ``p`` (shape ``(num_params,)``)."""
        return self._run(p, False)

    def value_and_grad(self, p) -> tuple[float, np.ndarray]:
        """``(loss, gradient)`` at ``p``; the gradient (shape ``(num_params,)``, float64) is a
        new array, the caller's."""
        value = self._run(p, True)
        return value, self._grad.copy()

    __call__ = value_and_grad


def collocate(
    prob: ODEProblem,
    t,
    X,
    p0=None,
    *,
    adam_iters: int = 0,
    lr: float = 0.01,
    maxiter: int = 250,
    gtol: float = 1e-10,
    **objective_options,
) -> np.ndarray:
    """Fit ``prob``'s parameters by collocation (:class:`CollocationObjective`): optionally
    ``adam_iters`` steps of Adam (learning rate ``lr``), then L-BFGS (scipy, ``maxiter``,
    ``gtol``). The default of 250 iterations is short on purpose: fitted much further, a
    network fits the noise of the derivative estimates, and the adjoint fit from there takes
    longer (``benchmarks/collocation.py``: on the Lotka-Volterra UDE, 250 iterations gave an
    adjoint loss of 0.49, 5000 one of 6.1). ``p0`` (shape ``(num_params,)``) defaults to
    ``prob.p``. Returns the fitted parameters (a new float64 array), the warm start for the
    adjoint fit of the same problem.
    ``objective_options`` go to :class:`CollocationObjective` (``dX``, ``method``,
    ``weights``, ``normalize``, derivative options)."""
    from ..nn._optim import Adam

    obj = CollocationObjective(prob, t, X, **objective_options)
    p = np.array(prob.p if p0 is None else p0, dtype=np.float64)
    if p.shape != (obj.num_params,):
        raise ValueError(f"p0 must have shape ({obj.num_params},), got {p.shape}")
    if adam_iters > 0:
        opt = Adam(lr)
        for _ in range(adam_iters):
            _, g = obj.value_and_grad(p)
            opt.step(p, g)
    res = minimize_lbfgsb(obj.value_and_grad, p, options={"maxiter": maxiter, "gtol": gtol})
    return np.asarray(res.x, dtype=np.float64)
