"""Every ``python`` code block of the documentation's pages runs against the current package.

Each page's blocks run in order in one fresh interpreter (a page's later blocks use its
earlier ones), from a temporary directory. A block whose first line is ``# not run: <why>``
is skipped (e.g. the SLURM recipe); a block with ``if __name__ == "__main__":`` runs as a
script of its own (Dask's worker processes import the main module). Slow: the first run
compiles the kernels the pages use.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_ext" not in p.parts)
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _scripts(page: Path) -> list[str]:
    blocks = [b for b in BLOCK.findall(page.read_text()) if not b.startswith("# not run")]
    alone = [b for b in blocks if 'if __name__ == "__main__":' in b]
    together = "\n".join(b for b in blocks if b not in alone)
    return ([together] if together.strip() else []) + alone


def test_the_pages_have_code_and_skips_say_why():
    assert any(_scripts(p) for p in PAGES)
    for page in PAGES:
        for b in BLOCK.findall(page.read_text()):
            if b.startswith("# not run"):
                assert re.match(r"# not run: \S", b), f"{page.name}: a skipped block says why"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT / "docs")) for p in PAGES])
def test_the_code_on_the_page_runs(page, tmp_path):
    scripts = _scripts(page)
    if not scripts:
        pytest.skip("no python code on this page")
    if any("dask" in s for s in scripts):
        pytest.importorskip("dask.distributed", reason="pip install scichains[dask]")
    for i, code in enumerate(scripts):
        script = tmp_path / f"page_{i}.py"
        script.write_text(code)
        res = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "MPLBACKEND": "Agg"},
        )
        assert res.returncode == 0, f"{page.name}:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
