"""Sending problems to worker processes: compiled functions by name, rebuilt once per worker.

An :class:`~scichains.ode.ODEProblem` holds C-callables whose addresses mean nothing in
another process, so it never travels itself: :class:`ProblemSpec` carries what rebuilds it
(the right-hand side and vjp as :class:`FunctionRef`, ``u0``, ``tspan``, ``p``, the network
kernels; not a mass matrix: ensembles run explicit methods, which refuse one before any
worker is asked), rebuilt once per worker process
(:func:`scichains.parallel._transport.worker_cached`).

A compiled function travels by reference whenever one serves: an importable module and
name (the worker imports it, and numba loads its machine code from the cache), or the source of
a :class:`~scichains.ode.SymbolicModel`'s generated module (the worker writes and imports the
same module, named by the hash of its source). Only a function defined in ``__main__`` (or
inside another function) is pickled by value (cloudpickle, through numba's own reducer): the
worker then compiles it once per process.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from pathlib import Path

from ...parallel._transport import worker_cached
from .._abi import register_cfunc
from .._problem import ODEProblem
from ..derivatives._codegen import load

GENERATED_PREFIX = "scichains_model_"


class FunctionRef:
    """A picklable handle on a compiled (``@numba.njit``) function; :meth:`resolve` returns
    the function in the process that unpickled it.

    ``kind``: ``"import"`` (module and qualified name), ``"generated"`` (a SymbolicModel's
    generated module: its source and the attribute), or ``"value"`` (the dispatcher itself,
    pickled by value: functions of ``__main__`` or closures)."""

    def __init__(self, f):
        self.kind = "value"
        self.obj = f
        self.module = self.name = self.source = None
        py = getattr(f, "py_func", None)
        if py is None:
            return
        module = getattr(py, "__module__", None) or ""
        qual = getattr(py, "__qualname__", "")
        if module.startswith(GENERATED_PREFIX):
            mod = sys.modules.get(module)
            attr = _attribute_of(mod, f)
            if mod is not None and attr is not None and getattr(mod, "__file__", None):
                self.kind, self.obj = "generated", None
                self.module, self.name = module, attr
                self.source = Path(mod.__file__).read_text()
            return
        if module == "__main__" or "<locals>" in qual:
            return
        try:
            mod = importlib.import_module(module)
        except ImportError:
            return
        if _get_qualified(mod, qual) is f:
            self.kind, self.obj = "import", None
            self.module, self.name = module, qual

    def resolve(self):
        if self.kind == "value":
            return self.obj
        if self.kind == "import":
            return _get_qualified(importlib.import_module(self.module), self.name)
        mod = sys.modules.get(self.module)
        if mod is None:
            mod = load(self.source)
        f = getattr(mod, self.name)
        _register_generated(mod)
        return f

    def __repr__(self) -> str:
        where = f"{self.module}.{self.name}" if self.module else repr(self.obj)
        return f"FunctionRef({self.kind}: {where})"


def _attribute_of(mod, f):
    if mod is None:
        return None
    for name in ("f", "vjp"):
        if getattr(mod, name, None) is f:
            return name
    for name, value in vars(mod).items():
        if value is f:
            return name
    return None


def _get_qualified(mod, qual):
    obj = mod
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _register_generated(mod) -> None:
    """Use a generated module's cached C-callables for its functions (as SymbolicModel does)."""
    if hasattr(mod, "f_cfunc"):
        register_cfunc(mod.f, mod.f_cfunc, True)
    if hasattr(mod, "vjp_cfunc"):
        register_cfunc(mod.vjp, mod.vjp_cfunc, True)


class ProblemSpec:
    """What rebuilds an :class:`~scichains.ode.ODEProblem` in another process (see the module
    docstring); ``token`` names it in the workers' caches."""

    def __init__(self, prob):
        self.token = uuid.uuid4().hex
        self.f = FunctionRef(prob.f)
        self.vjp = None if prob.vjp is None else FunctionRef(prob.vjp)
        if prob.automatic_vjp and self.vjp.kind == "value":
            self.vjp = None  # the worker makes it again (ensure_vjp) rather than compile a copy
        self.u0 = prob.u0.copy()
        self.tspan = prob.tspan
        self.p = prob.p.copy()
        self.kernel = prob.kernel
        self.error_group = prob.error_group
        self.network_rhs = getattr(prob, "network_rhs", False)
        # inputs: f is already the adapter evaluating them (ODEProblem(inputs=)); the rebuilt
        # problem keeps the interpolant (its stops) and the user's f (automatic vjps)
        self.inputs = getattr(prob, "inputs", None)
        self.user_f = None if self.inputs is None else FunctionRef(prob.user_f)

    def build(self):
        """A new ODEProblem (an automatic vjp is made again where a gradient needs one)."""
        vjp = None if self.vjp is None else self.vjp.resolve()
        prob = ODEProblem(self.f.resolve(), self.u0, self.tspan, self.p, self.kernel, vjp)
        prob.error_group = self.error_group
        if self.network_rhs:
            prob.network_rhs = True
        if self.inputs is not None:
            prob.inputs, prob.user_f = self.inputs, self.user_f.resolve()
        return prob

    def problem(self):
        """The rebuilt problem, made once per process (see :func:`worker_cached`)."""
        return worker_cached(("problem", self.token), self.build)
