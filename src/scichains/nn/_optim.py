"""Optimizers whose update runs in compiled code on the flat parameter vector.

State (moments, step count) lives in the optimizer object and persists across training calls,
so a second ``train_*`` call resumes where the first stopped. One optimizer serves one parameter
vector; a vector of another length or dtype starts fresh state (with a warning-free reset).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .._jit import kernel
from ._validate import FLOAT_DTYPES, as_real, check_inplace

OPT_SGD, OPT_ADAM, OPT_ADAMW = 0, 1, 2
#: the update rules the compiled code knows (``Optimizer.kind``)
KINDS = frozenset((OPT_SGD, OPT_ADAM, OPT_ADAMW))
#: the number of hyperparameters the update rules read (``Optimizer.hyper()``)
N_HYPER = 6
_F64 = np.dtype(np.float64)
# what :func:`checked_update` found wrong (0: nothing; the update was applied)
_G_LENGTH, _G_SHARES, _G_NONFINITE = 1, 2, 3


class Optimizer:
    """Base class of the optimizers :class:`SGD`, :class:`Adam` and :class:`AdamW`.

    An optimizer holds the hyperparameters and the state of one training run on one flat
    parameter vector ``p`` (shape ``(num_params,)``, float32 or float64): the moment estimates
    and the number of updates applied so far. The state persists across training calls, so a
    second ``train_*`` call resumes where the first stopped; it is created on first use and
    created afresh (moments zero, step count 0) when ``p`` has another length or dtype.

    The update rule runs in compiled code, selected by the subclass's ``kind``: the training
    functions accept instances of the three subclasses above (anything else raises
    ``TypeError``), and a new rule cannot be added by subclassing in Python.

    Attributes
    ----------
    state : numpy.ndarray or None
        Shape ``(2, num_params)``, ``p``'s dtype: the moments (SGD: the momentum buffer in
        row 0; Adam/AdamW: the first and second moments in rows 0 and 1); None before first
        use and after :meth:`reset`. It may be assigned (to restore a checkpoint): an array
        of another shape, dtype or layout (not C-contiguous and writeable, as the moments are
        updated in place) raises ``ValueError``/``TypeError``.
    t : numpy.ndarray
        Shape ``(1,)``, int64: the step count (also read through :attr:`steps`).

    An optimizer that is already in a training call (in any thread) is refused by another one
    with a ``RuntimeError``: make one optimizer per concurrent training run.
    """

    kind = -1

    def __init__(self):
        self._state: np.ndarray | None = None
        self.t = np.zeros(1, dtype=np.int64)

    @property
    def state(self) -> np.ndarray | None:
        """The moments: ``(2, num_params)``, the parameters' dtype (None before first use)."""
        return self._state

    @state.setter
    def state(self, value) -> None:
        # checked here, once, so that every step need only compare its length and dtype
        if value is not None:
            if not isinstance(value, np.ndarray):
                raise TypeError(f"state must be a numpy array or None, got {type(value).__name__}")
            if value.dtype not in FLOAT_DTYPES:
                raise TypeError(f"state must be float32 or float64, got dtype {value.dtype}")
            if value.ndim != 2 or value.shape[0] != 2:
                raise ValueError(f"state must have shape (2, num_params), got {value.shape}")
            if not value.flags.carray:
                raise ValueError(
                    "state must be a writeable contiguous array (the moments are updated in place)"
                )
        self._state = value

    def __setstate__(self, d: dict) -> None:
        if "state" in d:  # pickled before ``state`` was a property
            d["_state"] = d.pop("state")
        self.__dict__.update(d)

    def hyper(self) -> np.ndarray:
        raise NotImplementedError

    def _fits(self, p: np.ndarray) -> bool:
        """Whether the state arrays are those of a vector like ``p`` (length and dtype)."""
        state = self._state  # a (2, n) contiguous, writeable float array (see the setter)
        return state is not None and state.shape[1] == p.shape[0] and state.dtype == p.dtype

    def bind(self, p: np.ndarray):
        """State arrays for ``p`` (created on first use; kept across calls)."""
        if not self._fits(p):
            self.state = np.zeros((2, p.shape[0]), dtype=p.dtype)
            self.t[0] = 0
        return self.state

    def reset(self):
        """Forget the moments and the step count."""
        self.state = None
        self.t[0] = 0

    @property
    def steps(self) -> int:
        """Number of updates applied so far."""
        return int(self.t[0])

    def checked_hyper(self) -> np.ndarray:
        """:meth:`hyper`, after checking that the compiled code knows this optimizer's rule
        and can read what ``hyper()`` returned (a subclass may override either): else
        ``TypeError``."""
        self._check_kind()
        return self._check_hyper(self.hyper())

    def _check_kind(self) -> None:
        if self.kind not in KINDS:
            raise TypeError(
                f"{type(self).__name__} is not an optimizer the compiled code knows: use SGD, "
                "Adam or AdamW (or a subclass of one that keeps its kind)"
            )

    def _check_hyper(self, h) -> np.ndarray:
        if type(h) is not np.ndarray or h.dtype != _F64 or h.shape != (N_HYPER,):
            raise TypeError(
                f"{type(self).__name__}.hyper() must return a float64 array of shape "
                f"({N_HYPER},), got {type(h).__name__} {getattr(h, 'dtype', '')} "
                f"{getattr(h, 'shape', '')} (are the hyperparameters (lr, ...) real numbers?)"
            )
        return h

    def step(self, p: np.ndarray, g: ArrayLike) -> None:
        """Apply one update to ``p`` in place from the gradient ``g``.

        Parameters
        ----------
        p : numpy.ndarray
            The parameters, shape ``(n,)``, float32 or float64, C-contiguous and writeable:
            updated in place, never copied. Another type or dtype raises ``TypeError``;
            another shape, a non-contiguous (strided) or a read-only array ``ValueError``.
        g : array_like
            The gradient, ``n`` real numbers (converted to ``p``'s dtype when it is not
            already a contiguous array of it; never modified). A non-real dtype (complex,
            object) raises ``TypeError``; another length, NaN/inf entries, or memory shared
            with ``p`` (``opt.step(p, p)``) or with the optimizer's state ``ValueError``.

        Nothing is changed (neither ``p`` nor the optimizer's state) when an error is raised.
        """
        # the fast path: a few attribute checks (the lengths, the memory overlaps and the
        # finiteness of g are checked in compiled code, before the update)
        if not (
            type(p) is np.ndarray and p.dtype in FLOAT_DTYPES and p.ndim == 1 and p.flags.carray
        ):
            check_inplace(p, "p")  # raises, but for an array subclass or an unaligned array
        if not (type(g) is np.ndarray and g.dtype is p.dtype and g.flags.c_contiguous):
            g = as_real(g, "g", p.dtype)
        if g.ndim != 1:
            raise ValueError(f"g must have shape {p.shape} like p, got {g.shape}")
        builtin = type(self) in _BUILTIN  # their hyper() returns a float64 array of 6
        if not builtin:
            self._check_kind()
        hyper = self.hyper()
        if not builtin or hyper.dtype is not _F64:  # (not float64: an lr set to a string)
            self._check_hyper(hyper)
        if self._fits(p):
            status = checked_update(self.kind, hyper, self._state, self.t, p, g)
        else:  # a new vector: fresh state, kept only once the update is applied
            state = np.zeros((2, p.shape[0]), dtype=p.dtype)
            t = np.zeros(1, dtype=np.int64)
            status = checked_update(self.kind, hyper, state, t, p, g)
            if not status:
                self.state = state
                self.t[0] = t[0]
        if status:
            _step_error(status, p, g)


def _check_lr(lr):
    lr = float(lr)
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"learning rate must be positive, got {lr}")
    return lr


class Adam(Optimizer):
    """Adam (Kingma & Ba), with PyTorch's defaults and update formula.

    Each step updates the moment averages ``m = beta1 m + (1 - beta1) g`` and
    ``v = beta2 v + (1 - beta2) g**2`` and applies
    ``p -= lr * m_hat / (sqrt(v_hat) + eps)`` with the bias-corrected
    ``m_hat = m / (1 - beta1**t)`` and ``v_hat = v / (1 - beta2**t)``; the arithmetic is in
    ``p``'s dtype.

    Parameters
    ----------
    lr : float
        Learning rate (default ``1e-3``); must be positive and finite, else ``ValueError``.
    betas : tuple of two floats
        ``(beta1, beta2)``, the decay rates of the first and second moment averages (default
        ``(0.9, 0.999)``); each must lie in ``[0, 1)``, else ``ValueError``.
    eps : float
        Added to ``sqrt(v_hat)`` in the denominator, for numerical stability (default ``1e-8``;
        not checked).
    """

    kind = OPT_ADAM

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__()
        self.lr = _check_lr(lr)
        self.betas = (float(betas[0]), float(betas[1]))
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        self.eps = float(eps)

    def hyper(self):
        return np.array([self.lr, self.betas[0], self.betas[1], self.eps, 0.0, 0.0])

    def __repr__(self):
        return f"Adam(lr={self.lr}, betas={self.betas}, eps={self.eps})"


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before each update).

    Parameters
    ----------
    lr : float
        Learning rate (default ``1e-3``); must be positive and finite, else ``ValueError``.
    betas : tuple of two floats
        ``(beta1, beta2)``, the decay rates of the first and second moment averages (default
        ``(0.9, 0.999)``); each must lie in ``[0, 1)``, else ``ValueError``.
    eps : float
        Added to ``sqrt(v_hat)`` in the denominator, for numerical stability (default ``1e-8``;
        not checked).
    weight_decay : float
        Decay per unit learning rate (default ``1e-2``, PyTorch's default; not checked).

    The Adam step that follows the decay is that of :class:`Adam`.
    """

    kind = OPT_ADAMW

    def __init__(
        self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2
    ):
        super().__init__(lr, betas, eps)
        self.weight_decay = float(weight_decay)

    def hyper(self):
        return np.array([self.lr, self.betas[0], self.betas[1], self.eps, self.weight_decay, 0.0])


class SGD(Optimizer):
    """Stochastic gradient descent, with optional (heavy-ball) momentum as in PyTorch.

    Each step sets ``buf = momentum * buf + g`` and ``p -= lr * buf`` (no dampening, no Nesterov
    term); with ``momentum=0`` this is ``p -= lr * g``.

    Parameters
    ----------
    lr : float
        Learning rate (no default); must be positive and finite, else ``ValueError``.
    momentum : float
        Momentum factor in ``[0, 1)`` (default ``0.0``, plain gradient descent); other values
        raise ``ValueError``.
    """

    kind = OPT_SGD

    def __init__(self, lr: float, momentum: float = 0.0):
        super().__init__()
        self.lr = _check_lr(lr)
        self.momentum = float(momentum)
        if not (0.0 <= self.momentum < 1.0):
            raise ValueError(f"momentum must lie in [0, 1), got {momentum}")

    def hyper(self):
        return np.array([self.lr, 0.0, 0.0, 0.0, 0.0, self.momentum])


@kernel
def opt_update(kind, hyper, state, tcount, p, g):
    """One optimizer update of ``p`` in place (allocation-free)."""
    tcount[0] += 1
    t = tcount[0]
    lr = hyper[0]
    n = p.shape[0]
    if kind == OPT_SGD:
        mom = p.dtype.type(hyper[5])
        lrt = p.dtype.type(lr)
        buf = state[0]
        for j in range(n):
            b = mom * buf[j] + g[j]
            buf[j] = b
            p[j] -= lrt * b
        return
    b1 = hyper[1]
    b2 = hyper[2]
    if kind == OPT_ADAMW:
        decay = p.dtype.type(1.0 - lr * hyper[4])
        for j in range(n):
            p[j] *= decay
    step = p.dtype.type(lr / (1.0 - b1**t))
    inv_bc2 = p.dtype.type(1.0 / math.sqrt(1.0 - b2**t))
    eps = p.dtype.type(hyper[3])
    c1 = p.dtype.type(1.0 - b1)
    c2 = p.dtype.type(1.0 - b2)
    b1t = p.dtype.type(b1)
    b2t = p.dtype.type(b2)
    m = state[0]
    v = state[1]
    for j in range(n):
        gj = g[j]
        mj = b1t * m[j] + c1 * gj
        vj = b2t * v[j] + c2 * gj * gj
        m[j] = mj
        v[j] = vj
        p[j] -= step * mj / (math.sqrt(vj) * inv_bc2 + eps)


@kernel
def _overlaps(a, b):
    """Whether the memory of the contiguous arrays ``a`` and ``b`` overlaps."""
    if a.size == 0 or b.size == 0:
        return False
    a0 = a.ctypes.data
    b0 = b.ctypes.data
    return a0 < b0 + b.nbytes and b0 < a0 + a.nbytes


@kernel
def _finite_vector(g):
    """Whether every entry of ``g`` is finite, in one pass that vectorises: ``x * 0`` is NaN
    exactly when ``x`` is NaN or infinite, and the sum of those is NaN when one is (the kernels
    keep IEEE semantics for NaN and inf: see ``_jit.FASTMATH``). ``_checks.all_finite``'s
    early-exit loop stays scalar; this one runs on every entry at every step."""
    acc = g.dtype.type(0.0)
    for j in range(g.shape[0]):
        acc += g[j] * g.dtype.type(0.0)
    return acc == 0.0


@kernel
def checked_update(kind, hyper, state, tcount, p, g):
    """:func:`opt_update` after the checks that read the arrays: returns 0 when the update was
    applied, else what is wrong (``_G_*``), with nothing written."""
    if g.shape[0] != p.shape[0]:
        return _G_LENGTH
    if _overlaps(g, p) or _overlaps(g, state) or _overlaps(p, state):
        return _G_SHARES
    if not _finite_vector(g):
        return _G_NONFINITE
    opt_update(kind, hyper, state, tcount, p, g)
    return 0


def _step_error(status: int, p: np.ndarray, g: np.ndarray):
    if status == _G_LENGTH:
        raise ValueError(f"g must have shape {p.shape} like p, got {g.shape}")
    if status == _G_SHARES:
        raise ValueError(
            "g shares memory with p (or p or g with the optimizer's state): the update would "
            "read entries it has already overwritten; pass a separate gradient array"
        )
    bad = np.flatnonzero(~np.isfinite(g))
    raise ValueError(
        f"g contains NaN or infinite values ({bad.size} of {g.size}, the first at index "
        f"{bad[0]}: {g[bad[0]]}); the parameters and the optimizer's state are unchanged"
    )


_BUILTIN = frozenset((SGD, Adam, AdamW))
