"""Large straight-line SymPy expressions compiled without numba's per-operation typing.

numba types every arithmetic operation of a function separately (its overload resolution
costs a few milliseconds per operation here), so a generated right-hand side of thousands of
operations (a PK model's sensitivity system with a network: ~4000) takes tens of seconds to
compile, most of it typing scalar float64 arithmetic whose types are known in advance. Here
the expressions become a *program* (a tuple of instructions, plain Python data written into
the generated module), and one numba ``@intrinsic`` emits it as LLVM IR directly: numba types
one call, LLVM compiles the arithmetic, and numba's cache keeps the machine code as for any
function.

The instructions are in SSA form: instruction ``j`` defines value ``j``:

- ``("u", i)``, ``("p", i)``: ``u[i]``, ``p[i]``; ``("t",)``: the time; ``("c", x)``: a
  float64 constant
- ``("add", a, b, ...)``, ``("mul", a, b, ...)``: sums and products of values (left to
  right); ``("div", a, b)``; ``("powi", a, n)``: ``a ** n`` for an integer ``n`` (repeated
  multiplication); ``("pow", a, b)``: ``a ** b``; ``("f", name, a)``: a math function of
  :data:`FUNCTIONS`
- ``("store", i, a)``: ``out[i] = a`` (defines no value)

IEEE semantics without fast-math flags (a NaN or an infinity propagates; division by zero
gives an infinity, as ``error_model="numpy"`` does). :func:`program` returns None for an
expression it cannot express (``Max``, ``Heaviside``, ``Piecewise``, ...): the caller then
generates ordinary numba code.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# SymPy function name -> (LLVM intrinsic, or None for the C library's function of that name)
FUNCTIONS = {
    "exp": ("llvm.exp.f64", None),
    "log": ("llvm.log.f64", None),
    "sin": ("llvm.sin.f64", None),
    "cos": ("llvm.cos.f64", None),
    "Abs": ("llvm.fabs.f64", None),
    "tanh": (None, "tanh"),
    "sinh": (None, "sinh"),
    "cosh": (None, "cosh"),
    "tan": (None, "tan"),
    "atan": (None, "atan"),
    "asin": (None, "asin"),
    "acos": (None, "acos"),
    "erf": (None, "erf"),
}


class Unsupported(Exception):
    """An expression :func:`program` cannot express."""


def program(targets, exprs, temps, inputs):
    """The instructions computing ``out[targets[k]] = exprs[k]`` after the common
    subexpressions ``temps`` (``[(symbol, expression), ...]`` as ``sympy.cse`` returns them).

    ``inputs``: ``{symbol: ("u", i) | ("p", i) | ("t",)}``. Returns a tuple of instructions,
    or None when an expression uses a function or a node this module does not compile."""
    try:
        return _Builder(inputs).build(targets, exprs, temps)
    except Unsupported:
        return None


class _Builder:
    def __init__(self, inputs):
        self.inputs = inputs
        self.ins = []
        self.memo = {}

    def emit(self, instr):
        # constants by their repr: 0.0 and -0.0 compare equal but are not the same
        key = ("c", repr(instr[1])) if instr[0] == "c" else instr
        j = self.memo.get(key)
        if j is None:
            j = len(self.ins)
            self.ins.append(instr)
            self.memo[key] = j
        return j

    def build(self, targets, exprs, temps):
        import sympy as sp

        self.sp = sp
        self.values = {}
        for sym, e in temps:
            self.values[sym] = self.value(e)
        for tgt, e in zip(targets, exprs):
            self.ins.append(("store", int(tgt), self.value(e)))
        return tuple(self.ins)

    def value(self, e):
        sp = self.sp
        if e in self.values:
            return self.values[e]
        if isinstance(e, sp.Symbol):
            src = self.inputs.get(e)
            if src is None:
                raise Unsupported(f"unknown symbol {e}")
            return self.emit(tuple(src))
        if e.is_number:
            try:
                x = float(e)
            except TypeError:
                raise Unsupported(f"not a real number: {e}") from None
            return self.emit(("c", x))
        if isinstance(e, sp.Add):
            return self.emit(("add", *(self.value(a) for a in e.args)))
        if isinstance(e, sp.Mul):
            num, den = [], []
            for a in e.args:
                if isinstance(a, sp.Pow) and a.exp.is_Integer and a.exp < 0:
                    den.append(self.power(a.base, -int(a.exp)))
                else:
                    num.append(self.value(a))
            top = num[0] if len(num) == 1 else self.emit(("mul", *num)) if num else None
            if not den:
                return top
            bottom = den[0] if len(den) == 1 else self.emit(("mul", *den))
            if top is None:
                top = self.emit(("c", 1.0))
            return self.emit(("div", top, bottom))
        if isinstance(e, sp.Pow):
            b, x = e.base, e.exp
            if x.is_Integer:
                n = int(x)
                if n >= 0:
                    return self.power(b, n)
                return self.emit(("div", self.emit(("c", 1.0)), self.power(b, -n)))
            if x == sp.Rational(1, 2):
                return self.emit(("f", "sqrt", self.value(b)))
            return self.emit(("pow", self.value(b), self.value(x)))
        if isinstance(e, sp.Function):
            name = type(e).__name__
            if name not in FUNCTIONS or len(e.args) != 1:
                raise Unsupported(f"function {name}")
            return self.emit(("f", name, self.value(e.args[0])))
        raise Unsupported(f"{type(e).__name__}")

    def power(self, b, n):
        if n == 0:
            return self.emit(("c", 1.0))
        return self.value(b) if n == 1 else self.emit(("powi", self.value(b), n))


def _codegen_for(prog):
    """The intrinsic's code generator for ``prog``: ``(out, u, p, t)`` -> stores."""

    def codegen(context, builder, signature, args):
        dbl = ir.DoubleType()
        i64 = ir.IntType(64)
        ptrs = []
        for ty, val in zip(signature.args[:3], args[:3]):
            arr = cgutils.create_struct_proxy(ty)(context, builder, value=val)
            ptrs.append(arr.data)
        out, u, p = ptrs
        t = args[3]
        mod = builder.module

        def fn(name, nargs=1, libc=False):
            fnty = ir.FunctionType(dbl, [dbl] * nargs)
            if libc:
                return cgutils.get_or_insert_function(mod, fnty, name)
            return mod.declare_intrinsic(name, [dbl], fnty)

        def powi(a, n):
            # exact repeated squaring (as LLVM's powi expands a constant power)
            result, base = None, a
            while n:
                if n & 1:
                    result = base if result is None else builder.fmul(result, base)
                n >>= 1
                if n:
                    base = builder.fmul(base, base)
            return result

        vals = []
        for ins in prog:
            op = ins[0]
            if op == "u" or op == "p":
                ptr = builder.gep(u if op == "u" else p, [ir.Constant(i64, ins[1])])
                v = builder.load(ptr)
            elif op == "t":
                v = t
            elif op == "c":
                v = ir.Constant(dbl, ins[1])
            elif op == "add":
                v = vals[ins[1]]
                for a in ins[2:]:
                    v = builder.fadd(v, vals[a])
            elif op == "mul":
                v = vals[ins[1]]
                for a in ins[2:]:
                    v = builder.fmul(v, vals[a])
            elif op == "div":
                v = builder.fdiv(vals[ins[1]], vals[ins[2]])
            elif op == "powi":
                v = powi(vals[ins[1]], ins[2])
            elif op == "pow":
                v = builder.call(fn("llvm.pow.f64", 2), [vals[ins[1]], vals[ins[2]]])
            elif op == "f":
                if ins[1] == "sqrt":
                    v = builder.call(fn("llvm.sqrt.f64"), [vals[ins[2]]])
                else:
                    name, lib = FUNCTIONS[ins[1]]
                    f = fn(lib, libc=True) if name is None else fn(name)
                    v = builder.call(f, [vals[ins[2]]])
            elif op == "store":
                builder.store(vals[ins[2]], builder.gep(out, [ir.Constant(i64, ins[1])]))
                v = None
            else:  # pragma: no cover - programs come from _Builder
                raise AssertionError(op)
            vals.append(v)
        return context.get_dummy_value()

    return codegen


def evaluator(prog):
    """An intrinsic ``run(out, u, p, t)`` (contiguous float64 vectors and a float) that
    executes ``prog``; call it from an ``@njit`` function."""
    codegen = _codegen_for(prog)

    @intrinsic
    def run(typingctx, out, u, p, t):
        for a in (out, u, p):
            if not (isinstance(a, types.Array) and a.dtype == types.float64 and a.ndim == 1):
                return None
            if a.layout != "C":
                return None
        if t != types.float64:
            return None
        return types.void(out, u, p, t), codegen

    return run
