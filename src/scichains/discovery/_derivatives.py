"""Derivatives of sampled trajectories: finite differences, smoothed finite differences,
Savitzky-Golay (local polynomial least squares), smoothing splines and total-variation
regularised differentiation, all on irregular times."""

from __future__ import annotations

import numpy as np

METHODS = ("finite_difference", "smoothed_finite_difference", "savgol", "spline", "tv", "kalman")


def _check_times(t) -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 1:
        raise ValueError(f"t must have shape (m,), got {t.shape}")
    if t.size < 3:
        raise ValueError(f"need at least 3 samples to estimate derivatives, got {t.size}")
    if not np.all(np.isfinite(t)):
        raise ValueError("t has NaN or infinite values")
    if not np.all(np.diff(t) > 0):
        i = int(np.flatnonzero(np.diff(t) <= 0)[0])
        raise ValueError(
            f"t must be strictly increasing: t[{i}] = {t[i]!r}, t[{i + 1}] = {t[i + 1]!r}"
        )
    return t


def _check_samples(t, X) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(t, X as (m, n), whether X was a vector)``, with the shape and value checks."""
    t = _check_times(t)
    X = np.asarray(X, dtype=np.float64)
    vector = X.ndim == 1
    if vector:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] != t.size:
        raise ValueError(
            f"X must have shape ({t.size},) or ({t.size}, n) to match t, got {X.shape}"
        )
    if not np.all(np.isfinite(X)):
        rows = np.flatnonzero(~np.all(np.isfinite(X), axis=1))
        raise ValueError(f"X has NaN or infinite values (rows {rows[:5].tolist()}...)")
    return t, X, vector


def trapezoid_weights(t: np.ndarray) -> np.ndarray:
    """Weights ``w`` (shape ``(m,)``) of the trapezoidal rule on the samples ``t``:
    ``integral f dt ~ w @ f(t)``."""
    h = np.diff(t)
    w = np.zeros(t.size)
    w[:-1] += h / 2
    w[1:] += h / 2
    return w


def finite_difference(t: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Second-order finite differences on irregular times (``X``: ``(m, n)``): the derivative
    of the parabola through each point and its two neighbours (one-sided at the ends), exact
    for quadratics."""
    h = np.diff(t)
    D = np.empty_like(X)
    h0, h1 = h[:-1, None], h[1:, None]
    D[1:-1] = (
        -h1 / (h0 * (h0 + h1)) * X[:-2]
        + (h1 - h0) / (h0 * h1) * X[1:-1]
        + h0 / (h1 * (h0 + h1)) * X[2:]
    )
    a, b = h[0], h[1]
    D[0] = -(2 * a + b) / (a * (a + b)) * X[0] + (a + b) / (a * b) * X[1] - a / (b * (a + b)) * X[2]
    a, b = h[-1], h[-2]
    D[-1] = (
        (2 * a + b) / (a * (a + b)) * X[-1] - (a + b) / (a * b) * X[-2] + a / (b * (a + b)) * X[-3]
    )
    return D


def _local_polynomial(t: np.ndarray, X: np.ndarray, window: int, order: int, deriv: int):
    """Value (``deriv=0``) or first derivative (``deriv=1``) at each sample of the polynomial of
    degree ``order`` fitted by least squares to the ``window`` nearest samples in index (the
    window centred on the sample, shifted inwards at the ends)."""
    m = t.size
    if not (isinstance(window, (int, np.integer)) and 3 <= window <= m):
        raise ValueError(f"window must be an integer number of samples in [3, {m}], got {window!r}")
    if not (isinstance(order, (int, np.integer)) and 1 <= order < window):
        raise ValueError(
            f"order must be an integer in [1, window - 1 = {window - 1}], got {order!r}"
        )
    out = np.empty_like(X)
    half = window // 2
    powers = np.arange(order + 1)
    for i in range(m):
        lo = min(max(i - half, 0), m - window)
        tt = t[lo : lo + window]
        scale = tt[-1] - tt[0]
        V = ((tt - t[i]) / scale)[:, None] ** powers
        # the row of the pseudo-inverse that gives the coefficient of (t - t_i)^deriv
        w = np.linalg.pinv(V)[deriv]
        out[i] = w @ X[lo : lo + window] / scale**deriv
    return out


def _default_window(m: int, order: int) -> int:
    return int(min(m, max(order + 2, m // 20 * 2 + 1)))


def _spline(t: np.ndarray, X: np.ndarray, lam) -> np.ndarray:
    from ._gcv import smoothing_splines

    return np.stack([s.derivative()(t) for s in smoothing_splines(t, X, lam)], axis=1)


def _tv(t: np.ndarray, X: np.ndarray, alpha: float, max_iter: int, eps: float) -> np.ndarray:
    """Chartrand's total-variation regularised derivative, in the antiderivative's variables:
    the smooth signal ``y`` at the samples minimising ``a * TV(y') + sum_i w_i (y_i - x_i)^2 / 2``
    with ``y'`` piecewise constant (the slopes between samples), ``w`` the trapezoidal weights
    and ``a = alpha * std(x) * (t[-1] - t[0])^2`` (so that ``alpha`` has no units); that is
    Chartrand's functional ``a * TV(u) + |A u + c - x|^2 / 2`` with ``u = y'``, its integral
    ``A u`` and the constant ``c`` of integration. Solved by lagged diffusivity (a sparse
    pentadiagonal system per iteration), then the derivative at the samples by second-order
    differences of ``y``."""
    from scipy.sparse import diags
    from scipy.sparse.linalg import spsolve

    m = t.size
    h = np.diff(t)
    span = t[-1] - t[0]
    w = trapezoid_weights(t)
    # jumps of the slopes: (D y)_k = u_{k+1} - u_k, shape (m - 2, m)
    D = diags([1 / h[:-1], -(1 / h[:-1] + 1 / h[1:]), 1 / h[1:]], [0, 1, 2], shape=(m - 2, m))
    D = D.tocsr()
    W = diags(w)
    out = np.empty_like(X)
    for j in range(X.shape[1]):
        x = X[:, j]
        scale = max(float(np.std(x)), 1e-300)
        a = alpha * scale * span**2
        floor = (eps * scale / span) ** 2  # smooths |jump| near zero
        y = x.copy()
        for _ in range(max_iter):
            jump = D @ y
            E = diags(1.0 / np.sqrt(jump**2 + floor))
            y_new = spsolve((W + a * (D.T @ E @ D)).tocsc(), w * x)
            done = np.max(np.abs(y_new - y)) <= 1e-9 * scale
            y = y_new
            if done:
                break
        out[:, j] = y
    return finite_difference(t, out)


BIG = 1e11
"""The Kalman smoother's prior variance of its first state (a diffuse start, in units of the
scaled data). Against SciPy's smoothing spline of the same penalty (the same estimator) on 200
noisy samples of a sine (derivatives of size 1), the largest differences at penalties 1e-4,
1e-2 and 1: 5e-4 with 1e8 (the prior still pulls), 5e-6 to 5e-9 with 1e10, 5e-7 to 4e-10 with
1e11, 4e-8 to 1e-8 with 1e12 (digits lost to cancellation in the first updates)."""


def _kalman_pass(t: np.ndarray, y: np.ndarray, q: float, smooth: bool):
    """Kalman filter (and with ``smooth`` the Rauch-Tung-Striebel smoother) of the integrated
    random walk ``x'' = w`` (white noise of intensity ``q``) observed as ``y = x + e``,
    ``e ~ N(0, 1)``, on the times ``t``; the state (position, velocity) starts diffuse
    (variance :data:`BIG`: the data are scaled to unit spread and span). Returns ``(minus twice the
    log-likelihood with the noise variance profiled out, or the smoothed velocities)``: the
    likelihood counts the innovations after the first two (the diffuse start)."""
    m = t.size
    big = BIG
    xs = np.empty((m, 2))  # filtered means
    Ps = np.empty((m, 2, 2))  # filtered covariances
    xp = np.empty((m, 2))  # predicted means
    Pp = np.empty((m, 2, 2))  # predicted covariances
    x0, x1 = 0.0, 0.0
    p00, p01, p11 = big, 0.0, big
    ssq, logdet = 0.0, 0.0
    for i in range(m):
        if i > 0:
            h = t[i] - t[i - 1]
            x0, x1 = x0 + h * x1, x1
            p00, p01, p11 = (
                p00 + 2 * h * p01 + h * h * p11 + q * h**3 / 3,
                p01 + h * p11 + q * h * h / 2,
                p11 + q * h,
            )
        xp[i] = x0, x1
        Pp[i] = ((p00, p01), (p01, p11))
        S = p00 + 1.0
        nu = y[i] - x0
        if i >= 2:
            ssq += nu * nu / S
            logdet += np.log(S)
        k0, k1 = p00 / S, p01 / S
        x0, x1 = x0 + k0 * nu, x1 + k1 * nu
        p00, p01, p11 = p00 - k0 * p00, p01 - k0 * p01, p11 - k1 * p01
        xs[i] = x0, x1
        Ps[i] = ((p00, p01), (p01, p11))
    if not smooth:
        n = m - 2
        return n * np.log(ssq / n) + logdet
    v = np.empty(m)
    mean = xs[-1].copy()
    v[-1] = mean[1]
    for i in range(m - 2, -1, -1):
        h = t[i + 1] - t[i]
        F = np.array([[1.0, h], [0.0, 1.0]])
        C = Ps[i] @ F.T @ np.linalg.inv(Pp[i + 1])
        mean = xs[i] + C @ (mean - xp[i + 1])
        v[i] = mean[1]
    return v


def _kalman(t: np.ndarray, X: np.ndarray, alpha) -> np.ndarray:
    """The Kalman smoother's velocity of the integrated random walk (:func:`_kalman_pass`),
    with the ratio ``alpha`` of the measurement variance to the process noise intensity given
    or chosen by maximum likelihood (the noise variance profiled out)."""
    from scipy.optimize import minimize_scalar

    if alpha is not None and not (np.isscalar(alpha) and float(alpha) > 0):
        raise ValueError(
            f"alpha must be a positive number or None (maximum likelihood), got {alpha!r}"
        )
    if t.size < 4:
        raise ValueError(f"the Kalman smoother needs at least 4 samples, got {t.size}")
    span = t[-1] - t[0]
    s = (t - t[0]) / span  # unit time
    out = np.empty_like(X)
    for j in range(X.shape[1]):
        x = X[:, j]
        scale = float(np.std(x)) or 1.0
        y = (x - x.mean()) / scale
        if alpha is None:
            # q (process intensity over measurement variance, in unit time and spread):
            # from a straight line (1e-4) to nearly no smoothing (1e14)
            best = minimize_scalar(
                lambda lq, y=y: _kalman_pass(s, y, 10.0**lq, False), bounds=(-4.0, 14.0),
                method="bounded", options={"xatol": 1e-3},
            )  # fmt: skip
            q = 10.0**best.x
        else:
            # alpha in the data's units: measurement variance / process intensity
            q = span**3 / float(alpha)
        out[:, j] = _kalman_pass(s, y, q, True) * scale / span
    return out


def derivatives(t, X, method: str = "spline", **options) -> np.ndarray:
    """Time derivatives of a sampled trajectory, from the samples alone.

    Parameters
    ----------
    t : array_like, shape ``(m,)``
        The sample times, strictly increasing, not necessarily evenly spaced (at least 3).
    X : array_like, shape ``(m,)`` or ``(m, n)``
        The samples, one row per time (NaN or inf raises ``ValueError``). Several
        trajectories: ``t`` a list ``[t1, t2]`` and ``X`` a list ``[X1, X2]`` return the
        list of their derivatives, each trajectory on its own.
    method : str
        - ``"spline"`` (default): the derivative of the cubic smoothing spline
          (``scipy.interpolate.make_smoothing_spline``) with penalty ``lam`` (default
          ``None``: chosen by generalised cross-validation, SciPy's criterion and search,
          evaluated in the Demmler-Reinsch basis, about 3x faster on a few dozen samples).
          The default because it needs no window or penalty from the user and was the most
          accurate of the five on clean and noisy sines, on even and irregular times (3x
          better than Savitzky-Golay at 1% noise: ``benchmarks/discovery_noise.py``).
        - ``"finite_difference"``: second-order differences on the irregular grid (the
          parabola through each sample and its neighbours, one-sided at the ends); exact for
          quadratics, no smoothing: noise of standard deviation ``s`` becomes noise of about
          ``s / h`` in the derivative.
        - ``"smoothed_finite_difference"``: finite differences of the samples smoothed by
          local polynomials (``window``, ``order`` as for ``"savgol"``, default order 3).
        - ``"savgol"``: Savitzky-Golay on irregular times: the slope at each sample of the
          polynomial of degree ``order`` (default 3) fitted by least squares to the
          ``window`` nearest samples (an odd number, default about a tenth of the samples,
          at least ``order + 2``; the window is shifted inwards at the ends).
        - ``"tv"``: total-variation regularised differentiation (R. Chartrand, "Numerical
          differentiation of noisy, nonsmooth data", ISRN Applied Mathematics 2011, article
          164564): the derivative ``u`` minimising ``a * TV(u) + |A u + c - x|^2 / 2``, ``A``
          the antiderivative and ``c`` the constant of integration, written in the
          antiderivative's samples (a sparse system per lagged-diffusivity iteration:
          ``max_iter``, default 100; ``eps``, default 1e-6, the relative smoothing of ``|u'|``
          at zero). ``alpha`` (default 1e-5) has no units: ``a = alpha * std(x) * (t[-1] -
          t[0])^2``, the data term weighted by the trapezoidal rule, so one ``alpha`` serves
          any sampling density. Suited to piecewise-constant derivatives (kinks in ``x``); on
          smooth signals it staircases.
        - ``"kalman"``: the Rauch-Tung-Striebel smoother of an integrated random walk
          (``x'' = `` white noise of intensity ``q``; samples ``x + e``, ``e`` of variance
          ``r``), its velocity at the samples; ``alpha = r / q`` (in the data's units; larger
          is smoother), default ``None``: chosen by maximum likelihood (the innovations'
          likelihood, the noise variance profiled out, the first two samples starting the
          state). Its mean is the cubic smoothing spline with ``lam = alpha`` (Wahba 1978;
          checked against ``"spline"``): the two methods differ in how they choose the
          penalty, generalised cross-validation for ``"spline"``, the likelihood here (PySINDy
          reaches Kalman smoothing through the ``derivative`` package).
    **options
        The method's options named above; an option the method does not take raises
        ``TypeError``.

    Returns
    -------
    numpy.ndarray
        The derivatives at ``t``, float64, of the shape of ``X``.

    Raises
    ------
    ValueError
        Wrong shapes, ``t`` not strictly increasing, NaN/inf, an unknown method (the message
        lists the known ones) or a bad option value.
    """
    if isinstance(t, (list, tuple)) and len(t) > 0 and np.ndim(t[0]) == 1:
        if not isinstance(X, (list, tuple)) or len(X) != len(t):
            raise ValueError("a list of time arrays needs a list of trajectories X of its length")
        return [derivatives(ti, Xi, method, **options) for ti, Xi in zip(t, X)]
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    known = {
        "finite_difference": set(),
        "smoothed_finite_difference": {"window", "order"},
        "savgol": {"window", "order"},
        "spline": {"lam"},
        "tv": {"alpha", "max_iter", "eps"},
        "kalman": {"alpha"},
    }[method]
    extra = set(options) - known
    if extra:
        raise TypeError(
            f"method {method!r} takes the options {sorted(known) or 'none'}, got {sorted(extra)}"
        )
    t, X2, vector = _check_samples(t, X)
    if method == "finite_difference":
        D = finite_difference(t, X2)
    elif method in ("savgol", "smoothed_finite_difference"):
        order = options.get("order", 3)
        window = options.get(
            "window", _default_window(t.size, order if isinstance(order, int) else 3)
        )
        if method == "savgol":
            D = _local_polynomial(t, X2, window, order, 1)
        else:
            D = finite_difference(t, _local_polynomial(t, X2, window, order, 0))
    elif method == "spline":
        D = _spline(t, X2, options.get("lam"))
    elif method == "kalman":
        D = _kalman(t, X2, options.get("alpha"))
    else:
        alpha = options.get("alpha", 1e-5)
        if not (np.isscalar(alpha) and float(alpha) > 0):
            raise ValueError(f"alpha must be a positive number, got {alpha!r}")
        D = _tv(
            t, X2, float(alpha), int(options.get("max_iter", 100)), float(options.get("eps", 1e-6))
        )
    return D[:, 0] if vector else D
