"""Time a snippet in a fresh Python process (optionally with an empty numba cache)."""

from __future__ import annotations

import os
import subprocess
import sys


def seconds_in_fresh_process(code: str, cache_dir: str | None = None) -> float:
    """Run ``code``, which prints a number of seconds as its last line; return that number.

    ``cache_dir`` points numba at another cache directory (an empty one: a cold cache).
    """
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])
