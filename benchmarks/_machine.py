"""The machine a figure came from: printed at the top of every benchmark."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's description."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """One line: CPU model, LLVM's name for it, its vector features, core count, numba and
    its threading layer."""
    import llvmlite.binding as ll
    import numba

    features = ll.get_host_cpu_features()
    wanted = ("avx512f", "avx512bw", "avx512vl", "avx2", "fma", "avx", "sse4.2", "neon")
    have = [f for f in wanted if features.get(f, False)]
    return (
        f"machine: {cpu_model()} (LLVM: {ll.get_host_cpu_name()}; {' '.join(have) or 'no SIMD'}); "
        f"{os.cpu_count()} CPUs; numba {numba.__version__}, threading layer "
        f"{numba.config.THREADING_LAYER}"
    )


if __name__ == "__main__":
    print(describe())
