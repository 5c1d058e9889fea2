"""Code generation shared by the symbolic model, the tracer and the automatic vjps: SymPy
expressions printed as Python assignments (common subexpressions shared, every bit of a float
constant kept), and generated modules written to a cache directory named by their hash and
imported, so that numba's cache serves their compiled functions in later processes."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from ..._jit import SOURCE_DIGEST


def _sympy():
    import sympy

    return sympy


def assign(targets, exprs, prefix):
    """Lines computing ``targets[i] = exprs[i]`` with common subexpressions shared."""
    sp = _sympy()
    from sympy.printing.pycode import PythonCodePrinter

    class Printer(PythonCodePrinter):
        def _print_Float(self, expr):  # every bit of a float constant (SymPy prints 15 digits)
            return repr(float(expr))

    printer = Printer({"fully_qualified_modules": True, "standard": "python3"})
    temps, reduced = sp.cse(list(exprs), symbols=sp.numbered_symbols(f"_{prefix}"))
    out = [f"    {sym} = {printer.doprint(e)}" for sym, e in temps]
    for tgt, e in zip(targets, reduced):
        val = printer.doprint(e)
        if e.is_number:
            val = repr(float(e))
        out.append(f"    {tgt} = {val}")
    return out


def cache_dir() -> Path:
    base = os.environ.get("SCICHAINS_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "scichains"
    return root / "generated"


def load(source: str):
    """Write ``source`` to the cache directory (named by its hash and the package's) and
    import it, so that numba's cache serves its compiled functions in later processes."""
    digest = hashlib.sha256((SOURCE_DIGEST + source).encode()).hexdigest()[:20]
    name = f"scichains_model_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    for directory in (cache_dir(), Path(tempfile.gettempdir()) / "scichains-generated"):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{name}.py"
            if not path.exists() or path.read_text() != source:
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(source)
                os.replace(tmp, path)
            break
        except OSError:
            continue
    else:  # pragma: no cover
        raise OSError("no writable directory for generated model code (set SCICHAINS_CACHE)")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
