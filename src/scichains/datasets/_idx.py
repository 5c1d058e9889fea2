"""The IDX file format (MNIST's): a magic number, big-endian dimensions, then the data."""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np

# third byte of the magic number -> big-endian element type
_TYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


class IDXError(ValueError):
    """A file that is not a valid IDX file (bad magic number, truncated, wrong size)."""


def parse_idx(raw: bytes, name: str = "<bytes>") -> np.ndarray:
    """Parse the bytes of an (uncompressed) IDX file into an array in native byte order.

    Parameters
    ----------
    raw : bytes
        The whole file: the magic number (two zero bytes, a type code, the number of
        dimensions), the big-endian dimensions, then the data.
    name : str
        How error messages name the data (default ``"<bytes>"``; :func:`read_idx` passes the
        file name).

    Returns
    -------
    numpy.ndarray
        A new array of the shape in the header, dtype uint8, int8, int16, int32, float32 or
        float64 as the type code says.

    Raises
    ------
    IDXError
        A bad magic number, zero dimensions, a truncated header or data, or trailing bytes.
    """
    if len(raw) < 4:
        raise IDXError(f"{name}: {len(raw)} bytes, too short for an IDX header")
    zero, typ, ndim = raw[0] << 8 | raw[1], raw[2], raw[3]
    if zero != 0 or typ not in _TYPES:
        raise IDXError(
            f"{name}: bad magic number 0x{raw[:4].hex()} (expected 0x0000 then a type code "
            f"in {sorted(hex(t) for t in _TYPES)} and the number of dimensions)"
        )
    if ndim == 0:
        raise IDXError(f"{name}: zero dimensions")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IDXError(f"{name}: truncated header ({len(raw)} bytes, need {header})")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _TYPES[typ]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        what = "truncated" if len(raw) < expected else "has trailing bytes"
        raise IDXError(
            f"{name}: {what}: {len(raw)} bytes, dimensions {shape} of {dtype.name} need {expected}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file, gzip-compressed (by content, whatever its name) or raw.

    ``path``: the file (str or ``os.PathLike``). Returns the array as :func:`parse_idx` does;
    an invalid file or corrupt gzip data raises :class:`IDXError`, a missing file
    ``FileNotFoundError``.
    """
    with open(path, "rb") as f:
        raw = f.read()
    name = os.fspath(path)
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise IDXError(f"{name}: corrupt gzip data ({e})") from None
    return parse_idx(raw, name)


def write_idx(path: str | os.PathLike, array: np.ndarray, compress: bool = False) -> None:
    """Write ``array`` as an IDX file (used by the tests; handy for custom data sets).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (overwritten if it exists; its name does not choose the
        compression).
    array : array_like
        The data, of dtype uint8, int8, int16, int32, float32 or float64 (in either byte
        order); another dtype raises ``TypeError``. Stored big-endian.
    compress : bool
        Gzip the file (default False); :func:`read_idx` reads both.
    """
    array = np.asarray(array)
    codes = {v.newbyteorder("="): k for k, v in _TYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None:
        raise TypeError(f"IDX has no type for {array.dtype}")
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + array.astype(_TYPES[code]).tobytes()
    with open(path, "wb") as f:
        f.write(gzip.compress(raw) if compress else raw)
