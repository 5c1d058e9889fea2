"""``scichains`` / ``python -m scichains``: list and run the examples and benchmarks.

The scripts live in the source tree (``examples/``, ``benchmarks/``), found next to the
package (an editable install, as ``make`` makes) or under the current directory.
"""

from __future__ import annotations

import argparse
import ast
import os
import runpy
import sys
from pathlib import Path


def _roots() -> list[Path]:
    here = Path(__file__).resolve().parent
    cands = [here.parent.parent, Path.cwd()]
    out = []
    for c in cands:
        if (c / "examples").is_dir() and c not in out:
            out.append(c)
    return out


def scripts() -> dict[str, tuple[str, Path]]:
    """``{name: (kind, path)}`` for every example and benchmark script."""
    found = {}
    for root in _roots():
        for kind in ("examples", "benchmarks"):
            d = root / kind
            if not d.is_dir():
                continue
            for p in sorted(d.glob("*.py")):
                if p.name.startswith("_"):
                    continue
                found.setdefault(p.stem, (kind, p))
    return found


def _summary(path: Path) -> str:
    try:
        doc = ast.get_docstring(ast.parse(path.read_text()))
    except (OSError, SyntaxError):
        doc = None
    return (doc or "").strip().splitlines()[0] if doc else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="scichains", description="List and run the scichains examples and benchmarks."
    )
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("list", help="list the examples and benchmarks")
    run = sub.add_parser("run", help="run one of them (arguments after its name go to it)")
    run.add_argument("name")
    run.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    found = scripts()
    if args.cmd in (None, "list"):
        if not found:
            print("no examples/ or benchmarks/ found (run from a scichains source checkout)")
            return 1
        for kind in ("examples", "benchmarks"):
            print(f"{kind}:")
            for name, (k, path) in found.items():
                if k == kind:
                    print(f"  {name:24s} {_summary(path)}")
        print("run one with: python -m scichains run NAME [ARGS...]")
        return 0
    if args.name not in found:
        print(f"unknown script {args.name!r}; `python -m scichains list` shows them")
        return 2
    _, path = found[args.name]
    saved = (list(sys.argv), list(sys.path), os.getcwd())
    sys.argv = [str(path), *args.args]
    sys.path.insert(0, str(path.parent))
    os.chdir(path.parent.parent)
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv[:], sys.path[:] = saved[0], saved[1]
        os.chdir(saved[2])
    return 0
