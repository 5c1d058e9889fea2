"""One BLAS thread around SciPy's L-BFGS-B (scichains._blas), and nothing changed after it."""

import threading

import numpy as np
import pytest
import scipy.optimize  # noqa: F401  (loads SciPy's BLAS, which the limit must reach too)
from threadpoolctl import threadpool_info

import scichains as sc
from scichains._blas import one_blas_thread


def blas_threads():
    info = threadpool_info()
    return sorted((d["filepath"], d["num_threads"]) for d in info if d["user_api"] == "blas")


@pytest.fixture
def original():
    """The BLAS thread counts before the test; skips where they are already 1 (a limit to 1
    would not show)."""
    counts = blas_threads()
    if not counts or max(n for _, n in counts) < 2:
        pytest.skip("no BLAS library with more than one thread here")
    return counts


def test_the_limit_holds_inside_and_is_undone_after(original):
    with one_blas_thread():
        assert {n for _, n in blas_threads()} == {1}
        with one_blas_thread():  # nested
            assert {n for _, n in blas_threads()} == {1}
        assert {n for _, n in blas_threads()} == {1}
    assert blas_threads() == original
    with pytest.raises(RuntimeError, match="inside"):
        with one_blas_thread():
            raise RuntimeError("inside")
    assert blas_threads() == original


def test_blocks_on_other_threads_set_the_limit_and_leave_nothing_changed(original):
    with one_blas_thread():  # first on the main thread
        pass
    # thread A enters, then B while A is inside; A leaves first, then B
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with one_blas_thread():
            seen["a"] = {n for _, n in blas_threads()}
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b():
        a_in.wait(10)
        with one_blas_thread():
            seen["b while a is inside"] = {n for _, n in blas_threads()}
            b_in.set()
            a_out.wait(10)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"a": {1}, "b while a is inside": {1}}
    assert blas_threads() == original
    with one_blas_thread():  # and the main thread can set it again
        assert {n for _, n in blas_threads()} == {1}
    assert blas_threads() == original


def test_fit_runs_lbfgs_on_one_blas_thread_and_restores_them(original):
    inside = []

    def fun(p):
        inside.append({n for _, n in blas_threads()})
        return float(np.sum((p - 1.0) ** 2)), 2.0 * (p - 1.0)

    p = np.zeros(5)
    res = sc.fit(fun, p, sc.LBFGS(50), progress=False)
    assert res.loss < 1e-12
    # the evaluations inside the L-BFGS stage (all but the first, at the start) see one thread
    assert inside[1:] and all(s == {1} for s in inside[1:])
    assert blas_threads() == original


def test_a_library_loaded_after_a_first_block_is_limited_too():
    # found by test order: a controller built at the first block (NumPy's BLAS only) missed
    # SciPy's, imported later, which kept its threads inside later blocks
    import subprocess
    import sys

    code = (
        "import numpy\n"
        "from scichains._blas import one_blas_thread\n"
        "with one_blas_thread():\n    pass\n"
        "import scipy.optimize\n"
        "from threadpoolctl import threadpool_info\n"
        "before = {d['filepath']: d['num_threads'] for d in threadpool_info()"
        " if d['user_api'] == 'blas'}\n"
        "with one_blas_thread():\n"
        "    inside = {d['filepath']: d['num_threads'] for d in threadpool_info()"
        " if d['user_api'] == 'blas'}\n"
        "print(max(before.values()), max(inside.values()), len(inside))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    most_before, most_inside, n = map(int, out.stdout.split())
    if most_before < 2:
        pytest.skip("no BLAS library with more than one thread here")
    assert most_inside == 1 and n >= 1
