"""Stiff methods: Rosenbrock (Rodas5P, Rosenbrock23), ESDIRK (Kvaerno5, KenCarp4) and Radau IIA
(RadauIIA5), each a method class with its tableau and a compiled step for the shared loop, with
the Jacobians and the dense linear algebra (LU with partial pivoting, real and complex) they use."""
