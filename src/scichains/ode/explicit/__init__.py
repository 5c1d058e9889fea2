"""Explicit Runge-Kutta methods: the tableaus (Tsit5, DP5, BS3, Vern7, RK4, Euler) and the
compiled step and dense output the shared integration loop (``ode/_loop.py``) calls."""
