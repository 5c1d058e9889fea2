"""Theophylline population fits."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def test_classical_population_fit_matches_the_textbook_estimates():
    import theophylline as th

    pop, z, J = th.fit(th.classical(), np.log([1.5, 0.04, 0.5]), log=lambda *a: None)
    ka, cl, v = np.exp(pop.split(z)[0])
    # published fits of this data set: ka about 1.5 1/h, CL about 0.04 L/h/kg, V about 0.45-0.5 L/kg
    assert 1.2 < ka < 2.0 and 0.033 < cl < 0.047 and 0.4 < v < 0.55
    r = np.concatenate(th.residuals(pop, z))
    assert np.sqrt(np.mean(r**2)) < 0.8  # mg/L


@pytest.mark.slow
def test_hybrid_absorption_fits_better():
    import theophylline as th

    rows = th.main(["--maxiter", "300"])
    (_, J_a, *_), (_, J_b, *_) = rows
    assert J_b < J_a
