"""Theophylline with a network in the dynamics (DeepPumas style: a random effect as a network
input, anchored at the dose), by FOCE-I with an L2 prior on the weights (slow: two fits of
about a minute each, and the classical fit)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


@pytest.mark.slow
def test_network_in_the_dynamics_against_classical_and_across_seeds():
    import theophylline as th
    import theophylline_network as tn

    from scichains import pk

    rows, fits, spread, models = tn.main(["--seeds", "0", "1"], log=lambda *a: None)
    c, h = rows["classical"], rows["network"]
    assert abs(c["ofv"] - 116.804) < 0.1  # nlmixr2's FOCE-I objective of the classical model
    for f in fits:
        assert f.success and f.status == 0, f.message
        assert np.isfinite(f.ofv) and np.isfinite(f.penalty)
        # zero weights give the classical model (the anchor zeroes the term), so the
        # minimised OFV + prior cannot end above the classical OFV (0.01: BFGS's tolerance)
        assert f.ofv + f.penalty <= c["ofv"] + 0.01
    # measured: OFV 116.80 -> 71.16, AIC 130.80 -> 109.16 (k = 7 -> 19)
    assert h["aic"] < c["aic"] - 10
    # identifiability: the typical values do not depend on the initial weights (5%)
    assert spread is not None and np.all(spread < 0.05), spread
    # the wiring, independently: zero weights reproduce the classical fit's OFV
    data = pk.theophylline()
    f0 = pk.fit(th.classical_model(), data)
    model = models[0]
    x = np.concatenate([f0.x[:3], np.zeros(model.p - 3), f0.x[3:]])
    assert pk.PopulationObjective(model, data).value(x) == pytest.approx(f0.ofv, abs=1e-6)
