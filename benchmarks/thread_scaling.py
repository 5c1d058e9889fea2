"""How much a second thread buys on this machine, for a trivially parallel numba loop.

Each thread updates its own L1-resident float32 array; nothing is shared. On an idle machine
with two independent cores the two-thread rate would be twice the one-thread rate.
"""

import time

import numba
import numpy as np
from numba import prange


@numba.njit(parallel=True, fastmath=True)
def _work(a, nt, reps):
    for t in prange(nt):
        x = a[t]
        for _ in range(reps):
            for j in range(x.shape[0]):
                x[j] = x[j] * np.float32(0.999) + np.float32(0.001)


def main():
    a = np.ones((numba.config.NUMBA_NUM_THREADS, 4096), np.float32)
    rates = {}
    for nt in range(1, a.shape[0] + 1):
        _work(a, nt, 10)
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            _work(a, nt, 20_000)
            runs.append(nt * 4096 * 20_000 / (time.perf_counter() - t0) / 1e9)
        rates[nt] = float(np.median(runs))
        print(f"{nt} thread(s): {rates[nt]:.1f} G element updates/s (median of 5)")
    if len(rates) > 1:
        print(f"speed-up from 1 to {len(rates)} threads: {rates[len(rates)] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
