import gzip

import numpy as np
import pytest

from scichains import datasets
from scichains.datasets import _mnist


def _write_split(d, n, seed=0, compress=True, prefix="train"):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    ext = ".gz" if compress else ""
    datasets.write_idx(d / f"{prefix}-images-idx3-ubyte{ext}", images, compress=compress)
    datasets.write_idx(d / f"{prefix}-labels-idx1-ubyte{ext}", labels, compress=compress)
    return images, labels


@pytest.mark.parametrize("compress", [True, False])
def test_roundtrip_and_loader(tmp_path, compress):
    images, labels = _write_split(tmp_path, 7, compress=compress)
    x, y = datasets.load_mnist("train", path=tmp_path)
    assert x.dtype == np.float32 and x.shape == (7, 28, 28)
    np.testing.assert_allclose(x, images / 255.0, rtol=1e-7)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, labels)
    assert 0.0 <= x.min() and x.max() <= 1.0


def test_other_types_roundtrip(tmp_path):
    for arr in (
        np.arange(6, dtype=np.int32).reshape(2, 3),
        np.linspace(0, 1, 5),
        np.array([[-1, 2]], dtype=np.int16),
    ):
        datasets.write_idx(tmp_path / "a.idx", arr)
        out = datasets.read_idx(tmp_path / "a.idx")
        np.testing.assert_array_equal(out, arr)
        assert out.dtype == arr.dtype


def test_corrupt_files_raise_clear_errors(tmp_path):
    datasets.write_idx(tmp_path / "ok", np.zeros((3, 4), np.uint8))
    raw = (tmp_path / "ok").read_bytes()
    cases = {
        "truncated": raw[:-1],
        "trailing": raw + b"\x00",
        "magic": b"\x01\x02" + raw[2:],
        "type": raw[:2] + b"\x07" + raw[3:],
        "header": raw[:6],
        "empty": b"",
    }
    messages = {
        "truncated": "truncated",
        "trailing": "trailing",
        "magic": "magic",
        "type": "magic",
        "header": "truncated header",
        "empty": "too short",
    }
    for key, data in cases.items():
        (tmp_path / key).write_bytes(data)
        with pytest.raises(datasets.IDXError, match=messages[key]):
            datasets.read_idx(tmp_path / key)
    (tmp_path / "badgz").write_bytes(gzip.compress(raw)[:-5])
    with pytest.raises(datasets.IDXError, match="gzip"):
        datasets.read_idx(tmp_path / "badgz")


def test_mismatched_images_and_labels(tmp_path):
    _write_split(tmp_path, 5)
    datasets.write_idx(
        tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(4, np.uint8), compress=True
    )
    with pytest.raises(ValueError, match="do not match"):
        datasets.load_mnist(path=tmp_path)


def test_search_order_and_offline_message(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    (data_dir / "mnist").mkdir(parents=True)
    _write_split(data_dir / "mnist", 3, prefix="t10k")
    monkeypatch.setenv("SCICHAINS_DATA", str(data_dir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    x, _ = datasets.load_mnist("test")
    assert x.shape == (3, 28, 28)

    # not present anywhere and no network: the message says where to put the files
    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(_mnist.urllib.request, "urlopen", offline)
    with pytest.raises(FileNotFoundError, match="SCICHAINS_DATA") as e:
        datasets.load_mnist("train", progress=False)
    assert "network unreachable" in str(e.value)
    assert not any((tmp_path / "cache").rglob("*.part"))


def test_download_verifies_checksum(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SCICHAINS_DATA", raising=False)
    payload = gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x01\x05")

    class Response:
        headers = {"Content-Length": str(len(payload))}

        def __init__(self):
            self._data = payload

        def read(self, n):
            out, self._data = self._data[:n], self._data[n:]
            return out

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(_mnist.urllib.request, "urlopen", lambda *a, **k: Response())
    with pytest.raises(FileNotFoundError, match="does not match the published checksum"):
        datasets.load_mnist("train", progress=False)
    assert not any((tmp_path / "cache").rglob("*.gz"))
    # with the checksum of this payload accepted, the download lands in the cache
    import hashlib

    digest = hashlib.sha256(payload).hexdigest()
    sums = dict(_mnist.DATASETS["mnist"]["sha256"])
    sums["train-images-idx3-ubyte.gz"] = digest
    sums["train-labels-idx1-ubyte.gz"] = digest
    monkeypatch.setitem(_mnist.DATASETS["mnist"], "sha256", sums)
    with pytest.raises(ValueError, match="do not match"):  # 1-D "images": the shapes check
        datasets.load_mnist("train", progress=False)
    assert (tmp_path / "cache" / "scichains" / "mnist" / "train-images-idx3-ubyte.gz").is_file()


@pytest.mark.skipif(
    not (
        __import__("pathlib").Path("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz")
    ).is_file(),
    reason="Debian's dataset-fashion-mnist is not installed",
)
def test_fashion_mnist_from_debian_package():
    x, y = datasets.load_fashion_mnist("test", download=False)
    assert x.shape == (10_000, 28, 28) and y.shape == (10_000,)
    assert np.bincount(y).tolist() == [1000] * 10
