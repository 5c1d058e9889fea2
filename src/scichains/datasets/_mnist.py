"""MNIST and Fashion-MNIST: find the IDX files locally, or download and verify them."""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from ._idx import read_idx

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

DATASETS = {
    "mnist": {
        "mirrors": (
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ),
        "sha256": {
            "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        },
        "system_dirs": (),
    },
    "fashion-mnist": {
        "mirrors": ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
        "sha256": {
            "train-images-idx3-ubyte.gz": "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            "train-labels-idx1-ubyte.gz": "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            "t10k-images-idx3-ubyte.gz": "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            "t10k-labels-idx1-ubyte.gz": "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        },
        # Debian's dataset-fashion-mnist package
        "system_dirs": ("/usr/share/datasets/fashion-mnist",),
    },
}


def cache_dir() -> Path:
    """The per-user cache: ``$XDG_CACHE_HOME/scichains`` (default ``~/.cache/scichains``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scichains"


def _search_dirs(name: str, path) -> list[Path]:
    if path is not None:
        return [Path(path)]
    dirs = []
    env = os.environ.get("SCICHAINS_DATA")
    if env:
        dirs += [Path(env) / name, Path(env)]
    dirs.append(cache_dir() / name)
    dirs += [Path(d) for d in DATASETS[name]["system_dirs"]]
    return dirs


def _find(dirs: list[Path], stem: str) -> Path | None:
    for d in dirs:
        for fname in (stem + ".gz", stem):
            if (d / fname).is_file():
                return d / fname
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download(name: str, fname: str, dest: Path, progress: bool) -> Path:
    """Download ``fname`` into ``dest`` from the first mirror that answers; verify SHA-256."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / fname
    errors = []
    for mirror in DATASETS[name]["mirrors"]:
        url = mirror + fname
        tmp = target.with_suffix(target.suffix + ".part")
        try:
            with urllib.request.urlopen(url, timeout=30) as r, open(tmp, "wb") as out:
                total = int(r.headers.get("Content-Length") or 0)
                done = 0
                while True:
                    block = r.read(1 << 16)
                    if not block:
                        break
                    out.write(block)
                    done += len(block)
                    if progress and total:
                        bar = "#" * int(30 * done / total)
                        sys.stderr.write(
                            f"\r{fname} [{bar:<30}] {done / 1e6:.1f}/{total / 1e6:.1f} MB"
                        )
            if progress:
                sys.stderr.write("\n")
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            errors.append(f"{url}: {e}")
            tmp.unlink(missing_ok=True)
            continue
        digest = _sha256(tmp)
        if digest != DATASETS[name]["sha256"][fname]:
            tmp.unlink(missing_ok=True)
            errors.append(f"{url}: SHA-256 {digest} does not match the published checksum")
            continue
        tmp.replace(target)
        return target
    raise OSError("; ".join(errors))


def _load(name: str, split: str, path, download: bool, progress: bool):
    if split not in _FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    dirs = _search_dirs(name, path)
    arrays = []
    for stem in _FILES[split]:
        found = _find(dirs, stem)
        if found is None and download and path is None:
            try:
                found = _download(name, stem + ".gz", cache_dir() / name, progress)
            except OSError as e:
                raise FileNotFoundError(_missing_message(name, stem, dirs, e)) from None
        if found is None:
            raise FileNotFoundError(_missing_message(name, stem, dirs, None))
        arrays.append(read_idx(found))
    images, labels = arrays
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{name} {split}: images of shape {images.shape} and labels of shape "
            f"{labels.shape} do not match"
        )
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{name} {split}: labels outside 0..9")
    return (images.astype(np.float32) / np.float32(255.0), labels.astype(np.int64))


def _missing_message(name, stem, dirs, err):
    where = ", ".join(str(d) for d in dirs)
    msg = (
        f"{name}: {stem}(.gz) not found in {where}. Put the four IDX files (gzip or raw) in "
        f"one of these directories, or set SCICHAINS_DATA"
    )
    if err is not None:
        msg += f"; downloading failed: {err}"
    return msg


def load_mnist(split: str = "train", path=None, download: bool = True, progress: bool = True):
    """MNIST as ``(images, labels)``: float32 ``(N, 28, 28)`` in [0, 1], int64 ``(N,)``.

    Looks in ``path`` if given, else in ``$SCICHAINS_DATA`` (``/mnist`` or directly) and the
    per-user cache; when missing, downloads from the public mirrors into the cache and checks
    the published SHA-256 sums.

    Parameters
    ----------
    split : str
        ``"train"`` (default, 60,000 images) or ``"test"`` (10,000); anything else raises
        ``ValueError``.
    path : str or os.PathLike, optional
        A directory holding the split's two IDX files (``train-images-idx3-ubyte`` and
        ``train-labels-idx1-ubyte``, or ``t10k-...`` for ``"test"``; each gzip-compressed
        with a ``.gz`` name, or raw); only this directory is searched and nothing is
        downloaded.
    download : bool
        Download missing files (default True); with False a missing file raises
        ``FileNotFoundError``.
    progress : bool
        Draw a download progress bar on stderr (default True).

    Raises
    ------
    FileNotFoundError
        A file was neither found nor downloaded (the message lists the directories searched
        and why each mirror failed).
    scichains.datasets.IDXError
        A file is not a valid IDX file (a subclass of ``ValueError``).
    ValueError
        An unknown ``split``, images and labels that do not match, or labels outside
        ``0..9``.
    """
    return _load("mnist", split, path, download, progress)


def load_fashion_mnist(
    split: str = "train", path=None, download: bool = True, progress: bool = True
):
    """Fashion-MNIST, like :func:`load_mnist`; also found in /usr/share/datasets/fashion-mnist
    (Debian's ``dataset-fashion-mnist``).

    Returns ``(images, labels)``: float32 ``(N, 28, 28)`` in [0, 1], int64 ``(N,)`` (classes
    0..9).

    Parameters
    ----------
    split : str
        ``"train"`` (default, 60,000 images) or ``"test"`` (10,000); anything else raises
        ``ValueError``.
    path : str or os.PathLike, optional
        A directory holding the split's two IDX files (``train-images-idx3-ubyte`` and
        ``train-labels-idx1-ubyte``, or ``t10k-...`` for ``"test"``; each gzip-compressed
        with a ``.gz`` name, or raw); only this directory is searched and nothing is
        downloaded.
    download : bool
        Download missing files (default True); with False a missing file raises
        ``FileNotFoundError``.
    progress : bool
        Draw a download progress bar on stderr (default True).

    Raises
    ------
    FileNotFoundError
        A file was neither found nor downloaded (the message lists the directories searched
        and why each mirror failed).
    scichains.datasets.IDXError
        A file is not a valid IDX file (a subclass of ``ValueError``).
    ValueError
        An unknown ``split``, images and labels that do not match, or labels outside
        ``0..9``.
    """
    return _load("fashion-mnist", split, path, download, progress)
