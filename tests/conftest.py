import os

# numba counts allocations only when this is set before it is imported
os.environ.setdefault("NUMBA_NRT_STATS", "1")
