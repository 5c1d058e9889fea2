"""Checkpointed continuous adjoints: the forward solve keeps only the states at the save
points and doses; the backward pass re-solves one segment at a time from its checkpoint and
integrates the adjoint over it (SciMLSensitivity's ``checkpointing=true``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..ode._plan import SolvePlan, check_run, run_plan, stop_tables
from ._continuous import adjoint_over_plan


class Checkpoints:
    """The segments between consecutive checkpoints (``t0``, the save times, the dose times,
    ``t1``), each with its own stop and dose tables, and the state each one starts from.

    A dose at a checkpoint is applied at the end of the segment that lands there (so each
    checkpoint state is a right limit); doses at ``t0`` act on ``u0`` in the first segment.
    """

    def __init__(self, prob, plan: SolvePlan, tstops, jumps):
        t0, t1 = prob.tspan
        d = 1.0 if t1 > t0 else -1.0
        jumps = [] if jumps is None else [(float(a), int(b), float(c)) for a, b, c in jumps]
        tst = np.zeros(0) if tstops is None else np.atleast_1d(np.asarray(tstops, float))
        pts = np.concatenate([[t0, t1], plan.save, [j[0] for j in jumps]])
        cps = np.unique(pts)
        if d < 0:
            cps = cps[::-1].copy()
        self.times = cps
        self.tables = []
        for j in range(cps.size - 1):
            a, b = cps[j], cps[j + 1]
            inside = tst[(d * (tst - a) > 0) & (d * (b - tst) > 0)]
            seg_jumps = [jm for jm in jumps if (d * (jm[0] - a) > 0 and d * (b - jm[0]) >= 0)] + (
                [jm for jm in jumps if jm[0] == a] if j == 0 else []
            )
            # (the inputs: their samples inside the segment are stops too)
            ns = SimpleNamespace(tspan=(a, b), u0=prob.u0, inputs=getattr(prob, "inputs", None))
            _, *tables = stop_tables(ns, None, inside if inside.size else None, seg_jumps or None)
            self.tables.append(tables)
        n = prob.u0.size
        self.states = np.empty((cps.size - 1, n))  # where each segment starts
        self.dt0 = np.zeros(cps.size - 1)
        self.save_at = np.full(cps.size, -1, dtype=np.int64)
        for i, ts in enumerate(plan.save):
            self.save_at[np.nonzero(cps == ts)[0][0]] = i
        self.seg_pos = np.zeros(1, dtype=np.int64)
        self.seg_dl = np.zeros((1, n))

    def _segment(self, plan: SolvePlan, j, u, p):
        """Solve segment ``j`` from ``u`` into the plan's step buffers; returns the number of
        stored entries."""
        span = (self.times[j], self.times[j + 1])
        check_run(plan, run_plan(plan, u, p, span=span, dt0=self.dt0[j], tables=self.tables[j]), p)
        return int(plan.stats[0])

    def forward(self, plan: SolvePlan, u0, p):
        """Solve segment after segment, keeping the checkpoint states and the saved states
        (``plan.save_u``)."""
        plan.save_buffers()
        u = u0
        h = 0.0  # the first segment: Hairer's initial step
        for j in range(self.times.size - 1):
            self.states[j] = u
            self.dt0[j] = h
            m = self._segment(plan, j, u, p)
            if j == 0 and self.save_at[0] >= 0:
                plan.save_u[self.save_at[0]] = plan.us[0]  # after any dose at t0
            u = plan.us[m - 1].copy()
            if self.save_at[j + 1] >= 0:
                plan.save_u[self.save_at[j + 1]] = u
            # the next segment starts with the step the controller proposed last (stored,
            # so the backward re-solve takes the same steps)
            h = float(plan.ts[m])

    def backward(self, plan, mode, vaddr, p, dl_du, rtol, atol, ws, K, stats, dp, du0):
        """Re-solve each segment (last first) and integrate the adjoint over it, carrying
        ``lam`` and the parameter gradient from segment to segment."""
        dp[:] = 0.0
        du0[:] = 0.0
        stats[:] = 0
        for j in range(self.times.size - 2, -1, -1):
            m = self._segment(plan, j, self.states[j], p)
            self.seg_pos[0] = m - 1
            k = self.save_at[j + 1]
            self.seg_dl[0] = dl_du[k] if k >= 0 else 0.0
            adjoint_over_plan(
                mode,
                plan,
                vaddr,
                p,
                rtol,
                atol,
                m,
                self.seg_pos,
                self.seg_dl,
                dp,
                du0,
                ws,
                K,
                stats,
                True,
            )
        if self.save_at[0] >= 0:
            du0 += dl_du[self.save_at[0]]
