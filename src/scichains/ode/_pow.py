"""The step-size controllers' fractional powers, ``x ** y`` as ``exp(y log x)``.

The PI controller takes two powers per step (``e ** (0.7 / k)`` and ``qold ** (0.4 / k)``). The
C library's ``pow`` is correctly rounded but a call per value, and the ensemble loop, which
steps several trajectories as the lanes of a vector, would need one call per lane (~2 us of a
Lotka-Volterra trajectory's ~8). Here the power is fdlibm's log and exp (Sun Microsystems,
freely distributable: its polynomial coefficients) written once as LLVM IR and emitted for a
scalar (:func:`cpow`, every stepper's controller) or a vector of lanes (``lpow`` in
``_ensemble_lanes``): the same instructions per value, so a trajectory takes the same steps
in :func:`~scichains.ode.solve` and in :func:`~scichains.ode.solve_ensemble`, bit for bit.
Within a few units in the last place of the correctly rounded power (tested).

Domain: ``x >= 0`` finite and ``|y log x| < 700`` (the controllers' inputs: a finite error
norm, ``0 < y <= 0.7``). ``0 ** y = 0``; other inputs give unspecified values.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_LG = (
    6.666666666666735130e-01,
    3.999999999940941908e-01,
    2.857142874366239149e-01,
    2.222219843214978396e-01,
    1.818357216161805012e-01,
    1.531383769920937332e-01,
    1.479819860511658591e-01,
)
"""log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)), s = f / (2 + f): R's coefficients on
[sqrt(2)/2 - 1, sqrt(2) - 1]."""
_EP = (
    1.66666666666666019037e-01,
    -2.77777777770155933842e-03,
    6.61375632143793436117e-05,
    -1.65339022054652515390e-06,
    4.13813679705723846039e-08,
)
"""exp(r) on [-ln2 / 2, ln2 / 2] through r - r^2 P(r^2)."""
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00


def emit_pow(builder, x, y, width: int | None):
    """IR for ``x ** y``: ``x`` a double (``width=None``) or a ``<width x double>``, ``y`` a
    double (the same for every lane)."""
    b = builder
    dbl = ir.DoubleType()
    i64 = ir.IntType(64)
    if width is None:
        fty, ity, suffix = dbl, i64, "f64"

        def cf(value):
            return ir.Constant(dbl, value)

        def ci(value):
            return ir.Constant(i64, value)

        yv = y
    else:
        fty, ity, suffix = ir.VectorType(dbl, width), ir.VectorType(i64, width), f"v{width}f64"

        def cf(value):
            return ir.Constant(fty, [value] * width)

        def ci(value):
            return ir.Constant(ity, [value] * width)

        yv = b.insert_element(ir.Constant(fty, ir.Undefined), y, ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width)
        yv = b.shuffle_vector(yv, ir.Constant(fty, ir.Undefined), zeros)

    def poly(z, coefs):  # Horner: c0 + z (c1 + z (c2 + ...))
        acc = cf(coefs[-1])
        for c in coefs[-2::-1]:
            acc = b.fadd(cf(c), b.fmul(z, acc))
        return acc

    # log(x): x = 2^k m, m in [sqrt(2)/2, sqrt(2)), subnormals scaled by 2^54 first
    tiny = b.fcmp_ordered("<", x, cf(2.2250738585072014e-308))
    xs = b.select(tiny, b.fmul(x, cf(18014398509481984.0)), x)
    bits = b.bitcast(xs, ity)
    k = b.sub(b.lshr(bits, ci(52)), b.select(tiny, ci(1023 + 54), ci(1023)))
    m = b.bitcast(b.or_(b.and_(bits, ci(0x000FFFFFFFFFFFFF)), ci(0x3FF0000000000000)), fty)
    big = b.fcmp_ordered(">", m, cf(1.4142135623730951))
    m = b.select(big, b.fmul(m, cf(0.5)), m)
    k = b.add(k, b.zext(big, ity))
    f = b.fsub(m, cf(1.0))
    dk = b.sitofp(k, fty)
    sv = b.fdiv(f, b.fadd(cf(2.0), f))
    z = b.fmul(sv, sv)
    w = b.fmul(z, z)
    t1 = b.fmul(w, poly(w, (_LG[1], _LG[3], _LG[5])))
    t2 = b.fmul(z, poly(w, (_LG[0], _LG[2], _LG[4], _LG[6])))
    r = b.fadd(t2, t1)
    hfsq = b.fmul(cf(0.5), b.fmul(f, f))
    inner = b.fadd(b.fmul(sv, b.fadd(hfsq, r)), b.fmul(dk, cf(_LN2_LO)))
    logx = b.fsub(b.fmul(dk, cf(_LN2_HI)), b.fsub(b.fsub(hfsq, inner), f))
    # exp(t), t = y log(x) = k ln2 + r
    t = b.fmul(yv, logx)
    rint = cgutils.get_or_insert_function(
        b.module, ir.FunctionType(fty, [fty]), f"llvm.rint.{suffix}"
    )
    kf = b.call(rint, [b.fmul(t, cf(_INV_LN2))])
    hi = b.fsub(t, b.fmul(kf, cf(_LN2_HI)))
    lo = b.fmul(kf, cf(_LN2_LO))
    rr = b.fsub(hi, lo)
    tt = b.fmul(rr, rr)
    c = b.fsub(rr, b.fmul(tt, poly(tt, _EP)))
    e = b.fsub(cf(1.0), b.fsub(b.fsub(lo, b.fdiv(b.fmul(rr, c), b.fsub(cf(2.0), c))), hi))
    scaled = b.add(b.bitcast(e, ity), b.shl(b.fptosi(kf, ity), ci(52)))
    res = b.bitcast(scaled, fty)
    return b.select(b.fcmp_ordered("==", x, cf(0.0)), cf(0.0), res)


@intrinsic
def cpow(typingctx, x, y):
    """``x ** y`` for float64 ``x >= 0`` finite and ``y`` with ``|y log x| < 700`` (see the
    module docstring): the controllers' powers."""
    if x != types.float64 or not isinstance(y, types.Float):
        return None

    def codegen(context, builder, signature, args):
        yv = context.cast(builder, args[1], signature.args[1], types.float64)
        return emit_pow(builder, args[0], yv, None)

    return types.float64(x, y), codegen
