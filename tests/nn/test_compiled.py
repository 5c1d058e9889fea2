"""The contract with compiled code: the chain's kernels called from user @njit code."""

import subprocess
import sys

import numba
import numpy as np
import pytest
from numba.core.runtime import rtsys

import scichains as sc
from scichains import nn


@numba.njit(cache=False)  # not cached: it would go stale when the kernels change
def rk4_nn(k, p, u0, h, nsteps, traj):
    """Integrate du/dt = NN(u) with fixed-step RK4, calling the chain's compiled kernel."""
    n = u0.shape[0]
    u = u0.copy()
    k1 = np.empty(n)
    k2 = np.empty(n)
    k3 = np.empty(n)
    k4 = np.empty(n)
    tmp = np.empty(n)
    traj[0] = u
    for s in range(nsteps):
        _rk4_stages(k, p, u, h, k1, k2, k3, k4, tmp)
        for i in range(n):
            u[i] += h / 6 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i])
        traj[s + 1] = u
    return u


@numba.njit(cache=False)  # not cached: it would go stale when the kernels change
def _rk4_stages(k, p, u, h, k1, k2, k3, k4, tmp):
    n = u.shape[0]
    nn.chain_forward(k, p, u, k1)
    for i in range(n):
        tmp[i] = u[i] + 0.5 * h * k1[i]
    nn.chain_forward(k, p, tmp, k2)
    for i in range(n):
        tmp[i] = u[i] + 0.5 * h * k2[i]
    nn.chain_forward(k, p, tmp, k3)
    for i in range(n):
        tmp[i] = u[i] + h * k3[i]
    nn.chain_forward(k, p, tmp, k4)


@numba.njit(cache=False)  # not cached: it would go stale when the kernels change
def rk4_adjoint(k, p, traj, h, abar, gp, ws):
    """Discrete adjoint of ``rk4_nn`` for L = abar . u_N: returns dL/du0, accumulates dL/dp.

    ``ws`` is scratch of shape (10, n); ``gp`` gets dL/dp. Every stage calls the chain's vjp.
    """
    n = traj.shape[1]
    nsteps = traj.shape[0] - 1
    k1, k2, k3, k4, tmp = ws[0], ws[1], ws[2], ws[3], ws[4]
    kb1, kb2, kb3, kb4, xb = ws[5], ws[6], ws[7], ws[8], ws[9]
    pb = np.empty_like(gp)
    a = abar.copy()
    gp[:] = 0
    for s in range(nsteps - 1, -1, -1):
        u = traj[s]
        _rk4_stages(k, p, u, h, k1, k2, k3, k4, tmp)
        for i in range(n):
            kb1[i] = h / 6 * a[i]
            kb2[i] = h / 3 * a[i]
            kb3[i] = h / 3 * a[i]
            kb4[i] = h / 6 * a[i]
        # stage 4 input: u + h k3
        for i in range(n):
            tmp[i] = u[i] + h * k3[i]
        nn.chain_vjp(k, p, tmp, kb4, xb, pb)
        gp += pb
        for i in range(n):
            a[i] += xb[i]
            kb3[i] += h * xb[i]
        for i in range(n):
            tmp[i] = u[i] + 0.5 * h * k2[i]
        nn.chain_vjp(k, p, tmp, kb3, xb, pb)
        gp += pb
        for i in range(n):
            a[i] += xb[i]
            kb2[i] += 0.5 * h * xb[i]
        for i in range(n):
            tmp[i] = u[i] + 0.5 * h * k1[i]
        nn.chain_vjp(k, p, tmp, kb2, xb, pb)
        gp += pb
        for i in range(n):
            a[i] += xb[i]
            kb1[i] += 0.5 * h * xb[i]
        nn.chain_vjp(k, p, u, kb1, xb, pb)
        gp += pb
        for i in range(n):
            a[i] += xb[i]
    return a


def _spiral_chain():
    return sc.SimpleChain(2, sc.Dense(16, "tanh"), sc.Dense(2))


def test_rk4_loop_calls_chain_and_matches_python_forward():
    chain = _spiral_chain()
    p = chain.init_params(seed=4, dtype=np.float64)
    k = chain.kernel(np.float64)
    u0 = np.array([2.0, 0.0])
    h, nsteps = 1e-3, 1000
    traj = np.zeros((nsteps + 1, 2))
    uN = rk4_nn(k, p, u0, h, nsteps, traj)
    # the same RK4 in Python, one chain(...) call per stage
    u = u0.copy()
    for _ in range(nsteps):
        a = chain(u, p)
        b = chain(u + 0.5 * h * a, p)
        c = chain(u + 0.5 * h * b, p)
        d = chain(u + h * c, p)
        u = u + h / 6 * (a + 2 * b + 2 * c + d)
    np.testing.assert_allclose(uN, u, rtol=1e-12, atol=1e-14)
    assert np.abs(uN - u0).max() > 1e-2  # the network moved the state


def test_rk4_discrete_adjoint_matches_finite_differences():
    chain = _spiral_chain()
    p = chain.init_params(seed=5, dtype=np.float64)
    k = chain.kernel(np.float64)
    u0 = np.array([2.0, 0.0])
    h, nsteps = 1e-3, 1000
    w = np.array([1.0, -0.5])
    traj = np.zeros((nsteps + 1, 2))

    def L(q, u_init):
        return w @ rk4_nn(k, q, u_init, h, nsteps, traj)

    L(p, u0)
    gp = np.zeros_like(p)
    du0 = rk4_adjoint(k, p, traj.copy(), h, w, gp, np.zeros((10, 2)))
    eps = 1e-6
    fd_p = np.array([(L(p + eps * e, u0) - L(p - eps * e, u0)) / (2 * eps) for e in np.eye(p.size)])
    fd_u = np.array([(L(p, u0 + eps * e) - L(p, u0 - eps * e)) / (2 * eps) for e in np.eye(2)])
    # FD noise here is ~2e-9 (L ~ 1, eps 1e-6, 1000 steps of rounding)
    np.testing.assert_allclose(gp, fd_p, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(du0, fd_u, rtol=1e-6, atol=1e-8)


def test_single_vector_kernels_match_batched_api():
    chain = sc.SimpleChain(3, sc.Dense(7, "gelu"), sc.Dense(5, "softplus"), sc.Dense(2))
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        p = chain.init_params(seed=1, dtype=dtype)
        k = chain.kernel(dtype)
        x = rng.standard_normal(3).astype(dtype)
        v = rng.standard_normal(2).astype(dtype)
        out = np.zeros(2, dtype)
        nn.chain_forward(k, p, x, out)
        np.testing.assert_allclose(out, chain(x, p), rtol=1e-6)
        xb = np.zeros(3, dtype)
        pb = np.full(chain.num_params, 7.0, dtype)  # overwritten, not accumulated
        nn.chain_vjp(k, p, x, v, xb, pb)
        # v . chain(x) as a loss: SquaredLoss would square; use the linear identity instead
        cwl = chain.add_loss(sc.SquaredLoss(np.zeros((1, 2))))
        g = np.zeros_like(p)
        gx = np.zeros((1, 3), dtype)
        # d/dp sum((f - y)^2) with y = f - v/2 is v . df/dp
        y = (chain(x, p) - v / 2)[None, :]
        sc.valgrad(cwl, x[None, :], p, g, gx, targets=y)
        np.testing.assert_allclose(pb, g, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(xb, gx[0], rtol=2e-5, atol=1e-6)


def _allocations():
    s = rtsys.get_allocation_stats()
    return s.alloc + s.mi_alloc


def test_single_vector_kernels_do_not_allocate():
    chain = sc.SimpleChain(2, sc.Dense(50, "tanh"), sc.Dense(2))
    p = chain.init_params(dtype=np.float64)
    k = chain.kernel(np.float64)
    traj = np.zeros((1001, 2))
    u0 = np.array([1.0, 0.5])
    gp = np.zeros_like(p)
    ws = np.zeros((10, 2))
    w = np.ones(2)
    rk4_nn(k, p, u0, 1e-3, 1000, traj)
    rk4_adjoint(k, p, traj, 1e-3, w, gp, ws)

    def count(nsteps):
        t = traj[: nsteps + 1]
        before = _allocations()
        rk4_nn(k, p, u0, 1e-3, nsteps, t)
        rk4_adjoint(k, p, t, 1e-3, w, gp, ws)
        return _allocations() - before

    # the loops allocate a few work vectors once per call; the kernels add nothing per step
    assert count(10) == count(1000)


# ---------------------------------------------------------------- length checks (issue 11.3)
@numba.njit(cache=False)
def _user_forward(k, p, x, out):
    nn.chain_forward(k, p, x, out)


@numba.njit(cache=False)
def _user_vjp(k, p, x, v, xb, pb):
    nn.chain_vjp(k, p, x, v, xb, pb)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_wrong_lengths_raise_from_user_njit_code(dtype):
    # input 3 (a state of 2 is the "silently wrong" case of the issue), output 2
    chain = sc.SimpleChain(3, sc.Dense(5, "tanh"), sc.Dense(2))
    k = chain.kernel(dtype)
    P = chain.num_params
    good = {
        "p": np.zeros(P, dtype),
        "x": np.zeros(3, dtype),
        "out": np.zeros(2, dtype),
        "v": np.ones(2, dtype),
        "x_bar": np.zeros(3, dtype),
        "p_bar": np.zeros(P, dtype),
    }
    sizes = {"p": P, "x": 3, "out": 2, "v": 2, "x_bar": 3, "p_bar": P}
    _user_forward(k, good["p"], good["x"], good["out"])
    _user_vjp(k, good["p"], good["x"], good["v"], good["x_bar"], good["p_bar"])
    for name, n in sizes.items():
        for bad in (n - 1, n + 1, 0):
            a = dict(good)
            a[name] = np.zeros(bad, dtype)
            if name in ("p", "x", "out"):
                with pytest.raises(ValueError, match=rf"chain_forward: {name} has length {bad}\b"):
                    _user_forward(k, a["p"], a["x"], a["out"])
            if name != "out":
                with pytest.raises(ValueError, match=rf"chain_vjp: {name} has length {bad}\b"):
                    _user_vjp(k, a["p"], a["x"], a["v"], a["x_bar"], a["p_bar"])


_HUGE_OUTPUT = """
import numba, numpy as np
import scichains as sc
from scichains import nn

@numba.njit
def rhs(k, p, u, du):
    nn.chain_forward(k, p, u, du)

chain = sc.SimpleChain(2, sc.Dense(100_000))
k = chain.kernel(np.float64)
p = chain.init_params(dtype=np.float64)
try:
    rhs(k, p, np.ones(2), np.zeros(2))
except ValueError as e:
    print("ValueError:", e)
"""


def test_huge_output_into_short_du_raises_instead_of_crashing():
    # on the old code this wrote 100,000 numbers into a 2-entry array: the process died (SIGSEGV
    # or SIGABRT from a corrupted heap)
    r = subprocess.run(
        [sys.executable, "-c", _HUGE_OUTPUT], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ValueError: chain_forward: out has length 2" in r.stdout
    assert "100000 entries" in r.stdout


def test_single_sample_kernel_refuses_tiles_until_the_batched_kernels_are_prepared():
    # chain.kernel() prepares one-sample kernels only: a tile of several samples through it
    # must be refused, never silently skip a layer, and work once spec_for() has run
    from scichains.nn._compiled import M_ROWS, network_forward

    chain = sc.SimpleChain(2, sc.Dense(8, "tanh"), sc.Dense(2))
    k = chain.kernel(np.float64)
    p = chain.init_params(dtype=np.float64, seed=1)
    T = 4
    X = np.random.default_rng(0).standard_normal((T, 2))
    w = np.zeros(int(k.meta[M_ROWS]) * T)
    w[: 2 * T] = X.T.ravel()
    with pytest.raises(RuntimeError, match="spec_for"):
        network_forward(k, p, w, T, T)
    chain.spec_for(np.float64)
    r = network_forward(k, p, w, T, T)
    out = w[r * T : (r + 2) * T].reshape(2, T).T
    np.testing.assert_allclose(out, chain(X, p), rtol=1e-12)
