"""Input validation shared by the Python API: clear exceptions before any kernel runs."""

from __future__ import annotations

import inspect
import math
import operator

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


def check_inplace(p, what: str) -> np.ndarray:
    """``p``, a vector that compiled code updates in place: a writeable, C-contiguous 1-D
    float32/float64 numpy array. Never converted or copied (the update would be written into a
    copy the caller never sees): anything else raises ``TypeError`` (type, dtype) or
    ``ValueError`` (shape, layout, read-only) naming ``what``."""
    if not isinstance(p, np.ndarray):
        raise TypeError(
            f"{what} must be a numpy array (it is updated in place), got {type(p).__name__}"
        )
    if p.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{what} must be float32 or float64, got dtype {p.dtype}")
    if p.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {p.shape}")
    flags = p.flags
    if not flags.c_contiguous:
        raise ValueError(
            f"{what} must be a contiguous array (it is updated in place, and an update written "
            "into a contiguous copy would be lost): pass a contiguous array, e.g. "
            "np.ascontiguousarray(...), and read the result from it"
        )
    if not flags.writeable:
        raise ValueError(f"{what} must be writeable (it is updated in place)")
    return p


def check_disjoint(out: np.ndarray, what: str, inputs) -> None:
    """``ValueError`` when the output ``out`` shares memory with one of ``inputs``, pairs
    ``(array, name)`` of the numpy arrays the compiled code reads while it writes ``out``:
    writing one would change the other while it is read. Arrays whose memory numpy allocated
    for different owners (a view's ``base`` is its owner) are told apart without a
    ``np.may_share_memory`` call."""
    oo = out.base
    if oo is None:
        oo = out
    owned = type(oo) is np.ndarray and oo.flags.owndata
    for a, name in inputs:
        ao = a.base
        if ao is None:
            ao = a
        if owned and ao is not oo and type(ao) is np.ndarray and ao.flags.owndata:
            continue  # two allocations of numpy's: disjoint
        if np.may_share_memory(out, a):
            raise ValueError(
                f"{what} shares memory with {name}: it is overwritten while {name} is read; "
                f"pass a separate array for {what}"
            )


def as_count(n, what: str, minimum: int | None = 0) -> int:
    """``n`` as an int of at least ``minimum`` (None: no bound): an integer, or a float with an
    integral value (``1e4``); ``TypeError`` for other types, ``ValueError`` naming ``what`` for
    a fraction or a value below ``minimum``."""
    if isinstance(n, (bool, np.bool_)):
        raise TypeError(f"{what} must be an integer, got {n!r}")
    try:
        i = operator.index(n)
    except TypeError:
        if not isinstance(n, (float, np.floating)):
            raise TypeError(f"{what} must be an integer, got {type(n).__name__}") from None
        if not (math.isfinite(n) and n == math.floor(n)):
            raise ValueError(f"{what} must be a whole number, got {n!r}") from None
        i = int(n)
    if minimum is not None and i < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {i}")
    return int(i)


def as_flag(b, what: str) -> bool:
    """``b`` as a bool: a bool, numpy bool or the integers 0 and 1, else ``TypeError``."""
    if isinstance(b, (bool, np.bool_)):
        return bool(b)
    if isinstance(b, (int, np.integer)) and b in (0, 1):
        return bool(b)
    raise TypeError(f"{what} must be True or False, got {b!r}")


def as_labels(labels, what: str) -> np.ndarray:
    """Class labels as a C-contiguous int64 vector: integers, or floats with integral values;
    ``TypeError`` naming ``what`` for other dtypes (complex, object, strings, fractions),
    ``ValueError`` for a shape other than ``(N,)`` or ``(N, 1)``."""
    a = np.asarray(labels)
    if a.dtype.kind not in "iu":
        if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise TypeError(f"{what} must be integers, got dtype {a.dtype}")
    if a.ndim > 1 and not (a.ndim == 2 and a.shape[1] == 1):
        raise ValueError(
            f"{what} must be class indices of shape (N,), got shape {a.shape} (for one-hot "
            "targets use a regression loss, or pass their argmax along axis 1)"
        )
    return np.ascontiguousarray(a.reshape(-1), dtype=np.int64)
