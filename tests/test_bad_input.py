"""Property-based bad input: every public entry point either succeeds with finite,
correctly shaped (and, where a closed form exists, correct) results, or raises a
``ValueError``/``TypeError``/``ODESolveError`` with a message. Never a numba typing
traceback, a crash, or SUCCESS with non-finite or wrong output.

Calls into compiled code that could crash the interpreter on bad lengths (a network called
from the user's own ``@njit`` code) run in a subprocess per case.
"""

import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import scichains as sc  # noqa: E402
from scichains.adjoint import DiscreteAdjoint, InterpolatingAdjoint, Objective, SquaredError  # noqa: E402
from scichains.models import NeuralODE  # noqa: E402
from scichains.ode import ODEProblem, ODESolveError, Tsit5, solve  # noqa: E402

ALLOWED = (ValueError, TypeError, ODESolveError)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -1.0, 1e300, -1e-300]
DTYPES = [np.float64, np.float32, np.int64, np.complex128, np.bool_, object]


def _arrays(shapes, dtypes=DTYPES):
    """Arrays of the given shapes and dtypes, with NaN/inf/huge entries sometimes."""

    @st.composite
    def build(draw):
        shape = draw(st.sampled_from(shapes))
        dtype = draw(st.sampled_from(dtypes))
        rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        a = rng.standard_normal(shape)
        if a.size and draw(st.booleans()):
            a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from(SPECIAL))
        if dtype is object:
            return a.astype(object)
        with np.errstate(invalid="ignore", over="ignore"):
            return a.astype(dtype)

    return build()


def _outcome(call):
    """Run ``call``; return its result, or None if it raised an allowed error with a
    message. Anything else (a numba TypingError, an IndexError, ...) fails the test."""
    try:
        return call()
    except ALLOWED as e:
        assert str(e).strip(), f"{type(e).__name__} without a message"
        assert "numba" not in str(e).lower().split("\n")[0] or "njit" in str(e), str(e)
        return None


@numba.njit
def _decay(du, u, p, t):
    for i in range(u.shape[0]):
        du[i] = -p[0] * u[i]


@numba.njit
def _decay_vjp(v, u, p, t, ubar, pbar):
    pbar[0] = 0.0
    for i in range(u.shape[0]):
        ubar[i] = -p[0] * v[i]
        pbar[0] -= u[i] * v[i]


times = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([0.0, 1.0, 2.0, -1.0]),
)


@SETTINGS
@given(
    u0=_arrays([(), (0,), (1,), (3,), (2, 2)]),
    p=_arrays([(0,), (1,), (2,), (1, 1)]),
    t0=times,
    t1=times,
    saveat=st.one_of(
        st.none(),
        _arrays([(0,), (3,), (5,)], [np.float64]),
        st.sampled_from([[0.0, 0.5, 0.5, 1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 2.0, 5.0]]),
    ),
)
def test_solve(u0, p, t0, t1, saveat):
    def call():
        prob = ODEProblem(_decay, u0, (t0, t1), p)
        return solve(prob, Tsit5(), saveat=saveat, rtol=1e-8, atol=1e-10)

    sol = _outcome(call)
    if sol is None or not sol.success:
        if sol is not None:  # a failed solve must say why
            assert sol.message
        return
    u0f, pf = np.atleast_1d(np.asarray(u0, dtype=float)), np.asarray(p, dtype=float)
    assert sol.u.shape == (sol.t.size, u0f.size)
    assert np.all(np.isfinite(sol.u))
    exact = u0f[None, :] * np.exp(-pf[0] * (sol.t - t0))[:, None]
    np.testing.assert_allclose(sol.u, exact, rtol=1e-5, atol=1e-7 * max(1.0, np.abs(u0f).max()))


@SETTINGS
@given(
    data=_arrays([(4, 2), (4, 3), (3, 2), (4,), (0, 2)], [np.float64, np.float32, object]),
    saveat=st.sampled_from([[0.5, 1.0, 1.5, 2.0], [0.5, 0.5, 1.0, 2.0], [2.0, 1.5, 1.0, 0.5]]),
    p=_arrays([(1,), (2,), (0,)], [np.float64, np.int64, np.complex128]),
    discrete=st.booleans(),
)
def test_objective(data, saveat, p, discrete):
    sensealg = DiscreteAdjoint() if discrete else InterpolatingAdjoint()
    prob = ODEProblem(_decay, np.array([1.0, 2.0]), (0.0, 2.0), np.array([0.7]), vjp=_decay_vjp)

    def call():
        obj = Objective(prob, SquaredError(data), saveat, sensealg=sensealg)
        return obj.value_and_grad(p)

    out = _outcome(call)
    if out is None:
        return
    value, dp, du0 = out
    assert np.isfinite(value) and dp.shape == (1,) and du0.shape == (2,)
    assert np.all(np.isfinite(dp)) and np.all(np.isfinite(du0))


CHAIN = sc.SimpleChain(2, sc.Dense(4, "tanh"), sc.Dense(2))
P32 = CHAIN.init_params(seed=0)


@SETTINGS
@given(
    X=_arrays([(5, 2), (5, 3), (0, 2), (5,), (2, 5, 1)]),
    p=st.one_of(st.just(P32), _arrays([(P32.size,), (P32.size - 1,), (0,), (P32.size, 1)])),
    Y=_arrays([(5, 2), (5, 1), (4, 2)], [np.float64, np.float32]),
)
def test_chain_and_valgrad(X, p, Y):
    out = _outcome(lambda: CHAIN(X, p))
    if out is not None:
        assert out.shape == (np.shape(X)[0], 2) and np.all(np.isfinite(out))

    def grad():
        cwl = CHAIN.add_loss(sc.SquaredLoss(Y))
        g = np.zeros_like(np.asarray(p))
        return sc.valgrad(cwl, X, p, g), g

    out = _outcome(grad)
    if out is not None:
        value, g = out
        assert np.isfinite(value) and np.all(np.isfinite(g))


@settings(SETTINGS, max_examples=15)
@given(
    X=_arrays([(8, 2), (8, 3), (0, 2)], [np.float32, np.float64, np.int64]),
    p=st.one_of(st.just(P32), _arrays([(P32.size,), (3,)], [np.float32, np.float64])),
    iters=st.sampled_from([0, 1, 3, -1]),
    batched=st.booleans(),
)
def test_train(X, p, iters, batched):
    Y = np.zeros((8, 2), dtype=np.float32)
    cwl = CHAIN.add_loss(sc.SquaredLoss(Y))
    q = np.array(p, copy=True)

    def call():
        if batched:
            return sc.train_batched(q, cwl, X, sc.Adam(1e-3), iters, batch_size=4)
        return sc.train_unbatched(q, cwl, X, sc.Adam(1e-3), iters)

    try:
        _outcome(call)
    except FloatingPointError as e:  # NonFiniteLossError: NaN data made the loss NaN
        assert "NaN" in str(e) or "finite" in str(e)
        return
    assert np.all(np.isfinite(q)) or not np.all(np.isfinite(p))


@settings(SETTINGS, max_examples=20)
@given(
    u0=_arrays([(2,), (3,), (4, 2)], [np.float64, np.float32, object]),
    data=_arrays([(3, 2), (3, 3), (2, 2)], [np.float64]),
    p=st.one_of(st.just(P32.astype(np.float64)), _arrays([(P32.size - 1,), (P32.size,)])),
)
def test_neural_ode(u0, data, p):
    node = NeuralODE(CHAIN, (0.0, 1.0), [0.25, 0.5, 1.0], sensealg=DiscreteAdjoint())
    out = _outcome(lambda: node.loss_and_grad(u0, p, data))
    if out is not None:
        value, g = out
        assert np.isfinite(value) and g.shape == (P32.size,) and np.all(np.isfinite(g))


def test_population_bad_input():
    """Population's inputs, enumerated (each case compiles nothing new)."""
    import sympy as sp_

    from scichains.models import Population, SubjectData
    from scichains.ode import SymbolicModel

    a, c, lka, lke = sp_.symbols("a c lka lke")
    model = SymbolicModel(
        [a, c], [lka, lke], [-sp_.exp(lka) * a, sp_.exp(lka) * a - sp_.exp(lke) * c]
    )
    t = np.linspace(0.5, 4.0, 5)
    y = np.stack([np.zeros(5), np.linspace(0.5, 0.1, 5)], 1)
    w = np.broadcast_to([0.0, 1.0], y.shape)
    subjects = [SubjectData(t, y, w, np.array([d, 0.0]), tspan=(0.0, 4.0)) for d in (1.0, 2.0, 3.0)]
    pop = Population(model, subjects, eta_index=[0, 1], omega=[0.3, 0.2])
    z_ok = np.zeros(2 + 3 * 2)
    bad = [z_ok[:-1], np.full_like(z_ok, np.nan), z_ok.reshape(2, 4), z_ok.astype(complex)]
    for z in bad:
        assert _outcome(lambda z=z: pop.value_and_grad(z)) is None
    value, g = pop.value_and_grad(z_ok)
    assert np.isfinite(value) and g.shape == z_ok.shape


_SUBPROCESS = textwrap.dedent(
    """
    import itertools
    import numba, numpy as np
    import scichains as sc
    from scichains import nn

    @numba.njit
    def f(k, p, u, du):
        nn.chain_forward(k, p, u, du)

    @numba.njit
    def g(k, p, u, v, ubar, pbar):
        nn.chain_vjp(k, p, u, v, ubar, pbar)

    for nin, nout, nu, ndu, short_p in itertools.product(
        (2, 3), (2, 100_000), (2, 3), (2, 100_000), (False, True)
    ):
        chain = sc.SimpleChain(nin, sc.Dense(nout))
        k = chain.kernel(np.float64)
        p = chain.init_params(seed=0, dtype=np.float64)[: chain.num_params - short_p]
        bad = nu != nin or ndu != nout or short_p  # exact lengths: the contract
        for call in (
            lambda: f(k, p, np.ones(nu), np.zeros(ndu)),
            lambda: g(k, p, np.ones(nu), np.ones(ndu), np.zeros(nu), np.zeros(p.size)),
        ):
            try:
                call()
                outcome = "ok"
            except ValueError as e:
                assert str(e)
                outcome = "raised"
            assert outcome == ("raised" if bad else "ok"), (nin, nout, nu, ndu, short_p, outcome)
    print("all cases checked")
    """
)


def test_network_from_user_compiled_code_never_crashes():
    """Every combination of wrong lengths given to ``nn.chain_forward``/``nn.chain_vjp`` from
    the user's own ``@njit`` code raises ``ValueError`` (before: a segfault for a 100,000-entry
    output written into a 2-entry ``du``, silent garbage for the others). In a subprocess: a
    crash must not take the test runner with it."""
    r = subprocess.run([sys.executable, "-c", _SUBPROCESS], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "all cases checked" in r.stdout
