"""Ensembles: many initial states or parameters solved by one compiled loop per chunk, threaded
or on Dask workers; the lane loop (SIMD over trajectories) for plain compiled right-hand sides."""
