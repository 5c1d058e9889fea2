"""Losses, penalties, and the chain-with-loss that training works on.

Scaling convention, used identically by the value, the gradient and training: the loss is the
**mean over samples** of a per-sample loss, and penalties are added once (not divided by ``N``):

- ``SquaredLoss``: per sample ``sum_k (yhat_k - y_k)^2``;
- ``AbsoluteLoss``: per sample ``sum_k |yhat_k - y_k|``;
- ``LogitCrossEntropyLoss``: per sample ``logsumexp(z) - z[label]`` (softmax cross-entropy).
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING

import numpy as np

from .._jit import kernel, parallel_lock, resolve_threads
from . import _batch
from . import _layout as K
from ._batch import TILE, tile_width
from ._validate import (
    as_count,
    as_data,
    as_flag,
    as_labels,
    as_real,
    check_buffer,
    check_disjoint,
    check_params,
    float_dtype,
    reject_class,
)

_NOT_PRETILED = {t: np.zeros((0, 0), dtype=t) for t in (np.float32, np.float64)}

if TYPE_CHECKING:  # _chain imports this module (SimpleChain.add_loss)
    from ._chain import SimpleChain


class Loss:
    """Base class: a loss with its targets attached."""

    kind = K.LOSS_NONE

    def targets(self, chain: SimpleChain, n: int, dtype):
        """``(Y, labels)`` arrays for the kernels, validated against the chain and ``n``."""
        raise NotImplementedError

    def with_targets(self, targets) -> Loss:
        """The same loss with other targets (e.g. for a test set)."""
        return type(self)(targets)


class _RegressionLoss(Loss):
    def __init__(self, y):
        y = np.asarray(y)
        if y.dtype.kind not in "fiu":
            raise TypeError(f"{type(self).__name__}: targets must be real numbers, got {y.dtype}")
        if not np.isfinite(y).all():
            raise ValueError(f"{type(self).__name__}: targets contain NaN or infinite values")
        self.y = y

    def targets(self, chain, n, dtype):
        y = self.y
        want = (n,) + tuple(chain.output_shape())
        if y.shape != want and not (y.ndim == 1 and want[1:] == (1,) and y.shape == (n,)):
            raise ValueError(
                f"{type(self).__name__}: targets must have shape {want} for {n} samples, "
                f"got {y.shape}"
            )
        Y = np.ascontiguousarray(y.reshape(n, -1), dtype=dtype)
        return Y, np.zeros(1, dtype=np.int64)


class SquaredLoss(_RegressionLoss):
    """Mean over samples of the sum of squared errors; ``y`` has shape ``(N, n_out)``."""

    kind = K.LOSS_SQUARED


class AbsoluteLoss(_RegressionLoss):
    """Mean over samples of the sum of absolute errors; ``y`` has shape ``(N, n_out)``."""

    kind = K.LOSS_ABSOLUTE


class LogitCrossEntropyLoss(Loss):
    """Softmax cross-entropy on logits; ``labels`` are integers ``0..K-1`` of shape ``(N,)``."""

    kind = K.LOSS_LOGITCE

    def __init__(self, labels):
        self.labels = as_labels(labels, "LogitCrossEntropyLoss: labels")

    def targets(self, chain, n, dtype):
        nclass = chain.n_out
        if self.labels.shape != (n,):
            raise ValueError(
                f"LogitCrossEntropyLoss: labels must have shape ({n},), got {self.labels.shape}"
            )
        if n and (self.labels.min() < 0 or self.labels.max() >= nclass):
            raise ValueError(
                f"LogitCrossEntropyLoss: labels must lie in 0..{nclass - 1} "
                f"(the chain has {nclass} outputs); got range "
                f"{self.labels.min()}..{self.labels.max()}"
            )
        return np.zeros((1, 1), dtype=dtype), self.labels


def _weight(lam, what: str) -> float:
    """A penalty's weight as a float: a real number (else ``TypeError``), finite (else
    ``ValueError``)."""
    if isinstance(lam, (complex, np.complexfloating, str, bytes)):
        raise TypeError(f"{what}: lam must be a real number, got {lam!r}")
    try:
        lam = float(lam)
    except (TypeError, ValueError):
        raise TypeError(f"{what}: lam must be a real number, got {lam!r}") from None
    if not math.isfinite(lam):
        raise ValueError(f"{what}: lam must be finite, got {lam}")
    return lam


class Penalty:
    """Base class of parameter penalties (added to the loss once, not averaged)."""

    def encode(self, chain: SimpleChain) -> np.ndarray:
        raise NotImplementedError


class L1Penalty(Penalty):
    """``lam * sum(|p|)`` over all parameters."""

    def __init__(self, lam: float):
        self.lam = _weight(lam, "L1Penalty")

    def encode(self, chain):
        return np.array([self.lam, 0.0, self.lam, 0.0, 0.0])


class L2Penalty(Penalty):
    """``lam * sum(p^2)`` over all parameters."""

    def __init__(self, lam: float):
        self.lam = _weight(lam, "L2Penalty")

    def encode(self, chain):
        return np.array([0.0, self.lam, 0.0, self.lam, 0.0])


class FrontLastPenalty(Penalty):
    """One penalty on every layer but the last one with parameters, another on that last layer.

    ``front`` and ``last`` are :class:`L1Penalty`/:class:`L2Penalty` objects or ``None``.
    """

    def __init__(self, front: Penalty | None, last: Penalty | None):
        self.front = front
        self.last = last

    def encode(self, chain):
        f = self.front.encode(chain) if self.front is not None else np.zeros(5)
        la = self.last.encode(chain) if self.last is not None else np.zeros(5)
        last_layer = max((i for i, *_ in chain.offsets), default=0)
        split = min((s for i, _, s, _ in chain.offsets if i == last_layer), default=0)
        return np.array([f[0], f[1], la[2], la[3], float(split)])


@kernel
def penalty_grad(pen, p, g):
    """Add the penalty's gradient to ``g`` and return its value."""
    split = int(pen[4])
    total = 0.0
    for seg in range(2):
        l1 = pen[2 * seg]
        l2 = pen[2 * seg + 1]
        if l1 == 0.0 and l2 == 0.0:
            continue
        lo = 0 if seg == 0 else split
        hi = split if seg == 0 else p.shape[0]
        a1 = p.dtype.type(l1)
        a2 = p.dtype.type(2.0 * l2)
        zero = p.dtype.type(0.0)
        for j in range(lo, hi):
            x = p[j]
            total += l1 * abs(x) + l2 * x * x
            g[j] += a2 * x + (a1 if x > zero else (-a1 if x < zero else zero))
    return total


class ChainWithLoss:
    """A chain, a loss (with its targets) and an optional penalty; made by ``chain.add_loss``.

    Threading: one ``ChainWithLoss`` may be shared by several threads (``valgrad``,
    ``loss_and_grad``, ``evaluate_loss``, ``accuracy_and_loss``, ``train_*`` on separate
    parameter vectors), with results identical bit for bit to the same calls made one after
    the other. The work buffers it keeps between calls belong to one call at a time; a call
    that finds them in use runs on a set kept for its thread (made on its first such call).
    """

    def __init__(self, chain: SimpleChain, loss: Loss, penalty: Penalty | None = None):
        # the chain's own protocol rather than its class: _chain imports this module
        if not all(hasattr(chain, a) for a in ("layers", "kernel", "workspace", "num_params")):
            raise TypeError(f"ChainWithLoss needs a SimpleChain, got {type(chain).__name__}")
        reject_class(loss, "loss")
        reject_class(penalty, "penalty")
        if not isinstance(loss, Loss):
            raise TypeError(f"loss must be a scichains loss, got {type(loss).__name__}")
        if penalty is not None and not isinstance(penalty, Penalty):
            raise TypeError(f"penalty must be a scichains penalty, got {type(penalty).__name__}")
        self.chain = chain
        self.loss = loss
        self.penalty = penalty
        self._pen = penalty.encode(chain) if penalty is not None else np.zeros(5)
        self._init_buffers()

    def _init_buffers(self):
        self._buffers: dict = {}  # used by the call holding _lock
        self._lock = threading.Lock()
        self._spare = threading.local()  # .store: a thread's own, when _buffers are taken

    def __getstate__(self):
        state = self.__dict__.copy()
        for k in ("_buffers", "_lock", "_spare"):
            del state[k]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_buffers()

    def claim_buffers(self) -> tuple[dict, bool]:
        """``(store, owned)``: the store of buffers one call may use (pass it to
        :meth:`buffers`). ``owned``: the object's own store was free and is now held by the
        caller, who must hand it back with :meth:`release_buffers`; otherwise it is the
        calling thread's spare store (another call holds the object's)."""
        if self._lock.acquire(blocking=False):
            return self._buffers, True
        store = getattr(self._spare, "store", None)
        if store is None:
            store = self._spare.store = {}
        return store, False

    def release_buffers(self, owned: bool) -> None:
        """Hand back the store :meth:`claim_buffers` gave (a no-op unless ``owned``)."""
        if owned:
            self._lock.release()

    def __repr__(self) -> str:
        return f"{self.chain!r}.add_loss({type(self.loss).__name__}, penalty={self.penalty!r})"

    @property
    def num_params(self) -> int:
        return self.chain.num_params

    def init_params(self, seed: int = 0, dtype=np.float32) -> np.ndarray:
        return self.chain.init_params(seed=seed, dtype=dtype)

    def __call__(self, X, p, **kw):
        return self.chain(X, p, **kw)

    def prepare(self, X, p, targets=None):
        """Validated ``(X, Y, labels)`` for kernels (converted once to ``p``'s dtype)."""
        X, _ = as_data(self.chain, X, p.dtype, "X", allow_single=False)
        loss = self.loss if targets is None else self.loss.with_targets(targets)
        Y, labels = loss.targets(self.chain, X.shape[0], p.dtype)
        return X, Y, labels

    def buffers(self, dtype, nthreads: int, tile: int, store: dict):
        """Work and gradient buffers (one row per numba thread) from ``store`` (as given by
        :meth:`claim_buffers`), made on first use and kept between calls; never returned to
        users."""
        key = (np.dtype(dtype), nthreads, tile)
        b = store.get(key)
        if b is None:
            b = (
                self.chain.workspace(dtype, nthreads, tile, huge=True),
                np.zeros((nthreads, self.chain.num_params), dtype=dtype),
                np.zeros(nthreads, dtype=np.float64),
            )
            store[key] = b
        return b


def _check_cwl(cwl, what: str) -> None:
    if not isinstance(cwl, ChainWithLoss):
        reject_class(cwl, "cwl")
        raise TypeError(
            f"{what} needs a chain with a loss (chain.add_loss(...)), got {type(cwl).__name__}"
        )


def _run_valgrad(
    cwl,
    X,
    Y,
    labels,
    p,
    grad,
    gX,
    want_gx,
    samples,
    start,
    count,
    nthreads,
    train=True,
    seed=0,
    step=0,
):
    chain = cwl.chain
    T = tile_width(count, nthreads)
    store, owned = cwl.claim_buffers()
    lock = parallel_lock()
    if lock is not None:
        lock.acquire()
    try:
        work, gbuf, lbuf = cwl.buffers(p.dtype, nthreads, T, store)
        spec, fspec, meta = chain.spec_for(p.dtype), chain._fspec, chain._meta
        kind = cwl.loss.kind
        XYt = _NOT_PRETILED[p.dtype.type]
        data = (X, Y, labels, samples)
        body = _batch.valgrad_body(spec, fspec, meta, kind, p, *data, work, gbuf, gX, XYt)
        value = _batch.valgrad_batch(
            body, spec, fspec, meta, kind, p, *data, start, count, nthreads, T, work, gbuf,
            lbuf, grad, gX, want_gx, train, seed, step, XYt, _batch.NO_ABORT,
        )  # fmt: skip
    finally:
        if lock is not None:
            lock.release()
        cwl.release_buffers(owned)
    return value + penalty_grad(cwl._pen, p, grad)


def valgrad(
    cwl: ChainWithLoss,
    X,
    p,
    grad,
    grad_x=None,
    *,
    targets=None,
    threads: int | None = None,
    train: bool = True,
    step: int = 0,
) -> float:
    """Loss at ``p`` and its gradient, written into caller buffers.

    Parameters
    ----------
    cwl : ChainWithLoss
    X : array of shape ``(N, *input_shape)``
    p : array of shape ``(num_params,)``, float32 or float64
    grad : array like ``p``; overwritten with dL/dp
    grad_x : array of shape ``X.shape`` and ``p``'s dtype, optional; overwritten with dL/dX
    targets : optional targets replacing those attached to the loss
    threads : number of threads (default: all cores); a fixed number gives identical results
    train : dropout active (default) or not; ``step`` seeds the dropout masks

    Returns
    -------
    float
        The loss (mean over samples plus penalty).

    Safe to call from several threads at once on one ``cwl`` (with separate ``grad`` and
    ``grad_x`` buffers): the results are those of the same calls made one after another.

    Errors: ``p`` as in :func:`evaluate_loss`; ``grad`` and ``grad_x`` must be numpy arrays
    (else ``TypeError``) of their shape and ``p``'s dtype (else ``ValueError``/``TypeError``),
    C-contiguous and writeable, and share no memory with ``p``, ``X``, the targets or each
    other (else ``ValueError``): they are written in place, never into a copy. ``train`` must
    be a bool and ``step`` an integer (else ``TypeError``).
    """
    _check_cwl(cwl, "valgrad")
    p = check_params(cwl.chain, p)
    grad = check_buffer(grad, p.shape, p.dtype, "grad")
    train = as_flag(train, "train")
    step = as_count(step, "step", None)
    Xc, Y, labels = cwl.prepare(X, p, targets)
    N = Xc.shape[0]
    nthreads = resolve_threads(threads)
    # the outputs are written while p, X and the targets are read (grad: also after)
    inputs = ((p, "p"), (Xc, "X"), (Y, "the targets"))
    check_disjoint(grad, "grad", inputs)
    if grad_x is not None:
        grad_x = check_buffer(grad_x, np.shape(X), p.dtype, "grad_x")
        check_disjoint(grad_x, "grad_x", inputs + ((grad, "grad"),))
        gX = grad_x.reshape(N, -1)
    else:
        gX = np.zeros((1, 1), dtype=p.dtype)
    samples = np.arange(N, dtype=np.int64)
    return float(
        _run_valgrad(
            cwl,
            Xc,
            Y,
            labels,
            p,
            grad,
            gX,
            grad_x is not None,
            samples,
            0,
            N,
            nthreads,
            train=train,
            step=step,
        )
    )


def evaluate_loss(cwl: ChainWithLoss, X, p, targets=None) -> float:
    """The loss (mean over samples plus penalty, dropout off) at ``p`` on ``X``.

    Parameters
    ----------
    cwl : ChainWithLoss
        The chain with its loss (``chain.add_loss(...)``).
    X : array_like
        The inputs, shape ``(N, *chain.input_shape)``, real numbers (converted to ``p``'s
        dtype); a non-real dtype raises ``TypeError``, a wrong shape, ``N = 0`` or NaN/inf
        values ``ValueError``.
    p : numpy.ndarray
        The parameters, shape ``(num_params,)``, float32 or float64, C-contiguous (else
        ``TypeError`` for type/dtype, ``ValueError`` for shape/layout); the loss is computed
        in its dtype.
    targets : array_like, optional
        Targets replacing those attached to the loss (e.g. a test set's), of the same kind:
        ``(N, n_out)`` real values for a regression loss, ``(N,)`` integer labels for
        ``LogitCrossEntropyLoss``; validated as the loss's own (``TypeError``/``ValueError``).

    Returns
    -------
    float
        The loss, computed on one thread.
    """
    _check_cwl(cwl, "evaluate_loss")
    p = check_params(cwl.chain, p)
    Xc, Y, labels = cwl.prepare(X, p, targets)
    chain = cwl.chain
    work = chain.workspace(p.dtype, 1, TILE)[0]
    samples = np.arange(Xc.shape[0], dtype=np.int64)
    value = _batch.loss_batch(
        chain.spec_for(p.dtype),
        chain._fspec,
        chain._meta,
        cwl.loss.kind,
        p,
        Xc,
        Y,
        labels,
        samples,
        TILE,
        work,
    )
    g = np.zeros_like(p)
    return float(value + penalty_grad(cwl._pen, p, g))


def loss_and_grad(cwl: ChainWithLoss, X, *, dtype=np.float64, threads: int | None = None):
    """``fun(p) -> (loss, grad)`` for ``scipy.optimize.minimize(fun, p0, jac=True)``.

    The data is validated and converted once here. ``fun`` computes in ``dtype`` (float64 by
    default, what scipy's line searches expect) and returns a fresh float64 gradient. Dropout
    is off, so ``fun`` is deterministic. ``fun`` may be called from several threads at once.

    Parameters
    ----------
    cwl : ChainWithLoss
        The chain with its loss and targets (``chain.add_loss(...)``).
    X : array_like
        The inputs, shape ``(N, *chain.input_shape)``, real numbers converted once to
        ``dtype``; a non-real dtype raises ``TypeError``, a wrong shape, ``N = 0`` or NaN/inf
        values ``ValueError`` (here, not at the first call of ``fun``).
    dtype : numpy dtype
        ``numpy.float64`` (default) or ``numpy.float32``: the precision of the computation.
    threads : int, optional
        Number of threads (default: every core numba may use); not a positive integer, or more
        than numba's thread count, raises ``ValueError``.

    Returns
    -------
    callable
        ``fun(p)``: ``p`` is any array of ``num_params`` numbers (converted to ``dtype``, never
        modified); it returns the loss (float, mean over samples plus penalty) and its
        gradient (a new float64 array of shape ``(num_params,)``). A ``p`` of another length
        raises ``ValueError``, one of complex or object dtype ``TypeError``.
    """
    _check_cwl(cwl, "loss_and_grad")
    dt = float_dtype(dtype, "dtype")
    p0 = np.zeros(cwl.chain.num_params, dtype=dt)
    Xc, Y, labels = cwl.prepare(X, p0)
    N = Xc.shape[0]
    nthreads = resolve_threads(threads)
    samples = np.arange(N, dtype=np.int64)
    gX = np.zeros((1, 1), dtype=dt)

    def fun(p):
        p = check_params(cwl.chain, as_real(p, "p", dt))
        g = np.empty_like(p)
        v = _run_valgrad(cwl, Xc, Y, labels, p, g, gX, False, samples, 0, N, nthreads, train=False)
        return float(v), g.astype(np.float64)

    return fun


def accuracy_and_loss(cwl: ChainWithLoss, X, labels, p, *, threads: int | None = None):
    """``(accuracy, loss)`` on ``(X, labels)``: accuracy of ``argmax`` of the output.

    For a ``LogitCrossEntropyLoss`` the loss uses ``labels``; for regression losses it uses their
    one-hot encoding.

    Parameters
    ----------
    cwl : ChainWithLoss
        The chain with its loss; the targets attached to the loss are not used.
    X : array_like
        The inputs, shape ``(N, *chain.input_shape)`` (validated as for ``chain(X, p)``).
    labels : array_like
        Integer class indices, shape ``(N,)``, each in ``0..n_out-1`` (floats with integral
        values are accepted); another shape or a label out of range raises ``ValueError``,
        another dtype (fractions, complex, object) ``TypeError``.
    p : numpy.ndarray
        The parameters, shape ``(num_params,)``, float32 or float64.
    threads : int, optional
        Threads for the forward pass (default: every core numba may use); the loss is then
        evaluated on one thread.

    Returns
    -------
    tuple of float
        ``(accuracy, loss)``: the fraction of samples whose largest output is at index
        ``labels[i]``, and the loss (mean over samples plus penalty, dropout off).
    """
    _check_cwl(cwl, "accuracy_and_loss")
    shape = np.shape(labels)
    labels = as_labels(labels, "labels")
    out = cwl.chain(X, p, threads=threads)
    out = out.reshape(out.shape[0], -1)
    if shape != (out.shape[0],):
        raise ValueError(f"labels must have shape ({out.shape[0]},), got {shape}")
    if isinstance(cwl.loss, LogitCrossEntropyLoss):
        targets = labels
    else:
        if labels.min() < 0 or labels.max() >= out.shape[1]:
            raise ValueError(f"labels must lie in 0..{out.shape[1] - 1}")
        targets = np.eye(out.shape[1], dtype=p.dtype)[labels]
    acc = float(np.mean(np.argmax(out, axis=1) == labels))
    return acc, evaluate_loss(cwl, X, p, targets)
