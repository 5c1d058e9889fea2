"""The griffe extension that reads scichains' docstrings for the API reference
(docs/_ext/scichains_docstrings.py) keeps what each item says and where."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("griffe", reason="the docs extra is not installed: pip install -e '.[docs]'")

_PATH = Path(__file__).resolve().parents[2] / "docs" / "_ext" / "scichains_docstrings.py"
_spec = importlib.util.spec_from_file_location("scichains_docstrings", _PATH)
ext = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ext)

DOC = """Solve it, see :class:`ODEProblem`.

Parameters
----------
u0 : array of shape ``(n,)``, the initial state
rtol, atol : tolerances
bias : bool
    whether the layer has a bias
tspan : (t0, t1), integrated
continued without indentation

Text after the items, about :func:`solve`.

Returns
-------
Solution"""

WANT = """Solve it, see `ODEProblem`.

Text after the items, about `solve`.

Parameters
----------
u0
    array of shape ``(n,)``, the initial state
rtol
    tolerances
atol
    tolerances
bias : bool
    whether the layer has a bias
tspan
    (t0, t1), integrated
    continued without indentation

Returns
-------
Solution"""


def test_items_prose_and_roles_are_rewritten():
    assert ext.rewrite(DOC) == WANT


def test_a_docstring_without_sections_is_unchanged():
    text = "One line.\n\nA paragraph: with a colon, ``code`` and a list:\n\n- a : b"
    assert ext.rewrite(text) == text
