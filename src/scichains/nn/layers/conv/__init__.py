"""Convolution layers: the descriptor (:mod:`._layer`), the generic kernels (:mod:`._generic`),
the forward and backward row kernels (:mod:`._rows`, :mod:`._grad_rows`) and the entries the
chain's dispatch calls (:mod:`._apply`)."""

from ._apply import backward, forward
from ._layer import Conv

__all__ = ["Conv", "backward", "forward"]
