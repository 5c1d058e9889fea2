"""Goodness-of-fit plots, simulation and the visual predictive check."""

import matplotlib
import numpy as np
import pytest

from scichains import pk

from .models import oral_model, theoph_subset

matplotlib.use("Agg")


def test_gof_plot_draws_the_table(theoph_fit):
    import matplotlib.pyplot as plt

    model, data, res = theoph_fit
    tab = pk.residuals(model, data, res)
    fig = pk.gof_plot(tab)
    axes = fig.axes
    assert len(axes) == 4
    np.testing.assert_array_equal(axes[0].collections[0].get_offsets()[:, 0], tab["PRED"])
    np.testing.assert_array_equal(axes[1].collections[0].get_offsets()[:, 1], tab["DV"])
    np.testing.assert_array_equal(axes[2].collections[0].get_offsets()[:, 1], tab["CWRES"])
    plt.close(fig)
    with pytest.raises(ValueError, match="needs a CWRES column"):
        pk.gof_plot({"DV": [1.0], "PRED": [1.0], "IPRED": [1.0], "TIME": [0.0]})


def test_simulation_has_the_model_s_mean_and_residual_spread():
    # omega near zero: replicates scatter around PRED with the additive sd
    model = oral_model(pk.Additive(0.5))
    data = theoph_subset(4)
    x = model.pack(omega=[1e-10, 1e-10, 1e-10])
    sims = pk.simulate(model, data, x, 400, seed=1)
    pred = np.concatenate(pk.PopulationObjective(model, data).predict(x))
    assert sims.shape == (400, pred.size)
    z = (sims.mean(axis=0) - pred) / (0.5 / np.sqrt(400))
    assert np.max(np.abs(z)) < 4.5
    assert np.std(sims - pred) == pytest.approx(0.5, rel=0.03)
    np.testing.assert_array_equal(sims, pk.simulate(model, data, x, 400, seed=1))


def test_vpc_of_the_theophylline_fit(theoph_fit):
    import matplotlib.pyplot as plt

    model, data, res = theoph_fit
    v = pk.vpc(model, data, res, n_sim=100, bins=6)
    assert v.observed.shape == (6, 3) and v.simulated_low.shape == (6, 3)
    assert np.all(v.simulated_low <= v.simulated_median + 1e-12)
    assert np.all(v.simulated_median <= v.simulated_high + 1e-12)
    inside = (v.observed >= v.simulated_low) & (v.observed <= v.simulated_high)
    # an adequate model: the observed percentiles lie in the simulated 95% intervals
    assert inside[:, 1].sum() >= 5 and inside.sum() >= 14
    ax = v.plot()
    assert len(ax.lines) == 3
    plt.close(ax.figure)
