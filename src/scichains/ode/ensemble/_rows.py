"""One process's share of an ensemble: the validated options, the result arrays, and the
trajectories run in the lane loop (:mod:`._lanes`) or the scalar stepper's compiled blocks."""

from __future__ import annotations

from contextlib import contextmanager

import numba
import numpy as np

from ..._jit import parallel_lock
from .._abi import NO_MASS, StepControl, Stops
from .._solution import ReturnCode
from ._kernels import solve_batch
from ._lane_ops import LANES, lane_rhs_address
from ._lanes import solve_lanes


class _Settings:
    """The validated options of one ensemble solve: what a worker needs besides the rows."""

    def __init__(self, plan):
        self.save = plan.save
        self.tableau = plan.tableau
        self.control = (plan.rtol, plan.atol, plan.dt0, plan.dtmin, plan.max_steps)
        self.stops = (
            plan.stops,
            plan.jump_index,
            plan.jump_count,
            plan.jump_state,
            plan.jump_amount,
        )
        solver = plan.solver
        self.interp = solver.interp if plan.interpolate else np.zeros((0, 1), dtype=np.float64)
        self.cap0 = int(plan.ts.size)
        self.t0, self.t1 = plan.prob.tspan


def lanes_apply(prob, settings) -> bool:
    """Whether the lane-parallel loop (``_ensemble_lanes``) runs this ensemble: a compiled
    right-hand side ``f(du, u, p, t)`` (not one calling a network), no doses, and the error
    norm over the whole state. Otherwise the scalar stepper runs each trajectory. Depends on
    the problem and options only, never on the batch or thread count."""
    return (
        _LANES_ENABLED
        and prob.f_address != 0
        and not prob.takes_kernel
        and prob.error_group == 0
        and settings.stops[4].size == 0
    )


_LANES_ENABLED = True  # tests switch the lane loop off to check the scalar path


def _lane_blocks(m, threads):
    """Blocks of the lane loop: each several times ``LANES`` trajectories long, so the lanes
    stay full but for a block's last few; at most 16 a thread."""
    nb = max(m // (4 * LANES), min(threads, -(-m // LANES)))
    return max(1, min(nb, 16 * threads))


@contextmanager
def _numba_threads(threads: int):
    """Run the parallel ensemble kernel inside on ``threads`` of numba's threads, one loop
    iteration (block) handed out at a time; the caller's settings restored after. Holds the
    lock around parallel kernels that the threading layer needs (see ``parallel_lock``)."""
    lock = parallel_lock()
    previous = numba.get_num_threads()
    if lock is not None:
        lock.acquire()
    try:
        numba.set_num_threads(threads)
        old_chunk = numba.set_parallel_chunksize(1)
        try:
            yield
        finally:
            numba.set_parallel_chunksize(old_chunk)
    finally:
        numba.set_num_threads(previous)
        if lock is not None:
            lock.release()


def _result_parts(m: int, nsave: int, n: int) -> list:
    """``(shape, dtype)`` of the arrays :func:`_run_rows` returns for ``m`` trajectories."""
    f8, i8 = np.dtype(np.float64), np.dtype(np.int64)
    return [((m, nsave, n), f8), ((m,), i8), ((m,), f8), ((m, 1 + n), f8), ((m, 3), i8)]


def _fresh_results(m: int, nsave: int, n: int, outs=None) -> list:
    """The result arrays of ``m`` trajectories (:func:`_result_parts`; new ones, or ``outs``
    written over) before a solve: NaN states, zero counts, and every status ``NOT_RUN`` (not
    SUCCESS, 0, until a stepper says so: a trajectory no block reached shows NOT_RUN)."""
    if outs is None:
        outs = [np.empty(shape, dtype) for shape, dtype in _result_parts(m, nsave, n)]
    outs[0].fill(np.nan)
    for a in outs[2:]:
        a.fill(0)
    outs[1].fill(ReturnCode.NOT_RUN)
    return outs


_NO_EVENTS = (0, np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64))


def _run_rows(prob, settings, U0, P, m, threads, outs=None, events=_NO_EVENTS):
    """Solve ``m`` trajectories (rows of ``U0``/``P``, or a shared row) in this process on
    ``threads`` threads; returns ``(u, status, t_reached, fail, counts)`` (as
    :func:`_result_parts` describes): new arrays, or ``outs`` written over. ``events``: the
    lane loop's ``(caddr, edir, redo)`` (see :func:`solve_lanes`; only where the lanes
    apply)."""
    n = prob.u0.size
    nsave = settings.save.size
    out, status, t_reached, fail, counts = outs = _fresh_results(m, nsave, n, outs)
    if lanes_apply(prob, settings):
        control = StepControl(*settings.control, 0, NO_MASS)
        faddr = lane_rhs_address(prob.f, n, P.shape[1])
        with _numba_threads(threads):
            solve_lanes(
                faddr,
                U0,
                P,
                settings.t0,
                settings.t1,
                settings.tableau,
                control,
                settings.stops[0],
                settings.save,
                settings.interp,
                _lane_blocks(m, threads),
                out,
                status,
                t_reached,
                fail,
                counts,
                *events,
            )
        return out, status, t_reached, fail, counts
    # blocks: several per thread, handed out one at a time, so a few slow trajectories do not
    # hold up a thread's whole share (the results do not depend on the split)
    nblocks = max(1, min(m, 16 * threads))
    control = StepControl(*settings.control, prob.error_group, NO_MASS)
    # the lean form of the right-hand side where there is one (unsigned address: see
    # _kernels.rhs_function); the stepper's arithmetic is the same, so are the results
    faddr = prob.lean_address
    faddr = np.uint64(faddr) if faddr else prob.f_address
    kernel = prob.kernel
    with _numba_threads(threads):
        solve_batch(
            faddr,
            kernel,
            U0,
            P,
            settings.t0,
            settings.t1,
            settings.tableau,
            control,
            Stops(*settings.stops),
            settings.save,
            settings.interp,
            settings.cap0,
            nblocks,
            out,
            status,
            t_reached,
            fail,
            counts,
        )
    return out, status, t_reached, fail, counts
