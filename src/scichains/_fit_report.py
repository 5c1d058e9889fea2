"""What :func:`scichains.fit` reports: the :class:`FitResult`, the :class:`FitInfo` its
callbacks receive, and the progress bars it draws (tqdm's where installed)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np


class FitInfo:
    """What a :func:`fit` callback receives at each iterate (read its attributes).

    ``stage`` (index into the stages), ``optimizer`` (the stage's optimizer), ``iteration``
    (optimizer updates before this point, counted over all stages), ``epoch`` (mini-batch
    stages; else ``None``), ``loss`` (the objective at ``p``; in a mini-batch stage the loss of
    the batch), ``val_loss`` (the validation value at ``p`` when it was evaluated at this
    iterate, else ``None``), ``p`` (a read-only view of the current parameters, shape
    ``(num_params,)``: copy it to keep it), ``seconds`` (since the fit started).
    """

    __slots__ = ("stage", "optimizer", "iteration", "epoch", "loss", "val_loss", "p", "seconds")

    def __init__(self, stage, optimizer, iteration, epoch, loss, val_loss, p, seconds):
        self.stage = stage
        self.optimizer = optimizer
        self.iteration = iteration
        self.epoch = epoch
        self.loss = loss
        self.val_loss = val_loss
        self.p = p
        self.seconds = seconds

    def __repr__(self) -> str:
        return (
            f"FitInfo(stage={self.stage}, iteration={self.iteration}, epoch={self.epoch}, "
            f"loss={self.loss:.6g}, val_loss={self.val_loss}, seconds={self.seconds:.3f})"
        )


@dataclass
class FitResult:
    """The outcome of :func:`fit`.

    Attributes
    ----------
    p : numpy.ndarray
        A copy of the returned parameters (the vector passed to ``fit`` holds the same values).
    loss : float
        The objective at ``p`` (on all the data).
    val_loss : float or None
        The validation value at ``p`` (``None`` without a validation set).
    success : bool
        False when the fit stopped on a failed solve or a non-finite value or gradient.
    status : str
        ``"completed"`` (every stage ran to its iteration count or its own convergence test),
        ``"early_stopped"`` (the validation value stopped improving in the last stage),
        ``"stopped"`` (a callback returned True) or ``"failed"``.
    message : str
        What happened, in words.
    nit, nfev : int
        Optimizer updates and objective evaluations (gradients), over all stages.
    seconds : float
        Wall time of the whole fit.
    history : dict of numpy.ndarray
        One row per iterate: ``"iteration"``, ``"stage"``, ``"epoch"`` (-1 outside mini-batch
        stages), ``"loss"``, ``"grad_norm"`` (2-norm), ``"val_loss"`` (NaN where not
        evaluated), ``"seconds"``. A mini-batch stage records each batch's loss; its epoch's
        rows add up to the epoch's loss on all the data when the objective sums over
        trajectories (as ``MultiObjective`` and ``NeuralODE`` do), at moving parameters.
    stages : list of dict
        Per stage: ``"optimizer"`` (its repr), ``"status"``, ``"message"``, ``"nit"``,
        ``"seconds"``.
    """

    p: np.ndarray
    loss: float
    val_loss: float | None
    success: bool
    status: str
    message: str
    nit: int
    nfev: int
    seconds: float
    history: dict = field(repr=False)
    stages: list = field(repr=False)


def _use_tqdm(progress) -> bool:
    if progress is False:
        return False
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    if progress is True:
        return True
    return "ipykernel" in sys.modules or bool(getattr(sys.stderr, "isatty", lambda: False)())


def _tqdm_class():
    """tqdm's notebook bar in a Jupyter kernel with ipywidgets, else its text bar (tqdm.auto
    would warn without ipywidgets)."""
    if "ipykernel" in sys.modules:
        try:
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm

            return tqdm
        except ImportError:
            pass
    from tqdm.std import tqdm

    return tqdm


class _Bar:
    """One progress bar per stage: tqdm's where installed (and wanted), else a line on stderr
    redrawn at most every 0.5 s (``progress=True``), else nothing."""

    def __init__(self, mode: str, total: int, label: str):
        self.mode = mode
        self.total = total
        self.label = label
        self.done = 0
        self.t_draw = 0.0
        self.bar = None
        if mode == "tqdm":
            tqdm = _tqdm_class()
            self.bar = tqdm(total=total, desc=label, leave=True, dynamic_ncols=True)

    def update(self, n: int, loss: float, best: float):
        self.done += n
        if self.mode == "off":
            return
        now = time.perf_counter()
        if self.bar is not None:
            self.bar.update(n)
            if now - self.t_draw > 0.2:
                self.bar.set_postfix(loss=f"{loss:.4g}", best=f"{best:.4g}", refresh=False)
                self.t_draw = now
        elif now - self.t_draw > 0.5:
            sys.stderr.write(
                f"\r{self.label}: {self.done}/{self.total}  loss {loss:.6g}  best {best:.6g}"
            )
            sys.stderr.flush()
            self.t_draw = now

    def close(self, loss: float, best: float):
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4g}", best=f"{best:.4g}", refresh=False)
            self.bar.close()
        elif self.mode == "text":
            sys.stderr.write(
                f"\r{self.label}: {self.done}/{self.total}  loss {loss:.6g}  best {best:.6g}\n"
            )
            sys.stderr.flush()
