"""The GCV smoothing spline's fast route (discovery/_gcv.py) against SciPy's
``make_smoothing_spline``: the same fitted values at a given penalty, the same GCV score as
the hat matrix built column by column from SciPy, and the same spline where SciPy chooses the
penalty itself."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.interpolate import make_smoothing_spline

from scichains.discovery import _gcv


def _times(m: int, irregular: bool, seed: int = 0) -> np.ndarray:
    if not irregular:
        return np.linspace(0.0, 10.0, m)
    rng = np.random.default_rng(seed)
    return np.concatenate([[0.0], np.cumsum(rng.uniform(0.3, 1.7, m - 1))])


@pytest.mark.parametrize("m", [5, 31, 120])
@pytest.mark.parametrize("irregular", [False, True])
def test_eigen_route_gives_scipys_fit_at_a_given_penalty(m, irregular):
    t = _times(m, irregular)
    y = np.sin(t) + 0.1 * np.random.default_rng(1).standard_normal(m)
    d, U = _gcv.reinsch_eigen(t)
    np.testing.assert_allclose(U.T @ U, np.eye(m), atol=1e-12)
    for lam in (1e-3, 0.3, 20.0):
        mine = U @ ((U.T @ y) / (1.0 + lam * d))
        np.testing.assert_allclose(mine, make_smoothing_spline(t, y, lam=lam)(t), atol=1e-9)


def test_score_equals_the_hat_matrix_built_from_scipy():
    t = _times(25, True, seed=3)
    y = np.exp(-t / 8) + 0.02 * np.random.default_rng(2).standard_normal(t.size)
    d, U = _gcv.reinsch_eigen(t)
    m = t.size
    for lam in (0.01, 1.0, 15.0):
        S = np.column_stack([make_smoothing_spline(t, e, lam=lam)(t) for e in np.eye(m)])
        r = y - S @ y
        want = (r @ r / m) / (1.0 - np.trace(S) / m) ** 2
        assert _gcv.gcv_score(lam, d, U.T @ y) == pytest.approx(want, rel=1e-8)


@pytest.mark.parametrize("m", [8, 31, 101, 250])
@pytest.mark.parametrize("irregular", [False, True])
def test_gcv_splines_match_scipys_choice(m, irregular):
    t = _times(m, irregular, seed=m)
    rng = np.random.default_rng(m)
    X = np.column_stack(
        [
            np.sin(t) + 0.05 * rng.standard_normal(m),
            np.exp(-t / 3) + 0.01 * rng.standard_normal(m),
            t**2 + rng.standard_normal(m),
        ]
    )
    mine = _gcv.smoothing_splines(t, X, None)
    for j, spline in enumerate(mine):
        ref = make_smoothing_spline(t, X[:, j])
        scale = np.std(X[:, j])
        np.testing.assert_allclose(spline(t), ref(t), atol=2e-6 * scale)
        dref = ref.derivative()(t)
        np.testing.assert_allclose(spline.derivative()(t), dref, atol=2e-5 * np.std(dref) + 1e-12)


def test_ill_conditioned_and_long_records_take_scipys_search(monkeypatch):
    calls = []
    monkeypatch.setattr(_gcv, "gcv_penalty", lambda d, z: calls.append(1) or 1.0)
    rng = np.random.default_rng(0)
    # a cluster of samples 1e-4 apart among samples 1 apart: the eigenvalues spread > 1e10
    t = np.sort(np.concatenate([np.arange(40.0), 5.5 + 1e-4 * np.arange(6)]))
    X = np.sin(t)[:, None] + 0.01 * rng.standard_normal((t.size, 1))
    d, _ = _gcv.reinsch_eigen(t)
    assert d[-1] > _gcv.MAX_SPREAD * d[2]
    (spline,) = _gcv.smoothing_splines(t, X, None)
    np.testing.assert_array_equal(spline.c, make_smoothing_spline(t, X[:, 0]).c)
    t = np.linspace(0.0, 1.0, _gcv.DENSE_LIMIT + 1)
    _gcv.smoothing_splines(t, np.sin(t)[:, None], None)
    assert calls == []
    _gcv.smoothing_splines(t[:50], np.sin(t[:50])[:, None], None)
    assert calls == [1]


@pytest.mark.parametrize("bad", [-1.0, "a", [1.0, 2.0], float("nan"), np.inf, True])
def test_bad_penalty_is_refused(bad):
    t = np.linspace(0, 1, 10)
    with pytest.raises(ValueError, match="lam must be"):
        _gcv.smoothing_splines(t, np.sin(t)[:, None], bad)


def test_samples_far_apart_in_the_units_of_t():
    # every lam d tiny: 1 - tr(S)/m must not cancel to zero (it did: ZeroDivisionError)
    t = np.linspace(0.0, 10.0, 31) * 1e8
    y = np.sin(t / 1e8) + 0.05 * np.random.default_rng(0).standard_normal(t.size)
    (spline,) = _gcv.smoothing_splines(t, y[:, None], None)
    np.testing.assert_allclose(spline(t), make_smoothing_spline(t, y)(t), atol=1e-6)
