"""A training loop for any objective with a value and a gradient: ``scichains.fit``.

The recipe of universal differential equations (Rackauckas et al. 2020) and most neural-ODE
fits is a first-order optimizer (Adam) for a few hundred steps, then L-BFGS to convergence.
``fit`` runs such a sequence of stages on one flat parameter vector, with mini-batch epochs over
trajectories, a validation set with early stopping, callbacks, a history and a progress bar,
and it keeps the vector at its best finite point when a solve fails, the user's code raises or
the run is interrupted.

Python runs once per iteration here (each iteration is at least one ODE solve and its adjoint,
tens of microseconds and up); what the loop adds per iteration is a few microseconds
(``benchmarks/fit.py`` measures it against a hand-written loop).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from ._blas import minimize_lbfgsb, rejected_value
from ._fit_report import FitInfo, FitResult, _Bar, _use_tqdm
from .nn._optim import Optimizer
from .nn._train import _exclusive
from .nn._validate import check_inplace

__all__ = ["LBFGS", "FitInfo", "FitResult", "fit"]


class LBFGS:
    """L-BFGS as a stage of :func:`fit`: ``scipy.optimize.minimize(method="L-BFGS-B")`` on the
    objective's value and gradient.

    Parameters
    ----------
    maxiter : int
        Iterations at most (default 1000); a stage ``(LBFGS(...), n)`` sets it to ``n``.
    gtol, ftol : float
        SciPy's stopping tests: the largest entry of the projected gradient at most ``gtol``
        (default ``1e-5``), or the relative reduction of the value at most ``ftol`` (default
        ``2.2e-9``, SciPy's).
    maxcor : int
        Number of correction pairs kept (default 10).
    maxls : int
        Line-search steps per iteration at most (default 20).
    maxfun : int, optional
        Evaluations at most (default ``max(15000, 2 * maxiter)``).
    bounds : sequence of ``(low, high)`` pairs or ``scipy.optimize.Bounds``, optional
        Box constraints on the parameters.

    A solve that fails at a trial point of the line search (or a loss undefined there,
    :class:`scichains.adjoint.UndefinedLoss`) counts as a value above the last iterate's, so
    the search backs off (as :class:`scichains.adjoint.ScipyFun` does); not as ``inf``, at
    which SciPy's L-BFGS-B would stop and report convergence.
    """

    name = "L-BFGS"

    def __init__(
        self,
        maxiter: int = 1000,
        *,
        gtol: float = 1e-5,
        ftol: float = 2.220446049250313e-09,
        maxcor: int = 10,
        maxls: int = 20,
        maxfun: int | None = None,
        bounds=None,
    ):
        self.maxiter = _count(maxiter, "maxiter")
        self.gtol = float(gtol)
        self.ftol = float(ftol)
        self.maxcor = _count(maxcor, "maxcor")
        self.maxls = _count(maxls, "maxls")
        self.maxfun = None if maxfun is None else _count(maxfun, "maxfun")
        self.bounds = bounds

    def options(self, maxiter: int) -> dict:
        return {
            "maxiter": maxiter,
            "gtol": self.gtol,
            "ftol": self.ftol,
            "maxcor": self.maxcor,
            "maxls": self.maxls,
            "maxfun": self.maxfun if self.maxfun is not None else max(15000, 2 * maxiter),
        }

    def __repr__(self) -> str:
        return f"LBFGS(maxiter={self.maxiter}, gtol={self.gtol}, ftol={self.ftol})"


class _Failed(Exception):
    """A solve failed or the objective returned a non-finite value or gradient."""


class _Stop(Exception):
    """Raised out of SciPy's callback to end an L-BFGS stage (early stop or a callback)."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


def _count(n, what: str, low: int = 1) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < low:
        raise ValueError(f"{what} must be an integer >= {low}, got {n!r}")
    return int(n)


def _numerical_failure(e: BaseException) -> bool:
    """Whether ``e`` is a solver's numerical failure (step size too small, too many steps...),
    or an event loss undefined at the trial point (too few events), rather than an error in
    user code, which must reach the user."""
    ode = sys.modules.get("scichains.ode")  # (not imported: no solve could have failed)
    adjoint = sys.modules.get("scichains.adjoint")
    if adjoint is not None and isinstance(e, adjoint.UndefinedLoss):
        return True
    return ode is not None and isinstance(e, ode.ODESolveError) and e.numerical


def _value_function(objective) -> Callable:
    if hasattr(objective, "value_and_grad"):
        return objective.value_and_grad
    if callable(objective):
        return objective
    raise TypeError(
        "objective must have a value_and_grad(p) method (adjoint.Objective, MultiObjective, "
        f"...) or be a callable p -> (value, gradient), got {type(objective).__name__}"
    )


def _validation_function(validation) -> Callable | None:
    if validation is None:
        return None
    if hasattr(validation, "value"):
        return validation.value
    if hasattr(validation, "value_and_grad"):
        vg = validation.value_and_grad
        return lambda p: vg(p)[0]
    if callable(validation):
        return validation
    raise TypeError(
        "validation must have a value(p) method or be a callable p -> float, got "
        f"{type(validation).__name__}"
    )


def _stages(stages) -> list:
    """``[(optimizer, n), ...]`` from the forms ``fit`` accepts."""
    if isinstance(stages, (LBFGS, Optimizer)) or (
        isinstance(stages, tuple) and len(stages) == 2 and not isinstance(stages[0], tuple)
    ):
        stages = [stages]
    if not isinstance(stages, Sequence) or isinstance(stages, (str, bytes)) or not stages:
        raise TypeError(
            "stages must be a non-empty list of (optimizer, iterations) pairs or LBFGS(...) "
            f"stages, e.g. [(scichains.Adam(0.01), 300), scichains.LBFGS(1000)]; got {stages!r}"
        )
    out = []
    for i, s in enumerate(stages):
        if isinstance(s, LBFGS):
            out.append((s, s.maxiter))
            continue
        if not (isinstance(s, tuple) and len(s) == 2):
            raise TypeError(
                f"stage {i} must be an (optimizer, iterations) pair or an LBFGS(...), got {s!r}"
            )
        opt, n = s
        if isinstance(opt, type):
            raise TypeError(
                f"stage {i}: give an optimizer instance ({opt.__name__}(...)), not the class"
            )
        if not isinstance(opt, (Optimizer, LBFGS)):
            raise TypeError(
                f"stage {i}: the optimizer must be scichains.Adam, AdamW, SGD or LBFGS, got "
                f"{type(opt).__name__}"
            )
        out.append((opt, _count(n, f"stage {i}'s iteration count")))
    return out


_COLUMNS = ("iteration", "stage", "epoch", "loss", "grad_norm", "val_loss", "seconds")


class _Run:
    """The state of one :func:`fit` call: the best point, the history, the counters."""

    def __init__(
        self, fn, p, validation, validate_every, patience, min_delta, callback, keep, progress
    ):
        self.fn = fn
        self.p = p
        self.view = p.view()
        self.view.flags.writeable = False
        self.val = validation
        self.validate_every = validate_every
        self.patience = patience
        self.min_delta = min_delta
        self.callback = callback
        self.keep = keep
        self.bar_mode = "tqdm" if _use_tqdm(progress) else ("text" if progress else "off")
        # the best point so far: by the validation value when there is one, else by the loss
        self.best_p = p.copy()
        self.best = math.inf  # its criterion
        self.best_loss = math.nan  # its loss (NaN: unknown, e.g. a mini-batch snapshot)
        self.best_val = None
        self.have_best = False
        self.last_p = p.copy()  # the last point with a finite value (keep="last")
        self.last_loss = math.nan  # its loss (NaN: unknown)
        self.bad_validations = 0
        self.nit = 0
        self.nfev = 0
        self.t0 = time.perf_counter()
        self.rows = []  # the history, one tuple per iterate (columns: _COLUMNS)
        # a one-entry memory of the last full evaluation: a stage boundary evaluates the
        # point the previous stage ended at once, not twice
        self.memo_x = None
        self.memo = None

    # -- evaluations --------------------------------------------------------------------
    def evaluate(self, x, batch=None):
        """``(value, gradient, squared norm)`` at ``x``; raises _Failed on a solve failure or a
        non-finite result, and lets every other exception through."""
        self.nfev += 1
        try:
            out = self.fn(x) if batch is None else self.fn(x, batch=batch)
        except Exception as e:
            if _numerical_failure(e):
                raise _Failed(f"the solve failed: {e}") from e
            raise
        try:
            value, g = out[0], out[1]
        except (TypeError, IndexError, KeyError):
            raise TypeError(
                f"the objective must return (value, gradient[, ...]), got {type(out).__name__}"
            ) from None
        value = float(value)
        if type(g) is not np.ndarray or g.shape != x.shape:
            g = np.asarray(g, dtype=np.float64)
            if g.shape != x.shape:
                raise ValueError(
                    f"the objective's gradient has shape {g.shape}; the parameters have "
                    f"shape {x.shape}"
                )
        sq = float(g.dot(g))
        if not (math.isfinite(value) and math.isfinite(sq)):
            what = "value" if not math.isfinite(value) else "gradient"
            raise _Failed(f"the objective's {what} is not finite (value {value})")
        return value, g, sq

    def start(self, x):
        """The evaluation at a stage's start ``x``, and whether it still has to be recorded
        (not when the previous stage ended there and recorded it)."""
        fresh = not (self.memo_x is not None and np.array_equal(self.memo_x, x))
        return (*self.full(x), fresh)

    def full(self, x):
        """A full evaluation at ``x``, from the memory when ``x`` was the last one."""
        if self.memo_x is not None and np.array_equal(self.memo_x, x):
            return self.memo
        self.memo = self.evaluate(x)
        self.memo_x = x.copy()
        return self.memo

    def validate(self, x) -> float:
        try:
            v = float(self.val(x))
        except Exception as e:
            if _numerical_failure(e):
                return math.inf
            raise
        return v if math.isfinite(v) else math.inf

    # -- bookkeeping ----------------------------------------------------------------------
    def record(self, stage, epoch, loss, sq, val):
        self.rows.append(
            (
                self.nit,
                stage,
                -1 if epoch is None else epoch,
                loss,
                math.sqrt(sq),
                math.nan if val is None else val,
                time.perf_counter() - self.t0,
            )
        )

    def consider(self, x, loss, val, exact: bool = True) -> bool:
        """Take ``x`` as the best point if its criterion improves (``exact``: ``loss`` is the
        loss at ``x``, not an epoch's estimate); returns whether the validation value failed
        to improve ``patience`` times in a row."""
        crit = loss if self.val is None else val
        if crit is None:
            return False
        if crit < self.best - (self.min_delta if self.val is not None else 0.0):
            self.best = crit
            self.best_loss = loss if exact else math.nan
            self.best_val = val
            self.have_best = True
            np.copyto(self.best_p, x)
            self.bad_validations = 0
            return False
        if self.val is None:
            return False
        self.bad_validations += 1
        return self.patience is not None and self.bad_validations >= self.patience

    def notify(self, stage, opt, epoch, loss, val, x) -> bool:
        """The user's callback; True means stop."""
        if self.callback is None:
            return False
        if x is self.p:
            view = self.view
        else:
            view = x.view()
            view.flags.writeable = False
        info = FitInfo(stage, opt, self.nit, epoch, loss, val, view, time.perf_counter() - self.t0)
        return bool(self.callback(info))

    def iterate(self, stage, opt, epoch, x, loss, sq, batch_step=False) -> str | None:
        """Everything done at an iterate: validation, best point, history, callback. Returns
        ``"early_stopped"`` or ``"stopped"`` to end, else None."""
        val = None
        if self.val is not None and not batch_step and self.nit % self.validate_every == 0:
            val = self.validate(x)
        stale = False
        if not batch_step:
            stale = self.consider(x, loss, val)
        self.record(stage, epoch, loss, sq, val)
        if self.notify(stage, opt, epoch, loss, val, x):
            return "stopped"
        return "early_stopped" if stale else None

    def history(self) -> dict:
        cols = list(zip(*self.rows)) if self.rows else [()] * len(_COLUMNS)
        return {
            k: np.array(c, dtype=np.int64 if k in ("iteration", "stage", "epoch") else np.float64)
            for k, c in zip(_COLUMNS, cols)
        }


def _first_order(run: _Run, i: int, opt: Optimizer, n: int) -> tuple[str, str]:
    """``n`` full-batch steps of ``opt``; the point after the last step is evaluated too."""
    p = run.p
    bar = _Bar(run.bar_mode, n, f"stage {i} {type(opt).__name__}")
    loss = math.nan
    keep_last = run.keep == "last"
    try:
        with _exclusive(p, opt, "fit"):
            value, g, sq, fresh = run.start(p)
            for k in range(n):
                loss = value
                end = run.iterate(i, opt, None, p, value, sq) if (k or fresh) else None
                if end is not None:
                    return end, f"{end} after {k} of {n} steps"
                if keep_last:  # (with keep="best" the best point is the fallback)
                    np.copyto(run.last_p, p)
                    run.last_loss = value
                opt.step(p, g)
                run.nit += 1
                bar.update(1, value, run.best)
                run.memo_x = None
                value, g, sq = run.evaluate(p)
            loss = value
            run.memo = (value, g, sq)
            run.memo_x = p.copy()
            end = run.iterate(i, opt, None, p, value, sq)
            np.copyto(run.last_p, p)
            run.last_loss = value
            if end is not None:
                return end, f"{end} after {n} steps"
            return "completed", f"{n} steps"
    finally:
        bar.close(loss, run.best)


def _minibatch(run: _Run, i: int, opt: Optimizer, epochs: int, m: int, size: int, rng):
    """``epochs`` passes over ``m`` trajectories in shuffled batches of ``size``; validation,
    the best point and early stopping at the end of each epoch."""
    p = run.p
    per_epoch = -(-m // size)
    bar = _Bar(run.bar_mode, epochs * per_epoch, f"stage {i} {type(opt).__name__}")
    loss = math.nan
    try:
        with _exclusive(p, opt, "fit"):
            for e in range(epochs):
                order = rng.permutation(m)
                total = 0.0
                for start in range(0, m, size):
                    batch = order[start : start + size]
                    value, g, sq = run.evaluate(p, batch=batch)
                    total += value
                    end = run.iterate(i, opt, e, p, value, sq, batch_step=True)
                    if end is not None:
                        return end, f"{end} in epoch {e}"
                    opt.step(p, g)
                    run.nit += 1
                    bar.update(1, value, run.best)
                loss = total
                run.memo_x = None
                np.copyto(run.last_p, p)
                run.last_loss = math.nan
                # the end of an epoch: its loss (summed over its batches, at moving
                # parameters) stands for the loss here unless a validation set judges
                if run.val is not None and (e + 1) % run.validate_every == 0:
                    val = run.validate(p)
                    stale = run.consider(p, math.nan, val)
                elif run.val is None:
                    val = None
                    stale = run.consider(p, total, None, exact=False)  # (evaluated at the end)
                else:
                    val, stale = None, False
                if val is not None:
                    row = run.rows[-1]
                    run.rows[-1] = (*row[:5], val, row[6])
                if stale:
                    return "early_stopped", f"early_stopped after epoch {e}"
            return "completed", f"{epochs} epochs of {per_epoch} batches"
    finally:
        bar.close(loss, run.best)


def _lbfgs(run: _Run, i: int, opt: LBFGS, n: int) -> tuple[str, str]:
    p = run.p
    bar = _Bar(run.bar_mode, n, f"stage {i} L-BFGS")
    state = {"x": None, "value": math.nan, "sq": math.nan}
    zeros = np.zeros(p.shape, dtype=np.float64)

    def fun(q):
        x = q if q.dtype == p.dtype else q.astype(p.dtype)
        try:
            value, g, sq = run.full(x)
        except _Failed:  # back off (not inf: SciPy would stop there, see rejected_value)
            return rejected_value(run.last_loss), zeros
        state["x"], state["value"], state["sq"] = x, value, sq
        return value, g.astype(np.float64, copy=False)

    def callback(xk):
        x = xk if xk.dtype == p.dtype else xk.astype(p.dtype)
        if state["x"] is not None and np.array_equal(state["x"], x):
            value, sq = state["value"], state["sq"]
        else:  # (SciPy reports an iterate it did not evaluate last: evaluate it)
            value, _, sq = run.full(x)
        run.nit += 1
        np.copyto(run.last_p, x)
        run.last_loss = value
        bar.update(1, value, run.best)
        end = run.iterate(i, opt, None, x, value, sq)
        if end is not None:
            raise _Stop(end)

    try:
        with _exclusive(p, opt, "fit"):
            value, _, sq, fresh = run.start(p)  # (a failure at the start is reported)
            end = run.iterate(i, opt, None, p, value, sq) if fresh else None
            np.copyto(run.last_p, p)
            run.last_loss = value
            if end is not None:
                return end, f"{end} at the start"
            try:
                res = minimize_lbfgsb(  # (one BLAS thread: SciPy's beside a busy core, _blas)
                    fun,
                    p.astype(np.float64),
                    bounds=opt.bounds,
                    callback=callback,
                    options=opt.options(n),
                )
            except _Stop as s:
                return s.status, f"{s.status} after {run.nit} iterations in all"
            msg = res.message if isinstance(res.message, str) else str(res.message)
            return "completed", f"{res.nit} iterations: {msg}"
    finally:
        np.copyto(p, run.last_p)  # L-BFGS ends at its last accepted iterate
        bar.close(state["value"], run.best)


def fit(
    objective,
    p: np.ndarray,
    stages,
    *,
    batch_size: int | None = None,
    trajectories: int | None = None,
    seed: int | None = 0,
    validation=None,
    validate_every: int = 1,
    patience: int | None = None,
    min_delta: float = 0.0,
    callback: Callable[[FitInfo], bool | None] | None = None,
    progress: bool | None = None,
    keep: str = "best",
) -> FitResult:
    """Minimise ``objective`` over ``p`` in place, stage after stage (e.g. Adam, then L-BFGS).

    Parameters
    ----------
    objective : object with ``value_and_grad(p)``, or a callable ``p -> (value, gradient)``
        Returns the loss (a float) and its gradient (shape ``(num_params,)``); further
        returned items are ignored, so :class:`scichains.adjoint.Objective`,
        :class:`~scichains.adjoint.MultiObjective` and ``lambda p: node.loss_and_grad(u0, p,
        data)`` work as they are. With ``batch_size`` it is called as ``value_and_grad(p,
        batch=indices)`` (the ``batch=`` of ``MultiObjective`` and ``NeuralODE.loss_and_grad``)
        by first-order stages, and without ``batch`` (all the data) by L-BFGS stages.
    p : numpy.ndarray
        The parameters, shape ``(num_params,)``, float64 or float32, C-contiguous, writeable;
        updated in place. When ``fit`` returns, and also when it raises (an error in the
        objective or a callback, ``KeyboardInterrupt``), ``p`` holds the best point found so
        far (``keep="best"``) or the last point with a finite loss (``keep="last"``).
    stages : list
        Each an ``(optimizer, n)`` pair, run in order from where the last one ended:
        ``scichains.Adam``/``AdamW``/``SGD`` for ``n`` steps (``n`` epochs with
        ``batch_size``), or ``scichains.LBFGS`` for ``n`` iterations at most; an
        ``LBFGS(maxiter)`` alone also stands for a stage. One pair alone also works. An
        optimizer's state (Adam's moments) carries over to later calls, as with ``step``.
    batch_size : int, optional
        Mini-batches of this many trajectories in first-order stages, reshuffled each epoch
        (generator ``numpy.random.default_rng(seed)``); the last batch of an epoch may be
        smaller.
    trajectories : int, optional
        The number of trajectories to batch over (default ``objective.m`` when the objective
        has it, as ``MultiObjective`` does).
    seed : int or None
        Seed of the shuffling.
    validation : object with ``value(p)``, or a callable ``p -> float``, optional
        Evaluated every ``validate_every`` iterations (epochs with ``batch_size``); the best
        point is then the one with the lowest validation value (a failed solve counts as
        ``inf``), and with ``patience`` a stage ends after that many validations in a row
        without an improvement larger than ``min_delta`` (the next stage starts from the best
        point).
    callback : callable, optional
        ``callback(info)`` with a :class:`FitInfo` at every iterate (every batch in mini-batch
        stages); returning True ends the fit (status ``"stopped"``).
    progress : bool, optional
        A progress bar per stage: tqdm's (``tqdm.auto``) where installed, else a line on stderr.
        Default: tqdm's bar in a notebook or on a terminal, nothing otherwise.
    keep : ``"best"`` or ``"last"``
        Which point to leave in ``p``: the best (lowest loss, or validation value) seen, or the
        last point of the last stage (default ``"best"``).

    Returns
    -------
    FitResult
        With ``loss`` (the objective at the returned point), ``history``, ``status`` and
        per-stage reports.

    A solve that fails (:class:`scichains.ode.ODESolveError` other than an error in the user's
    functions) or a NaN/infinite value or gradient ends the fit with ``status="failed"``
    (``success=False``) and ``p`` at its best finite point; inside an L-BFGS line search it
    only rejects the trial point. Errors raised by user code reach the caller.

    Threads: ``fit`` holds ``p`` and each stage's optimizer for the duration of the stage; a
    second training call on either from another thread raises ``RuntimeError``.
    """
    check_inplace(p, "p")
    fn = _value_function(objective)
    plan = _stages(stages)
    val = _validation_function(validation)
    validate_every = _count(validate_every, "validate_every")
    if patience is not None:
        patience = _count(patience, "patience")
        if val is None:
            raise ValueError("patience (early stopping) needs a validation set: validation=")
    if keep not in ("best", "last"):
        raise ValueError(f"keep must be 'best' or 'last', got {keep!r}")
    min_delta = float(min_delta)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable, got {type(callback).__name__}")
    m = None
    if batch_size is not None:
        batch_size = _count(batch_size, "batch_size")
        m = trajectories if trajectories is not None else getattr(objective, "m", None)
        if m is None:
            raise ValueError(
                "batch_size needs the number of trajectories: pass trajectories= (or an "
                "objective with an attribute m, as MultiObjective has)"
            )
        m = _count(m, "trajectories")
    elif trajectories is not None:
        raise ValueError("trajectories= is used with batch_size= (mini-batches)")

    run = _Run(fn, p, val, validate_every, patience, min_delta, callback, keep, progress)
    rng = np.random.default_rng(seed)
    reports = []
    status, message, success = "completed", "", True
    last_status = None
    try:
        for i, (opt, n) in enumerate(plan):
            t_stage = time.perf_counter()
            nit0 = run.nit
            if last_status == "early_stopped" and run.have_best:
                np.copyto(p, run.best_p)  # (the next stage starts from the best point)
            try:
                if isinstance(opt, LBFGS):
                    last_status, msg = _lbfgs(run, i, opt, n)
                elif m is not None:
                    last_status, msg = _minibatch(run, i, opt, n, m, batch_size, rng)
                else:
                    last_status, msg = _first_order(run, i, opt, n)
            except _Failed as e:
                last_status, msg = "failed", f"{e} (stage {i}, after {run.nit} iterations)"
            reports.append(
                {
                    "optimizer": repr(opt),
                    "status": last_status,
                    "message": msg,
                    "nit": run.nit - nit0,
                    "seconds": time.perf_counter() - t_stage,
                }
            )
            if last_status in ("failed", "stopped"):
                status, success = last_status, last_status != "failed"
                break
            if last_status == "early_stopped" and i == len(plan) - 1:
                status = "early_stopped"
        message = "; ".join(f"stage {j}: {r['message']}" for j, r in enumerate(reports))
    finally:
        # whatever happened (including an exception on its way out), p is left at a point
        # the user can keep: the best one, or the last finite one
        if keep == "best" and run.have_best:
            np.copyto(p, run.best_p)
        elif keep == "last" or not run.have_best:
            np.copyto(p, run.last_p)
    loss, val_loss = _final_values(run, p, val)
    return FitResult(
        p=p.copy(),
        loss=loss,
        val_loss=val_loss,
        success=success,
        status=status,
        message=message,
        nit=run.nit,
        nfev=run.nfev,
        seconds=time.perf_counter() - run.t0,
        history=run.history(),
        stages=reports,
    )


def _final_values(run: _Run, p: np.ndarray, val) -> tuple[float, float | None]:
    """The loss (and validation value) at the returned point: remembered when known, else
    evaluated once (after mini-batch stages, or when the point was never evaluated whole)."""
    loss = math.nan
    for x, v in ((run.best_p, run.best_loss), (run.last_p, run.last_loss)):
        if math.isfinite(v) and np.array_equal(p, x):
            loss = v
            break
    else:
        try:
            loss = run.full(p)[0]
        except _Failed:
            pass
    val_loss = None
    if val is not None:
        val_loss = (
            run.best_val
            if (run.have_best and np.array_equal(p, run.best_p) and run.best_val is not None)
            else run.validate(p)
        )
    return float(loss), val_loss
