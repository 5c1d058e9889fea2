"""SimpleChain: shapes, the flat parameter layout, and the encoding the kernels read."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._jit import parallel_lock, resolve_threads
from . import _batch
from . import _layout as K
from ._batch import TILE, tile_width  # noqa: F401 (TILE: also read by tests)
from ._dispatch import clear_addresses, prepare
from ._memory import zeros_huge
from ._simd import MAX_LANES
from ._validate import as_data, check_params, float_dtype, reject_class
from .layers import Layer


class ChainKernel(NamedTuple):
    """What the compiled single-vector kernels need, as a tuple numba can take as an argument.

    Pass it to :func:`scichains.nn.chain_forward` / :func:`scichains.nn.chain_vjp` from your own
    ``@njit`` code. ``work`` is scratch space: use one ``ChainKernel`` per thread.
    """

    spec: np.ndarray
    fspec: np.ndarray
    meta: np.ndarray
    work: np.ndarray
    samples: np.ndarray

    def __reduce__(self):
        # the layer-kernel addresses in ``spec`` are valid in this process only: a copy
        # unpickled elsewhere prepares its own
        return (_unpickle_kernel, (clear_addresses(self.spec), *self[1:]))


def _unpickle_kernel(spec, fspec, meta, work, samples) -> ChainKernel:
    prepare(spec, work.dtype)
    return ChainKernel(spec, fspec, meta, work, samples)


class SimpleChain:
    """A chain of layers applied one after the other, with all parameters in one flat vector.

    Parameters
    ----------
    input_shape : int or tuple of int
        Shape of one sample, e.g. ``4`` or ``(4,)`` for vectors, ``(1, 28, 28)`` for images.
    *layers : Layer
        The layers, applied in order.

    Notes
    -----
    Data has samples along the first axis: ``X.shape == (N, *input_shape)``.

    Parameter layout: the layers' parameters follow each other in layer order; within a layer,
    in the order of ``layer.param_shapes`` (for ``Dense``: ``W`` of shape ``(out, in)``
    row-major, then ``b``). ``chain.offsets`` lists ``(layer index, name, start, shape)``.
    """

    def __init__(self, input_shape, *layers: Layer):
        if isinstance(input_shape, (int, np.integer)):
            input_shape = (int(input_shape),)
        input_shape = tuple(int(s) for s in input_shape)
        if not input_shape or any(s < 1 for s in input_shape):
            raise ValueError(f"input_shape must be positive sizes, got {input_shape}")
        if not layers:
            raise ValueError("SimpleChain needs at least one layer")
        for i, layer in enumerate(layers):
            reject_class(layer, f"layer {i}")
            if not isinstance(layer, Layer):
                raise TypeError(f"layer {i} is a {type(layer).__name__}, not a scichains layer")
        self.input_shape = input_shape
        self.layers = tuple(layers)
        self._build()

    # ------------------------------------------------------------------ structure
    def _build(self):
        shapes = [self.input_shape]
        for i, layer in enumerate(self.layers):
            try:
                shapes.append(tuple(layer.output_shape(shapes[-1])))
            except ValueError as e:
                raise ValueError(f"layer {i} ({layer!r}): {e}") from None
        self.shapes = shapes
        offsets = []
        off = 0
        for i, layer in enumerate(self.layers):
            for name, shape in layer.param_shapes(shapes[i]):
                offsets.append((i, name, off, tuple(shape)))
                off += int(np.prod(shape))
        self.offsets = offsets
        self.num_params = off

        L = len(self.layers)
        spec = np.full((L, K.SPEC_WIDTH), -1, dtype=np.int64)
        spec[:, K.ADDRESS_COLUMNS] = 0
        fspec = np.zeros((L, 2), dtype=np.float64)
        n_in0 = int(np.prod(self.input_shape))
        row = n_in0
        cur = 0
        width = n_in0
        by_layer = {}
        scratch = {}
        tables = []
        table_len = K.META_WIDTH
        for i, name, start, _shape in offsets:
            by_layer.setdefault(i, {})[name] = start
        for i, layer in enumerate(self.layers):
            n_in = int(np.prod(shapes[i]))
            n_out = int(np.prod(shapes[i + 1]))
            code = layer.encode(shapes[i])
            kind, act, rate, needs_d = code.kind, code.act, code.rate, code.needs_derivative
            if len(code.extra) > K.S_SCRATCH - K.S_X0:
                raise ValueError(f"layer {i} ({layer!r}): too many layer-specific fields")
            spec[i, K.S_X0 : K.S_X0 + len(code.extra)] = code.extra
            if code.table is not None:
                spec[i, K.S_X0] = table_len
                tables.append(np.asarray(code.table, dtype=np.int64))
                table_len += tables[-1].size
            spec[i, K.S_KIND] = kind
            spec[i, K.S_ACT] = act
            spec[i, K.S_NIN] = n_in
            spec[i, K.S_NOUT] = n_out
            spec[i, K.S_WOFF] = by_layer.get(i, {}).get("W", -1)
            spec[i, K.S_BOFF] = by_layer.get(i, {}).get("b", -1)
            spec[i, K.S_IN] = cur
            spec[i, K.S_INDEX] = i + 65536 * int(getattr(layer, "seed", 0))
            fspec[i, 0] = rate
            if code.scratch > 0:
                scratch[i] = int(code.scratch)
            if kind == K.RESHAPE:
                spec[i, K.S_OUT] = cur
            else:
                spec[i, K.S_OUT] = row
                cur = row
                row += n_out
                if needs_d:
                    spec[i, K.S_D] = row
                    row += n_out
            width = max(width, n_in, n_out)
        n_out_final = int(np.prod(shapes[-1]))
        meta = np.zeros(table_len, dtype=np.int64)
        if tables:
            meta[K.META_WIDTH :] = np.concatenate(tables)
        meta[K.M_NIN] = n_in0
        meta[K.M_NOUT] = n_out_final
        meta[K.M_YROW] = row
        row += n_out_final
        meta[K.M_GA] = row
        meta[K.M_GB] = row + width
        row += 2 * width
        meta[K.M_ZERO] = row  # a row that stays zero: padding reads it
        row += 1
        # scratch rows: one region, shared by the layers (they run one at a time)
        for i in scratch:
            spec[i, K.S_SCRATCH] = row
        row += max(scratch.values(), default=0)
        meta[K.M_ROWS] = row
        meta[K.M_NPARAMS] = self.num_params
        self._spec, self._fspec, self._meta = spec, fspec, meta
        self._prepared: set[str] = set()
        self.n_in = n_in0
        self.n_out = n_out_final

    def spec_for(self, dtype) -> np.ndarray:
        """The chain's ``spec`` with the addresses of its layer kernels for ``dtype`` filled in
        (compiling them, or loading them from numba's cache, on first use in this process)."""
        dt = np.dtype(dtype)
        if dt.char not in self._prepared:
            prepare(self._spec, dt)
            self._prepared.add(dt.char)
        return self._spec

    def _spec_single(self, dtype) -> np.ndarray:
        """``spec`` prepared for one sample at a time (see :func:`._dispatch.prepare`)."""
        dt = np.dtype(dtype)
        if "1" + dt.char not in self._prepared:
            prepare(self._spec, dt, single=True)
            self._prepared.add("1" + dt.char)
        return self._spec

    def __getstate__(self):
        # kernel addresses are valid in this process only: a copy elsewhere prepares its own
        state = dict(self.__dict__)
        state["_spec"] = clear_addresses(self._spec)
        state["_prepared"] = set()
        return state

    def output_shape(self, n: int | None = None) -> tuple[int, ...]:
        """Shape of the output for a batch of ``n`` samples (per-sample shape when ``None``)."""
        if n is None:
            return self.shapes[-1]
        return (int(n),) + self.shapes[-1]

    def __repr__(self) -> str:
        inner = ",\n  ".join(repr(layer) for layer in self.layers)
        return f"SimpleChain({self.input_shape},\n  {inner}\n)  # {self.num_params} parameters"

    def describe(self) -> dict:
        """A JSON-serialisable description (used by :func:`save`)."""
        return {
            "input_shape": list(self.input_shape),
            "layers": [{"type": layer.name, **layer.config()} for layer in self.layers],
        }

    def __eq__(self, other) -> bool:
        return isinstance(other, SimpleChain) and self.describe() == other.describe()

    __hash__ = None

    # ------------------------------------------------------------------ parameters
    def init_params(self, seed: int = 0, dtype=np.float32) -> np.ndarray:
        """A new flat parameter vector of shape ``(num_params,)``: Glorot weights, zero biases."""
        dt = float_dtype(dtype, "dtype")
        rng = np.random.default_rng(seed)
        p64 = np.zeros(self.num_params, dtype=np.float64)
        views = self.params(p64)
        for i, layer in enumerate(self.layers):
            layer.init(views[i], self.shapes[i], rng)
        return p64.astype(dt)

    def params(self, p: np.ndarray) -> list[dict[str, np.ndarray]]:
        """Per-layer dicts of named views into ``p`` (writing to a view writes to ``p``)."""
        p = check_params(self, p, copy=False)
        views: list[dict[str, np.ndarray]] = [{} for _ in self.layers]
        for i, name, start, shape in self.offsets:
            views[i][name] = p[start : start + int(np.prod(shape))].reshape(shape)
        return views

    # ------------------------------------------------------------------ evaluation
    def __call__(self, X, p, *, threads: int | None = None) -> np.ndarray:
        """Apply the chain (inference mode: dropout off) to ``X``.

        ``X`` has shape ``(N, *input_shape)`` (or ``input_shape`` for one sample); returns a new
        array of shape ``(N, *output_shape)`` (or ``output_shape``) and the dtype of ``p``.
        Safe to call from several threads at once (each call has its own work buffer).
        """
        p = check_params(self, p)
        X, single = as_data(self, X, p.dtype, "X")
        nthreads = resolve_threads(threads)
        N = X.shape[0]
        nthreads = max(1, min(nthreads, -(-N // TILE)))
        out = np.empty((N, self.n_out), dtype=p.dtype)
        work = self.workspace(p.dtype, nthreads, TILE)
        samples = np.arange(N, dtype=np.int64)
        lock = parallel_lock()
        if lock is not None:
            lock.acquire()
        try:
            spec, fspec, meta = self.spec_for(p.dtype), self._fspec, self._meta
            body = _batch.forward_body(spec, fspec, meta, p, X, out, samples, work)
            _batch.forward_batch(body, spec, fspec, meta, p, X, out, samples, nthreads, TILE, work)
        finally:
            if lock is not None:
                lock.release()
        out = out.reshape((N,) + self.shapes[-1])
        return out[0] if single else out

    forward = __call__

    def workspace(self, dtype, nthreads: int, tile: int, huge: bool = False) -> np.ndarray:
        """A zeroed work buffer of shape ``(nthreads, rows * tile + MAX_LANES * num_params)``
        for the batched kernels: the activation rows of a tile, then room for one SIMD vector
        of partial sums per parameter. ``huge``: in transparent huge pages where the OS gives
        them (for buffers kept between calls: see :mod:`scichains.nn._memory`)."""
        rows = int(self._meta[K.M_ROWS])
        shape = (nthreads, rows * tile + MAX_LANES * self.num_params)
        return zeros_huge(shape, dtype) if huge else np.zeros(shape, dtype=dtype)

    def kernel(self, dtype=np.float64) -> ChainKernel:
        """The arrays the single-vector compiled kernels need (with a fresh work buffer).

        Prepared for one sample at a time: to run tiles of several samples through it from
        compiled code (``network_forward`` with ``T > 1``), call ``chain.spec_for(dtype)``
        as well."""
        dt = float_dtype(dtype, "dtype")
        return ChainKernel(
            self._spec_single(dt),
            self._fspec,
            self._meta,
            np.zeros(int(self._meta[K.M_ROWS]), dtype=dt),
            np.zeros(1, dtype=np.int64),
        )

    def add_loss(self, loss, penalty=None):
        """Attach a loss (and optionally a penalty): returns a :class:`ChainWithLoss`."""
        from ._loss import ChainWithLoss

        return ChainWithLoss(self, loss, penalty)
