"""The population PK/PD hybrid (slow: about a minute)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


@pytest.mark.slow
def test_population_map_recovers_typical_values():
    import pk_hybrid
    import pk_population

    est, corr = pk_population.main([])
    for k in pk_hybrid.PHYS:
        assert est[k] == pytest.approx(pk_hybrid.TRUE[k], rel=0.1), k
    assert min(corr) > 0.8  # the estimated random effects track the true ones
