"""SUNDIALS' CVODE called directly (ctypes), with compiled callbacks: no Python per step or call.

scikit-sundae wraps CVODE for Python callbacks; each call of the right-hand side then crosses
into Python (a few microseconds, which dominate small stiff systems). For a problem whose
right-hand side and vjp are C-callables (every compiled problem without a network kernel),
this module drives the same CVODE library (the one scikit-sundae ships) through ctypes and
hands it ``numba.cfunc`` callbacks compiled once (cached): the right-hand side, the exact
dense Jacobian built row by row from the vjp, and (with events) the root function that calls
the events' conditions. They receive the problem through CVODE's ``user_data``: an int64
block ``[n, len(p), &p, f address, vjp address, &fail, &e, &row, &pbar, failed, conditions
address, number of events]``. CVODE's vectors and dense matrix are read through their content
structs (``N_Vector`` serial content: length, own_data, data; dense ``SUNMatrix``: M, N, data; with
scikit-sundae's build, 32-bit ``sunindextype``, the data pointer at byte 8 of both), a layout
checked against ``N_VGetArrayPointer`` when the library is loaded; anything unexpected
(another layout, a missing library) makes :func:`available` false and the solvers fall back to
scikit-sundae.
"""

from __future__ import annotations

import ctypes
import glob
import os
from types import SimpleNamespace

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from ..._jit import CFUNC_FLAGS
from .._abi import NO_NETWORK, lean_from_address, rhs_from_address, vjp_from_address

CV_ADAMS, CV_BDF = 1, 2
CV_NORMAL, CV_ONE_STEP = 1, 2
CV_RHSFUNC_FAIL = -8
MESSAGES = {
    -1: "CV_TOO_MUCH_WORK: max_steps steps taken before reaching the output time",
    -2: "CV_TOO_MUCH_ACC: the tolerances are too small for the machine precision",
    -3: "CV_ERR_FAILURE: error test failures occurred too many times (or with |h| = hmin)",
    -4: "CV_CONV_FAILURE: convergence test failures occurred too many times (or |h| = hmin)",
    -5: "CV_LINIT_FAIL: the linear solver's initialisation failed",
    -6: "CV_LSETUP_FAIL: the linear solver's setup failed (a singular iteration matrix?)",
    -7: "CV_LSOLVE_FAIL: the linear solver's solve failed",
    -8: "CV_RHSFUNC_FAIL: the right-hand side failed",
    -9: "CV_FIRST_RHSFUNC_ERR: the right-hand side failed at the first call",
    -10: "CV_REPTD_RHSFUNC_ERR: the right-hand side failed repeatedly",
    -11: "CV_UNREC_RHSFUNC_ERR: the right-hand side failed unrecoverably",
    -12: "CV_RTFUNC_FAIL: an event condition failed",
}
INFO_SIZE = 12
(N, NPAR, P_ADDR, F_ADDR, V_ADDR, FAIL_ADDR, E_ADDR, ROW_ADDR, PB_ADDR, FAILED, G_ADDR, NG) = range(
    INFO_SIZE
)
FAILED_RHS, FAILED_JAC, FAILED_CONDITION = 1, 2, 3


@intrinsic
def _f64_ptr(typingctx, addr):
    """An int64 address as a ``float64*``."""
    sig = types.CPointer(types.float64)(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

    return sig, codegen


@intrinsic
def _i64_ptr(typingctx, addr):
    """An int64 address as an ``int64*``."""
    sig = types.CPointer(types.int64)(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

    return sig, codegen


@numba.njit(inline="always")
def _data(obj, n):
    """The ``float64`` data (length ``n``) of a serial ``N_Vector`` or a dense ``SUNMatrix``
    (address ``obj``): both structs start with their content pointer, and both contents hold
    the data pointer at byte 8 (after two 32-bit integers)."""
    content = numba.carray(_i64_ptr(obj), 1)[0]
    return numba.carray(_f64_ptr(numba.carray(_i64_ptr(content), 2)[1]), n)


_I64 = types.int64


@numba.njit(inline="always")
def _record_failure(info, t, u, what):
    """Keep the point where a user function raised (Python calls it again there)."""
    n = u.shape[0]
    fail = numba.carray(_f64_ptr(info[FAIL_ADDR]), n + 1)
    fail[0] = t
    for i in range(n):
        fail[1 + i] = u[i]
    info[FAILED] = what


@numba.cfunc(types.int32(types.float64, _I64, _I64, _I64), **CFUNC_FLAGS)
def _cv_rhs(t, y, ydot, ud):
    info = numba.carray(_i64_ptr(ud), INFO_SIZE)
    n = info[N]
    u = _data(y, n)
    du = _data(ydot, n)
    p = numba.carray(_f64_ptr(info[P_ADDR]), info[NPAR])
    f = rhs_from_address(info[F_ADDR])
    if f(du, u, p, t, NO_NETWORK) != 0:
        _record_failure(info, t, u, FAILED_RHS)
        return -1  # unrecoverable: CVODE stops
    return 0


@numba.cfunc(types.int32(types.float64, _I64, _I64, _I64), **CFUNC_FLAGS)
def _cv_root(t, y, gout, ud):
    """CVODE's root function: the events' conditions ``g_i(u, t, p)`` into ``gout``."""
    info = numba.carray(_i64_ptr(ud), INFO_SIZE)
    n = info[N]
    u = _data(y, n)
    g = numba.carray(_f64_ptr(gout), info[NG])
    p = numba.carray(_f64_ptr(info[P_ADDR]), info[NPAR])
    cond = lean_from_address(info[G_ADDR])
    if cond(g.ctypes.data, u.ctypes.data, p.ctypes.data, t, n, info[NPAR]) != 0:
        _record_failure(info, t, u, FAILED_CONDITION)
        return -1
    return 0


@numba.cfunc(types.int32(types.float64, _I64, _I64, _I64, _I64, _I64, _I64, _I64), **CFUNC_FLAGS)
def _cv_jac(t, y, fy, jmat, ud, tmp1, tmp2, tmp3):
    info = numba.carray(_i64_ptr(ud), INFO_SIZE)
    n = info[N]
    u = _data(y, n)
    jd = _data(jmat, n * n)  # column-major: entry (i, j) at j n + i
    p = numba.carray(_f64_ptr(info[P_ADDR]), info[NPAR])
    e = numba.carray(_f64_ptr(info[E_ADDR]), n)
    row = numba.carray(_f64_ptr(info[ROW_ADDR]), n)
    pb = numba.carray(_f64_ptr(info[PB_ADDR]), info[NPAR])
    vjp = vjp_from_address(info[V_ADDR])
    for i in range(n):
        for j in range(n):
            e[j] = 0.0
        e[i] = 1.0
        if vjp(e, u, p, t, NO_NETWORK, row, pb) != 0:
            _record_failure(info, t, u, FAILED_JAC)
            return -1
        for j in range(n):
            jd[j * n + i] = row[j]
    return 0


_LIB = {}


def _load():
    """The SUNDIALS libraries scikit-sundae ships, with the prototypes used here; None when
    they cannot be found or their struct layout is not the expected one."""
    if "cv" in _LIB:
        return _LIB["cv"]
    _LIB["cv"] = None
    try:
        import sksundae
    except ImportError:  # pragma: no cover - a dependency
        return None
    libs = os.path.join(os.path.dirname(os.path.dirname(sksundae.__file__)), "scikit_sundae.libs")

    def one(stem):
        found = sorted(glob.glob(os.path.join(libs, f"libsundials_{stem}-*.so*")))
        if not found:
            raise OSError(stem)
        return ctypes.CDLL(found[0], mode=ctypes.RTLD_GLOBAL)

    try:
        core, nvec, mat, ls, cv = (
            one(s) for s in ("core", "nvecserial", "sunmatrixdense", "sunlinsoldense", "cvode")
        )
    except OSError:
        return None
    vp, d, idx, c_int = ctypes.c_void_p, ctypes.c_double, ctypes.c_int32, ctypes.c_int
    pvp = ctypes.POINTER(vp)
    protos = [
        (core, "SUNContext_Create", c_int, [c_int, pvp]),
        (core, "SUNContext_Free", c_int, [pvp]),
        (core, "SUNContext_ClearErrHandlers", c_int, [vp]),
        (core, "N_VGetArrayPointer", ctypes.POINTER(d), [vp]),
        (core, "N_VDestroy", None, [vp]),
        (core, "SUNMatDestroy", None, [vp]),
        (core, "SUNLinSolFree", c_int, [vp]),
        (nvec, "N_VNew_Serial", vp, [idx, vp]),
        (mat, "SUNDenseMatrix", vp, [idx, idx, vp]),
        (ls, "SUNLinSol_Dense", vp, [vp, vp, vp]),
        (cv, "CVodeCreate", vp, [c_int, vp]),
        (cv, "CVodeInit", c_int, [vp, vp, d, vp]),
        (cv, "CVodeReInit", c_int, [vp, d, vp]),
        (cv, "CVodeSStolerances", c_int, [vp, d, d]),
        (cv, "CVodeSetLinearSolver", c_int, [vp, vp, vp]),
        (cv, "CVodeSetJacFn", c_int, [vp, vp]),
        (cv, "CVodeSetUserData", c_int, [vp, vp]),
        (cv, "CVodeSetMaxNumSteps", c_int, [vp, ctypes.c_long]),
        (cv, "CVodeSetMaxOrd", c_int, [vp, c_int]),
        (cv, "CVodeSetInitStep", c_int, [vp, d]),
        (cv, "CVodeSetMinStep", c_int, [vp, d]),
        (cv, "CVodeSetStopTime", c_int, [vp, d]),
        (cv, "CVodeRootInit", c_int, [vp, c_int, vp]),
        (cv, "CVodeSetRootDirection", c_int, [vp, vp]),
        (cv, "CVodeSetNoInactiveRootWarn", c_int, [vp]),
        (cv, "CVodeGetRootInfo", c_int, [vp, vp]),
        (cv, "CVode", c_int, [vp, d, vp, ctypes.POINTER(d), c_int]),
        (cv, "CVodeGetNumSteps", c_int, [vp, ctypes.POINTER(ctypes.c_long)]),
        (cv, "CVodeGetNumRhsEvals", c_int, [vp, ctypes.POINTER(ctypes.c_long)]),
        (cv, "CVodeGetNumJacEvals", c_int, [vp, ctypes.POINTER(ctypes.c_long)]),
        (cv, "CVodeGetNumErrTestFails", c_int, [vp, ctypes.POINTER(ctypes.c_long)]),
        (cv, "CVodeFree", None, [pvp]),
    ]
    api = SimpleNamespace()
    try:
        for lib, name, res, args in protos:
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
            setattr(api, name, fn)
    except AttributeError:
        return None
    # the struct layout _data relies on, checked on one vector and one matrix
    ctx = vp()
    if api.SUNContext_Create(0, ctypes.byref(ctx)) != 0:
        return None
    try:
        v = api.N_VNew_Serial(3, ctx)
        m = api.SUNDenseMatrix(3, 3, ctx)
        try:
            want = ctypes.cast(api.N_VGetArrayPointer(v), vp).value
            ok = _struct_data(v) == want and _struct_ints(v) == (3, 1)
            ok = ok and _struct_ints(m) == (3, 3) and _struct_data(m) != 0
        finally:
            api.N_VDestroy(v)
            api.SUNMatDestroy(m)
    finally:
        api.SUNContext_Free(ctypes.byref(ctx))
    if ok:
        _LIB["cv"] = api
    return _LIB["cv"]


def _struct_ints(obj):
    """The two 32-bit integers opening the content struct of ``obj``."""
    content = ctypes.cast(obj, ctypes.POINTER(ctypes.c_void_p))[0]
    ints = ctypes.cast(content, ctypes.POINTER(ctypes.c_int32))
    return ints[0], ints[1]


def _struct_data(obj):
    """The pointer at byte 8 of the content struct of ``obj``."""
    content = ctypes.cast(obj, ctypes.POINTER(ctypes.c_void_p))[0]
    return ctypes.cast(content, ctypes.POINTER(ctypes.c_void_p))[1]


class ConditionFailed(Exception):  # noqa: N818 - a signal, turned into the user's own error
    """An event condition raised in compiled code, at time ``t`` and state ``u``: the caller
    calls the conditions again from Python there to raise the user's exception."""

    def __init__(self, t, u):
        super().__init__(t)
        self.t, self.u = t, u


def available(prob) -> bool:
    """Whether ``prob`` can run on the direct path: a compiled right-hand side without a
    network kernel, and the libraries found with the expected layout."""
    return prob.f_address != 0 and prob.kernel is NO_NETWORK and _load() is not None


class DirectCVODE:
    """One CVODE instance over a compiled problem, with the small interface of
    scikit-sundae's ``CVODE`` that :mod:`scichains.ode.cvode._sundials` uses (``init_step``,
    ``step``), plus :meth:`roots`, :meth:`counts` and :meth:`close`. ``events``: None, or
    ``(conditions address, directions)``: the compiled conditions of the events
    (``RHS_SIGNATURE``, writing ``g_i`` into their first argument) and their directions
    (+1, -1, 0), handed to CVODE's root finding."""

    def __init__(
        self, prob, p, method, rtol, atol, max_steps, max_order, dt0, dtmin, exact, events=None
    ):
        top = 5 if method == "BDF" else 12
        if max_order is not None and not 1 <= int(max_order) <= top:
            raise ValueError(f"max_order of CVODE's {method} must lie in 1..{top}, got {max_order}")
        api = _load()
        self.api = api
        self.prob = prob
        n = prob.u0.size
        self.n = n
        self.p = np.ascontiguousarray(p, dtype=np.float64)
        self.fail = np.zeros(n + 1)
        self.e = np.zeros(n)
        self.row = np.zeros(n)
        self.pb = np.zeros(max(self.p.size, 1))
        self.info = np.zeros(INFO_SIZE, dtype=np.int64)
        self.info[:] = [
            n,
            self.p.size,
            self.p.ctypes.data,
            prob.f_address,
            prob.vjp_address if exact else 0,
            self.fail.ctypes.data,
            self.e.ctypes.data,
            self.row.ctypes.data,
            self.pb.ctypes.data,
            0,
            0 if events is None else int(events[0]),
            0 if events is None else len(events[1]),
        ]
        m = int(self.info[NG])
        self.rootdir = np.zeros(max(m, 1), dtype=np.int32)
        self.found = np.zeros(max(m, 1), dtype=np.int32)
        if events is not None:
            self.rootdir[:m] = events[1]
        self.options = (method, rtol, atol, max_steps, max_order, dt0, dtmin, exact)
        self.ctx = ctypes.c_void_p()
        self.mem = ctypes.c_void_p()
        self.y = self.A = self.LS = None
        self.totals = np.zeros(4, dtype=np.int64)  # steps, f calls, Jacobians, error fails
        self.initialised = False
        if api.SUNContext_Create(0, ctypes.byref(self.ctx)) != 0:
            raise RuntimeError("SUNContext_Create failed")
        api.SUNContext_ClearErrHandlers(self.ctx)  # failures are return codes, not prints
        self.y = api.N_VNew_Serial(n, self.ctx)
        lmm = CV_BDF if method == "BDF" else CV_ADAMS
        self.mem = ctypes.c_void_p(api.CVodeCreate(lmm, self.ctx))
        if not self.mem.value or not self.y:
            self.close()
            raise MemoryError("CVODE could not allocate its memory")
        self.ydata = np.ctypeslib.as_array(api.N_VGetArrayPointer(self.y), shape=(n,))

    def _check(self, flag, what):
        if flag < 0:
            raise RuntimeError(f"{what} failed with return code {flag}")

    def init_step(self, t0, u0):
        api = self.api
        self._add_counts()
        self.ydata[:] = u0
        if self.initialised:
            self._check(api.CVodeReInit(self.mem, float(t0), self.y), "CVodeReInit")
            return
        method, rtol, atol, max_steps, max_order, dt0, dtmin, exact = self.options
        self._check(api.CVodeInit(self.mem, _cv_rhs.address, float(t0), self.y), "CVodeInit")
        self.initialised = True
        self._check(api.CVodeSStolerances(self.mem, rtol, atol), "CVodeSStolerances")
        self._check(api.CVodeSetUserData(self.mem, self.info.ctypes.data), "CVodeSetUserData")
        self.A = api.SUNDenseMatrix(self.n, self.n, self.ctx)
        self.LS = api.SUNLinSol_Dense(self.y, self.A, self.ctx)
        if not self.A or not self.LS:
            raise MemoryError("CVODE's dense linear solver could not be allocated")
        self._check(api.CVodeSetLinearSolver(self.mem, self.LS, self.A), "CVodeSetLinearSolver")
        if exact:
            self._check(api.CVodeSetJacFn(self.mem, _cv_jac.address), "CVodeSetJacFn")
        self._check(api.CVodeSetMaxNumSteps(self.mem, int(max_steps)), "CVodeSetMaxNumSteps")
        if max_order is not None:
            self._check(api.CVodeSetMaxOrd(self.mem, int(max_order)), "CVodeSetMaxOrd")
        if dt0:
            self._check(api.CVodeSetInitStep(self.mem, float(dt0)), "CVodeSetInitStep")
        if dtmin:
            self._check(api.CVodeSetMinStep(self.mem, float(dtmin)), "CVodeSetMinStep")
        m = int(self.info[NG])
        if m:  # kept by CVodeReInit
            self._check(api.CVodeRootInit(self.mem, m, _cv_root.address), "CVodeRootInit")
            self._check(
                api.CVodeSetRootDirection(self.mem, self.rootdir.ctypes.data),
                "CVodeSetRootDirection",
            )
            api.CVodeSetNoInactiveRootWarn(self.mem)  # a condition zero at t0 is no event

    def step(self, tout, method="normal", tstop=None):
        """Advance to ``tout`` (``method="normal"``: CVODE's interpolation past it) or by one
        step (``"onestep"``), never past ``tstop``; returns ``status``, ``t``, ``y`` (a view
        of CVODE's vector: copy it to keep it), ``message``. A user function that raised is
        raised here again (from Python, by the caller's reproduction)."""
        api = self.api
        if tstop is not None:
            self._check(api.CVodeSetStopTime(self.mem, float(tstop)), "CVodeSetStopTime")
        tret = ctypes.c_double(0.0)
        task = CV_NORMAL if method == "normal" else CV_ONE_STEP
        flag = api.CVode(self.mem, float(tout), self.y, ctypes.byref(tret), task)
        failed = int(self.info[FAILED])
        if failed:
            from .._solution import user_error_failure

            self.info[FAILED] = 0
            n = self.n
            if failed == FAILED_CONDITION:
                raise ConditionFailed(float(self.fail[0]), self.fail[1 : 1 + n].copy())
            failure = user_error_failure(self.prob, self.p, self.fail[0], self.fail[1 : 1 + n])
            what = "right-hand side" if failed == FAILED_RHS else "vjp (for the Jacobian)"
            raise failure.exception or RuntimeError(f"the {what} failed: {failure.message}")
        message = MESSAGES.get(flag, f"CVODE returned {flag}") if flag < 0 else ""
        return SimpleNamespace(status=flag, t=tret.value, y=self.ydata, message=message, nfev=0)

    def roots(self):
        """After a return at a root (CVODE's flag 2): ``(m,)`` int32, nonzero for the events
        found (+1 where the condition rose, -1 where it fell): a copy."""
        flag = self.api.CVodeGetRootInfo(self.mem, self.found.ctypes.data)
        self._check(flag, "CVodeGetRootInfo")
        return self.found[: int(self.info[NG])].copy()

    def _add_counts(self):
        if not self.initialised:
            return
        api = self.api
        out = ctypes.c_long(0)
        for i, fn in enumerate(
            (
                api.CVodeGetNumSteps,
                api.CVodeGetNumRhsEvals,
                api.CVodeGetNumJacEvals,
                api.CVodeGetNumErrTestFails,
            )
        ):
            out.value = 0
            fn(self.mem, ctypes.byref(out))
            self.totals[i] += out.value

    def counts(self):
        """``{"nf", "naccept", "nreject", "njev"}`` over every segment so far."""
        saved = self.totals.copy()
        self._add_counts()
        steps, nf, njev, nfail = (int(x) for x in self.totals)
        self.totals[:] = saved
        return {"nf": nf, "naccept": steps, "nreject": nfail, "njev": njev}

    def close(self):
        api = self.api
        if self.mem is not None and self.mem.value:
            api.CVodeFree(ctypes.byref(self.mem))
        if self.LS:
            api.SUNLinSolFree(self.LS)
            self.LS = None
        if self.A:
            api.SUNMatDestroy(self.A)
            self.A = None
        if self.y:
            api.N_VDestroy(self.y)
            self.y = None
        if self.ctx is not None and self.ctx.value:
            api.SUNContext_Free(ctypes.byref(self.ctx))
        self.ctx = None
        self.mem = None
