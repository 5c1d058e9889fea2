"""Helper threads (scichains._workers): errors reach the caller, the caller's CPU affinity
is restored, and a call completes without its helpers."""

import os
import threading
import time

import pytest

from scichains import _workers


def test_an_error_in_a_helper_reaches_the_caller():
    raised = threading.Event()

    def fn(slot, flag):
        if slot == 1:
            flag.set()
            raise ValueError("boom in helper")
        assert flag.wait(5)
        time.sleep(0.05)  # the helper's error is recorded meanwhile
        return 7

    with pytest.raises(ValueError, match="boom in helper"):
        _workers.run_shared(fn, 2, (raised,))
    assert _workers.wait_idle()


def test_the_callers_affinity_is_restored():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    before = os.sched_getaffinity(0)
    seen = []

    def fn(slot):
        if slot == 0:
            seen.append(os.sched_getaffinity(0))
        return slot

    assert _workers.run_shared(fn, 2, ()) == 0
    assert os.sched_getaffinity(0) == before
    if _workers.pinned(2) and len(before) > 1:
        assert len(seen[0]) == 1  # pinned for the call
    assert _workers.wait_idle()


def test_a_call_completes_while_its_helper_is_busy():
    """A helper stuck in an earlier job does not hold up the next call: the caller does the
    whole computation itself."""
    release = threading.Event()

    def slow(slot):
        if slot == 1:
            release.wait(5)
        return slot

    _workers.run_shared(slow, 2, ())  # the helper now waits on `release`
    t = time.perf_counter()
    assert _workers.run_shared(lambda slot: slot + 10, 2, ()) == 10
    assert time.perf_counter() - t < 1.0
    release.set()
    assert _workers.wait_idle()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_helpers():
    import multiprocessing

    _workers.run_shared(lambda slot: slot, 2, ())  # helpers exist in this process
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply(_child_call) == (0, True)


def _child_call():
    result = _workers.run_shared(lambda slot: slot, 2, ())
    return result, _workers.wait_idle(5)
