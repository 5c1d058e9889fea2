"""The SIR example: a network in place of the infection term, then discovery of beta S I."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def test_quick_smoke_run():
    """--quick: a short training and the whole discovery, ending in a SymbolicModel that
    solves past the data."""
    import sir_ude

    found, err = sir_ude.main(["--quick"])
    ((best, beta, ok),) = found
    assert best.n_terms >= 1
    assert np.isfinite(best.sse)
    assert np.isfinite(err)


@pytest.mark.slow
def test_recovers_beta_s_i_for_four_of_five_seeds():
    import sir_ude

    found, _ = sir_ude.main(["--seeds", "5"])
    assert sum(ok for _, _, ok in found) >= 4, [b.equations() for b, _, _ in found]
    for _, beta, ok in found:
        if ok:
            assert beta == pytest.approx(sir_ude.BETA, rel=0.05)
