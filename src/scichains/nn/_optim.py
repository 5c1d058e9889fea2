"""Optimizers whose update runs in compiled code on the flat parameter vector.

State (moments, step count) lives in the optimizer object and persists across training calls,
so a second ``train_*`` call resumes where the first stopped. One optimizer serves one parameter
vector; a vector of another length or dtype starts fresh state (with a warning-free reset).
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import kernel

OPT_SGD, OPT_ADAM, OPT_ADAMW = 0, 1, 2


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
        use and after :meth:`reset`.
    t : numpy.ndarray
        Shape ``(1,)``, int64: the step count (also read through :attr:`steps`).

    An optimizer that is already in a training call (in any thread) is refused by another one
    with a ``RuntimeError``: make one optimizer per concurrent training run.
    """

    kind = -1

    def __init__(self):
        self.state: np.ndarray | None = None
        self.t = np.zeros(1, dtype=np.int64)

    def hyper(self) -> np.ndarray:
        raise NotImplementedError

    def bind(self, p: np.ndarray):
        """State arrays for ``p`` (created on first use; kept across calls)."""
        if self.state is None or self.state.shape[1] != p.shape[0] or self.state.dtype != p.dtype:
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

    def step(self, p: np.ndarray, g: np.ndarray) -> None:
        """Apply one update to ``p`` in place from the gradient ``g``."""
        opt_update(self.kind, self.hyper(), self.bind(p), self.t, p, g)


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
