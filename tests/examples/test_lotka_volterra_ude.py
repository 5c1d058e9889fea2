"""The missing-physics pipeline end to end (slow: about a minute with compilation)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


@pytest.mark.slow
def test_recovers_the_interaction_terms():
    import lotka_volterra_ude as lv

    Xi, err = lv.main([])
    names = lv.FEATURES
    support = {(names[i], j) for i, j in zip(*np.nonzero(Xi))}
    assert support == {("x*y", 0), ("x*y", 1)}
    assert Xi[names.index("x*y"), 0] == pytest.approx(-0.9, rel=0.15)
    assert Xi[names.index("x*y"), 1] == pytest.approx(0.8, rel=0.15)
    assert np.isfinite(err)
