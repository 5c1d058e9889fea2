"""Derivatives of right-hand sides: tracing a compiled function into SymPy, the symbolic model
and its code generator (Python source or LLVM), and automatic vjps (traced, complex step, or
through the network kernels). ``ODEProblem`` finds the vjp makers through
:func:`scichains.ode._problem.vjp_makers`, registered here, so that the problem does not import
this package."""

from .._problem import register_vjp_makers
from ._autodiff import automatic_vjp, network_vjp

register_vjp_makers(automatic_vjp, network_vjp)
