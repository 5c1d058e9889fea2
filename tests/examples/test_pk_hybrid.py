"""The pharmacometric hybrid end to end (slow)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


@pytest.mark.slow
def test_hybrid_recovers_parameters_and_generalises_to_an_unseen_dose():
    import pk_hybrid

    est, res = pk_hybrid.main([])
    for k in pk_hybrid.PHYS:
        assert est[k] == pytest.approx(pk_hybrid.TRUE[k], rel=0.05), k
    assert res[1.0][2] < 0.02  # trained dose: R within 2% of the truth
    assert res[0.1][2] < 0.05  # a dose ten times smaller, never seen in training
    assert res["effect_gap_observed"] < 0.3  # the effect curve where the data are (Smax 2.9)
