import os

# numba counts allocations only when this is set before it is imported (see NUMBA-NOTES.md)
os.environ.setdefault("NUMBA_NRT_STATS", "1")
