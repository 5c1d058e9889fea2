"""Write the notebooks from the cells below: ``python notebooks/_build.py`` writes them without
outputs; ``python notebooks/_build.py --execute`` also runs each one at full size (nbclient,
``NUMBA_NUM_THREADS=1``) and stores it with its outputs (figures as PNG) so that it reads on a
code host without running. ``--execute NAME ...`` runs only those.

The notebooks use the public API only (no imports from ``examples/``, no ``sys.path``): the data
they need are simulated in the notebook or come from ``scichains.datasets``, so they run from
any directory and with the package installed from a wheel. The test suite runs them
(tests/test_notebooks.py) with ``SCICHAINS_QUICK=1``, a reduced size, so they cannot rot."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


class Md(str):
    """A markdown cell (plain strings are code cells)."""


QUICK = """import os

import matplotlib.pyplot as plt
import numpy as np

QUICK = os.environ.get("SCICHAINS_QUICK") == "1"  # reduced size (the test suite)"""

NOTEBOOKS = {
    "neural_ode_spiral.ipynb": [
        Md(
            "# A neural ODE fitted to the spiral\n\n"
            "du/dt = (u^3) A with A = [[-0.1, 2], [-2, -0.1]]: data at 30 points on [0, 1.5]; the "
            "model is `SimpleChain(2, Activation('cube'), Dense(50, 'tanh'), Dense(2))`, trained "
            "with Adam on gradients from the adjoint (Tsit5, rtol 1e-6; the default sensitivity "
            "method is the discrete adjoint, exact for the discretised solution)."
        ),
        QUICK,
        """from scipy.integrate import solve_ivp

import scichains as sc
from scichains.models import NeuralODE

A = np.array([[-0.1, 2.0], [-2.0, -0.1]])
u0 = np.array([2.0, 0.0])
ts = np.linspace(0.0, 1.5, 30)
data = solve_ivp(lambda t, u: (u**3) @ A, (0, 1.5), u0, t_eval=ts, rtol=1e-10, atol=1e-12).y.T
chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(50, "tanh"), sc.Dense(2))
p = chain.init_params(seed=0, dtype=np.float64)
node = NeuralODE(chain, (0.0, 1.5), ts)""",
        """opt = sc.Adam(0.05)
losses = []
for _ in range(30 if QUICK else 300):
    loss, g = node.loss_and_grad(u0, p, data)
    losses.append(loss)
    opt.step(p, g)
print(f"loss {losses[0]:.3f} -> {losses[-1]:.4f}")""",
        """pred = node.predict(u0, p)
fig, ax = plt.subplots(1, 2, figsize=(10, 4))
ax[0].plot(data[:, 0], data[:, 1], "o", label="data")
ax[0].plot(pred[:, 0], pred[:, 1], "-", label="neural ODE")
ax[0].legend()
ax[0].set_title("phase plane")
ax[1].semilogy(losses)
ax[1].set_title("loss")
plt.show()""",
    ],
    # ------------------------------------------------------------------------------------
    "lotka_volterra_discovery.ipynb": [
        Md(
            "# Missing physics of Lotka-Volterra: a UDE, then discovery of its terms\n\n"
            "Truth: x' = alpha x - beta x y, y' = gamma x y - delta y, observed every 0.1 on "
            "[0, 3] with 5% noise. The universal differential equation (UDE) keeps the known part "
            "(alpha x, -delta y) and learns the rest with a network U(x, y). "
            "`scichains.discovery` then turns the trained network into equations: STLSQ "
            "candidates on a library of polynomials and sines, each refitted to the *data* "
            "through the adjoint, scored by BIC plus 2 per term, improved by a stepwise search; "
            "the winner becomes a `SymbolicModel` that we extrapolate."
        ),
        QUICK,
        Md(
            "## Data\n\nThe truth as a `SymbolicModel` (SymPy right-hand side, compiled with its "
            "exact vjp), solved and perturbed with Gaussian noise of 5% of each state's mean."
        ),
        """import scipy.optimize
import sympy as sp

import scichains as sc
from scichains.adjoint import InterpolatingAdjoint, Objective, ScipyFun, SquaredError
from scichains.discovery import PolynomialLibrary, StructureSearch
from scichains.ode import NetworkTerm, SymbolicModel, solve

x, y = sp.symbols("x y")
alpha, beta, gamma, delta = sp.symbols("alpha beta gamma delta")
truth = SymbolicModel(
    [x, y], [alpha, beta, gamma, delta], [alpha * x - beta * x * y, gamma * x * y - delta * y]
)
p_true = truth.pack(alpha=1.3, beta=0.9, gamma=0.8, delta=1.8)
u0 = np.array([0.44249296, 4.6280594])
ts = np.linspace(0.0, 3.0, 31)
clean = solve(truth.problem(u0, (0.0, 3.0), p_true), saveat=ts, rtol=1e-10, atol=1e-12).u
rng = np.random.default_rng(5678)
data = clean + 0.05 * clean.mean(axis=0) * rng.standard_normal(clean.shape)""",
        Md(
            "## The UDE\n\nA `NetworkTerm` puts a `SimpleChain` (2 -> 5 -> 5 -> 5 -> 2, Gaussian "
            "rbf) into the SymPy right-hand side; `ude.pack(network=...)` builds the parameter "
            "vector. An `Objective` holds the solver and adjoint buffers for repeated "
            "loss-and-gradient evaluations: Adam first, then L-BFGS (`ScipyFun` adapts it to "
            "`scipy.optimize.minimize(jac=True)`)."
        ),
        """chain = sc.SimpleChain(2, sc.Dense(5, "rbf"), sc.Dense(5, "rbf"), sc.Dense(5, "rbf"), sc.Dense(2))
U = NetworkTerm(chain, [x, y])
ude = SymbolicModel([x, y], [], [1.3 * x + U[0], -1.8 * y + U[1]], network=U)
p = ude.pack(network=chain.init_params(seed=1, dtype=np.float64))
# sensealg: the method the README's 10-seed discovery result was measured with
obj = Objective(
    ude.problem(u0, (0.0, 3.0), p), SquaredError(data), ts, rtol=1e-7, atol=1e-9,
    sensealg=InterpolatingAdjoint(),
)  # fmt: skip

losses = []
opt = sc.Adam(0.1)
for _ in range(200):
    loss, g, _ = obj.value_and_grad(p)  # loss, dL/dp, dL/du0
    losses.append(loss)
    opt.step(p, g)
fun = ScipyFun(lambda q: obj.value_and_grad(q)[:2])
res = scipy.optimize.minimize(
    fun, p, jac=True, method="L-BFGS-B",
    options={"maxiter": 300 if QUICK else 10_000, "gtol": 1e-10},
    callback=lambda q: losses.append(fun.last_value),
)  # fmt: skip
p = res.x
print(f"loss {losses[0]:.3f} -> {res.fun:.4f} after 200 Adam and {res.nit} L-BFGS iterations")""",
        Md(
            "## Discovery\n\n`StructureSearch.from_ude` sets up the search for the network's "
            "outputs U_0, U_1 on the library; `run_ude` samples the trained network along its "
            "trajectory, takes the STLSQ candidates, refits each to the data and searches "
            "stepwise. (`scichains.discovery.select_structure(ude, p, library, data, ts, u0)` "
            "does both in one call.)"
        ),
        """library = PolynomialLibrary(degree=3, sin=True)
if QUICK:  # a smaller library: fewer candidates to refit
    library = PolynomialLibrary(degree=2)
print(len(library.names(["x", "y"])), "library terms:", ", ".join(library.names(["x", "y"])))
search = StructureSearch.from_ude(
    ude, p, library, data, ts, u0, margin=2.0, sensealg=InterpolatingAdjoint()
)
result = search.run_ude(ude, p)
print(f"{len(result.candidates)} candidate structures refitted; the best five:")
for s in result.candidates[:5]:
    print(f"  {s.n_terms:2d} terms, data SSE {s.sse:8.4f}, score {s.score:8.2f}:", s.terms())
best = result.best
for action, feature, unknown in best.moves:
    print(f"stepwise search: {action} {feature} ({unknown})")
print("selected:")
print("\\n".join(best.equations()))""",
        Md(
            "The selected structure as a model: `to_symbolic_model()` gives a `SymbolicModel` "
            "whose parameters are the refitted coefficients (named after their terms), ready for "
            "further fitting or, here, extrapolation far past the data."
        ),
        """found, q = best.to_symbolic_model()
print(found.params, q)
t_long = np.linspace(0.0, 50.0, 2001)
truth_long = solve(truth.problem(u0, (0.0, 50.0), p_true), saveat=t_long, rtol=1e-8, atol=1e-10).u
found_long = solve(found.problem(u0, (0.0, 50.0), q), saveat=t_long, rtol=1e-8, atol=1e-10).u
t_fine = np.linspace(0.0, 3.0, 301)
fitted = solve(ude.problem(u0, (0.0, 3.0), p), saveat=t_fine, rtol=1e-8, atol=1e-10).u

fig, ax = plt.subplots(1, 3, figsize=(15, 4))
ax[0].plot(ts, data, "o")
ax[0].plot(t_fine, fitted, "-")
ax[0].set_title("UDE fit to the data")
ax[1].semilogy(losses)
ax[1].set_title("loss (Adam, then L-BFGS)")
ax[2].plot(t_long, truth_long, "k-", lw=1)
ax[2].plot(t_long, found_long, "--")
ax[2].set_title("discovered model (dashed) vs truth, to t = 50")
plt.show()""",
    ],
    # ------------------------------------------------------------------------------------
    "sir_discovery.ipynb": [
        Md(
            "# Discovering the infection term of an SIR epidemic\n\n"
            "Truth: S' = -beta S I, I' = beta S I - gamma I, R' = gamma I (beta = 0.4, gamma = "
            "0.1), observed daily for 40 days with 5% noise. The UDE keeps the recovery "
            "(gamma I, known) and replaces the infection term by a network U(S, I): "
            "S' = -U, I' = U - gamma I, R' = gamma I. After training, "
            "`scichains.discovery.select_structure` looks for U among quadratic polynomials of "
            "S and I and should return U = beta S I."
        ),
        QUICK,
        """import scipy.optimize
import sympy as sp

import scichains as sc
from scichains.adjoint import Objective, ScipyFun, SquaredError
from scichains.discovery import PolynomialLibrary, select_structure
from scichains.ode import NetworkTerm, SymbolicModel, solve

S, I, R = sp.symbols("S I R")
b, g = sp.symbols("beta gamma")
truth = SymbolicModel([S, I, R], [b, g], [-b * S * I, b * S * I - g * I, g * I])
p_true = truth.pack(beta=0.4, gamma=0.1)
u0 = np.array([0.99, 0.01, 0.0])
ts = np.linspace(0.0, 40.0, 41)
clean = solve(truth.problem(u0, (0.0, 40.0), p_true), saveat=ts, rtol=1e-10, atol=1e-12).u
rng = np.random.default_rng(0)
data = clean + 0.05 * clean.mean(axis=0) * rng.standard_normal(clean.shape)""",
        Md(
            "## The UDE and its training\n\nThe network (2 -> 8 -> 8 -> 1, tanh) sees S and I; "
            "Adam, then L-BFGS, on gradients from the adjoint."
        ),
        """chain = sc.SimpleChain(2, sc.Dense(8, "tanh"), sc.Dense(8, "tanh"), sc.Dense(1))
U = NetworkTerm(chain, [S, I])
ude = SymbolicModel([S, I, R], [], [-U[0], U[0] - 0.1 * I, 0.1 * I], network=U)
p = ude.pack(network=chain.init_params(seed=1, dtype=np.float64))
obj = Objective(ude.problem(u0, (0.0, 40.0), p), SquaredError(data), ts, rtol=1e-7, atol=1e-9)

opt = sc.Adam(0.01)
losses = []
for _ in range(300):
    loss, grad, _ = obj.value_and_grad(p)
    losses.append(loss)
    opt.step(p, grad)
fun = ScipyFun(lambda q: obj.value_and_grad(q)[:2])
res = scipy.optimize.minimize(
    fun, p, jac=True, method="L-BFGS-B",
    options={"maxiter": 200 if QUICK else 3000, "gtol": 1e-10},
    callback=lambda q: losses.append(fun.last_value),
)  # fmt: skip
p = res.x
print(f"loss {losses[0]:.4f} -> {res.fun:.3g} ({res.nit} L-BFGS iterations)")""",
        Md(
            "## What did the network learn?\n\nThe network's output along the trained "
            "trajectory against the true infection term, then the structure search (STLSQ "
            "candidates refitted to the data, BIC plus 2 per term, stepwise search)."
        ),
        """library = PolynomialLibrary(degree=2)
result = select_structure(ude, p, library, data, ts, u0)
best = result.best
print("\\n".join(best.equations()))
terms = best.terms()["U_0"]
print("U =", " + ".join(f"{c:.4g} {name}" for name, c in terms.items()))
if set(terms) == {"S*I"}:
    beta = terms["S*I"]
    print(f"beta recovered: {beta:.4f} (true 0.4, error {abs(beta / 0.4 - 1):.1%})")""",
        """from scichains.discovery import ude_samples

states, learned = ude_samples(ude, p, u0, ts)  # trained trajectory, network outputs there
found, q = best.to_symbolic_model()
t_long = np.linspace(0.0, 100.0, 201)
truth_long = solve(truth.problem(u0, (0.0, 100.0), p_true), saveat=t_long, rtol=1e-8).u
found_long = solve(found.problem(u0, (0.0, 100.0), q), saveat=t_long, rtol=1e-8).u

fig, ax = plt.subplots(1, 3, figsize=(15, 4))
ax[0].plot(ts, data, "o", ms=3)
ax[0].plot(ts, states, "-")
ax[0].set_title("UDE fit (S, I, R)")
ax[1].plot(ts, learned[:, 0], "o", label="network U(S, I)")
ax[1].plot(ts, 0.4 * states[:, 0] * states[:, 1], "-", label="true beta S I")
ax[1].legend()
ax[1].set_title("the learned infection term")
ax[2].plot(t_long, truth_long, "k-", lw=1)
ax[2].plot(t_long, found_long, "--")
ax[2].axvline(40, color="grey", lw=0.5)
ax[2].set_title("discovered model (dashed) vs truth, to day 100")
plt.show()""",
    ],
    # ------------------------------------------------------------------------------------
    "multi_trajectory.ipynb": [
        Md(
            "# Neural ODEs on many trajectories, mini-batches and multiple shooting\n\n"
            "Real experiments start from different initial states and are sampled at times of "
            "their own. Here the truth is the spiral du/dt = (u^3) A; the model is "
            "`SimpleChain(2, Activation('cube'), Dense(50, 'tanh'), Dense(2))`.\n\n"
            "1. Eight trajectories, each with its own random sampling times, as a list of "
            "`scichains.adjoint.Trajectory`; trained with Adam on mini-batches "
            "(`adjoint.minibatches`); the trajectories of a batch run on threads and the "
            "result is identical for any thread count.\n"
            "2. One long series (2.5 turns of the spiral): single shooting stalls; "
            "`adjoint.MultipleShooting` fits segments from free initial states tied by a "
            "continuity penalty, then a short single-shooting polish."
        ),
        QUICK,
        """from scipy.integrate import solve_ivp

import scichains as sc
from scichains.adjoint import Trajectory, minibatches
from scichains.models import NeuralODE

A = np.array([[-0.1, 2.0], [-2.0, -0.1]])


def simulate(u0, t):
    return solve_ivp(lambda _, u: (u**3) @ A, (0, t[-1]), u0, t_eval=t, rtol=1e-10, atol=1e-12).y.T


rng = np.random.default_rng(0)
m = 8
angles = rng.uniform(0, 2 * np.pi, m)
U0 = np.stack([np.cos(angles), np.sin(angles)], 1) * rng.uniform(1.5, 2.0, (m, 1))
trajectories = []
for i in range(m):
    t = np.sort(rng.uniform(0.0, 1.5, rng.integers(10, 25)))  # its own times
    clean = simulate(U0[i], np.concatenate([[0.0], t]))[1:]
    trajectories.append(Trajectory(U0[i], t, clean + 0.02 * rng.standard_normal(clean.shape)))
print("samples per trajectory:", [len(tr.saveat) for tr in trajectories])""",
        Md(
            "## Training on mini-batches\n\n`node.objective(trajectories)` builds a "
            "`MultiObjective` once (buffers per trajectory); `value_and_grad(p, batch=idx)` "
            "returns the loss and gradient summed over the batch, and dL/du0 for its rows."
        ),
        """chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(50, "tanh"), sc.Dense(2))
p = chain.init_params(seed=0, dtype=np.float64)
node = NeuralODE(chain, (0.0, 1.5), np.linspace(0.0, 1.5, 2))  # saveat: per trajectory here
obj = node.objective(trajectories)
opt = sc.Adam(0.02)
epochs = 20 if QUICK else 600
losses = []
for epoch in range(epochs):
    opt.lr = 0.02 * 0.05 ** (epoch / epochs)  # learning rate from 0.02 down to 0.001
    for batch in minibatches(m, 4, rng):
        loss, grad, du0 = obj.value_and_grad(p, batch=batch, threads=2)
        opt.step(p, grad)
    losses.append(obj.value(p))  # the full loss, all trajectories
print(f"full loss {losses[0]:.3f} -> {losses[-1]:.4f} after {epochs} epochs")
# the same gradient on 1 or 2 threads, bit for bit
g1, g2 = obj.value_and_grad(p, threads=1)[1], obj.value_and_grad(p, threads=2)[1]
assert g1.tobytes() == g2.tobytes()""",
        Md(
            "Predictions at dense times for the training initial states and for two initial "
            "states never seen in training: `predict` takes `u0` of shape (m, n) and returns "
            "(m, len(saveat), n)."
        ),
        """t_fine = np.linspace(0.0, 1.5, 151)
dense = NeuralODE(chain, (0.0, 1.5), t_fine)
new = np.array([[0.0, -1.8], [1.2, 1.2]])
pred = dense.predict(np.concatenate([U0, new]), p)  # (m + 2, 151, 2)
fig, ax = plt.subplots(1, 3, figsize=(15, 4.5))
for i, tr in enumerate(trajectories):
    ln = ax[0].plot(tr.data[:, 0], tr.data[:, 1], "o", ms=3)
    ax[0].plot(pred[i, :, 0], pred[i, :, 1], "-", color=ln[0].get_color())
ax[0].set_title("8 trajectories, own times: data and fit")
for j, u in enumerate(new):
    ref = simulate(u, t_fine)
    ax[1].plot(ref[:, 0], ref[:, 1], "k-", lw=1)
    ax[1].plot(pred[m + j, :, 0], pred[m + j, :, 1], "--")
ax[1].set_title("unseen initial states: truth (black), model")
ax[2].semilogy(losses)
ax[2].set_xlabel("epoch")
ax[2].set_title("full loss")
plt.show()""",
        Md(
            "## A long series: single against multiple shooting\n\n121 noisy points over 2.5 "
            "turns. For `MultipleShooting` the neural ODE is written as a `SymbolicModel` with a "
            "`NetworkTerm` (any `ODEProblem` works). Segments of 5 save points share their "
            "boundary points; the optimisation variable is `theta = [p, U_0, ..., U_(K-1)]` "
            "(`ms.initial(p)` starts the segment states from the data)."
        ),
        """import scipy.optimize
import sympy as sp

from scichains.adjoint import MultipleShooting, Objective, ScipyFun, SquaredError
from scichains.ode import NetworkTerm, SymbolicModel, solve

ts = np.linspace(0.0, 6.0, 121)
u0 = np.array([2.0, 0.0])
series = simulate(u0, ts) + 0.02 * rng.standard_normal((ts.size, 2))
x, y = sp.symbols("x y")
net = NetworkTerm(chain, [x, y])
model = SymbolicModel([x, y], [], [net[0], net[1]], network=net)
p0 = model.pack(network=chain.init_params(seed=0, dtype=np.float64))
prob = model.problem(u0, (0.0, 6.0), p0)
tol = dict(rtol=1e-6, atol=1e-8)
single = Objective(prob, SquaredError(series), ts, **tol)
ms = MultipleShooting(prob, series, ts, 5, continuity=100.0, **tol)
print(f"{ms.K} segments; theta has {ms.initial(p0).size} entries")
iters = 30 if QUICK else 300

p_single, opt, hist_single = p0.copy(), sc.Adam(0.01), []
for _ in range(iters):
    loss, grad, _ = single.value_and_grad(p_single)
    hist_single.append(loss)
    opt.step(p_single, grad)

theta, opt, hist_ms = ms.initial(p0), sc.Adam(0.01), []
for _ in range(3 * iters):
    loss, grad = ms.value_and_grad(theta)
    hist_ms.append(loss)
    opt.step(theta, grad)
p_ms, U_ms = ms.split(theta)
# polish: single shooting from the multiple-shooting parameters
fun = ScipyFun(lambda q: single.value_and_grad(q)[:2])
res = scipy.optimize.minimize(
    fun, p_ms, jac=True, method="L-BFGS-B", options={"maxiter": 20 if QUICK else 200}
)
print(f"single shooting, {iters} Adam steps: data SSE {single.value(p_single):.3g}")
print(f"multiple shooting, {3 * iters} Adam steps: data SSE {single.value(p_ms):.3g}")
print(f"  then {res.nit} L-BFGS steps of single shooting: {res.fun:.3g}")
print(f"(noise floor, the truth's SSE: {np.sum((simulate(u0, ts) - series) ** 2):.3g})")""",
        """fig, ax = plt.subplots(1, 3, figsize=(15, 4))
for k, (s, e) in enumerate(ms.segments):
    seg = solve(model.problem(U_ms[k], (ts[s], ts[e]), p_ms), saveat=ts[s : e + 1], **tol).u
    ax[0].plot(ts[s : e + 1], seg[:, 0], "-", lw=1.5)
ax[0].plot(ts, series[:, 0], "k.", ms=2)
ax[0].set_title("multiple shooting: segments (x)")
t_dense = np.linspace(0.0, 6.0, 601)
for q, color in ((p_single, "C0"), (res.x, "C1")):
    sol = solve(model.problem(u0, (0.0, 6.0), q), saveat=t_dense, **tol)
    if sol.success:
        ax[1].plot(sol.u[:, 0], sol.u[:, 1], "-", color=color)
ax[1].plot(series[:, 0], series[:, 1], "k.", ms=2)
ax[1].set_title("from u0: single (blue), multiple + polish (orange)")
ax[2].semilogy(hist_single, label="single shooting")
ax[2].semilogy(np.arange(len(hist_ms)), hist_ms, label="multiple shooting")
ax[2].legend()
ax[2].set_xlabel("Adam step")
ax[2].set_title("loss")
plt.show()""",
    ],
    # ------------------------------------------------------------------------------------
    "theophylline_population.ipynb": [
        Md(
            "# Theophylline: population PK by FOCE-I\n\n"
            "The 12 subjects of R's `Theoph` data (one oral dose each, in mg, into the depot at "
            "t = 0; 132 concentrations in mg/L), shipped as `scichains.pk.theophylline()`. The "
            "model is nlmixr2's one-compartment model of these data: log-normal random effects on "
            "ka, CL and V (diagonal omega), additive residual error. `pk.fit` estimates the typical "
            "values, omega and the residual standard deviation by FOCE-I (the objective in "
            "NONMEM's -2 log-likelihood convention, exact outer gradient); then the covariance "
            "step, shrinkage, goodness-of-fit plots and a visual predictive check. nlmixr2's "
            "published FOCEi fit of the same model and data: OBJF 116.804; ka 1.594 1/h, "
            "CL 2.751 L/h, V 31.81 L; BSV 70.0, 26.8, 13.9 %CV; add.sd 0.6947 mg/L. "
            "(`python -m scichains run theophylline --json` prints the same fit as JSON.)"
        ),
        QUICK,
        """import sympy as sp

from scichains import pk

data = pk.theophylline()
print(len(data), "subjects,", data.n_obs, "concentrations")
depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
model = pk.PKModel(
    states=[depot, center],  # dose CMT 1 -> depot (amounts, mg)
    odes=[-ka * depot, ka * depot - cl / v * center],
    individual={ka: sp.exp(tka + eka), cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev)},
    theta={tka: 0.45, tcl: 1.0, tv: 3.45},  # log 1/h, log L/h, log L
    eta=[eka, ecl, ev],
    omega=[0.6, 0.3, 0.1],  # initial variances (diagonal omega)
    observe=center / v,  # mg/L
    error=pk.Additive(0.7),
)""",
        """fit = pk.fit(model, data, method="focei")
print(f"{fit.message} OFV {fit.ofv:.3f} ({fit.n_evaluations} evaluations, {fit.seconds:.2f} s)")
cov = pk.covariance(model, data, fit)  # sandwich (R^-1 S R^-1)
shrink = pk.shrinkage(fit)
cv = fit.omega_cv()
print("          estimate  RSE%  BSV(CV%)  shrinkage(SD)%")
for k, (name, unit) in enumerate((("ka", "1/h"), ("CL", "L/h"), ("V", "L"))):
    est = np.exp(list(fit.theta.values())[k])  # RSE of exp(theta) = SE of theta
    rse = 100 * cov.se_theta[k]
    print(f"{name:3s} {unit:4s} {est:8.4g} {rse:6.1f} {cv[k]:8.1f} {shrink[k]:8.1f}")
print(f"add mg/L {fit.sd['add']:8.4g} {100 * cov.se_sd[0] / fit.sd['add']:6.1f}")""",
        """table = pk.residuals(model, data, fit)  # PRED, IPRED, RES, WRES, IWRES, CPRED, CWRES
fig = pk.gof_plot(table)
plt.show()""",
        """v = pk.vpc(model, data, fit, n_sim=50 if QUICK else 500)
ax = v.plot()
ax.set_xlabel("time (h)")
ax.set_ylabel("theophylline (mg/L)")
plt.show()""",
    ],
}


def build(names=None) -> list[Path]:
    paths = []
    for name, cells in NOTEBOOKS.items():
        if names and name not in names and name.removesuffix(".ipynb") not in names:
            continue
        nb = new_notebook()
        nb.cells = [new_markdown_cell(c) if isinstance(c, Md) else new_code_cell(c) for c in cells]
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nbformat.write(nb, HERE / name)
        paths.append(HERE / name)
    return paths


def execute(path: Path) -> float:
    """Run ``path`` at full size in a scratch directory and store it with its outputs."""
    import tempfile

    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env = {"NUMBA_NUM_THREADS": "1", "SCICHAINS_QUICK": "0"}
    old = {k: os.environ.get(k) for k in (*env, "MPLBACKEND")}
    os.environ.update(env)
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend: PNG outputs
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            NotebookClient(
                nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": tmp}}
            ).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    elapsed = time.perf_counter() - t0
    nbformat.write(nb, path)
    return elapsed


if __name__ == "__main__":
    args = sys.argv[1:]
    run = bool(args) and args[0] == "--execute"
    names = args[1:] if run else args
    for path in build(names):
        if run:
            print(f"{path.name}: executed at full size in {execute(path):.0f} s", flush=True)
