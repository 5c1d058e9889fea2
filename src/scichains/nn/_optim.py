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
    """Adam (Kingma & Ba), with PyTorch's defaults and update formula."""

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
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before each update)."""

    kind = OPT_ADAMW

    def __init__(
        self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2
    ):
        super().__init__(lr, betas, eps)
        self.weight_decay = float(weight_decay)

    def hyper(self):
        return np.array([self.lr, self.betas[0], self.betas[1], self.eps, self.weight_decay, 0.0])


class SGD(Optimizer):
    """Stochastic gradient descent, with optional (heavy-ball) momentum as in PyTorch."""

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
