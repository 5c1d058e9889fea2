"""One numbering of status codes: the compiled kernels' constants are ReturnCode's values."""

import re
from pathlib import Path

import scichains
from scichains.ode import ReturnCode, _codes


def test_kernel_constants_are_the_return_codes():
    for code in ReturnCode:
        assert getattr(_codes, code.name) == int(code)
    assert _codes.GROW not in {int(c) for c in ReturnCode}


def test_no_module_numbers_the_codes_itself():
    # e.g. "SINGULAR, JACOBIAN_NONFINITE = 6, 7" or "NEWTON_FAILURE = 8" outside _codes.py
    names = "|".join(c.name for c in ReturnCode) + "|GROW"
    pattern = re.compile(rf"^\s*(?:({names})\s*,\s*)*({names})\s*=\s*[-0-9]", re.M)
    root = Path(scichains.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name not in ("_codes.py", "_solution.py") and pattern.search(path.read_text())
    ]
    assert offenders == []
