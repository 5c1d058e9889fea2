"""This machine's FP32 fused-multiply-add peak, measured: every benchmark's "% of peak" divides
by it (never by a number measured elsewhere).

A compiled loop of independent FMAs on the widest vectors the host has (LLVM's ``<N x float>``
with ``N`` = 16 where AVX-512 is present, 8 with AVX2, 4 otherwise), twelve accumulators per
thread (more than the FMA latency times the FMA ports, so the loop is bound by throughput),
run on ``threads`` numba threads at once (a ``prange`` of one loop per thread). 2 flop per
FMA lane. The median of a few repetitions is reported.

python benchmarks/_peak.py [--threads N]
"""

from __future__ import annotations

import argparse
import time

import llvmlite.binding as ll
import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

ACCUMULATORS = 12


def vector_lanes() -> int:
    """FP32 lanes of the widest vector register the host has."""
    f = ll.get_host_cpu_features()
    if f.get("avx512f", False):
        return 16
    if f.get("avx", False) or f.get("avx2", False):
        return 8
    return 4


LANES = vector_lanes()


@intrinsic
def _fma_loop(typingctx, n, seed):
    """``ACCUMULATORS`` independent chains ``acc = acc * a + b`` on ``<LANES x float>`` for
    ``n`` iterations; returns the sum of the lanes (so nothing is optimised away)."""
    sig = types.float32(types.int64, types.float32)

    def codegen(context, builder, signature, args):
        count, s = args
        vty = ir.VectorType(ir.FloatType(), LANES)
        mod = builder.module
        fma = cgutils.get_or_insert_function(
            mod, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{LANES}f32"
        )

        def splat(x):
            v = ir.Constant(vty, ir.Undefined)
            for i in range(LANES):
                v = builder.insert_element(v, x, ir.Constant(ir.IntType(32), i))
            return v

        a = splat(ir.Constant(ir.FloatType(), 0.999999))
        b = splat(builder.fmul(s, ir.Constant(ir.FloatType(), 1e-7)))
        inits = [
            splat(builder.fadd(s, ir.Constant(ir.FloatType(), float(k))))
            for k in range(ACCUMULATORS)
        ]
        pre = builder.block
        loop = builder.append_basic_block("fma.loop")
        done = builder.append_basic_block("fma.done")
        builder.branch(loop)
        builder.position_at_end(loop)
        i = builder.phi(ir.IntType(64))
        i.add_incoming(ir.Constant(ir.IntType(64), 0), pre)
        accs = []
        for k in range(ACCUMULATORS):
            phi = builder.phi(vty)
            phi.add_incoming(inits[k], pre)
            accs.append(phi)
        new = [builder.call(fma, [acc, a, b]) for acc in accs]
        nxt = builder.add(i, ir.Constant(ir.IntType(64), 1))
        i.add_incoming(nxt, loop)
        for phi, v in zip(accs, new):
            phi.add_incoming(v, loop)
        builder.cbranch(builder.icmp_signed("<", nxt, count), loop, done)
        builder.position_at_end(done)
        total = new[0]
        for v in new[1:]:
            total = builder.fadd(total, v)
        out = builder.extract_element(total, ir.Constant(ir.IntType(32), 0))
        for lane in range(1, LANES):
            out = builder.fadd(
                out, builder.extract_element(total, ir.Constant(ir.IntType(32), lane))
            )
        return out

    return sig, codegen


@numba.njit(parallel=True, cache=False)
def _run(threads, n, out):
    for t in prange(threads):
        out[t] = _fma_loop(n, np.float32(t + 1))


def fp32_peak(threads: int | None = None, seconds: float = 0.3, reps: int = 5) -> float:
    """The measured FP32 FMA peak of ``threads`` threads (default: numba's count), GFLOP/s."""
    threads = numba.get_num_threads() if threads is None else int(threads)
    out = np.zeros(threads, dtype=np.float32)
    _run(threads, 1000, out)  # compile
    n = 1_000_000
    while True:  # size the loop to about `seconds`
        t0 = time.perf_counter()
        _run(threads, n, out)
        dt = time.perf_counter() - t0
        if dt > seconds / 4 or n > 10**10:
            break
        n *= 4
    n = max(1, int(n * seconds / max(dt, 1e-9)))
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        _run(threads, n, out)
        dt = time.perf_counter() - t0
        rates.append(2.0 * LANES * ACCUMULATORS * n * threads / dt / 1e9)
    if not np.all(np.isfinite(out)):  # pragma: no cover - the chains stay finite
        raise RuntimeError("the FMA chains overflowed")
    return float(np.median(rates))


def describe_peak(threads: int | None = None) -> tuple[float, str]:
    """``(GFLOP/s, one line saying how it was measured)``."""
    threads = numba.get_num_threads() if threads is None else int(threads)
    peak = fp32_peak(threads)
    return peak, (
        f"measured FP32 peak: {peak:.0f} GFLOP/s on {threads} thread(s) ({LANES}-lane FMA "
        f"vectors, {ACCUMULATORS} independent chains per thread, median of 5)"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    import _machine

    print(_machine.describe())
    for th in sorted({1, args.threads or numba.get_num_threads()}):
        print(describe_peak(th)[1])
