import os

# numba counts allocations only when this is set before it is imported
os.environ.setdefault("NUMBA_NRT_STATS", "1")


def pytest_configure(config):
    """Under pytest-xdist, the controlling process imports scichains once before the workers
    start: the import drops a stale numba cache (sources changed since it was written) here,
    not in two workers at the same time."""
    if not hasattr(config, "workerinput"):
        import scichains  # noqa: F401
