"""Input validation shared by the Python API: clear exceptions before any kernel runs."""

from __future__ import annotations

import inspect

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def float_dtype(dtype, what: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{what} must be float32 or float64, got {dtype!r}") from None
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{what} must be float32 or float64, got {dt}")
    return dt


def check_params(chain, p, copy: bool = False) -> np.ndarray:
    """``p`` must be a 1-D float32/float64 array of length ``chain.num_params``."""
    if not isinstance(p, np.ndarray):
        raise TypeError(f"parameters must be a numpy array, got {type(p).__name__}")
    if p.dtype not in FLOAT_DTYPES:
        raise TypeError(f"parameters must be float32 or float64, got dtype {p.dtype}")
    if p.ndim != 1 or p.shape[0] != chain.num_params:
        raise ValueError(
            f"parameters must have shape ({chain.num_params},) for this chain, got {p.shape}"
        )
    if not p.flags.c_contiguous:
        if copy:
            return np.ascontiguousarray(p)
        raise ValueError("parameters must be a contiguous array")
    return p


def as_data(chain, X, dtype, what: str, allow_single: bool = True):
    """``X`` as a C-contiguous ``(N, n_in)`` array of ``dtype``, and whether it was one sample.

    Integer or other-precision float input is converted (once); NaN/inf raise ``ValueError``.
    """
    X = np.asarray(X)
    if X.dtype.kind not in "fiu":
        raise TypeError(f"{what} must hold real numbers, got dtype {X.dtype}")
    shape = chain.input_shape
    single = False
    if X.shape == shape and allow_single:
        single = True
        X = X.reshape((1,) + shape)
    elif len(shape) == 3 and shape[0] == 1 and X.ndim == 3 and X.shape[1:] == shape[1:]:
        X = X.reshape((X.shape[0],) + shape)  # (N, H, W) images of one channel
    if X.ndim != len(shape) + 1 or X.shape[1:] != shape:
        raise ValueError(f"{what} must have shape (N, {', '.join(map(str, shape))}), got {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{what} holds no samples")
    X = np.ascontiguousarray(X.reshape(X.shape[0], -1), dtype=dtype)
    if not np.isfinite(X).all():
        raise ValueError(f"{what} contains NaN or infinite values")
    return X, single


def check_buffer(buf, shape, dtype, what: str) -> np.ndarray:
    if not isinstance(buf, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, got {type(buf).__name__}")
    if buf.shape != tuple(shape):
        raise ValueError(f"{what} must have shape {tuple(shape)}, got {buf.shape}")
    if buf.dtype != dtype:
        raise TypeError(f"{what} must have dtype {dtype} (the parameters' dtype), got {buf.dtype}")
    if not buf.flags.c_contiguous or not buf.flags.writeable:
        raise ValueError(f"{what} must be a writeable contiguous array")
    return buf


def reject_class(obj, what: str) -> None:
    """Refuse a class passed where an instance of it is expected (``sensealg=DiscreteAdjoint``
    for ``DiscreteAdjoint()``, ``Adam`` for ``Adam()``) with a ``TypeError`` saying what to
    pass; anything else passes through to the caller's own checks."""
    if not isinstance(obj, type):
        return
    try:
        needs_args = any(
            q.default is q.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)
            for q in inspect.signature(obj).parameters.values()
        )
    except (TypeError, ValueError):
        needs_args = True
    call = f"{obj.__name__}(...)" if needs_args else f"{obj.__name__}()"
    raise TypeError(f"{what} is the class {obj.__name__}, not an instance of it: pass {call}")


def as_real(x, what: str, dtype=np.float64) -> np.ndarray:
    """``x`` as a C-contiguous array of ``dtype``; ``TypeError`` naming ``what`` unless it holds
    real numbers (complex values would lose their imaginary part with only a warning, objects
    and strings would fail deep inside numpy)."""
    if type(x) is np.ndarray and x.dtype == dtype and x.flags.c_contiguous:
        return x  # the common case, without the calls below
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{what} must hold real numbers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=dtype)
