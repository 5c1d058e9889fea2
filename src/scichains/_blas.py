"""One BLAS thread around SciPy's L-BFGS-B (:func:`minimize_lbfgsb`).

SciPy's L-BFGS-B does its own small linear algebra through the OpenBLAS that SciPy ships, which
keeps a thread per core. On an idle machine that costs nothing; beside one CPU-bound process on
a 2-core machine (the normal laptop case) its threads wait for each other. Measured on an AMD
EPYC (Zen 2, 2 cores, 2026-12-05): L-BFGS-B on a 10-parameter quadratic took 170 us per
evaluation idle and 470-730 us beside a spinning process, 180-230 us with one BLAS thread; 20
iterations on the spiral neural ODE (252 weights, ``benchmarks/under_load.py --workloads
lbfgs,lbfgs_scipy``, medians of 5 x 20) took 3.05 ms per iteration idle and 5.92 ms (1.94x)
beside it when ``scipy.optimize.minimize`` was called directly, 3.38 and 3.10 ms through
``scichains.fit`` with this limit. The problems this package
hands to L-BFGS are small (at most a few thousand parameters), where one BLAS thread is as fast
as several, so its L-BFGS calls run with one. The objective runs inside the same limit; the
linear algebra in this package's objectives is on small matrices, which OpenBLAS does not
split between threads anyway.

``threadpoolctl`` finds and limits the loaded BLAS libraries. The controller is built at each
outermost block (scanning the loaded libraries takes about 1-1.5 ms, against a whole L-BFGS
run): a controller built once missed a BLAS library loaded after it (SciPy's, imported after a
first fit had used NumPy's), which then kept its threads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_owner: int | None = None  # the thread whose block set the limit


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with the BLAS libraries (NumPy's, SciPy's) limited to one thread each.

    OpenBLAS (pthreads) keeps one thread count for the process, which threadpoolctl lets one
    Python thread at a time change and restore. So the first block to start sets the limit and
    restores the counts when it ends; blocks nested in it, and blocks that start on other
    Python threads while it runs, change nothing (they run under the limit while it lasts, and
    with the original counts after it: a matter of speed only, never a count left changed)."""
    global _owner
    limiter = None
    with _lock:
        if _owner is None:
            from threadpoolctl import ThreadpoolController

            _owner = threading.get_ident()
            # the libraries loaded now (a library loaded later, inside the block, keeps its
            # threads until the next block)
            limiter = ThreadpoolController().limit(limits=1, user_api="blas")
            limiter.__enter__()  # (threadpoolctl: this thread controls the counts until exit)
    try:
        yield
    finally:
        if limiter is not None:
            with _lock:
                limiter.__exit__(None, None, None)
                _owner = None


def minimize_lbfgsb(fun, x0, **kwargs):
    """``scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", **kwargs)`` with one
    BLAS thread (:func:`one_blas_thread`): the package's every L-BFGS-B call goes through it."""
    import scipy.optimize

    with one_blas_thread():
        return scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", **kwargs)


def rejected_value(reference: float) -> float:
    """The value to give L-BFGS-B for a trial point where the objective is not defined (a
    failed solve, too few events): above ``reference`` (the value at the point the line search
    started from, or any recent finite value) by ten times its magnitude plus one.

    Not ``inf``: when the first trial point of a line search gets ``inf`` (or a huge value
    such as 1e300), SciPy's L-BFGS-B (1.17) stops at its starting point and reports
    convergence ("RELATIVE REDUCTION OF F <= FACTR*EPSMCH"), a silent wrong answer. With a
    value a few times the reference its line search backs off to a shorter step, as it does
    after any increase (checked on a quadratic whose first trial point was undefined)."""
    import math

    if not math.isfinite(reference):
        return 1e100
    return reference + 10.0 * (abs(reference) + 1.0)
