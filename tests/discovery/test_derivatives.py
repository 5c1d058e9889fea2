"""discovery.derivatives against analytic derivatives: exactness of finite differences on
polynomials, each method's error on clean and noisy sines (even and irregular times), the
total-variation method on a kink, and the error messages."""

import numpy as np
import pytest

from scichains.discovery import derivatives

METHODS = ["finite_difference", "smoothed_finite_difference", "savgol", "spline", "tv", "kalman"]


def _times(m, irregular, seed=0):
    if not irregular:
        return np.linspace(0.0, 2 * np.pi, m)
    rng = np.random.default_rng(seed)
    # gaps between 0.5 and 1.5 times the mean: irregular, never nearly coincident
    gaps = rng.uniform(0.5, 1.5, m - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)]) * (2 * np.pi / gaps.sum())


def _rms(a):
    return float(np.sqrt(np.mean(np.square(a))))


@pytest.mark.parametrize("irregular", [False, True])
def test_finite_differences_are_exact_for_quadratics(irregular):
    t = _times(40, irregular)
    X = np.stack([3.0 - 2.0 * t + 0.5 * t**2, t**2], axis=1)
    dX = np.stack([-2.0 + t, 2 * t], axis=1)
    np.testing.assert_allclose(derivatives(t, X, "finite_difference"), dX, rtol=0, atol=1e-11)
    # a cubic is not exact, but the error is second order: it drops ~4x when h halves
    errs = [
        _rms(derivatives(tt, tt**3, "finite_difference") - 3 * tt**2)
        for tt in (_times(41, irregular), _times(81, irregular))
    ]
    assert 3.0 < errs[0] / errs[1] < 5.0


@pytest.mark.parametrize("irregular", [False, True])
def test_local_polynomials_are_exact_for_their_degree(irregular):
    t = _times(60, irregular)
    x = 1.0 + t - 0.3 * t**2 + 0.05 * t**3
    dx = 1.0 - 0.6 * t + 0.15 * t**2
    np.testing.assert_allclose(derivatives(t, x, "savgol", window=9, order=3), dx, atol=1e-9)


# bounds on the RMS error of cos(t) from sin(t) sampled at 200 times on [0, 2 pi]: about 3x
# the errors measured (benchmarks/discovery_noise.py prints them)
CLEAN = {
    "finite_difference": 1e-3,
    "smoothed_finite_difference": 2e-2,
    "savgol": 3e-3,
    "spline": 3e-4,
    "tv": 2e-2,
    "kalman": 1.5e-3,  # measured 3.7e-4 / 4.0e-4 (even / irregular)
}
NOISY = {  # 1% noise
    "finite_difference": 1.0,
    "smoothed_finite_difference": 6e-2,
    "savgol": 6e-2,
    "spline": 3e-2,
    "tv": 1e-1,
    "kalman": 8e-2,  # measured 2.4e-2 (the spline: 9.3e-3)
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("irregular", [False, True])
def test_each_method_on_a_sine(method, irregular):
    t = _times(200, irregular)
    x = np.sin(t)
    assert _rms(derivatives(t, x, method) - np.cos(t)) < CLEAN[method]
    rng = np.random.default_rng(1)
    noisy = x + 0.01 * rng.standard_normal(t.size)
    assert _rms(derivatives(t, noisy, method) - np.cos(t)) < NOISY[method]


def test_noise_is_amplified_by_plain_differences_and_smoothed_by_the_spline():
    t = _times(200, False)
    rng = np.random.default_rng(2)
    noisy = np.sin(t) + 0.01 * rng.standard_normal(t.size)
    fd = _rms(derivatives(t, noisy, "finite_difference") - np.cos(t))
    spline = _rms(derivatives(t, noisy, "spline") - np.cos(t))
    # white noise s through central differences: about s / (sqrt(2) h), h = 2 pi / 199
    assert fd == pytest.approx(0.01 / (np.sqrt(2) * (2 * np.pi / 199)), rel=0.3)
    assert spline < fd / 10


def test_a_chosen_spline_penalty_and_savgol_window_are_used():
    t = _times(100, False)
    x = np.sin(t)
    stiff = derivatives(t, x, "spline", lam=1e3)  # nearly a straight line
    assert np.ptp(stiff) < 0.1
    wide = derivatives(t, x, "savgol", window=99, order=1)
    assert np.ptp(wide) < 0.5


def test_total_variation_keeps_a_kink():
    # x = |t - 1|: the derivative jumps from -1 to 1; TV finds both plateaus through noise
    t = np.linspace(0.0, 2.0, 201)
    rng = np.random.default_rng(3)
    x = np.abs(t - 1.0) + 0.01 * rng.standard_normal(t.size)
    u = derivatives(t, x, "tv", alpha=1e-4)
    away = np.abs(t - 1.0) > 0.15
    assert _rms(u[away] - np.sign(t[away] - 1.0)) < 0.1


def test_the_kalman_smoother_is_the_smoothing_spline_of_the_same_penalty():
    # the RTS smoother of an integrated random walk (measurement variance / process intensity
    # = alpha) has the natural cubic smoothing spline with lam = alpha as its mean (Wahba
    # 1978); SciPy's make_smoothing_spline is an independent implementation of the latter
    from scipy.interpolate import make_smoothing_spline

    t = _times(200, True)
    rng = np.random.default_rng(0)
    x = np.sin(t) + 0.01 * rng.standard_normal(t.size)
    for alpha in (1e-4, 1e-2, 1.0):
        spline = make_smoothing_spline(t, x, lam=alpha).derivative()(t)
        np.testing.assert_allclose(derivatives(t, x, "kalman", alpha=alpha), spline, atol=2e-6)


def test_the_kalman_likelihood_is_the_restricted_gaussian_likelihood():
    # the likelihood maximised over q (diffuse start, noise variance profiled out) against
    # the dense one: the data's contrasts orthogonal to a straight line, covariance
    # q K + I with K the integrated Wiener kernel; differences between two values of q agree
    from scipy.linalg import null_space

    from scichains.discovery._derivatives import _kalman_pass

    rng = np.random.default_rng(1)
    m = 40
    s = np.r_[0.0, np.sort(rng.uniform(0.0, 1.0, m - 1))]
    y = np.sin(5 * s) + 0.1 * rng.standard_normal(m)
    lo, hi = np.minimum.outer(s, s), np.maximum.outer(s, s)
    K = lo**2 * (3 * hi - lo) / 6
    Z = null_space(np.stack([np.ones(m), s]))

    def dense(q):
        C = Z.T @ (q * K + np.eye(m)) @ Z
        a = Z.T @ y
        return (m - 2) * np.log(a @ np.linalg.solve(C, a) / (m - 2)) + np.linalg.slogdet(C)[1]

    for q1, q2 in ((1e2, 1e4), (1e3, 1e6)):
        want = dense(q1) - dense(q2)
        got = _kalman_pass(s, y, q1, False) - _kalman_pass(s, y, q2, False)
        assert got == pytest.approx(want, rel=1e-7)


def test_columns_and_trajectories():
    t = _times(50, True)
    X = np.stack([np.sin(t), np.cos(t)], axis=1)
    D = derivatives(t, X, "savgol")
    assert D.shape == (50, 2)
    np.testing.assert_allclose(D[:, 0], derivatives(t, X[:, 0], "savgol"))
    t2 = _times(30, False)
    out = derivatives([t, t2], [X, np.sin(t2)], "finite_difference")
    assert [o.shape for o in out] == [(50, 2), (30,)]
    np.testing.assert_array_equal(out[1], derivatives(t2, np.sin(t2), "finite_difference"))


def test_bad_input_raises_clearly():
    t = np.linspace(0.0, 1.0, 10)
    x = np.sin(t)
    with pytest.raises(ValueError, match="unknown method 'wavelet'.*finite_difference.*kalman"):
        derivatives(t, x, "wavelet")
    with pytest.raises(ValueError, match="alpha must be a positive number"):
        derivatives(t, x, "kalman", alpha=0.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        derivatives(t[::-1], x)
    with pytest.raises(ValueError, match="strictly increasing"):
        derivatives(np.r_[t[:5], t[4:9]], x)
    with pytest.raises(ValueError, match=r"shape \(10,\) or \(10, n\)"):
        derivatives(t, x[:9])
    with pytest.raises(ValueError, match="NaN"):
        derivatives(t, np.r_[x[:9], np.nan])
    with pytest.raises(ValueError, match="t has NaN"):
        derivatives(np.r_[t[:9], np.nan], x)
    with pytest.raises(ValueError, match="at least 3"):
        derivatives(t[:2], x[:2])
    with pytest.raises(TypeError, match="'spline' takes the options \\['lam'\\]"):
        derivatives(t, x, "spline", window=5)
    with pytest.raises(ValueError, match="window"):
        derivatives(t, x, "savgol", window=11)
    with pytest.raises(ValueError, match="order"):
        derivatives(t, x, "savgol", window=5, order=5)
    with pytest.raises(ValueError, match="lam"):
        derivatives(t, x, "spline", lam=-1.0)
    with pytest.raises(ValueError, match="alpha"):
        derivatives(t, x, "tv", alpha=0.0)
    with pytest.raises(ValueError, match="list of trajectories"):
        derivatives([t, t], x)
