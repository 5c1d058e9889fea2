"""NeuralODE: du/dt = chain(u; p), fitted through the adjoints of scichains.adjoint."""

from __future__ import annotations

import threading

import numba
import numpy as np

from .._checks import all_finite
from .._jit import FLAGS
from .._status import call_status5, call_status7
from ..adjoint._gradient import Objective
from ..adjoint._loss import SquaredError
from ..adjoint._methods import ADJOINT_FAMILIES, adjoint_family
from ..adjoint._multi import (
    MultiObjective,
    WorkerSets,
    check_batch,
    is_trajectory_list,
    resolve_trajectory_threads,
    run_trajectories,
    sum_in_order,
)
from ..adjoint._sensealg import SensitivityAlgorithm
from ..nn import chain_forward, chain_vjp
from ..nn._chain import SimpleChain
from ..nn._validate import as_real, reject_class
from ..ode._abi import RHS_SIGNATURE, VJP_SIGNATURE, LazyCfunc, register_cfunc
from ..ode._events import check_events
from ..ode._family import FAMILIES
from ..ode._inputs import Interpolation
from ..ode._problem import ODEProblem
from ..ode.cvode._sundials import CVODESolver
from ..ode.explicit._tableaus import SOLVERS, ExplicitRK, Tsit5
from ..ode.stiff._esdirk import ESDIRK
from ..ode.stiff._rosenbrock import Rosenbrock
from ._lockstep import NO_LOCKSTEP, lockstep_problem
from ._lockstep_driver import lockstep_value_and_grad, sum_blocks
from ._lockstep_lists import LockstepTrajectories, blockable
from ._node_inputs import _rhs_inputs_jit, _split_inputs_vjp, _vjp_inputs_jit


def _rhs(du, u, p, t, k):
    chain_forward(k, p, u, du)


def _vjp(v, u, p, t, k, ubar, pbar):
    chain_vjp(k, p, u, v, ubar, pbar)


_rhs_jit = numba.njit(**FLAGS)(_rhs)
_vjp_jit = numba.njit(**FLAGS)(_vjp)


def _rhs_status(du, u, p, t, k):
    return call_status5(_rhs_jit, du, u, p, t, k)


def _vjp_status(v, u, p, t, k, ubar, pbar):
    return call_status7(_vjp_jit, v, u, p, t, k, ubar, pbar)


# the C-callables the solver and the adjoints call (status 1: the kernel raised, e.g. a
# length check), cached on disk; the dispatchers stand for them in the ODEProblem (and run the
# same code when called from Python)
_neural_rhs = LazyCfunc(RHS_SIGNATURE, _rhs_status)  # compiled when a problem first uses it
_neural_vjp = LazyCfunc(VJP_SIGNATURE, _vjp_status)
register_cfunc(_rhs_jit, _neural_rhs, True)
register_cfunc(_vjp_jit, _neural_vjp, True)


def _accepted() -> str:
    """The solvers NeuralODE takes, in words: the adaptive ones of every family with an
    adjoint (for messages)."""
    words = []
    for family in ADJOINT_FAMILIES:
        if family == "explicit":  # FAMILIES names the fixed-step methods too
            names = ", ".join(name for name, m in SOLVERS.items() if m.adaptive)
            words.append(
                f"adaptive explicit Runge-Kutta ({names}, or an ExplicitRK of your own with "
                "an error estimate)"
            )
        else:
            words.append(FAMILIES[family])
    return "an adaptive solver of scichains.ode with an adjoint: " + "; ".join(words)


_ACCEPTED = _accepted()


def _finite_per_trajectory(a: np.ndarray, what: str) -> None:
    """``ValueError`` naming the first trajectory (leading index) of ``a`` with NaN/inf."""
    if not np.isfinite(a).all():
        i = int(np.argwhere(~np.isfinite(a))[0][0])
        raise ValueError(f"{what} contains NaN or infinite values (first in trajectory {i})")


def _one_thread(threads) -> None:
    """``ValueError`` for ``threads`` other than None or 1 on a call with one trajectory
    (``u0`` of shape ``(n,)``): there is nothing to spread over threads."""
    if threads is not None and resolve_trajectory_threads(threads) != 1:
        raise ValueError(
            f"threads={threads} spreads several trajectories over threads; u0 of shape (n,) "
            "is one trajectory, solved on the calling thread: give u0 of shape (m, n), or "
            "no threads="
        )


class NeuralODE:
    """A neural ODE du/dt = chain(u; p) (or chain([u, x(t)]; p) with measured ``inputs``) on
    ``tspan``, observed at ``saveat``.

    Parameters
    ----------
    chain : SimpleChain with input and output of the state's size ``n``
    tspan : (t0, t1)
    saveat : times (sorted in the direction of integration) where the solution is returned
    solver : an adaptive solver of any family with an adjoint: explicit Runge-Kutta (Tsit5,
        the default; DP5, BS3, Vern7), Rosenbrock (Rodas5P, Rosenbrock23), ESDIRK (KenCarp4,
        Kvaerno5) or CVODE (CVODE_BDF, CVODE_Adams): a stiff neural ODE or UDE trains with
        Rodas5P or KenCarp4. The family is looked up (``solver.family``), not the class.
        Fixed-step methods (RK4, Euler) raise ``ValueError`` (the adjoints differentiate
        adaptive solves; NeuralODE has no ``dt``), anything else ``TypeError``, naming the
        solvers it takes.
    sensealg : the gradient method; default (None) the solver's ``default_sensealg``, as in
        :class:`scichains.adjoint.Objective`: DiscreteAdjoint() with the explicit methods and
        with the Rosenbrock methods' exact Jacobian (exact for the discretised solution, and
        the fastest), InterpolatingAdjoint() with the ESDIRK methods (integrated backward by
        Rodas5P), CVODE and ``Rodas5P(jacobian="finite difference")``. Others: a continuous
        adjoint (InterpolatingAdjoint(), QuadratureAdjoint(), ...) or ForwardSensitivity()
        with the explicit methods, InterpolatingAdjoint() with the Rosenbrock methods; a
        method the solver's family has not raises ``TypeError`` naming those it has.
    rtol, atol, max_steps : as in :func:`scichains.ode.solve`
    lockstep : ``"auto"`` (default), a block size ``k``, or None: how many trajectories of
        a batch are solved together (below; :meth:`lockstep_size` says what ``"auto"``
        picks), None for each solved alone with its own step sizes
    inputs : :class:`scichains.ode.Interpolation`, optional
        Measured input signals (``m`` channels) driving the model: du/dt = chain([u, x(t)];
        p), ``x(t)`` the interpolated inputs, so the chain's input has size ``n + m`` (a
        forced or controlled neural ODE). Every trajectory sees the same signal; gradients are
        with respect to ``p`` and ``u0`` (the inputs are data); the solvers stop at the
        samples of constant and linear inputs; ``tspan`` (and ``predict``'s times) must lie
        within the samples' range. Not with ``lockstep``.
    events, max_events : state-dependent events (:class:`scichains.ode.Event`), as in
        :func:`scichains.ode.solve`: e.g. a reset or a bounce that the network's dynamics
        run through. The conditions and affects are called as ``g(u, t, p)`` and
        ``a(u, t, p)`` with ``p`` the network's weights (usually unused). The gradients pass
        through the events (their times move with ``p`` and ``u0``: the event-time
        correction of :class:`scichains.adjoint.Objective`), with the discrete adjoint of the
        explicit and Rosenbrock methods. Each trajectory has its own
        events and is solved alone (not with ``lockstep``).

    ``p`` is the chain's flat parameter vector (float64).

    Many trajectories: ``u0`` of shape ``(m, n)`` (one initial state a row) with ``data`` of
    shape ``(m, len(saveat), n)`` gives the loss summed over the trajectories and the sum of
    their gradients; ``predict`` then returns shape ``(m, len(saveat), n)``. The trajectories
    (or lockstep blocks) run on ``threads`` Python threads (default: numba's thread count; the
    compiled solver and adjoint release the GIL), handed out in order to whichever thread is
    free (a thread slowed by other work on its core takes fewer), each thread with buffers of
    its own, and the sums are
    taken in trajectory order: results are identical bit for bit for any ``threads`` (at
    most one thread per trajectory, or per block with ``lockstep``). One trajectory (``u0`` of
    shape ``(n,)``) runs on the calling thread: ``threads`` other than None or 1 then raise
    ``ValueError``.
    Trajectories with times of their own: ``loss_and_grad([Trajectory(u0_i, saveat_i,
    data_i, weights_i, jumps_i), ...], p)`` (each solved to its last save time; ``saveat`` and
    ``tspan[1]`` of the model unused), or :meth:`objective` once for a training loop.
    Mini-batches: ``batch=`` indices (see :class:`scichains.adjoint.MultiObjective`: the loss
    and gradient are the sums over the batch).

    Lockstep blocks (the default for a batch, ``lockstep="auto"``, or ``lockstep=k``):
    trajectories (of ``u0`` of shape ``(m, n)``, in the order given or of ``batch``) are solved
    in blocks of ``k`` as one system each, stepping together: every stage evaluates the network
    on the block's ``k`` states at once (the batched kernels: SIMD across trajectories, as
    ``jax.vmap`` in diffrax) and the adjoint back-propagates through all of them at once. The
    block shares one step size, controlled by the largest of its trajectories' error norms (each
    is solved at least as accurately as alone, in as many steps as its hardest one needs). The
    gradient is that of this discretisation (it differs from the per-trajectory solves' at the
    tolerance's level). Blocks, not trajectories, are spread over ``threads``; the blocks are
    fixed by ``k`` and summed in order, so results are identical bit for bit for any thread
    count. With the explicit methods and the discrete adjoint (the defaults)
    :meth:`loss_and_grad` runs all blocks as one compiled computation, with no Python per block
    (``models/_lockstep_driver.py``). One trajectory (``u0`` of shape ``(n,)``) is a block of
    one: solved alone. Trajectory lists (times of their own) step together with ``"auto"`` when
    they can (:meth:`objective`: saved at the union of their times, each trajectory's data
    weighted at its own) and are solved one by one otherwise; :meth:`loss_and_grad` and
    :meth:`objective` refuse them on a model with ``lockstep=k`` (``ValueError``). ``"auto"``
    picks ``k`` from the batch size, the solver family and ``n`` (:meth:`lockstep_size`), never
    from the thread count. 16 spiral trajectories, one loss and gradient: blocks of 8 2.2x
    faster than per-trajectory solves on one thread, 2.3x on two; 64: blocks of 16 2.3x and 2.4x
    (``benchmarks/neural_ode.py``, AMD EPYC Zen 2, 2026-12-05). ``lockstep=None`` gives each
    trajectory its own step sizes and error control (the gradient of each trajectory's own
    discretisation, as in a loop over single solves). With the Rosenbrock and ESDIRK methods the
    block's Jacobian is one dense ``(k n, k n)`` matrix (``k n`` vjp calls of the whole block to
    form it, an LU of that size): keep ``k n`` small (tens of states). 16 spiral trajectories,
    one loss and gradient at rtol 1e-6 on one thread (a shared machine, 2026-12-03): Rodas5P 3.2
    ms alone, 2.7 ms with ``lockstep=8``, 3.7 ms with 16; KenCarp4 (its Jacobian kept across
    steps) 5.4 ms alone, 2.9 ms with 16. The ESDIRK methods' Newton iteration stops on the
    block's RMS norm (below 0.01 of the tolerance), so one trajectory's Newton error may reach
    ``0.01 sqrt(k)`` of the tolerance; the step's error control is per trajectory, as with the
    other methods. CVODE refuses ``lockstep=k`` (``ValueError``; ``"auto"`` solves each alone):
    its error norm, SUNDIALS' own, is taken over the whole state and cannot be the largest of
    the trajectories' norms.

    Threading: ``predict`` and ``loss_and_grad`` may be called from several threads at once,
    with results identical bit for bit to the same calls made one after another;
    ``last_du0`` is the calling thread's. The solver's buffers, the network's scratch and the
    data buffer of the loss serve one call at a time; a call that finds them in use runs on a
    set kept for its thread (made on its first such call).
    """

    def __init__(
        self,
        chain: SimpleChain,
        tspan,
        saveat,
        solver: ExplicitRK | Rosenbrock | ESDIRK | CVODESolver = Tsit5,
        sensealg: SensitivityAlgorithm | None = None,
        rtol: float = 1e-6,
        atol: float = 1e-8,
        max_steps: int = 100_000,
        lockstep: int | str | None = "auto",
        inputs: Interpolation | None = None,
        events=None,
        max_events: int = 10_000,
    ):
        if not isinstance(chain, SimpleChain):
            raise TypeError("NeuralODE needs a SimpleChain")
        if inputs is not None and not isinstance(inputs, Interpolation):
            raise TypeError(
                f"inputs must be a scichains.ode.Interpolation, got {type(inputs).__name__}"
            )
        m_in = 0 if inputs is None else inputs.m
        if chain.input_shape != (chain.n_out + m_in,):
            if inputs is None:
                raise ValueError(
                    f"the chain must map the state to its derivative: input shape "
                    f"{chain.input_shape}, output shape {chain.output_shape()}"
                )
            raise ValueError(
                f"with {m_in} input channel(s) the chain maps [u, x(t)] to du/dt: its input "
                f"must have size n + {m_in} = {chain.n_out + m_in} for its output of size n = "
                f"{chain.n_out}; got input shape {chain.input_shape}"
            )
        if lockstep is not None and not (
            lockstep == "auto"
            if isinstance(lockstep, str)
            else isinstance(lockstep, (int, np.integer))
            and not isinstance(lockstep, bool)
            and lockstep >= 1
        ):
            raise ValueError(
                f"lockstep must be 'auto', a positive integer or None, got {lockstep!r}"
            )
        if inputs is not None and lockstep not in (None, "auto"):
            raise ValueError(
                "lockstep= with inputs= is not supported: the trajectories are solved one by "
                "one (drop lockstep=)"
            )
        self.inputs = inputs
        self.events = check_events(events)
        if self.events and lockstep not in (None, "auto"):
            raise ValueError(
                "lockstep= with events= is not supported: each trajectory has events of its "
                "own and is solved alone (drop lockstep=)"
            )
        self.max_events = max_events
        reject_class(solver, "solver")
        try:
            family = adjoint_family(solver)
        except TypeError:
            raise TypeError(
                f"NeuralODE does not take the solver {solver!r}: it takes {_ACCEPTED}"
            ) from None
        if not solver.adaptive:
            raise ValueError(
                f"NeuralODE does not take the fixed-step method {solver.name}: the adjoints "
                f"differentiate adaptive solves (and NeuralODE has no dt=); it takes {_ACCEPTED}"
            )
        self.chain = chain
        self.n = chain.n_out
        saveat = as_real(saveat, "saveat")
        if saveat.ndim != 1 or saveat.size == 0:
            raise ValueError("saveat must be a non-empty vector of times")
        if lockstep not in (None, "auto") and family in NO_LOCKSTEP:
            raise ValueError(
                f"lockstep={lockstep} with {solver.name}: {NO_LOCKSTEP[family]}; use lockstep "
                "with an explicit, Rosenbrock or ESDIRK method (Tsit5, Rodas5P, KenCarp4, ...), "
                f"or {solver.name} without lockstep (the trajectories solved one by one)"
            )
        self.lockstep = lockstep if lockstep in (None, "auto") else int(lockstep)
        self._family = family
        self._settings = (tspan, saveat, solver, sensealg, rtol, atol, max_steps)
        self._obj, self._loss = self._objective()
        self.tspan = self._obj.prob.tspan
        self.sensealg = self._obj.sensealg
        self.saveat = self._obj.saveat
        self.solver = solver
        self._busy = threading.Lock()  # held by the call using _obj and _loss
        self._spare = threading.local()  # .pair: a thread's own (objective, loss)
        self._last = threading.local()  # .du0: dL/du0 of the thread's latest loss_and_grad
        self._batch = WorkerSets(self._objective)  # (objective, loss) pairs, one per thread
        self._blocks = WorkerSets(dict)  # per thread: {block size: lockstep (objective, loss)}
        # the compiled driver's block objectives: its own, not those of the Python blocks
        # (predict's), as a helper may finish a block of a call after that call returned
        self._driven = WorkerSets(dict)
        self._runners: dict = {}  # block size: its BlockRunner (the compiled driver)

    def _objective(self):
        """A new ``(Objective, SquaredError)`` pair with buffers and network scratch of its
        own (the loss's data buffer is rewritten by each ``loss_and_grad``)."""
        return self._pair(self.problem(), events=True)

    def _block_pair(self, cache: dict, mb: int):
        """The ``(Objective, SquaredError)`` of a lockstep block of ``mb`` trajectories from a
        thread's ``cache`` (made on first need)."""
        pair = cache.get(mb)
        if pair is None:
            pair = cache[mb] = self._pair(lockstep_problem(self.chain, mb, self._settings[0]))
        return pair

    def _pair(self, prob: ODEProblem, events: bool = False):
        """``(Objective, SquaredError)`` on ``prob`` with the model's settings (and its events,
        with ``events``: the problem of one trajectory); the loss's data buffer has the
        problem's state size per save point."""
        _, saveat, solver, sensealg, rtol, atol, max_steps = self._settings
        loss = SquaredError(np.zeros((saveat.size, prob.u0.size)))
        obj = Objective(
            prob,
            loss,
            saveat,
            solver=solver,
            sensealg=sensealg,  # None: the solver's default_sensealg
            rtol=rtol,
            atol=atol,
            max_steps=max_steps,
            **self._event_options(events),
        )
        return obj, loss

    def _event_options(self, events: bool = True) -> dict:
        """The model's events as keyword arguments of an objective (none without events)."""
        if not (events and self.events):
            return {}
        return {"events": self.events, "max_events": self.max_events}

    def lockstep_size(self, m: int) -> int | None:
        """The block size with which ``m`` trajectories sharing the model's ``saveat`` are
        solved in lockstep, or None when each is solved alone.

        With ``lockstep="auto"`` (the default) it depends on ``m``, the solver's family and
        the state size only, never on the thread count (so results are the same bits for any
        ``threads``): explicit methods: ``m`` itself up to 8, blocks of 8 up to 24
        trajectories (two blocks or more for two threads), of 16 above (measured fastest:
        ``benchmarks/neural_ode.py``); Rosenbrock and ESDIRK methods: blocks of
        ``min(8, 16 // n)`` (their dense block Jacobian has ``(k n)^2`` entries), alone when
        that is 1; CVODE, Radau, automatic switching, models with ``inputs`` or ``events``:
        alone.
        Trajectory lists use it too (:meth:`objective`).
        """
        if self.lockstep is None:
            return None
        if self.lockstep != "auto":
            return self.lockstep
        if m < 2 or self.inputs is not None or self.events:
            return None
        if self._family == "explicit":
            return m if m <= 8 else (8 if m <= 24 else 16)
        if self._family in ("rosenbrock", "esdirk"):
            k = min(m, 8, 16 // self.n)
            return k if k >= 2 else None
        return None

    def _run_blocks(self, u0, p, threads, one, order, size):
        """``one(objective, loss, p, idx)`` for each lockstep block ``idx`` (consecutive
        entries of ``order``, ``size`` of them, the last maybe fewer) on ``threads``
        threads; the results in block order."""
        blocks = [order[j : j + size] for j in range(0, order.size, size)]
        k = min(resolve_trajectory_threads(threads), len(blocks))
        p, _ = self._obj._args(p, None)  # checked once (reads the problem only)

        def run(cache, j):
            obj, loss = self._block_pair(cache, blocks[j].size)
            return one(obj, loss, p, blocks[j])

        with self._blocks.claim(k) as caches:
            return run_trajectories(caches, len(blocks), run)

    def _claim(self):
        """``(objective, loss, owned)`` for one call: this object's own pair when free
        (``owned``: release ``_busy`` after the call), else the calling thread's pair."""
        if self._busy.acquire(blocking=False):
            return self._obj, self._loss, True
        pair = getattr(self._spare, "pair", None)
        if pair is None:
            pair = self._spare.pair = self._objective()
        return pair[0], pair[1], False

    @property
    def last_du0(self) -> np.ndarray:
        """dL/du0 of the latest :meth:`loss_and_grad` call made by the calling thread."""
        try:
            return self._last.du0
        except AttributeError:
            raise AttributeError("last_du0: no loss_and_grad call in this thread yet") from None

    def _batched_u0(self, u0):
        """``u0`` as an ``(m, n)`` float64 array of finite values, else ``ValueError``."""
        u0 = as_real(u0, "u0")
        if u0.ndim != 2 or u0.shape[1] != self.n or u0.shape[0] == 0:
            raise ValueError(
                f"u0 must have shape ({self.n},) or (m, {self.n}) for m trajectories, "
                f"got {u0.shape}"
            )
        _finite_per_trajectory(u0, "u0")
        return u0

    def _run_batch(self, u0, p, threads, one, batch=None):
        """``one(objective, loss, p, i)`` for each trajectory ``i`` of ``u0`` (shape
        ``(m, n)``; those of ``batch`` only, in its order, when given), on ``threads``
        threads; the results in that order."""
        m = u0.shape[0]
        order = np.arange(m) if batch is None else batch
        k = min(resolve_trajectory_threads(threads), order.size)
        p, _ = self._obj._args(p, None)  # checked once (reads the problem only)
        with self._batch.claim(k) as workers:
            return run_trajectories(
                workers,
                order.size,
                lambda pair, j: one(pair[0], pair[1], p, int(order[j])),
                None if batch is None else batch,
                m,
            )

    def problem(self, u0=None, p=None) -> ODEProblem:
        """A new :class:`~scichains.ode.ODEProblem` for du/dt = chain(u; p) on ``tspan``
        (network scratch of its own; the exact vjp), for the rest of the adjoint API, e.g.
        ``adjoint.MultipleShooting(node.problem(), data, saveat, group_size)``. ``u0``
        defaults to zeros, ``p`` to zeros. It is the problem of one trajectory (``lockstep``
        does not apply to it)."""
        u0 = np.zeros(self.n) if u0 is None else u0
        p = np.zeros(self.chain.num_params) if p is None else p
        kernel = self.chain.kernel(np.float64)
        if self.inputs is not None:  # du/dt = chain([u, x(t)]; p)
            prob = ODEProblem(
                _rhs_inputs_jit,
                u0,
                self._settings[0],
                p,
                kernel=kernel,
                vjp=_vjp_inputs_jit,
                inputs=self.inputs,
            )
            # for prob.with_input_parameters(): gradients with respect to the input samples
            prob.input_split_vjp = _split_inputs_vjp(self.chain.num_params)
            return prob
        prob = ODEProblem(_rhs_jit, u0, self._settings[0], p, kernel=kernel, vjp=_vjp_jit)
        prob.network_rhs = True  # f is the chain itself: adjoints may reuse its activations
        return prob

    def _refuse_lockstep_for_trajectories(self) -> None:
        """``ValueError`` when the model has ``lockstep``: Trajectory specs (times of their
        own) are solved one by one, so the option could not apply."""
        if self.lockstep not in (None, "auto"):
            raise ValueError(
                f"lockstep={self.lockstep} steps trajectories that share the model's saveat "
                "(u0 of shape (m, n), data of shape (m, len(saveat), n)); Trajectory specs "
                "have times of their own and are solved one by one, without lockstep: make "
                "the NeuralODE without lockstep= for them"
            )

    def objective(self, trajectories) -> MultiObjective | LockstepTrajectories:
        """An objective on this model for ``trajectories`` (a list of
        :class:`~scichains.adjoint.Trajectory` or tuples ``(u0, saveat, data[, weights[,
        jumps]])``, times of their own; ``t0`` defaults to ``tspan[0]``), with the model's
        solver, sensealg and tolerances: build it once for a training loop
        (``obj.value_and_grad(p, threads=..., batch=...)`` -> ``(L, dL/dp, dL/du0)``).

        With ``lockstep="auto"`` and trajectories that can step together (squared-error data,
        weights allowed, no doses, starting at ``tspan[0]``, forward in time; a family that
        steps blocks), a ``LockstepTrajectories``: blocks of :meth:`lockstep_size` of the
        batch, saved at the union of the save times, each trajectory's data weighted at its
        own times only (its loss the one it has alone, on the block's discretisation; a block
        runs to the last time of all). Otherwise, or with ``lockstep=None``, a
        :class:`~scichains.adjoint.MultiObjective` solving each trajectory alone."""
        self._refuse_lockstep_for_trajectories()
        _, saveat, solver, sensealg, rtol, atol, max_steps = self._settings
        prob = self._obj.prob
        multi = MultiObjective(
            prob,
            trajectories,
            None,
            solver=solver,
            sensealg=sensealg,  # None: the solver's default_sensealg
            rtol=rtol,
            atol=atol,
            max_steps=max_steps,
            **self._event_options(),
        )
        if (
            self.lockstep == "auto"
            and self.lockstep_size(multi.m) is not None
            and blockable(self, trajectories)
        ):
            return LockstepTrajectories(self, multi)
        return multi

    def predict(self, u0, p, threads: int | None = None, saveat=None) -> np.ndarray:
        """The solution at ``saveat``: a new array of shape ``(len(saveat), n)``, or
        ``(m, len(saveat), n)`` for ``u0`` of shape ``(m, n)`` (``threads``: see the class).
        ``saveat``: other times than the model's (sorted in the direction of integration;
        e.g. a dense grid for a plot, or times past the data), solved by a model made for them
        (same solver, tolerances, lockstep) from ``tspan[0]``: to ``tspan[1]``, or to the
        farthest of them when some lie beyond it (the span extended in the same direction, as
        diffrax does with a new ``t1``). Times before ``tspan[0]`` (after it, for a backward
        model) raise ``ValueError``."""
        if saveat is not None:
            _, _, solver, sensealg, rtol, atol, max_steps = self._settings
            saveat = as_real(saveat, "saveat")
            other = NeuralODE(
                self.chain,
                self._span_to(saveat),
                saveat,
                solver,
                sensealg,
                rtol,
                atol,
                max_steps,
                self.lockstep,
                self.inputs,
                self.events,
                self.max_events,
            )
            return other.predict(u0, p, threads)
        if np.ndim(u0) >= 2:
            u0 = self._batched_u0(u0)
            size = self.lockstep_size(u0.shape[0])
            if size is not None:

                def block(obj, _, p, idx):
                    y = obj.saved_states(p, u0[idx].ravel())  # a buffer: copied below
                    return y.reshape(y.shape[0], idx.size, self.n).transpose(1, 0, 2).copy()

                order = np.arange(u0.shape[0])
                return np.concatenate(self._run_blocks(u0, p, threads, block, order, size))

            def one(obj, _, p, i):
                return obj.saved_states(p, u0[i]).copy()

            return np.stack(self._run_batch(u0, p, threads, one))
        _one_thread(threads)
        obj, _, owned = self._claim()
        try:
            p, u0 = obj._args(p, u0)
            return obj.saved_states(p, u0).copy()
        finally:
            if owned:
                self._busy.release()

    def _span_to(self, saveat: np.ndarray) -> tuple[float, float]:
        """The model's ``tspan``, extended (same direction) to the farthest of ``saveat``
        when some lie beyond ``tspan[1]``; ``ValueError`` for times before ``tspan[0]``."""
        t0, t1 = self.tspan
        if saveat.ndim != 1 or saveat.size == 0:
            raise ValueError("saveat must be a non-empty vector of times")
        if not np.isfinite(saveat).all():
            raise ValueError("saveat contains NaN or infinite values")
        d = 1.0 if t1 > t0 else -1.0
        ahead = d * (saveat - t0)  # how far past t0 each time lies, along the integration
        if ahead.min() < 0.0:
            first = float(saveat[int(np.argmin(ahead))])
            raise ValueError(
                f"saveat has the time {first}, {'before' if d > 0 else 'after'} the start "
                f"t0 = {t0} of tspan {self.tspan}: the model integrates "
                f"{'forward' if d > 0 else 'backward'} from t0"
            )
        far = float(saveat[int(np.argmax(ahead))])
        return (t0, far) if d * (far - t1) > 0.0 else (t0, t1)

    def loss_and_grad(self, u0, p, data=None, threads: int | None = None, batch=None):
        """``(L, dL/dp)`` for ``L = sum over saveat of |u(t_i) - data_i|^2``.

        ``data`` has shape ``(len(saveat), n)``. The gradient is a new float64 array;
        ``self.last_du0`` holds dL/du0 (the calling thread's).

        Many trajectories: ``u0`` of shape ``(m, n)`` and ``data`` of shape
        ``(m, len(saveat), n)``; ``L`` and ``dL/dp`` are then sums over the trajectories (in
        trajectory order, on ``threads`` threads: see the class) and ``last_du0`` has shape
        ``(m, n)``. Or ``u0`` a list of :class:`~scichains.adjoint.Trajectory` (times of
        their own; ``data`` not given; not on a ``lockstep`` model): builds :meth:`objective`
        on each call. ``threads``: see the class (None or 1 for one trajectory). ``batch``:
        trajectory indices; ``L``, ``dL/dp`` are then sums over the batch, ``last_du0`` has
        shape ``(len(batch), n)``.
        """
        if is_trajectory_list(u0):
            if data is not None:
                raise ValueError("with Trajectory specs the data are in them: pass data=None")
            self._refuse_lockstep_for_trajectories()
            loss, dp, du0 = self.objective(u0).value_and_grad(p, None, threads, batch)
            self._last.du0 = du0
            return loss, dp
        if data is None:
            raise ValueError("give data (or a list of Trajectory specs as u0)")
        if np.ndim(u0) >= 2:
            return self._loss_and_grad_batch(u0, p, data, threads, batch)
        if batch is not None:
            raise ValueError("batch= selects among several trajectories: u0 of shape (m, n)")
        _one_thread(threads)
        data = as_real(data, "data")
        if data.shape != (self.saveat.size, self.n):
            raise ValueError(f"data must have shape {(self.saveat.size, self.n)}, got {data.shape}")
        if not all_finite(data):
            raise ValueError("data contains NaN or infinite values")
        obj, sq, owned = self._claim()
        try:
            sq.data[...] = data
            loss, dp, du0 = obj.value_and_grad(p, u0)
        finally:
            if owned:
                self._busy.release()
        self._last.du0 = du0
        return loss, dp

    def _loss_and_grad_batch(self, u0, p, data, threads, batch=None):
        u0 = self._batched_u0(u0)
        data = as_real(data, "data")
        shape = (u0.shape[0], self.saveat.size, self.n)
        if data.shape != shape:
            raise ValueError(
                f"data must have shape {shape} (trajectories, save points, states) for u0 of "
                f"shape {u0.shape}, got {data.shape}"
            )
        _finite_per_trajectory(data, "data")

        idx = None if batch is None else check_batch(batch, u0.shape[0])
        size = self.lockstep_size(u0.shape[0] if idx is None else len(idx))
        if size is not None:
            order = np.arange(u0.shape[0]) if idx is None else np.asarray(idx)
            k = resolve_trajectory_threads(threads)
            q, _ = self._obj._args(p, None)  # checked once (reads the problem only)
            claim, pair = self._driven.claim, self._block_pair
            done = lockstep_value_and_grad(
                claim, pair, self._runners, q, u0, data, None, order, size, k
            )
            if done is None:  # not on the compiled driver (a stiff method): a call per block

                def block(obj, sq, p, b):
                    sq.data[...] = data[b].transpose(1, 0, 2).reshape(sq.data.shape)
                    value, dp, du0 = obj.value_and_grad(p, u0[b].ravel())
                    return value, dp, du0.reshape(b.size, self.n)

                done = sum_blocks(self._run_blocks(u0, p, threads, block, order, size))
            self._last.du0 = done[2]
            return done[0], done[1]

        def one(obj, sq, p, i):
            sq.data[...] = data[i]
            return obj.value_and_grad(p, u0[i])

        loss, dp, du0 = sum_in_order(self._run_batch(u0, p, threads, one, idx))
        self._last.du0 = du0
        return loss, dp
