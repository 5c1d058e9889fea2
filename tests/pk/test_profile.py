"""Log-likelihood profiles (pk.profile): the interval's ends are where the refitted OFV rises
by the chi-square quantile, and they agree with the Wald interval of the covariance step for a
well-determined parameter."""

import matplotlib
import numpy as np
import pytest

from scichains import pk

from .test_covariate_search import one_compartment, study  # noqa: F401 - the fixture

matplotlib.use("Agg")


def test_profile_of_a_typical_value_and_a_residual_sd(study):  # noqa: F811
    model = one_compartment(False)
    fit = pk.fit(model, study)
    prof = pk.profile(model, study, fit, "tcl")
    print(prof.lower, prof.estimate, prof.upper, prof.values.size)
    assert prof.lower < fit.theta["tcl"] < prof.upper and not prof.message
    assert prof.threshold == pytest.approx(3.8415, abs=1e-4)
    # at each end a fit with the parameter held there is 3.84 above the minimum
    for end in (prof.lower, prof.upper):
        held = pk.fit(model, study, x0=fit.x, fix={"tcl": end})
        assert held.ofv - fit.ofv == pytest.approx(prof.threshold, abs=0.02)
    # log CL is well determined here: the interval is near the Wald interval
    se = pk.covariance(model, study, fit).se_theta[0]
    half = (prof.upper - prof.lower) / 2
    assert half == pytest.approx(1.96 * se, rel=0.15)
    assert np.all(np.diff(prof.values) > 0) and prof.ofv.min() >= fit.ofv - 1e-3
    # a standard deviation stays positive; its interval lies around the estimate
    sd = pk.profile(model, study, fit, "prop", level=0.9)
    assert 0 < sd.lower < fit.sd["prop"] < sd.upper
    assert sd.threshold == pytest.approx(2.7055, abs=1e-4)
    ax = prof.plot()
    assert ax.get_xlabel() == "tcl" and len(ax.lines) >= 4


def test_progress_lines_name_the_profile(study, capsys):  # noqa: F811
    model = one_compartment(False)
    fit = pk.fit(model, study)
    pk.profile(model, study, fit, "tv", progress=True)
    err = capsys.readouterr().err
    assert "profile of tv:" in err and "unconverged" in err


def test_bad_profiles_are_named(study):  # noqa: F811
    model = one_compartment(False)
    fake = pk.FitResult.__new__(pk.FitResult)  # the estimates only: nothing is fitted
    fake.theta, fake.sd = {"tcl": 1.0, "tv": 3.0}, {"prop": 0.1}
    fake.omega = np.diag([0.04, 0.02])
    with pytest.raises(ValueError, match="no parameter 'ka'"):
        pk.profile(model, study, fake, "ka")
    with pytest.raises(ValueError, match="level"):
        pk.profile(model, study, fake, "tcl", level=95)
    with pytest.raises(TypeError, match="fix"):
        pk.profile(model, study, fake, "tcl", fix=["tv"])
