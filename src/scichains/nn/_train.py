"""Training loops: many optimizer steps per call into compiled code.

Python only runs between chunks of steps (to call the user's callback or draw the progress
bar); each chunk is one compiled loop of (forward, backward, penalty, optimizer update) that
allocates nothing after warm-up. The steps run on the calling thread and ``threads - 1``
helper threads, each step's batch cut into chunks that any of them may take, or take over
from a thread that lost its core (``nn/_chunked.py``, ``scichains._workers``): the results
do not depend on which thread computed what.

Threading: several threads may train at once with one ``ChainWithLoss`` (results identical bit
for bit to the same runs made one after another), each on its own parameter vector with its
own optimizer. An optimizer (its moments and step count) or a parameter vector that is
already in a training call is refused with a ``RuntimeError``."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

import numpy as np

from .._jit import resolve_threads
from .._workers import run_shared
from . import _batch
from . import _layout as K
from ._batch import tile_width
from ._chunked import chunk_count, train_worker
from ._loss import ChainWithLoss
from ._memory import zeros_huge
from ._optim import Optimizer
from ._validate import as_count, check_disjoint, check_params, reject_class


class NonFiniteLossError(FloatingPointError):
    """Training met a NaN or infinite loss; ``p`` holds the last parameters with a finite loss."""


class _Progress:
    def __init__(self, total: int, enabled: bool, label: str):
        self.total = total
        self.enabled = enabled
        self.label = label
        self.t0 = time.perf_counter()

    def update(self, done: int, loss: float):
        if not self.enabled:
            return
        frac = done / max(self.total, 1)
        bar = "#" * int(30 * frac)
        el = time.perf_counter() - self.t0
        sys.stderr.write(
            f"\r{self.label} [{bar:<30}] {done}/{self.total}  loss {loss:.6g}  {el:.1f}s"
        )
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


_IN_TRAINING: set = set()  # ("optimizer", id) and ("parameters", address) of running trainings
_IN_TRAINING_LOCK = threading.Lock()


@contextmanager
def _exclusive(p, opt, what: str):
    """Hold ``opt`` and the memory of ``p`` for one training call; refuse them (RuntimeError)
    while another training call, in any thread, holds either."""
    keys = [("optimizer", id(opt)), ("parameters", p.__array_interface__["data"][0])]
    with _IN_TRAINING_LOCK:
        if keys[0] in _IN_TRAINING:
            raise RuntimeError(
                f"{what}: this {type(opt).__name__} optimizer is in use by another training "
                "call (in another thread, or an outer call in this one). An optimizer holds "
                "the moments and step count of one training run: make one optimizer per "
                "thread (a new one, or copy.deepcopy(opt))"
            )
        if keys[1] in _IN_TRAINING:
            raise RuntimeError(
                f"{what}: this parameter vector is being trained by another call (in another "
                "thread, or an outer call in this one); training updates it in place: give "
                "each thread its own copy (p.copy())"
            )
        _IN_TRAINING.update(keys)
    try:
        yield
    finally:
        with _IN_TRAINING_LOCK:
            _IN_TRAINING.difference_update(keys)


class _Trainer:
    """Validated state shared by the two training entry points.

    ``store``: where the work buffers come from (see ``ChainWithLoss.claim_buffers``); by
    default a new store of this trainer's own."""

    def __init__(self, p, cwl, X, opt, threads, batch, pretile=False, store=None):
        if not isinstance(cwl, ChainWithLoss):
            raise TypeError("training needs a chain with a loss (chain.add_loss(...))")
        reject_class(opt, "opt")
        if not isinstance(opt, Optimizer):
            raise TypeError(f"opt must be a scichains optimizer, got {type(opt).__name__}")
        opt._check_kind()  # an update rule the compiled code knows
        self.p = check_params(cwl.chain, p)
        if not self.p.flags.writeable:
            raise ValueError("parameters must be writeable (they are updated in place)")
        self.cwl = cwl
        self.X, self.Y, self.labels = cwl.prepare(X, self.p)
        # p is updated in place while the data is read
        check_disjoint(self.p, "p", ((self.X, "X"), (self.Y, "the targets")))
        self.N = self.X.shape[0]
        batch = self.N if batch is None else as_count(batch, "batch_size", 1)
        self.batch = min(batch, self.N)
        nthreads = resolve_threads(threads)
        self.nthreads = max(1, min(nthreads, -(-self.batch // 16)))
        self.opt = opt
        self.state = opt.bind(self.p)
        self.tile = tile_width(self.batch, self.nthreads)
        self.nch = chunk_count(-(-self.batch // self.tile), self.nthreads)
        store = {} if store is None else store
        # scratch of the chunked steps' own (a helper still finishing a dropped chunk after
        # a call returns writes only there), and the fewest cycles per tile seen
        key = ("chunked", self.p.dtype, self.nthreads, self.tile, self.nch)
        if key not in store:
            store[key] = (
                cwl.chain.workspace(self.p.dtype, self.nthreads, self.tile, huge=True),
                np.zeros((self.nthreads, self.p.size), dtype=self.p.dtype),
                np.zeros((self.nch, self.p.size), dtype=self.p.dtype),
                np.zeros(self.nch, dtype=np.float64),
                np.array([1 << 40, 2, 0], dtype=np.int64),
            )
        self.work, self.gbuf, self.gch, self.lch, self.speed = store[key]
        self.grad = np.zeros_like(self.p)
        self.pprev = self.p.copy()
        self.gX = np.zeros((1, 1), dtype=self.p.dtype)
        self.samples = np.arange(self.N, dtype=np.int64)
        self.XYt = np.zeros((0, 0), dtype=self.p.dtype)
        meta = cwl.chain._meta
        nf, nk = int(meta[K.M_NIN]), int(meta[K.M_NOUT])
        regression = cwl.loss.kind in (K.LOSS_SQUARED, K.LOSS_ABSOLUTE)
        if pretile and self.batch == self.N and regression and self.Y.shape == (self.N, nk):
            # full batch, regression targets: lay the data out as the tiles read it, once,
            # instead of gathering (transposing) every sample at every step
            nt = _batch.pretiled_count(self.N, self.tile)
            if nt * (nf + nk) * self.tile <= 2**24:  # at most 16M numbers (64 MB in float32)
                # kept in the store with the work buffers (in huge pages: see _memory), filled
                # anew by every call
                shape = (nt, (nf + nk) * self.tile)
                key = ("pretiled", self.p.dtype, shape)
                if key not in store:
                    store[key] = zeros_huge(shape, self.p.dtype)
                self.XYt = store[key]
                _batch.pretile(
                    self.X,
                    self.Y,
                    self.samples,
                    0,
                    self.N,
                    self.tile,
                    nf,
                    nk,
                    self.XYt,
                )
        # the threads' share of a step, called by address (see _batch.valgrad_thread)
        self.spec = cwl.chain.spec_for(self.p.dtype)
        self.body = _batch.valgrad_body(
            self.spec,
            cwl.chain._fspec,
            meta,
            cwl.loss.kind,
            self.p,
            self.X,
            self.Y,
            self.labels,
            self.samples,
            self.work,
            self.gbuf,
            self.gX,
            self.XYt,
        )

    def run(self, nsteps: int, losses: np.ndarray) -> int:
        """Run ``nsteps`` steps on this thread and the helpers (see ``nn/_chunked.py``)."""
        c = self.cwl.chain
        ctl = self.ctl = np.array([0, nsteps, 0], dtype=np.int64)
        claims = np.zeros(max(nsteps, 1), dtype=np.int64)
        done = np.zeros(max(nsteps, 1), dtype=np.int64)
        cstat = np.zeros(self.nch, dtype=np.int64)
        cstart = np.zeros(self.nch, dtype=np.int64)
        args = (
            ctl, claims, done, cstat, cstart, self.speed, self.body, self.spec, c._fspec, c._meta,
            self.cwl.loss.kind, self.p, self.X, self.Y, self.labels, self.samples, self.batch,
            nsteps, self.nch, self.tile, self.work, self.gbuf, self.gch, self.lch, self.grad,
            self.gX, self.cwl._pen, self.opt.kind, self.opt.checked_hyper(), self.state,
            self.opt.t, self.pprev, losses, 0, self.opt.steps, self.XYt,
        )  # fmt: skip
        return int(run_shared(train_worker, self.nthreads, args, self.speed[2:]))


def _chunks(total: int, every: int):
    done = 0
    while done < total:
        n = min(every, total - done)
        yield done, n
        done += n


def train_unbatched(
    p,
    cwl: ChainWithLoss,
    X,
    opt: Optimizer,
    iters: int,
    *,
    threads: int | None = None,
    callback=None,
    callback_every: int = 100,
    progress: bool = False,
) -> np.ndarray:
    """Train on the full batch for ``iters`` optimizer steps, updating ``p`` in place.

    Parameters
    ----------
    p : numpy.ndarray
        The flat parameter vector, shape ``(num_params,)``, float32 or float64, C-contiguous
        and writeable; updated in place, and the computation runs in its dtype. Another type
        or dtype raises ``TypeError``; another shape, a non-contiguous or a read-only array
        ``ValueError``.
    cwl : ChainWithLoss
        The chain with its loss and targets (``chain.add_loss(...)``); anything else raises
        ``TypeError``.
    X : array_like
        The inputs, shape ``(N, *chain.input_shape)`` (``(N, H, W)`` also works for a
        one-channel image input ``(1, H, W)``); real numbers, converted once to ``p``'s dtype.
        A non-real dtype raises ``TypeError``; a wrong shape, ``N = 0`` or NaN/inf values
        ``ValueError``, as do targets of the loss that do not match ``N``.
    opt : Optimizer
        An :class:`SGD`, :class:`Adam` or :class:`AdamW` instance; its state (moments, step
        count) carries over to later calls. A class instead of an instance, or another type,
        raises ``TypeError``.
    iters : int
        Number of optimizer steps.
    threads : int, optional
        Number of threads (default: every core numba may use; at most one per 16 samples is
        used). A fixed number gives identical results from run to run. Not a positive integer,
        or more than numba's thread count: ``ValueError``.
    callback : callable, optional
        ``callback(iteration, loss, p)``, called every ``callback_every`` steps and after the
        last one (``iteration`` counts from 1, ``loss`` is that of the step's parameters
        before the update, ``p`` is the array being trained, not a copy). Exceptions it raises
        propagate, leaving ``p`` as it is at that point.
    callback_every : int
        Steps between callbacks (default 100); less than 1 raises ``ValueError`` when a
        ``callback`` is given.
    progress : bool
        Draw a progress bar with the latest loss and the elapsed time on stderr (updated
        about 100 times; default False).

    Returns
    -------
    numpy.ndarray
        The loss of every step, float64, shape ``(iters,)``.

    Raises
    ------
    NonFiniteLossError
        A loss was NaN or infinite; ``p`` is left at its last value with a finite loss.
    RuntimeError
        ``opt`` or ``p`` is already in a training call (in another thread, or an outer call).

    Several threads may train at once with one ``cwl``, each with its own ``p`` and ``opt``.
    """
    iters = as_count(iters, "iters")
    every = _every(iters, callback, callback_every, progress)
    with _training(p, cwl, opt, "train_unbatched") as store:
        tr = _Trainer(p, cwl, X, opt, threads, None, pretile=True, store=store)
        losses = np.zeros(iters, dtype=np.float64)
        bar = _Progress(iters, progress, "train")
        for done, n in _chunks(iters, every):
            k = tr.run(n, losses[done : done + n])
            _after_chunk(done, n, k, losses, tr.p, callback, bar)
    return losses


@contextmanager
def _training(p, cwl, opt, what):
    """Claim ``p``, ``opt`` (see :func:`_exclusive`) and a buffer store of ``cwl`` for one
    training call; yields the store."""
    if not isinstance(cwl, ChainWithLoss):
        raise TypeError("training needs a chain with a loss (chain.add_loss(...))")
    if not isinstance(p, np.ndarray):
        raise TypeError(f"parameters must be a numpy array, got {type(p).__name__}")
    with _exclusive(p, opt, what):
        store, owned = cwl.claim_buffers()
        try:
            yield store
        finally:
            cwl.release_buffers(owned)


def train_batched(
    p,
    cwl: ChainWithLoss,
    X,
    opt: Optimizer,
    epochs: int,
    batch_size=None,
    *,
    seed: int = 0,
    threads: int | None = None,
    callback=None,
    callback_every: int = 100,
    progress: bool = False,
) -> np.ndarray:
    """Train for ``epochs`` passes over reshuffled mini-batches, updating ``p`` in place.

    Each epoch shuffles an index permutation with ``numpy.random.default_rng(seed)`` (the data
    is never copied); the last batch of an epoch may be smaller.

    Parameters
    ----------
    p : numpy.ndarray
        The flat parameter vector, shape ``(num_params,)``, float32 or float64, C-contiguous
        and writeable; updated in place (errors as in :func:`train_unbatched`).
    cwl : ChainWithLoss
        The chain with its loss and targets (``chain.add_loss(...)``); anything else raises
        ``TypeError``.
    X : array_like
        The inputs, shape ``(N, *chain.input_shape)``, real numbers converted once to ``p``'s
        dtype (errors as in :func:`train_unbatched`).
    opt : Optimizer
        An :class:`SGD`, :class:`Adam` or :class:`AdamW` instance; its state carries over to
        later calls. A class instead of an instance, or another type, raises ``TypeError``.
    epochs : int
        Number of passes over the data; each has ``ceil(N / batch_size)`` steps.
    batch_size : int, optional
        Samples per step (default ``min(N, 64 * threads)``; larger values are cut to ``N``);
        less than 1 raises ``ValueError``.
    seed : int
        Seed of the shuffling generator (default 0); dropout masks depend on each
        ``Dropout`` layer's own seed and the optimizer's step count, not on this.
    threads : int, optional
        Number of threads (default: every core numba may use); as in :func:`train_unbatched`.
    callback : callable, optional
        ``callback(iteration, loss, p)``, called every ``callback_every`` steps (counted over
        all epochs) and after the last one; as in :func:`train_unbatched`.
    callback_every : int
        Steps between callbacks (default 100); less than 1 raises ``ValueError`` when a
        ``callback`` is given.
    progress : bool
        Draw a progress bar on stderr (default False).

    Returns
    -------
    numpy.ndarray
        The loss of every step, float64, shape ``(epochs * ceil(N / batch_size),)``.

    Raises
    ------
    NonFiniteLossError
        A loss was NaN or infinite; ``p`` is left at its last value with a finite loss.
    RuntimeError
        ``opt`` or ``p`` is already in a training call (threading as in
        :func:`train_unbatched`).
    """
    threads_n = resolve_threads(threads)
    epochs = as_count(epochs, "epochs")
    if callback is not None:
        as_count(callback_every, "callback_every", 1)
    N = np.shape(X)[0] if np.ndim(X) else 0
    if batch_size is None:
        batch_size = max(1, min(N, 64 * threads_n))
    with _training(p, cwl, opt, "train_batched") as store:
        tr = _Trainer(p, cwl, X, opt, threads_n, batch_size, store=store)
        rng = np.random.default_rng(seed)
        per_epoch = -(-tr.N // tr.batch)
        total = epochs * per_epoch
        losses = np.zeros(total, dtype=np.float64)
        every = _every(total, callback, callback_every, progress)
        bar = _Progress(total, progress, "train")
        pos = 0
        for _ in range(epochs):
            rng.shuffle(tr.samples)
            for done, n in _chunks(per_epoch, every):
                k = tr.run(n, losses[pos + done : pos + done + n])
                _after_chunk(pos + done, n, k, losses, tr.p, callback, bar)
            pos += per_epoch
    return losses


def _every(total, callback, callback_every, progress):
    if callback is not None:
        return as_count(callback_every, "callback_every", 1)
    if progress:
        return max(1, total // 100)
    return max(total, 1)


def _after_chunk(done, n, k, losses, p, callback, bar):
    if k < n:
        raise NonFiniteLossError(
            f"loss is {losses[done + k]} at step {done + k + 1}; training stopped and the "
            "parameters were left at their last value with a finite loss"
        )
    last = float(losses[done + n - 1]) if n else float("nan")
    bar.update(done + n, last)
    if callback is not None:
        callback(done + n, last, p)
