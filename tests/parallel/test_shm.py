"""scichains.parallel._shm: result blocks that workers on this machine write into."""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

from scichains.parallel import _shm as shm

pytestmark = [
    pytest.mark.whitebox,
    pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="no /dev/shm here"),
]


def _parts():
    return [((5, 3, 2), np.dtype(np.float64)), ((5,), np.dtype(np.int64)), ((7,), np.float32)]


def test_layout_is_aligned_and_disjoint():
    offsets, nbytes = shm.layout(_parts())
    assert offsets[0] == shm.HEADER and all(o % 64 == 0 for o in offsets)
    ends = [o + int(np.prod(s)) * np.dtype(d).itemsize for o, (s, d) in zip(offsets, _parts())]
    assert all(e <= o for e, o in zip(ends, offsets[1:])) and ends[-1] <= nbytes


def test_a_worker_writes_the_caller_reads_and_the_file_goes():
    offsets, nbytes = shm.layout(_parts())
    block = shm.SharedBlock.create(nbytes)
    assert block is not None and block.path.exists()
    # another process writes its rows
    code = (
        "import sys, pickle, numpy as np; from scichains.parallel import _shm as shm; "
        "handle, offsets, parts = pickle.loads(bytes.fromhex(sys.argv[1])); "
        "at = shm.rows_offset(offsets[0], *parts[0], 2); "
        "assert shm.write(handle, [(at, np.full((2, 3, 2), 7.5)), "
        "(offsets[1], np.arange(5))])"
    )
    import pickle

    arg = pickle.dumps((block.handle, offsets, _parts())).hex()
    subprocess.run([sys.executable, "-c", code, arg], check=True, env=dict(os.environ))
    u = block.array(offsets[0], *_parts()[0])
    status = block.array(offsets[1], *_parts()[1])
    block.unlink()
    assert not block.path.exists()
    want = np.zeros((5, 3, 2))
    want[2:4] = 7.5
    np.testing.assert_array_equal(u, want)  # still mapped after the file is gone
    np.testing.assert_array_equal(status, np.arange(5))


def test_write_refuses_what_it_cannot_see():
    offsets, nbytes = shm.layout(_parts())
    block = shm.SharedBlock.create(nbytes)
    path, token, size = block.handle
    rows = [(offsets[1], np.arange(5))]
    try:
        assert not shm.write((path, bytes(16), size), rows)  # another block's token
        assert not shm.write((path, token, size + 64), rows)  # another size
        assert not shm.write((path + "-elsewhere", token, size), rows)  # another machine
        with pytest.raises(ValueError, match="outside the block"):
            shm.write(block.handle, [(nbytes - 8, np.arange(5))])
        assert shm.write(block.handle, rows)
        np.testing.assert_array_equal(block.array(offsets[1], *_parts()[1]), np.arange(5))
    finally:
        block.unlink()
    assert not shm.write(block.handle, rows)  # gone


def _full(fd, data, offset):
    raise OSError(errno.ENOSPC, "No space left on device")


def _plenty(path):
    class Free:
        f_bavail, f_frsize = 1 << 30, 4096

    return Free


def test_no_room_means_no_block(monkeypatch):
    before = set(shm.SHM_DIR.glob(shm.PREFIX + "*"))
    monkeypatch.setattr(shm, "_statvfs", _plenty)  # room by statvfs; the write fails
    monkeypatch.setattr(shm, "_pwrite", _full)
    assert shm.SharedBlock.create(1 << 20) is None
    assert set(shm.SHM_DIR.glob(shm.PREFIX + "*")) == before  # nothing left behind


def test_a_block_larger_than_the_room_left_is_not_made(monkeypatch):
    free = os.statvfs(shm.SHM_DIR)
    room = free.f_bavail * free.f_frsize
    assert shm.SharedBlock.create(room + (1 << 30)) is None

    class Small:
        f_bavail, f_frsize = 10, 4096

    monkeypatch.setattr(shm, "_statvfs", lambda path: Small)
    assert shm.SharedBlock.create(41_000) is None
    block = shm.SharedBlock.create(40_000)
    assert block is not None
    block.unlink()


def test_no_room_for_the_rows_means_they_are_returned(monkeypatch):
    offsets, nbytes = shm.layout(_parts())
    block = shm.SharedBlock.create(nbytes)
    try:
        monkeypatch.setattr(shm, "_pwrite", _full)
        assert not shm.write(block.handle, [(offsets[1], np.arange(5))])
        short = iter([8, 0])  # room for one int64, then none
        monkeypatch.setattr(shm, "_pwrite", lambda fd, data, offset: next(short))
        assert not shm.write(block.handle, [(offsets[1], np.arange(5))])
    finally:
        block.unlink()


def test_short_writes_are_resumed(monkeypatch):
    offsets, nbytes = shm.layout(_parts())
    block = shm.SharedBlock.create(nbytes)
    calls = []

    def seven_bytes(fd, data, offset):  # as a write interrupted after 7 bytes would
        calls.append(offset)
        return os.pwrite(fd, data[:7], offset)

    try:
        monkeypatch.setattr(shm, "_pwrite", seven_bytes)
        u = np.arange(12.0).reshape(2, 3, 2) + 0.5
        at = shm.rows_offset(offsets[0], *_parts()[0], 3)
        assert shm.write(block.handle, [(at, u), (offsets[1], np.arange(5)), (offsets[2], [])])
        assert len(calls) == -(-u.nbytes // 7) + -(-40 // 7)  # nothing for the empty piece
        np.testing.assert_array_equal(block.array(offsets[0], *_parts()[0])[3:5], u)
        np.testing.assert_array_equal(block.array(offsets[1], *_parts()[1]), np.arange(5))
    finally:
        block.unlink()


def test_blocks_of_dead_processes_are_swept(monkeypatch):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True, check=True).stdout.strip()  # fmt: skip
    stale = shm.SHM_DIR / f"{shm.PREFIX}{dead}-{'ab' * 16}"
    stale.write_bytes(b"x" * 64)
    mine = shm.SharedBlock.create(128)
    monkeypatch.setattr(shm, "_swept", False)
    other = shm.SharedBlock.create(128)
    try:
        assert not stale.exists()
        assert mine.path.exists()  # this process runs: its blocks stay
    finally:
        stale.unlink(missing_ok=True)
        mine.unlink()
        other.unlink()
