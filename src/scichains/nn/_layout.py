"""How a chain is encoded for the compiled kernels: named fields of ``spec`` and ``meta``.

A chain is three small arrays (built by :class:`~scichains.nn.SimpleChain`):

- ``spec`` (int64, one row of :data:`SPEC_WIDTH` per layer): kind, activation code, sizes,
  parameter offsets, the rows of the work buffer that hold the layer's input, output and stored
  derivative, the addresses of the layer's compiled kernels, then layer-specific integers;
- ``fspec`` (float64, one row per layer): real-valued options (the dropout rate);
- ``meta`` (int64): sizes of the whole chain (``M_*``), then the layers' index tables
  (convolution and pooling windows).

Activations live features-major in a work buffer of ``rows * T`` numbers: row ``r`` of a tile
of ``T`` samples starts at ``r * T`` and the batch index is the innermost, contiguous loop.
"""

from __future__ import annotations

# layer kinds
DENSE, ACTIVATION, DROPOUT, RESHAPE, CONV, MAXPOOL = 1, 2, 3, 4, 5, 6

# spec columns shared by every layer
S_KIND = 0  # a layer kind above
S_ACT = 1  # activation code (scichains.nn._activations)
S_NIN = 2  # inputs per sample
S_NOUT = 3  # outputs per sample
S_WOFF = 4  # offset of the weights in the flat parameter vector (-1: none)
S_BOFF = 5  # offset of the bias (-1: none)
S_IN = 6  # first work-buffer row of the input
S_OUT = 7  # first row of the output
S_D = 8  # first row of the stored derivative (-1: none)
S_INDEX = 9  # layer index + 65536 * seed (dropout masks)
# addresses of the layer's compiled kernels (numba.cfunc), per dtype; 0 until
# scichains.nn._dispatch.prepare() has filled them in this process
S_FWD32, S_BWD32, S_FWD64, S_BWD64 = 10, 11, 12, 13
# ... and of its lean single-sample kernels (T == 1, fewer arguments), for the kinds that have
# them (0: none; the general kernels above serve)
S_ONE_F32, S_ONE_B32, S_ONE_F64, S_ONE_B64 = 14, 15, 16, 17
S_X0 = 18  # first layer-specific column (LayerCode.extra)
ADDRESS_COLUMNS = [S_FWD32, S_BWD32, S_FWD64, S_BWD64, S_ONE_F32, S_ONE_B32, S_ONE_F64, S_ONE_B64]
SPEC_WIDTH = S_X0 + 14

# layer-specific columns of a convolution (LayerCode.extra in this order)
C_TABLE = S_X0  # offset in meta of the (npos, nterms) table of input rows (-1: padding)
C_NPOS = S_X0 + 1  # output positions OH * OW
C_NTERMS = S_X0 + 2  # terms per output: C * kh * kw
C_GEO = S_X0 + 3  # (OC, C, H, W, OH, OW, kh, kw): eight columns from here
C_OC = C_GEO  # output channels
C_ROWS = S_X0 + 11  # 1: unpadded and stride 1 (the whole-row kernels apply)

# the last column, any layer: first row of the layer's scratch rows (LayerCode.scratch), -1: none
S_SCRATCH = SPEC_WIDTH - 1

# layer-specific columns of max pooling
P_TABLE = S_X0  # offset in meta of the (nout, k) table of window rows
P_K = S_X0 + 1  # elements per window

# meta entries
M_NIN, M_NOUT, M_ROWS, M_YROW, M_GA, M_GB, M_NPARAMS, M_ZERO = range(8)
META_WIDTH = 8  # the index tables follow

# loss kinds
LOSS_NONE, LOSS_SQUARED, LOSS_ABSOLUTE, LOSS_LOGITCE = 0, 1, 2, 3

# what a layer's backward kernel returns (bit flags)
B_SWAPPED = 1  # dL/d(input) is in the other gradient buffer: swap them
B_SCALED = 2  # dL/d(input) already carries the previous layer's stored derivative
