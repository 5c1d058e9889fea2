"""The SIMD width: chosen from the CPU, overridable, and every width gives correct gradients.

The portable 16-byte path (SSE/NEON machines) and the 64-byte one (AVX-512) are forced with
``SCICHAINS_VECTOR_BYTES`` in a fresh process without the on-disk cache (so this machine's
cache is neither used nor dropped), and checked against a plain numpy gradient.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scichains import _jit
from scichains.nn import _simd

_CHECK = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
import scichains as sc
from scichains import _jit
from scichains.nn import _chain, _simd
from nn.reference import valgrad as ref_valgrad

assert _jit.VECTOR_BYTES == {width} and _simd.MAX_LANES == {width} // 4, _simd.MAX_LANES
print("tile", _chain.TILE)
rng = np.random.default_rng(0)
for dtype, tol in ((np.float32, 2e-4), (np.float64, 1e-10)):
    chain = sc.SimpleChain(3, sc.Dense(13, "tanh"), sc.Dense(2))
    p = chain.init_params(seed=1, dtype=dtype)
    # 301 samples on one thread: full register blocks, a one-vector tail and a scalar tail
    X = rng.standard_normal((301, 3)).astype(dtype)
    Y = rng.standard_normal((301, 2)).astype(dtype)
    cwl = chain.add_loss(sc.SquaredLoss(Y))
    g = np.zeros_like(p)
    val = sc.valgrad(cwl, X, p, g, threads=1)
    rval, rg, _ = ref_valgrad(p.astype(np.float64), X, [3, 13, 2], ["tanh", "identity"],
                              "squared", Y.astype(np.float64))
    assert abs(val - rval) <= tol * abs(rval), (val, rval)
    err = np.abs(g - rg).max() / np.abs(rg).max()
    assert err <= tol, (dtype, err)
print("ok")
"""


def _run(width: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, SCICHAINS_VECTOR_BYTES=width, SCICHAINS_DISABLE_CACHE="1")
    code = _CHECK.format(tests=str(Path(__file__).resolve().parents[1]), width=width)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout
    )


@pytest.mark.whitebox  # private: scichains._jit's CPU features and cache stamp
def test_host_choice():
    features = set(_jit._cpu_features().split(","))
    if os.environ.get("SCICHAINS_VECTOR_BYTES"):
        pytest.skip("the width is forced in this environment")
    assert _jit.VECTOR_BYTES == (32 if "+avx2" in features else 16)
    assert _simd.VEC_BYTES == _jit.VECTOR_BYTES


# each width compiles every layer kernel again in a subprocess (~70 s cold): slow tests
@pytest.mark.parametrize("width", [pytest.param(w, marks=pytest.mark.slow) for w in ("16", "64")])
def test_forced_width_gives_correct_gradients(width):
    r = _run(width)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok"), r.stdout
    assert f"tile {264 if width == '16' else 288}" in r.stdout


def test_bad_width_is_refused():
    env = dict(os.environ, SCICHAINS_VECTOR_BYTES="48", SCICHAINS_DISABLE_CACHE="1")
    r = subprocess.run(
        [sys.executable, "-c", "import scichains"], capture_output=True, text=True, env=env
    )
    assert r.returncode != 0
    assert "SCICHAINS_VECTOR_BYTES must be 16, 32 or 64, got '48'" in r.stderr


@pytest.mark.whitebox  # private: scichains._jit's CPU features and cache stamp
def test_cache_written_with_another_width_is_dropped(tmp_path, monkeypatch):
    import hashlib

    import numba

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    nn_dir = Path(_jit.__file__).resolve().parent / "nn"
    # where numba puts the cache of nn/*.py under NUMBA_CACHE_DIR
    folder = tmp_path / f"nn_{hashlib.sha1(str(nn_dir).encode()).hexdigest()}"
    folder.mkdir()
    stale = folder / "_batch.valgrad_batch-1.py311.nbi"
    stale.write_bytes(b"x")
    stamp = tmp_path / "scichains-sources.sha256"
    other = 16 if _jit.VECTOR_BYTES != 16 else 32
    stamp.write_text(f"{_jit.SOURCE_DIGEST} vector-bytes={other}")
    _jit._drop_stale_cache()
    assert not stale.exists()
    assert stamp.read_text() == f"{_jit.SOURCE_DIGEST} vector-bytes={_jit.VECTOR_BYTES}"
    # same sources and width: the cache stays
    stale.write_bytes(b"x")
    _jit._drop_stale_cache()
    assert stale.exists()
