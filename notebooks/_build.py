"""Write the notebooks from the cells below: ``python notebooks/_build.py`` writes them without
outputs; ``python notebooks/_build.py --execute`` also runs each one at full size (nbclient,
``NUMBA_NUM_THREADS=1`` unless :data:`THREADS` says otherwise) and stores it with its outputs
(figures as PNG) so that it reads on a code host without running. ``--execute NAME ...`` runs
only those.

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
        """# scichains.fit: any objective returning (loss, gradient); p is trained in place
res = sc.fit(lambda q: node.loss_and_grad(u0, q, data), p, [(sc.Adam(0.05), 30 if QUICK else 300)])
losses = res.history["loss"]
print(f"loss {losses[0]:.3f} -> {res.loss:.4f} ({res.message})")""",
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
        """import sympy as sp

import scichains as sc
from scichains.adjoint import InterpolatingAdjoint, Objective, SquaredError
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
            "loss-and-gradient evaluations; `scichains.fit` trains with Adam first, then L-BFGS "
            "(SciPy's, on the same objective), and keeps a history of the loss."
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

# Adam, then L-BFGS from where Adam ended; p is trained in place
res = sc.fit(obj, p, [(sc.Adam(0.1), 200), sc.LBFGS(300 if QUICK else 10_000, gtol=1e-10)])
losses = res.history["loss"]
print(
    f"loss {losses[0]:.3f} -> {res.loss:.4f} after 200 Adam and "
    f"{res.stages[1]['nit']} L-BFGS iterations"
)""",
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
        """import sympy as sp

import scichains as sc
from scichains.adjoint import Objective, SquaredError
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

res = sc.fit(obj, p, [(sc.Adam(0.01), 300), sc.LBFGS(200 if QUICK else 3000, gtol=1e-10)])
losses = res.history["loss"]
print(f"loss {losses[0]:.4f} -> {res.loss:.3g} ({res.stages[1]['nit']} L-BFGS iterations)")""",
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
    "lynx_hare_discovery.ipynb": [
        Md(
            "# Lynx and hare: missing terms from real pelt counts, and how far to trust them\n\n"
            "The Hudson's Bay Company pelt counts of snowshoe hare (H) and Canadian lynx (L), "
            "1900-1920, in tens of thousands (`scichains.datasets.load_lynx_hare`). We train on "
            "1900-1915 and hold out 1916-1920 to judge forecasts. On these data:\n\n"
            "1. a known-physics baseline: Lotka-Volterra, H' = alpha H - beta H L, L' = gamma H L "
            "- delta L, its four rates and the initial state fitted;\n"
            "2. which terms the data themselves support: E-SINDy (bagged sparse regression) on "
            "smoothed derivatives gives each candidate term an inclusion probability;\n"
            "3. a universal differential equation (UDE) that keeps only the growth of hares and "
            "the death of lynx (alpha H, -delta L) and learns the rest with a network, warm-"
            "started by collocation and refined through the adjoint;\n"
            "4. the terms the trained network stands for, each structure refitted to the data, "
            "and every model's forecast of the held-out years.\n\n"
            "Then a synthetic system whose missing term is cubic, recovered both from a trained "
            "UDE and directly from the samples by weak-form regression."
        ),
        QUICK,
        """import sympy as sp

import scichains as sc
from scichains.adjoint import Objective, SquaredError
from scichains.datasets import load_lynx_hare
from scichains.ode import NetworkTerm, SymbolicModel, solve

table = load_lynx_hare()  # year, hare, lynx (thousands of pelts)
t_all = table[:, 0] - 1900.0  # years since 1900
Z = table[:, 1:] / 10.0  # tens of thousands of pelts
n_train = 16  # 1900-1915; 1916-1920 held out
ts, data = t_all[:n_train], Z[:n_train]
tol = dict(rtol=1e-8, atol=1e-10)
H, L = sp.symbols("H L")


def trajectory(model, p, u0, t):
    \"\"\"The model's states at times t (from t = 0).\"\"\"
    return solve(model.problem(u0, (0.0, t[-1]), p), saveat=t, **tol).u


def held_out_rmse(pred):
    \"\"\"Root-mean-square error of a trajectory at all 21 years on the held-out years.\"\"\"
    return float(np.sqrt(np.mean((pred[n_train:] - Z[n_train:]) ** 2)))


def fit_with_initial_state(objective, p, u0, stages):
    \"\"\"Fit the parameters and the initial state together: theta = [p, u0].\"\"\"
    k = p.size
    theta = np.concatenate([p, u0])

    def value_and_grad(th):
        loss, dp, du0 = objective.value_and_grad(th[:k], th[k:])
        return loss, np.concatenate([dp, du0])

    res = sc.fit(value_and_grad, theta, stages, progress=False)
    return theta[:k], theta[k:], res""",
        Md(
            "## 1. The known-physics baseline\n\nLotka-Volterra as a `SymbolicModel`, fitted by "
            "L-BFGS from rough guesses; the initial state is fitted too (the 1900 counts are "
            "as noisy as the rest)."
        ),
        """a, b, g, d = sp.symbols("alpha beta gamma delta")
lv = SymbolicModel([H, L], [a, b, g, d], [a * H - b * H * L, g * H * L - d * L])
p_guess = lv.pack(alpha=0.5, beta=0.2, gamma=0.2, delta=0.5)
obj_lv = Objective(lv.problem(data[0], (0.0, ts[-1]), p_guess), SquaredError(data), ts, **tol)
p_lv, u0_lv, res_lv = fit_with_initial_state(obj_lv, p_guess, data[0], [sc.LBFGS(500)])
pred_lv = trajectory(lv, p_lv, u0_lv, t_all)
print("rates:", dict(zip(lv.params, np.round(p_lv, 4))), " initial state:", np.round(u0_lv, 3))
print(f"training SSE {res_lv.loss:.3f}; held-out RMSE {held_out_rmse(pred_lv):.3f}")""",
        Md(
            "## 2. Which terms do the data support?\n\nThe derivatives from a smoothing spline "
            "(penalty by generalised cross-validation), then E-SINDy: STLSQ on 100 bootstrap "
            "resamples, each at the threshold its own AICc chooses. An inclusion probability is "
            "the fraction of resamples that keep the term. Sixteen noisy years leave the "
            "structure uncertain, and the table says so: no candidate term is certain."
        ),
        """from scichains.discovery import PolynomialLibrary, derivatives, ensemble_sparse_regression

library = PolynomialLibrary(degree=2)
names = library.names(["H", "L"])
dZ = derivatives(ts, data)  # method="spline"
esindy = ensemble_sparse_regression(
    data, dZ, library, input_names=["H", "L"], target_names=["H'", "L'"]
)
print("inclusion probability of each term (E-SINDy on the smoothed derivatives)")
print(f"{'term':>6} {'in H_dot':>9} {'in L_dot':>9}")
for name, (ph, pl) in zip(names, esindy.inclusion):
    print(f"{name:>6} {ph:9.2f} {pl:9.2f}")""",
        Md(
            "## 3. The UDE\n\nH' = alpha H + U_0(H, L), L' = -delta L + U_1(H, L); the network "
            "(2 -> 8 -> 8 -> 2, tanh) sees the counts divided by 5 (inputs of order one). "
            "Started from random weights, the adjoint fit diverges at first (hares grow "
            "exponentially until the network learns predation); "
            "`discovery.collocate` first fits the right-hand side to the spline's derivatives "
            "(no solves, about a second), then Adam and L-BFGS refine through the adjoint, with "
            "the initial state."
        ),
        """from scichains.discovery import collocate

chain = sc.SimpleChain(2, sc.Dense(8, "tanh"), sc.Dense(8, "tanh"), sc.Dense(2))
U = NetworkTerm(chain, [H / 5, L / 5])
ude = SymbolicModel([H, L], [a, d], [a * H + U[0], -d * L + U[1]], network=U)
p0 = ude.pack(alpha=0.5, delta=0.9, network=chain.init_params(seed=1, dtype=np.float64))
prob = ude.problem(data[0], (0.0, ts[-1]), p0)
p_col = collocate(prob, ts, data, p0, adam_iters=200, lr=0.01)
obj_ude = Objective(prob, SquaredError(data), ts, **tol)
print(f"training SSE from the random start {obj_ude.value(p0):.3g}, after collocation "
      f"{obj_ude.value(p_col):.3g}")  # fmt: skip
stages = [(sc.Adam(0.005), 300), sc.LBFGS(100 if QUICK else 1000)]
p_ude, u0_ude, res_ude = fit_with_initial_state(obj_ude, p_col, data[0], stages)
pred_ude = trajectory(ude, p_ude, u0_ude, t_all)
print(
    f"UDE training SSE {res_ude.loss:.3f} (Lotka-Volterra {res_lv.loss:.3f}); "
    f"held-out RMSE {held_out_rmse(pred_ude):.3f} (Lotka-Volterra {held_out_rmse(pred_lv):.3f})"
)""",
        Md(
            "## 4. What did the network learn, and does it forecast?\n\nFirst E-SINDy on the "
            "network's outputs along its trajectory (which terms describe *the network*), then "
            "`select_structure`: the STLSQ candidates, each refitted to the *data* through the "
            "adjoint and scored by BIC plus 2 per term, improved by a stepwise search. Each "
            "candidate's forecast of the held-out years is printed beside its training error."
        ),
        """from scichains.discovery import select_structure, ude_samples

t_fine = np.linspace(0.0, ts[-1], 151)
states, learned = ude_samples(ude, p_ude, u0_ude, t_fine)
on_network = ensemble_sparse_regression(
    states, learned, library, input_names=["H", "L"], target_names=["U_0", "U_1"]
)
print("inclusion probability of each term in the network's outputs")
print(f"{'term':>6} {'in U_0':>7} {'in U_1':>7}")
for name, (p0_, p1_) in zip(names, on_network.inclusion):
    print(f"{name:>6} {p0_:7.2f} {p1_:7.2f}")

# QUICK (the test suite): one stepwise search instead of four
result = select_structure(ude, p_ude, library, data, ts, u0_ude, starts=1 if QUICK else 4)
found, q_found = result.best.to_symbolic_model()
pred_found = trajectory(found, q_found, u0_ude, t_all)


def describe(s):
    model_s, q_s = s.to_symbolic_model()
    rmse_s = held_out_rmse(trajectory(model_s, q_s, u0_ude, t_all))
    print(f"{s.n_terms} terms, training SSE {s.sse:.3f}, score {s.score:.2f}, "
          f"held-out RMSE {rmse_s:.3f}")  # fmt: skip
    print("    " + "\\n    ".join(s.equations(precision=3)))


print(f"\\n{len(result.candidates)} candidate structures refitted to the data; the best three:")
for s in result.candidates[:3]:
    describe(s)
print("selected after the stepwise search:")
describe(result.best)""",
        Md(
            "Every structure keeps the predation term H L in both equations, as the "
            "Lotka-Volterra hypothesis says, and the best candidates' lynx equation is "
            "Lotka-Volterra's own. The UDE and the selected structure fit the training years "
            "several times better than Lotka-Volterra and forecast the held-out years worse: "
            "with sixteen noisy years, the BIC rewards terms that fit the noise of this "
            "particular record (the structure with the lowest score is not the one that "
            "forecasts best). The inclusion probabilities from the data (section 2) warned of "
            "that, while those on the network's outputs (close to 1 for most terms) only say "
            "which terms describe the network, whose outputs carry no noise. What to take from "
            "it: the discovered terms are a hypothesis to test on more data (other fur-trade "
            "records, later years), and the four-parameter model is the one to forecast with "
            "until then."
        ),
        """t_dense = np.linspace(0.0, 20.0, 201)
curves = {
    "Lotka-Volterra": (lv, p_lv, u0_lv),
    "UDE": (ude, p_ude, u0_ude),
    "discovered": (found, q_found, u0_ude),
}
print(f"{'model':>15} {'held-out RMSE':>14}")
for label, pred in [("Lotka-Volterra", pred_lv), ("UDE", pred_ude), ("discovered", pred_found)]:
    print(f"{label:>15} {held_out_rmse(pred):14.3f}")
fig, ax = plt.subplots(1, 2, figsize=(14, 4.5), sharex=True)
for j, species in enumerate(["hare", "lynx"]):
    ax[j].plot(1900 + ts, data[:, j], "ko", label="training years")
    ax[j].plot(1900 + t_all[n_train:], Z[n_train:, j], "rs", label="held out")
    for label, (model, q, u0) in curves.items():
        ax[j].plot(1900 + t_dense, trajectory(model, q, u0, t_dense)[:, j], label=label)
    ax[j].axvline(1915.5, color="grey", lw=0.5)
    ax[j].set_title(f"{species} pelts (tens of thousands)")
ax[0].legend()
plt.show()""",
        Md(
            "## A synthetic system with a cubic missing term\n\nA damped Duffing oscillator, "
            "x' = v, v' = -x - 0.1 v - x^3, sampled every 0.1 on [0, 10] with noise of 2% of "
            "each state's standard deviation. Weak-form regression (weak SINDy) on the samples "
            "alone, then a UDE that knows everything except the cubic restoring force, "
            "v' = -x - 0.1 v + U(x), and the structure its network stands for."
        ),
        """from scichains.discovery import weak_sparse_regression

x, v = sp.symbols("x v")
duffing = SymbolicModel([x, v], [], [v, -x - 0.1 * v - x**3])
y0 = np.array([2.0, 0.0])
t_d = np.linspace(0.0, 10.0, 101)
clean = solve(duffing.problem(y0, (0.0, 10.0), np.zeros(0)), saveat=t_d, rtol=1e-10, atol=1e-12).u
rng = np.random.default_rng(0)
samples = clean + 0.02 * clean.std(axis=0) * rng.standard_normal(clean.shape)
cubic = PolynomialLibrary(degree=3)
names_d = dict(input_names=["x", "v"], target_names=["x'", "v'"])
weak = weak_sparse_regression(t_d, samples, cubic, **names_d)
print("weak form, from the samples alone:")
print(weak)

net = sc.SimpleChain(1, sc.Dense(8, "tanh"), sc.Dense(8, "tanh"), sc.Dense(1))
Ux = NetworkTerm(net, [x])
ude_d = SymbolicModel([x, v], [], [v, -x - 0.1 * v + Ux[0]], network=Ux)
q = ude_d.pack(network=net.init_params(seed=1, dtype=np.float64))
prob_d = ude_d.problem(y0, (0.0, 10.0), q)
q = collocate(prob_d, t_d, samples, q)
obj_d = Objective(prob_d, SquaredError(samples), t_d, rtol=1e-7, atol=1e-9)
res_d = sc.fit(obj_d, q, [(sc.Adam(0.01), 200), sc.LBFGS(100 if QUICK else 500)], progress=False)
found_d = select_structure(ude_d, q, cubic, samples, t_d, y0).best
print(f"\\nUDE training SSE {res_d.loss:.4f}; the structure of its network, refitted to the data:")
print("\\n".join(found_d.equations()))""",
    ],
    # ------------------------------------------------------------------------------------
    "events_and_inputs.ipynb": [
        Md(
            "# Events and measured inputs: a heated room, a bouncing ball, dosing by a rule\n\n"
            "Three models that need more than `u' = f(u, p, t)`:\n\n"
            "1. **A measured input.** A room whose temperature follows the outside temperature "
            "and a heater, both measured hourly. A neural ODE that sees the inputs "
            "(`NeuralODE(..., inputs=ode.Interpolation(...))`) against the same network "
            "without them, judged on a held-out day.\n"
            "2. **A state-dependent event with an affect.** A ball dropped from an unknown "
            "height bounces with an unknown restitution; a video gives its landing times. The "
            "gradient passes through the events (`adjoint.EventTimeLoss`).\n"
            "3. **Dosing by a rule.** A drug is given again whenever its concentration falls "
            "below 2 mg/L: the dosing times depend on the parameters being fitted, and the "
            "gradient accounts for that (`adjoint.Objective(..., events=...)`)."
        ),
        QUICK,
        Md(
            "## 1. A heated room with a measured outside temperature\n\n"
            "Three days of hourly samples: the outside temperature (a daily cycle plus weather), "
            "the heater's on/off state, and a thermometer in the room (noise 0.15 degC). The "
            "room's true dynamics (unknown to the models) have wall losses, a heat pump whose "
            "output falls as the room warms, and a cubic loss. The models work in scaled units, "
            "(T - 15 degC) / 5 degC, as one standardises any network's inputs. We train on the "
            "first two days and predict the third."
        ),
        """import time

import numba

import scichains as sc
from scichains import adjoint, ode
from scichains.models import NeuralODE

rng = np.random.default_rng(4)
hours = np.arange(0.0, 73.0)  # three days, hourly samples
weather = np.cumsum(rng.normal(0.0, 0.6, hours.size))  # slow weather drift, degC
outside = 6.0 + 5.0 * np.sin(2 * np.pi * (hours - 9.0) / 24.0) + weather
heater = np.where((hours % 24 >= 6) & (hours % 24 < 21), 1.0, 0.0)
heater[30:34] = 0.0  # someone switched it off one afternoon


def scaled(temp):  # the models' units
    return (temp - 15.0) / 5.0


inputs = ode.Interpolation(hours, np.stack([scaled(outside), heater], axis=1), kind="linear")


@numba.njit
def true_room(du, u, p, t, x):  # x[0]: outside (scaled), x[1]: heater on (1) or off (0)
    du[0] = -0.15 * (u[0] - x[0]) + x[1] * 0.8 * (1.0 - 0.4 * u[0]) - 0.02 * u[0] ** 3


u0 = np.array([scaled(14.0)])
truth = ode.solve(
    ode.ODEProblem(true_room, u0, (0.0, 72.0), inputs=inputs),
    ode.Tsit5(),
    saveat=hours[1:],
    rtol=1e-9,
    atol=1e-11,
).u
measured = truth + rng.normal(0.0, 0.03, truth.shape)
train = hours[1:] <= 48.0""",
        Md(
            "Two neural ODEs with the same hidden layer: one sees `[T, outside, heater]`, the "
            "other only `T`. Both are trained the same way (Adam, then L-BFGS, through "
            "`scichains.fit` on the discrete adjoint), from the same seed."
        ),
        """models = {
    "with the inputs": (sc.SimpleChain(3, sc.Dense(16, "tanh"), sc.Dense(1)), {"inputs": inputs}),
    "without them": (sc.SimpleChain(1, sc.Dense(16, "tanh"), sc.Dense(1)), {}),
}
stages = [(sc.Adam(0.01), 100 if QUICK else 500), sc.LBFGS(50 if QUICK else 1000)]
predictions = {}
for name, (chain, kw) in models.items():
    node = NeuralODE(chain, (0.0, 48.0), hours[1:][train], **kw)
    p = chain.init_params(seed=0, dtype=np.float64)
    t0 = time.perf_counter()
    res = sc.fit(
        lambda q, node=node: node.loss_and_grad(u0, q, measured[train]), p, stages, progress=False
    )
    seconds = time.perf_counter() - t0
    pred = NeuralODE(chain, (0.0, 72.0), hours[1:], **kw).predict(u0, p)
    predictions[name] = pred
    err = 5.0 * (pred - truth)[:, 0]  # degC
    rmse_train = np.sqrt(np.mean(err[train] ** 2))
    rmse_held = np.sqrt(np.mean(err[~train] ** 2))
    print(
        f"{name:>16}: trained in {seconds:.1f} s; RMSE on days 1-2 {rmse_train:.2f} degC, "
        f"on the held-out day 3 {rmse_held:.2f} degC"
    )""",
        """fig, ax = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
ax[0].plot(hours, outside, label="outside (measured)")
ax[0].fill_between(hours, -3, -3 + 3 * heater, step="post", alpha=0.3, label="heater on")
ax[0].set_ylabel("degC")
ax[0].legend(loc="upper left")
ax[1].plot(hours[1:], 15 + 5 * measured[:, 0], ".", color="gray", label="room (measured)")
for name, pred in predictions.items():
    ax[1].plot(hours[1:], 15 + 5 * pred[:, 0], label=f"neural ODE {name}")
ax[1].axvline(48.0, color="k", lw=0.8)
ax[1].text(49.0, ax[1].get_ylim()[0] + 1.0, "held out")
ax[1].set_xlabel("hours")
ax[1].set_ylabel("degC")
ax[1].legend(loc="upper left")
plt.show()""",
        Md(
            "Without the inputs the network can only learn an autonomous one-dimensional ODE, "
            "whose solutions are monotone: it settles near the mean and misses every daily "
            "cycle. With them it follows the held-out day it never saw (its error there is "
            "larger than on the training days: day 3's weather differs). The solver stops at "
            "every sample of a linear input (a kink), so no step straddles one."
        ),
        Md(
            "## 2. A bouncing ball fitted to its landing times\n\n"
            "Height `u[0]`, velocity `u[1]`; an event where the height crosses zero downward, "
            "whose affect reverses the velocity times the restitution `e`. A 240-frames-per-"
            "second video gives the first six landing times (rounding noise of 1/240 s)."
        ),
        """@numba.njit
def falling(du, u, p, t):  # p = [g, restitution]
    du[0] = u[1]
    du[1] = -p[0]


@numba.njit
def ground(u, t, p):
    return u[0]


@numba.njit
def bounce(u, t, p):
    u[1] = -p[1] * u[1]


g, h_true, e_true = 9.81, 1.35, 0.78
ball = ode.ODEProblem(falling, [h_true, 0.0], (0.0, 8.0), [g, e_true])
landing = ode.Event(ground, bounce, direction=-1)
seen = ode.solve(ball, ode.Tsit5(), rtol=1e-10, atol=1e-12, events=landing)
video = seen.t_events[0][:6] + rng.normal(0.0, 1 / 240, 6)
print("landing times in the video:", np.round(video, 4))""",
        Md(
            "The loss is the squared difference between the model's first six landing times "
            "and the video's; `value_and_grad(p, u0)` gives its gradient with respect to `p` "
            "(the restitution) and `u0` (the drop height), through the events. A first guess "
            "comes from the video itself: the first fall gives the height (h = g t1^2 / 2), the "
            "ratio of two successive flights the restitution. The bounds keep every trial "
            "point's sixth landing inside the 8 s solved."
        ),
        """fit_to = adjoint.Objective(
    ball,
    None,
    None,
    rtol=1e-10,
    atol=1e-12,
    events=landing,
    event_loss=adjoint.EventTimeLoss(video),
)


def landing_loss(q):  # q = [drop height, restitution]
    value, dp, du0 = fit_to.value_and_grad(np.array([g, q[1]]), np.array([q[0], 0.0]))
    return value, np.array([du0[0], dp[1]])


q = np.array([g * video[0] ** 2 / 2, (video[2] - video[1]) / (video[1] - video[0])])
print(f"first guess: height {q[0]:.4f} m, restitution {q[1]:.4f}")
res = sc.fit(landing_loss, q, [sc.LBFGS(200, bounds=[(0.2, 3.0), (0.2, 0.95)])], progress=False)
print(f"fitted:      height {q[0]:.4f} m, restitution {q[1]:.4f} ({res.message})")
print(f"truth:       height {h_true:.4f} m, restitution {e_true:.4f}")""",
        """fitted = ode.solve(
    ode.ODEProblem(falling, [q[0], 0.0], (0.0, 3.5), [g, q[1]]),
    ode.Tsit5(),
    saveat=np.linspace(0.0, 3.5, 701),
    rtol=1e-10,
    atol=1e-12,
    events=landing,
)
fig, ax = plt.subplots(figsize=(10, 3.5))
ax.plot(fitted.t, fitted.u[:, 0], label="fitted model")
ax.plot(video, np.zeros(6), "o", label="landings in the video")
ax.set_xlabel("s")
ax.set_ylabel("height (m)")
ax.legend()
plt.show()""",
        Md(
            "## 3. Dosing by a rule: a dose whenever the concentration falls below 2 mg/L\n\n"
            "A one-compartment model, C' = -k C, with a dose raising C by `dose/V` each time "
            "C crosses 2 mg/L downward (the first dose at t = 0 is the initial state). The "
            "dosing times are not data: they follow from `k` and `dose/V`, so a fit must move "
            "them with the parameters. Concentrations are sampled every 1.5 h over a day with "
            "a 5% proportional assay error; the pump logs when it dosed, to the minute."
        ),
        """@numba.njit
def elimination(du, u, p, t):  # u[0]: concentration (mg/L); p = [k (1/h), dose/V (mg/L)]
    du[0] = -p[0] * u[0]


@numba.njit
def below_threshold(u, t, p):
    return u[0] - 2.0


@numba.njit
def redose(u, t, p):
    u[0] += p[1]


k_true, c_true = 0.23, 6.0
rule = ode.Event(below_threshold, redose, direction=-1)
# solved past the last sample (36 h), so that trial parameters still dose as often as logged
drug = ode.ODEProblem(elimination, [c_true], (0.0, 36.0), [k_true, c_true])
times = np.arange(1.0, 24.5, 1.5)
true = ode.solve(drug, ode.Tsit5(), saveat=times, rtol=1e-10, atol=1e-12, events=rule)
conc = true.u * (1 + rng.normal(0.0, 0.05, true.u.shape))
doses = true.t_events[0][true.t_events[0] <= 24.0]
logged = doses + rng.normal(0.0, 1 / 60, doses.size)
print("redoses (h):", np.round(doses, 3), " in the pump's log:", np.round(logged, 3))""",
        Md(
            "The loss: the concentrations' squared errors weighted by 1 / C^2 (a proportional "
            "error) plus the squared differences between the model's redose times and the "
            "log's, weighted as a 6-minute error (`adjoint.EventTimeLoss`). The log matters: "
            "when a redose time crosses a sample time as the parameters move, that sample jumps "
            "by a dose, so the concentrations alone give a loss with jumps and other minima "
            "(fitted without the log on 14 noise seeds, on the scale below: 2 ended at other "
            "minima, k = 0.35 and 0.72 1/h with smaller, more frequent doses, and 2 stopped "
            "when the line search met a jump; with it, 14 of 14 within 1.1% of the true k). The "
            "parameters are fitted on a log scale (divided by 20, so that L-BFGS's first unit "
            "step changes them by 5%), from initial estimates made as a pharmacometrician "
            "makes them: a log-linear fit to the samples of the first dose gives `k` and the "
            "concentration at 0, i.e. `dose/V`. The initial state is `dose/V` too, so its "
            "gradient adds to that parameter's."
        ),
        """by_log = adjoint.EventTimeLoss(logged, weights=np.full(doses.size, 1 / 0.1**2))  # 6 min
obj = adjoint.Objective(
    drug,
    adjoint.SquaredError(conc, weights=1 / conc**2),
    times,
    rtol=1e-10,
    atol=1e-12,
    events=rule,
    event_loss=by_log,
)


def dosing_loss(x):  # x = 20 log [k, dose/V]
    q = np.exp(x / 20)
    value, dp, du0 = obj.value_and_grad(q, q[1:2])
    return value, (dp + np.array([0.0, du0[0]])) * q / 20


rise = np.flatnonzero(np.diff(conc[:, 0]) > 0)[0]  # the first sample after a redose
slope, intercept = np.polyfit(times[: rise + 1], np.log(conc[: rise + 1, 0]), 1)
x = 20 * np.log([-slope, np.exp(intercept)])
q = np.exp(x / 20)
print(f"initial estimates: k {q[0]:.4f} 1/h, dose/V {q[1]:.3f} mg/L")
res = sc.fit(dosing_loss, x, [sc.LBFGS(200)], progress=False)
q = np.exp(x / 20)
print(f"fitted:            k {q[0]:.4f} 1/h, dose/V {q[1]:.3f} mg/L ({res.message})")
print(f"truth:             k {k_true:.4f} 1/h, dose/V {c_true:.3f} mg/L")""",
        """grid = np.linspace(0.0, 24.0, 961)
model = ode.solve(
    ode.ODEProblem(elimination, q[1:2], (0.0, 24.0), q),
    ode.Tsit5(),
    saveat=grid,
    rtol=1e-10,
    atol=1e-12,
    events=rule,
)
fig, ax = plt.subplots(figsize=(10, 3.5))
ax.plot(times, conc[:, 0], "o", label="samples")
ax.plot(model.t, model.u[:, 0], label="fitted model")
ax.plot(logged, np.full(logged.size, 2.0), "v", color="k", label="redoses in the pump's log")
ax.axhline(2.0, color="k", lw=0.8, ls="--")
ax.set_xlabel("hours")
ax.set_ylabel("mg/L")
ax.legend()
plt.show()""",
        Md(
            "## 4. Steering by the input: a heater schedule\n\n"
            "The room of part 1 with its known dynamics, on a cold night (4 degC outside): "
            "which heater power, hour by hour from midnight (a zero-order hold between 0 and "
            "1), brings it from 12 to 18 degC at 7:00 with the least heating? "
            "`ODEProblem.with_input_parameters()` makes the input's samples parameters of the "
            "problem, so the adjoint gives the gradient with respect to each hour's power."
        ),
        """night = np.arange(0.0, 8.0)  # the samples: midnight to 7:00
plan = ode.Interpolation(
    night, np.column_stack([np.full(night.size, scaled(4.0)), np.zeros(night.size)]), "constant"
)
problem = ode.ODEProblem(true_room, [scaled(12.0)], (0.0, 7.0), inputs=plan)
problem = problem.with_input_parameters()  # p: the 16 samples (outside, heater) by hour
heat = slice(problem.input_slice.start + 1, None, 2)  # the heater channel of each sample
reach = adjoint.Objective(problem, adjoint.SquaredError([[scaled(18.0)]]), [7.0])


def schedule_loss(h):  # h: the heater power of each hour; 18 degC at 7:00, little heating
    q = problem.p.copy()
    q[heat] = h
    value, dp, _ = reach.value_and_grad(q)
    return 100.0 * value + 0.01 * h @ h, 100.0 * dp[heat] + 0.02 * h


power = np.zeros(night.size)
res = sc.fit(schedule_loss, power, [sc.LBFGS(200, bounds=[(0.0, 1.0)] * night.size)],
             progress=False)  # fmt: skip
problem.p[heat] = power  # the fitted schedule
room = ode.solve(problem, ode.Tsit5(), saveat=np.linspace(0.0, 7.0, 141))
print("heater power by hour:", np.round(power, 2), f"({res.message})")
print(f"room at 7:00: {15 + 5 * room.u[-1, 0]:.2f} degC")""",
        """fig, ax = plt.subplots(2, 1, figsize=(10, 5), sharex=True)
ax[0].step(night, power, where="post")
ax[0].set_ylabel("heater power")
ax[1].plot(room.t, 15 + 5 * room.u[:, 0])
ax[1].axhline(18.0, color="k", lw=0.8, ls="--")
ax[1].set_xlabel("hours after midnight")
ax[1].set_ylabel("room, degC")
plt.show()""",
        Md(
            "The schedule heats little at first and most in the last hours: heat given early "
            "leaks out through the walls before 7:00, so the same warmth at 7:00 costs more "
            "then. The last sample (7:00) acts only at the end and stays at 0.\n\n"
            "These fits use the discrete adjoint; the continuous adjoints, forward "
            "sensitivities and CVODE's adjoint pass through events too "
            "(`sensealg=adjoint.InterpolatingAdjoint()`, `adjoint.ForwardSensitivity()`, "
            "`solver=ode.CVODE_BDF()`; see the ODE guide)."
        ),
        Md(
            "## 5. A dosing rule in a population model, fitted by FOCE-I\n\n"
            "Part 3's rule for a population: 30 patients each given 100 mg IV at 0 receive a "
            "rescue dose of 40 mg when their concentration falls below 0.8 mg/L (once; a "
            "device gives it and its time is not recorded). `pk.DoseRule` puts the rule in "
            "the `PKModel`; the solver finds each crossing, and the rescue time's derivatives "
            "along the random effects and typical values (to the third order FOCE-I's exact "
            "gradient needs) enter the sensitivities. The samples are taken early (0.5-3 h) "
            "and late (30-48 h): every plausible patient's rescue falls between, so no "
            "rescue time crosses a sample as the parameters move (where one does, the "
            "prediction there jumps by the dose, and so does the likelihood)."
        ),
        """import sympy as sp

from scichains import pk

center, cl, v = sp.symbols("center cl v")
tcl, tv, ecl, ev = sp.symbols("tcl tv eta_cl eta_v")


def rescue_model(rules):
    return pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev)},
        theta={tcl: np.log(3.0), tv: np.log(40.0)},  # initial estimates, not the truth
        eta=[ecl, ev],
        omega=np.array([0.1, 0.1]),
        observe=center / v,
        error=pk.Exponential(0.2),
        rules=rules,
    )


rescue = rescue_model([pk.DoseRule(center / v - 0.8, center, 40.0, direction=-1, max_doses=1)])
t_obs = np.array([0.5, 1.5, 3.0, 30.0, 36.0, 42.0, 48.0])
patients = pk.EventData(
    [
        pk.Subject(i + 1, [pk.Dose(0.0, 100.0, 0)], t_obs, np.ones(t_obs.size), np.arange(7))
        for i in range(30)
    ],
    [],
)
truth = rescue.pack(theta=[np.log(4.0), np.log(30.0)], omega=np.diag([0.09, 0.04]), sd=[0.1])
dv = pk.simulate(rescue, patients, truth, 1, seed=5)[0].reshape(30, 7)
for s, row in zip(patients.subjects, dv):
    s.dv[:] = row
fit = pk.fit(rescue, patients)
no_rule = pk.fit(rescue_model([]), patients)
cl_hat, v_hat = np.exp(list(fit.theta.values()))
bsv_cl, bsv_v = 100 * np.sqrt(np.diag(fit.omega))
print(
    f"FOCE-I with the rule: CL {cl_hat:.2f} L/h, V {v_hat:.1f} L (simulated: 4 and 30), "
    f"BSV {bsv_cl:.0f}% and {bsv_v:.0f}% (30% and 20%), OFV {fit.ofv:.1f}, {fit.seconds:.1f} s"
)
print(f"the same model without the rule: OFV {no_rule.ofv:.1f}")""",
        """dense = np.linspace(0.05, 48.0, 600)
shown = [0, 1, 2, 3]
grid = pk.EventData(
    [
        pk.Subject(
            i + 1, [pk.Dose(0.0, 100.0, 0)], dense, np.ones(dense.size), np.arange(dense.size)
        )
        for i in shown
    ],
    [],
)
curves = pk.PopulationObjective(rescue, grid).predict(fit.x, etas=fit.etas[shown])
fig, ax = plt.subplots(1, 4, figsize=(15, 3.5), sharey=True)
for a, i, c in zip(ax, shown, curves):
    a.semilogy(t_obs, dv[i], "o", label="samples")
    a.semilogy(dense, c, label="individual prediction")
    a.axhline(0.8, color="k", lw=0.8, ls="--")
    jump = dense[1:][np.diff(c) > 0]
    a.set_title(f"patient {i + 1}: rescue at {jump[0]:.1f} h" if jump.size else f"patient {i + 1}")
    a.set_xlabel("hours")
ax[0].set_ylabel("mg/L")
ax[0].legend()
plt.show()""",
        Md(
            "The late samples lie above the first dose's decay by the rescue dose, decayed "
            "from a time that differs from patient to patient; the model without the rule "
            "cannot place them (its OFV is about 200 points worse), and the model with it "
            "recovers CL and V within a few percent. The same `PKModel` simulates, predicts "
            "and fits with the rule (`pk.simulate`, `pk.vpc`, `pk.covariance`, ...); see the "
            "pk guide for what is checked and what is not supported with rules."
        ),
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
            "(`scichains.fit(..., batch_size=4)`); the trajectories of a batch run on threads "
            "and the "
            "result is identical for any thread count.\n"
            "2. One long series (2.5 turns of the spiral): single shooting stalls; "
            "`adjoint.MultipleShooting` fits segments from free initial states tied by a "
            "continuity penalty, then a short single-shooting polish."
        ),
        QUICK,
        """from scipy.integrate import solve_ivp

import scichains as sc
from scichains.adjoint import Trajectory
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
            "## Training on mini-batches\n\n`node.objective(trajectories)` builds the "
            'objective once. With the default `lockstep="auto"` the trajectories of a batch '
            "step together as one system (the network on all their states at once), saved at "
            "the union of their times, each trajectory's data weighted at its own times; "
            "`NeuralODE(..., lockstep=None)` would solve each alone. "
            "`value_and_grad(p, batch=idx)` "
            "returns the loss and gradient summed over the batch, and dL/du0 for its rows; "
            "`scichains.fit` draws the batches (`batch_size=4`, reshuffled each epoch) and a "
            "callback lowers the learning rate."
        ),
        """chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(50, "tanh"), sc.Dense(2))
p = chain.init_params(seed=0, dtype=np.float64)
node = NeuralODE(chain, (0.0, 1.5), np.linspace(0.0, 1.5, 2))  # saveat: per trajectory here
obj = node.objective(trajectories)  # value_and_grad(p, batch=...), obj.m trajectories
epochs = 20 if QUICK else 600


def schedule(info):  # called before each step: learning rate from 0.02 down to 0.001
    info.optimizer.lr = 0.02 * 0.05 ** (info.epoch / epochs)


res = sc.fit(obj, p, [(sc.Adam(0.02), epochs)], batch_size=4, callback=schedule, keep="last")
h = res.history  # one row per batch; an epoch's rows add up to its loss at moving parameters
losses = np.bincount(h["epoch"], weights=h["loss"])
print(
    f"loss {losses[0]:.3f} in the first epoch -> {res.loss:.4f} (all trajectories) "
    f"after {epochs} epochs"
)
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
ax[2].set_title("loss per epoch (sum over its batches)")
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
    "stiff_models.ipynb": [
        Md(
            "# Stiff models: Rodas5P, ESDIRK, CVODE, and gradients through them\n\n"
            "Robertson's chemical kinetics (three species, rate constants 0.04, 3e7 and 1e4: "
            "time scales from 1e-8 to 1e5) is the classic stiff test problem. We solve it with "
            "the compiled stiff methods and with SUNDIALS' CVODE, show what an explicit method "
            "does on it, then fit the three rate constants to noisy data with exact gradients "
            "(the discrete adjoint through the Rosenbrock steps) and check those gradients "
            "against central differences."
        ),
        QUICK,
        """import time

import numba

import scichains as sc
from scichains import adjoint, ode


@numba.njit
def robertson(du, u, p, t):  # p: log rate constants (positive rates for any p)
    k1, k2, k3 = np.exp(p[0]), np.exp(p[1]), np.exp(p[2])
    du[0] = -k1 * u[0] + k3 * u[1] * u[2]
    du[1] = k1 * u[0] - k2 * u[1] ** 2 - k3 * u[1] * u[2]
    du[2] = k2 * u[1] ** 2


k_true = np.log([0.04, 3e7, 1e4])
u0 = np.array([1.0, 0.0, 0.0])
ts = np.logspace(-5, 5, 40)  # save times, seconds
prob = ode.ODEProblem(robertson, u0, (0.0, 1e5), k_true)
ref = ode.solve(prob, ode.Rodas5P(), saveat=ts, rtol=1e-12, atol=1e-16).u  # reference""",
        Md(
            "## Solvers\n\n"
            "Each stiff method at `rtol=1e-8, atol=1e-12`: time per solve (after the first, "
            "which compiles), steps, Jacobians and LU factorisations, and the largest error "
            "against the tight reference, scaled by the tolerances "
            "(`|u - ref| / (atol + rtol |ref|)`: the tolerances bound each step's local error, "
            "so the global error over 40 save points is a few to a hundred times larger, "
            "least for the higher-order methods). "
            "The Rosenbrock methods build an exact Jacobian at every step (here from the "
            "automatic vjp of the compiled right-hand side); the ESDIRK methods reuse one "
            "until their Newton iterations slow down; CVODE is SUNDIALS' variable-order BDF, "
            "called with compiled callbacks."
        ),
        """solvers = {
    "Rodas5P": ode.Rodas5P(),
    "Rosenbrock23": ode.Rosenbrock23(),
    "Kvaerno5": ode.Kvaerno5(),
    "KenCarp4": ode.KenCarp4(),
    "CVODE_BDF": ode.CVODE_BDF(),
}
print(f"{'solver':13s} {'ms':>7s} {'steps':>6s} {'Jacobians':>9s} {'LUs':>5s} {'error/tol':>9s}")
for name, solver in solvers.items():
    ode.solve(prob, solver, saveat=ts, rtol=1e-8, atol=1e-12)  # compile (first call)
    t0 = time.perf_counter()
    for _ in range(5):
        sol = ode.solve(prob, solver, saveat=ts, rtol=1e-8, atol=1e-12)
    ms = (time.perf_counter() - t0) / 5 * 1e3
    st = sol.stats
    err = np.max(np.abs(sol.u - ref) / (1e-12 + 1e-8 * np.abs(ref)))
    jac = st.get("njac", st.get("njev", 0))
    lus = str(st["nlu"]) if "nlu" in st else "-"
    print(f"{name:13s} {ms:7.2f} {st['naccept']:6d} {jac:9d} {lus:>5s} {err:9.2g}")""",
        Md(
            "An explicit method has to keep its step below the fastest time scale for the "
            "whole interval: Tsit5 stops at `max_steps` long before t = 1e5."
        ),
        """sol = ode.solve(prob, ode.Tsit5(), saveat=ts, rtol=1e-8, atol=1e-12, max_steps=20_000)
print(sol.status.name, f"after {sol.stats['naccept']} steps, at t = {sol.t_reached:.3g} s")""",
        """sol = ode.solve(prob, ode.Rodas5P(), saveat=ts, rtol=1e-8, atol=1e-12)
fig, ax = plt.subplots(figsize=(7, 4))
for j, (label, scale) in enumerate((("A", 1), ("B x 1e4", 1e4), ("C", 1))):
    ax.semilogx(ts, scale * sol.u[:, j], label=label)
ax.set_xlabel("t (s)")
ax.set_ylabel("concentration")
ax.legend()
ax.set_title("Robertson, Rodas5P")
plt.show()""",
        Md(
            "## Fitting the rate constants\n\n"
            "Data: the reference with 2% log-normal noise. The loss is `LogNormalLoss` (squared "
            "residuals of the logarithms: the three species span nine orders of magnitude). "
            "`adjoint.Objective` is built once and evaluated at new parameters; with Rodas5P "
            "its gradient is the discrete adjoint, exact for the discretised solution. "
            "`check_gradient` compares it with central differences: they agree to the "
            "accuracy central differences of an adaptive solve can reach (which needs the "
            "tighter tolerance: at rtol 1e-8 the step-size choices themselves shift with the "
            "parameters by about 1e-5, relative)."
        ),
        """rng = np.random.default_rng(1)
data = ref * np.exp(0.02 * rng.standard_normal(ref.shape))
p0 = k_true + np.array([0.5, -0.7, 0.6])  # a start 1.6-2x off in each constant
for rtol in (1e-8, 1e-10):
    obj = adjoint.Objective(
        prob, adjoint.LogNormalLoss(data), ts, solver=ode.Rodas5P(), rtol=rtol, atol=rtol * 1e-4
    )
    print(f"rtol {rtol:g}:", adjoint.check_gradient(obj.value_and_grad, p0))""",
        """obj = adjoint.Objective(
    prob, adjoint.LogNormalLoss(data), ts, solver=ode.Rodas5P(), rtol=1e-10, atol=1e-14
)
p_fit = p0.copy()  # trained in place
t0 = time.perf_counter()
res = sc.fit(obj, p_fit, sc.LBFGS(1000), progress=False)  # SciPy's L-BFGS-B, as a fit stage
trace = res.history["loss"]
print(f"{res.message} in {res.stages[0]['nit']} iterations, {time.perf_counter() - t0:.2f} s")
for name, k0, k in zip(("k1", "k2", "k3"), np.exp(k_true), np.exp(p_fit)):
    print(f"{name}: true {k0:.4g}, fitted {k:.4g}")""",
        Md(
            "## The other solvers' gradients\n\n"
            "The ESDIRK methods and CVODE have no discrete adjoint here: their gradients come "
            "from the interpolating adjoint (the adjoint ODE integrated backward by Rodas5P "
            "over the stored forward solution): the gradient of the exact solution up to the "
            "tolerances, rather than the exact gradient of the discretised one. Compared with "
            "central differences of each solver's own solves at rtol 1e-10, KenCarp4's agrees "
            "to about 1e-6; CVODE's differs by a few parts in 1e-4 (its variable-order BDF "
            "steps make both its solution and its central differences less smooth in p); "
            "that is still far below what an optimiser notices."
        ),
        """for name in ("KenCarp4", "CVODE_BDF"):
    o = adjoint.Objective(
        prob, adjoint.LogNormalLoss(data), ts, solver=solvers[name], rtol=1e-10, atol=1e-14
    )
    print(f"{name:10s}", adjoint.check_gradient(o.value_and_grad, p0))""",
        """fig, ax = plt.subplots(figsize=(6, 3.5))
ax.semilogy(trace, "o-")
ax.set_xlabel("L-BFGS-B iteration")
ax.set_ylabel("loss")
ax.set_title("fit of the three rate constants")
plt.show()""",
    ],
    # ------------------------------------------------------------------------------------
    "ensembles.ipynb": [
        Md(
            "# Ensembles: thousands of solves, in process and on Dask\n\n"
            "Lotka-Volterra from a few thousand initial states: `ode.solve_ensemble` runs them in "
            "one compiled loop on numba's threads, with no Python per trajectory; the same call "
            "with `executor=` a `dask.distributed.Client` splits them into batches on the "
            "workers and gives the same numbers bit for bit. Then the gradient of a loss summed "
            "over the ensemble (`adjoint.EnsembleObjective`) on the same executor, and a "
            "multi-start fit with `parallel.sweep`."
        ),
        QUICK,
        """import time

import numba

import scichains
from scichains import adjoint, ode, parallel


@numba.njit
def lotka_volterra(du, u, p, t):
    du[0] = p[0] * u[0] - p[1] * u[0] * u[1]
    du[1] = p[2] * u[0] * u[1] - p[3] * u[1]


m = 1_000 if QUICK else 20_000
rng = np.random.default_rng(0)
u0s = 1.0 + rng.random((m, 2))  # initial states in [1, 2]^2
ts = np.linspace(0.0, 10.0, 50)
prob = ode.ODEProblem(lotka_volterra, [1.0, 1.0], (0.0, 10.0), [1.5, 1.0, 1.0, 3.0])
eprob = ode.EnsembleProblem(prob, u0s=u0s)
ens = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=ts)  # compiles on first use
print(ens.u.shape, "saved states;", int(ens.success.sum()), "of", m, "succeeded")""",
        Md(
            "## In this process: threads, against a Python loop\n\n"
            "Wall-clock times on this machine (they vary with the machine and its load; "
            "`benchmarks/ensemble.py` measures them with repeated, interleaved rounds)."
        ),
        """def seconds(f, rounds=3):
    best = np.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


nthreads = numba.config.NUMBA_NUM_THREADS
one = seconds(lambda: ode.solve_ensemble(eprob, ode.Tsit5(), saveat=ts, threads=1))
every = seconds(lambda: ode.solve_ensemble(eprob, ode.Tsit5(), saveat=ts, threads=nthreads))
k = 200  # a Python loop over solve, timed on k trajectories


def python_loop():
    for i in range(k):
        one_prob = ode.ODEProblem(lotka_volterra, u0s[i], (0.0, 10.0), prob.p)
        ode.solve(one_prob, ode.Tsit5(), saveat=ts)


loop = seconds(python_loop, rounds=1) * m / k
print(f"1 thread {one:.3f} s; {nthreads} threads {every:.3f} s; a Python loop ~{loop:.2f} s")
print(f"per trajectory: {1e6 * one / m:.1f} us on one thread")""",
        """sol = ode.solve(ode.ODEProblem(lotka_volterra, u0s[7], (0.0, 10.0), prob.p), saveat=ts)
print("trajectory 7 equals solve bit for bit:", np.array_equal(sol.u, ens.u[7]))
fig, ax = plt.subplots(figsize=(6, 4))
for i in range(0, m, m // 20):
    ax.plot(ens.u[i, :, 0], ens.u[i, :, 1], lw=0.8)
ax.set_xlabel("prey")
ax.set_ylabel("predator")
ax.set_title(f"20 of the {m} trajectories")
plt.show()""",
        Md(
            "## On Dask\n\n"
            "A `LocalCluster` stands in for a real cluster here (two worker processes of one "
            "thread each; see the how-to *Run on a SLURM cluster* for `dask_jobqueue`). "
            "`scichains.warm_up` loads the compiled kernels on every worker first, so that no "
            "task pays for compilation. Batches are sized from a short pilot solve so that "
            "each task runs for about half a second; the results come back in order."
        ),
        """from dask.distributed import Client, LocalCluster

cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
client = Client(cluster)
scichains.warm_up(client)
ens_dask = ode.solve_ensemble(eprob, ode.Tsit5(), saveat=ts, executor=client)
print("identical to the in-process run:", np.array_equal(ens_dask.u, ens.u))""",
        Md(
            "## Gradients over the ensemble\n\n"
            "The loss summed over every trajectory, `L(p) = sum_i |u_i(ts) - data_i|^2`, and "
            "its gradient with respect to the shared parameters: in process, and with the data "
            "sent to the workers once (each call then sends only `p`). Partial sums are taken "
            "over fixed blocks of trajectories, so the result does not depend on where they ran."
        ),
        """data = ens.u + 0.01 * rng.standard_normal(ens.u.shape)
p_start = np.array([1.3, 0.9, 1.1, 2.7])
local = adjoint.EnsembleObjective(eprob, adjoint.SquaredError(data), ts)
remote = adjoint.EnsembleObjective(eprob, adjoint.SquaredError(data), ts, executor=client)
L1, g1, _ = local.value_and_grad(p_start)
L2, g2, _ = remote.value_and_grad(p_start)
print(f"L = {L1:.6g}; same on Dask: {L1 == L2 and np.array_equal(g1, g2)}")
print("dL/dp =", g1)""",
        Md(
            "## Multi-start fits with `parallel.sweep`\n\n"
            "Independent fits (here: the four parameters of one noisy trajectory from five "
            "random starts) run as futures; `sweep` returns them all, best first, so a start "
            "that ends in a local minimum shows up at the bottom of the list. The fit "
            "function is sent to the workers, so it must be picklable (defined in the "
            "notebook it is pickled by value, with the globals it uses: keep those small)."
        ),
        """target, start_state = data[0].copy(), u0s[0].copy()  # what each fit needs, nothing more


def fit_from(start):
    import scipy.optimize

    from scichains import adjoint, ode

    one = ode.ODEProblem(lotka_volterra, start_state, (0.0, 10.0), start)
    obj = adjoint.Objective(one, adjoint.SquaredError(target), ts, rtol=1e-8, atol=1e-10)
    return scipy.optimize.minimize(
        adjoint.ScipyFun(lambda q: obj.value_and_grad(q)[:2]),
        start,
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.1, 5.0)] * 4,
    )


starts = [np.array([1.5, 1.0, 1.0, 3.0]) * rng.uniform(0.6, 1.4, 4) for _ in range(5)]
results = parallel.sweep(fit_from, starts, executor=client)
for r in results:
    print(f"start {np.round(r.config, 2)} -> loss {r.result.fun:.4g}, p {np.round(r.result.x, 3)}")
client.close()
cluster.close()""",
    ],
    # ------------------------------------------------------------------------------------
    "blog_benchmarks.ipynb": [
        Md(
            "# The SimpleChains.jl blog's two benchmarks, and how to reproduce them\n\n"
            "SimpleChains.jl's announcement measured two small networks on the CPU: an MLP that "
            "learns the exponential of 2x2 matrices (10,000 samples, full batch, Adam) and "
            "LeNet5 on MNIST. `benchmarks/matexp.py` and `benchmarks/lenet5.py` are the full "
            "versions (with the machine's measured peak, PyTorch/JAX peers, compile times; "
            "figures and machines on the Benchmarks page). This notebook runs a short version "
            "of each with the public API, so that you can see what is timed, and times a plain "
            "NumPy implementation of the same MLP step beside it as a reference on your machine."
        ),
        QUICK,
        """import platform
import time

import numba
from llvmlite import binding
from scipy.linalg import expm

import scichains as sc


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


print(cpu_model(), f"(LLVM target {binding.get_host_cpu_name()}),", end=" ")
print(numba.config.NUMBA_NUM_THREADS, "numba threads")""",
        Md(
            "## The matrix exponential\n\n"
            "X: 10,000 random 2x2 matrices (standard normal) flattened to 4 features; Y: their "
            "matrix exponentials. The model: 4 -> Dense(32, tanh) -> Dense(16, tanh) -> Dense(4), "
            "squared loss, Adam(1e-3), float32."
        ),
        """rng = np.random.default_rng(1)
n = 10_000
A = rng.standard_normal((n, 2, 2)).astype(np.float32)
X = A.reshape(n, 4)
Y = np.stack([expm(a.astype(np.float64)) for a in A]).reshape(n, 4).astype(np.float32)
chain = sc.SimpleChain(4, sc.Dense(32, "tanh"), sc.Dense(16, "tanh"), sc.Dense(4))
cwl = chain.add_loss(sc.SquaredLoss(Y))
# multiply-adds per sample and step: forward, weight gradients, input gradients (not layer 1)
macs = 3 * (4 * 32 + 32 * 16 + 16 * 4) - 4 * 32""",
        Md(
            "First a reference: the same training step written with NumPy (matrix products "
            "through BLAS, on BLAS's threads; float32, the same initial weights and Adam), timed "
            "on this machine (before scichains starts its threads, which would compete with "
            "BLAS's). It is a reference implementation, not a tuned peer: the full benchmark "
            "compares against PyTorch and JAX when they are installed (`--peers`)."
        ),
        """def numpy_training(p0, X, Y, steps, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    layers = [(v["W"].copy(), v["b"].copy()) for v in chain.params(p0)]
    m = [(np.zeros_like(W), np.zeros_like(b)) for W, b in layers]
    s = [(np.zeros_like(W), np.zeros_like(b)) for W, b in layers]
    Xt, Yt = X.T.copy(), Y.T.copy()  # features along rows: (4, n)
    N = X.shape[0]
    out = []
    for k in range(1, steps + 1):
        acts = [Xt]
        for i, (W, b) in enumerate(layers):
            z = W @ acts[-1] + b[:, None]
            acts.append(np.tanh(z) if i < 2 else z)
        r = acts[-1] - Yt
        out.append(float(np.sum(r * r)) / N)
        g = 2.0 * r / N
        for i in range(2, -1, -1):
            W, b = layers[i]
            gW, gb = g @ acts[i].T, g.sum(axis=1)
            if i > 0:
                g = (W.T @ g) * (1.0 - acts[i] ** 2)
            for j, (par, grad) in enumerate(((W, gW), (b, gb))):
                m[i][j][...] = b1 * m[i][j] + (1 - b1) * grad
                s[i][j][...] = b2 * s[i][j] + (1 - b2) * grad * grad
                mh = m[i][j] / (1 - b1**k)
                sh = s[i][j] / (1 - b2**k)
                par -= lr * mh / (np.sqrt(sh) + eps)
    return np.array(out)


ref_steps = 50 if QUICK else 500
t0 = time.perf_counter()
ref_losses = numpy_training(chain.init_params(seed=0), X, Y, ref_steps)
np_step = (time.perf_counter() - t0) / ref_steps
print(f"NumPy: {1e4 * np_step:.2f} s per 10,000 steps")""",
        Md(
            "Now scichains: `sc.train_unbatched` runs the steps in one compiled loop on numba's "
            "threads; the parameters are one flat vector `p` updated in place. Its first steps "
            "match the NumPy reference's losses."
        ),
        """p = chain.init_params(seed=0)
check = sc.train_unbatched(p.copy(), cwl, X, sc.Adam(1e-3), ref_steps)  # also compiles
print(
    f"same losses as NumPy: step 1 {ref_losses[0]:.5f} vs {check[0]:.5f}, "
    f"step {ref_steps} {ref_losses[-1]:.5f} vs {check[-1]:.5f}"
)
opt = sc.Adam(1e-3)
steps = 500 if QUICK else 10_000
t0 = time.perf_counter()
losses = sc.train_unbatched(p, cwl, X, opt, steps)
seconds = time.perf_counter() - t0
gflops = 2 * macs * n * steps / seconds / 1e9
print(
    f"{steps} steps in {seconds:.2f} s: {1e4 * seconds / steps:.2f} s per 10,000 steps, "
    f"{gflops:.1f} GFLOP/s; loss {losses[0]:.3f} -> {losses[-1]:.4f}; "
    f"{np_step / (seconds / steps):.1f}x faster per step than the NumPy reference"
)""",
        Md(
            "## LeNet5 on Fashion-MNIST\n\n"
            "The blog used MNIST; Fashion-MNIST has the same format and shapes (and is harder). "
            "`scichains.datasets.load_fashion_mnist` finds the files of Debian's "
            "`dataset-fashion-mnist` package, or downloads and verifies them. One epoch of "
            "mini-batches of 64 (a subset of the images in the short run), then the test "
            "accuracy."
        ),
        """from scichains import datasets

try:
    Xtr, ytr = datasets.load_fashion_mnist("train", progress=False)
    Xte, yte = datasets.load_fashion_mnist("test", progress=False)
except (FileNotFoundError, OSError) as e:  # offline, without the data
    print("Fashion-MNIST is not available here:", e)
    Xtr = None
if Xtr is not None:
    if QUICK:
        Xtr, ytr, Xte, yte = Xtr[:2_000], ytr[:2_000], Xte[:1_000], yte[:1_000]
    lenet = sc.SimpleChain(
        (1, 28, 28),
        sc.Conv(6, (5, 5), "relu"),
        sc.MaxPool((2, 2)),
        sc.Conv(16, (5, 5), "relu"),
        sc.MaxPool((2, 2)),
        sc.Flatten(),
        sc.Dense(120, "relu"),
        sc.Dense(84, "relu"),
        sc.Dense(10),
    )
    lwl = lenet.add_loss(sc.LogitCrossEntropyLoss(ytr))
    q = lenet.init_params(seed=0)
    lopt = sc.Adam(3e-4)
    warm = lenet.add_loss(sc.LogitCrossEntropyLoss(ytr[:128]))
    sc.train_batched(q.copy(), warm, Xtr[:128], sc.Adam(3e-4), 1, batch_size=64)  # compile
    epochs = 1 if QUICK else 3
    for epoch in range(epochs):
        t0 = time.perf_counter()
        sc.train_batched(q, lwl, Xtr, lopt, 1, batch_size=64, seed=epoch)
        dt = time.perf_counter() - t0
        acc, _ = sc.accuracy_and_loss(lwl, Xte, yte, q)
        print(f"epoch {epoch + 1}: {dt:.2f} s ({Xtr.shape[0]} images), test accuracy {acc:.4f}")""",
        """fig, ax = plt.subplots(figsize=(6, 3.5))
ax.semilogy(losses, label="scichains")
ax.semilogy(ref_losses, "--", label="NumPy reference")
ax.set_xlabel("Adam step")
ax.set_ylabel("training loss")
ax.set_title("matrix exponential MLP")
ax.legend()
plt.show()""",
        Md(
            "## Reproducing the published figures\n\n"
            "From a clone of the repository (the README's `make demo` runs the first line):\n\n"
            "```sh\n"
            ".venv/bin/python benchmarks/matexp.py                 # scichains alone, ~1 min\n"
            ".venv/bin/pip install torch==2.13.0 jax               # the peers (CPU builds)\n"
            ".venv/bin/python benchmarks/matexp.py --peers --compile-times\n"
            ".venv/bin/python benchmarks/lenet5.py --peers         # 10 epochs, PyTorch eager\n"
            "```\n\n"
            "Each script prints the CPU model and vector features, measures the machine's FP32 "
            "peak (a compiled loop of independent FMAs on all threads) and reports against it, "
            "and runs the peers in the same session, so that ratios come from one machine "
            "at one time. Run them on an otherwise idle machine: a second busy process on a "
            "2-core VM slows any library's two-thread run many times over."
        ),
    ],
    # ------------------------------------------------------------------------------------
    "hybrid_pkpd.ipynb": [
        Md(
            "# Hybrid PK/PD models: a network inside the mechanism\n\n"
            "Two hybrids. First a PK/PD model whose drug-effect function is unknown: a network "
            "of the concentration takes its place inside the ODE, and is fitted together with "
            "the physical parameters by adjoint gradients (a universal differential equation). "
            "Then a population model on real data: the Theophylline absorption shaped by a small "
            "network of time, fitted by FOCE-I and compared with the classical model by OFV, AIC "
            "and a visual predictive check."
        ),
        QUICK,
        Md(
            "## 1. A learned drug effect\n\n"
            "Truth (the model of DeepPumas' public workshop): depot -> central with first-order "
            "absorption and elimination; a response R with zero-order production stimulated by "
            "the drug, `R' = Kin (1 + EFF(cp)) - Kout R`, `EFF = Smax cp^n / (SC50^n + cp^n)`. "
            "Doses of 1.0 at t = 0 and 5; cp and R observed every 0.5 with 2% proportional noise. "
            "The hybrid keeps the PK and the turnover equation and replaces EFF by a network "
            "1 -> 6 -> 6 -> 1 (tanh) of cp, fitted with a small L2 prior on the network's "
            "weights (without it the fit trades Kin and Kout against a large effect and drives "
            "the loss below the noise level)."
        ),
        """import time

import sympy as sp

import scichains as sc
from scichains import adjoint, ode

TRUE = dict(Ka=0.5, CL=1.0, Vc=1.0, Smax=2.9, n=1.5, SC50=0.05, Kout=2.2, Kin=0.8)
ts = np.arange(0.0, 15.0 + 1e-9, 0.5)
depot, central, resp = sp.symbols("depot central R")


def doses(amount):
    return [(t, 0, amount) for t in (0.0, 5.0)]


ka, cl, vc, smax, n, sc50, kout, kin = sp.symbols("Ka CL Vc Smax n SC50 Kout Kin")
cp = sp.Max(central, 0)
truth = ode.SymbolicModel(
    [depot, central, resp],
    [ka, cl, vc, smax, n, sc50, kout, kin],
    [
        -ka * depot,
        ka * depot / vc - cl / vc * central,
        kin * (1 + smax * cp**n / (sc50**n + cp**n)) - kout * resp,
    ],
)


def simulate_truth(amount, t):
    prob = truth.problem([0.0, 0.0, TRUE["Kin"] / TRUE["Kout"]], (0.0, 15.0), truth.pack(**TRUE))
    return ode.solve(prob, saveat=t, jumps=doses(amount), rtol=1e-10, atol=1e-12, throw=True).u


rng = np.random.default_rng(11)
clean = simulate_truth(1.0, ts)
data = clean * (1.0 + 0.02 * rng.standard_normal(clean.shape))  # the depot is not observed""",
        """lka, lcl, lvc, lkin, lkout = sp.symbols("lKa lCL lVc lKin lKout")  # log parameters
Ka, CL, Vc, Kin, Kout = (sp.exp(s) for s in (lka, lcl, lvc, lkin, lkout))
chain = sc.SimpleChain(1, sc.Dense(6, "tanh"), sc.Dense(6, "tanh"), sc.Dense(1))
U = ode.NetworkTerm(chain, [cp], name="EFF")
hybrid = ode.SymbolicModel(
    [depot, central, resp],
    [lka, lcl, lvc, lkin, lkout],
    [-Ka * depot, Ka * depot / Vc - CL / Vc * central, Kin * (1 + U[0]) - Kout * resp],
    network=U,
)
# start a factor 1.5-2 from the truth, absorption slower than elimination as in the truth
guess = dict(lKa=np.log(0.8), lCL=np.log(1.5), lVc=np.log(0.7), lKin=np.log(1.2), lKout=np.log(1.5))
p = hybrid.pack(network=0.5 * chain.init_params(seed=0, dtype=np.float64), **guess)
weights = np.zeros_like(data)
weights[:, 1:] = 1.0 / np.maximum(np.abs(data[:, 1:]), 1e-3) ** 2  # relative errors
prob = hybrid.problem([0.0, 0.0, 1.0], (0.0, 15.0), p)
obj = adjoint.Objective(
    prob, adjoint.SquaredError(data, weights), ts, jumps=doses(1.0), rtol=1e-7, atol=1e-9
)


def value_and_grad(q):
    # R(0) = Kin / Kout depends on the parameters: the chain rule through u0
    u0 = np.array([0.0, 0.0, np.exp(q[3] - q[4])])
    value, g, du0 = obj.value_and_grad(q, u0)
    g = g.copy()
    g[3] += du0[2] * u0[2]
    g[4] -= du0[2] * u0[2]
    # an L2 prior on the network's weights: without it the fit trades Kin and Kout against a
    # large, wiggly effect and drives the loss below the noise level
    w = q[hybrid.n_phys :]
    g[hybrid.n_phys :] += 2e-3 * w
    return value + 1e-3 * float(w @ w), g


# Adam, then L-BFGS from where Adam ended (the UDE recipe); p is trained in place, and a
# solve that fails at a trial point counts as an infinite loss
t0 = time.perf_counter()
stages = [(sc.Adam(0.02), 50 if QUICK else 300), sc.LBFGS(50 if QUICK else 5000)]
res = sc.fit(value_and_grad, p, stages, progress=False)
losses = res.history["loss"]
print(f"loss {losses[0]:.3g} -> {res.loss:.4f} in {time.perf_counter() - t0:.1f} s")
for name, value in zip(("Ka", "CL", "Vc", "Kin", "Kout"), np.exp(p[:5])):
    print(f"{name:5s} {value:7.4f}  (true {TRUE[name]})")""",
        Md(
            "How well does the hybrid predict a dose it never saw (0.1 instead of 1.0), and what "
            "effect function did the network learn? The data only cover concentrations up to "
            "their maximum: beyond it the network extrapolates."
        ),
        """t_fine = np.linspace(0.0, 15.0, 301)
fig, ax = plt.subplots(1, 3, figsize=(16, 4))
for amount, style in ((1.0, "-"), (0.1, "--")):
    sol = ode.solve(
        hybrid.problem([0.0, 0.0, float(np.exp(p[3] - p[4]))], (0.0, 15.0), p),
        saveat=t_fine, jumps=doses(amount), rtol=1e-9, atol=1e-11, throw=True,
    )  # fmt: skip
    true = simulate_truth(amount, t_fine)
    gap = np.abs(sol.u[:, 2] - true[:, 2]).max() / np.abs(true[:, 2]).max()
    print(f"dose {amount}: max |R - R_true| / max R_true = {gap:.2%}")
    ax[0].plot(t_fine, true[:, 2], "k" + style, lw=1, label=f"truth, dose {amount}")
    ax[0].plot(t_fine, sol.u[:, 2], style, label=f"hybrid, dose {amount}")
ax[0].plot(ts, data[:, 2], "o", ms=3, label="R data (dose 1.0)")
ax[0].set_title("response R")
ax[0].legend(fontsize=8)
cps = np.linspace(0.0, 1.0, 201)
learned = chain(cps[:, None], p[hybrid.n_phys :])[:, 0]
emax = TRUE["Smax"] * cps ** TRUE["n"] / (TRUE["SC50"] ** TRUE["n"] + cps ** TRUE["n"])
ax[1].plot(cps, emax, "k", label="true Emax")
ax[1].plot(cps, learned, label="network")
ax[1].axvspan(0, data[:, 1].max(), alpha=0.15, label="observed cp")
ax[1].set_xlabel("cp")
ax[1].set_title("drug effect EFF(cp)")
ax[1].legend(fontsize=8)
ax[2].semilogy(losses)
ax[2].set_title("loss (Adam, then L-BFGS-B)")
plt.show()""",
        Md(
            "## 2. A population hybrid on real data: Theophylline\n\n"
            "The classical one-compartment model absorbs at the rate `ka depot`. The hybrid "
            "absorbs at `ka g(t) depot` with a network of time shared by all subjects, "
            "`z(t) = sum_j w2_j tanh(w1_j t / 10 + b1_j)`, squashed into (0, 4) and normalised "
            "so that `g(0) = 1` whatever the weights: `ka` keeps its meaning (the absorption "
            "rate constant at the dose), the network only shapes how it changes afterwards. "
            "This normalisation is the identifiability aid; with it, different initial weights "
            "give the same typical values. The weights are typical values (fixed effects) "
            "written into the individual-parameter block in SymPy, so the FOCE-I gradient stays "
            "exact, with an L2 prior on them (`l2=`). The first fit's time includes "
            "generating and compiling the hybrid's sensitivity system."
        ),
        """from scichains import pk

theoph = pk.theophylline()
depot2, center, ka2, cl2, v2, t = sp.symbols("depot center ka cl v t")
tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
individual = {ka2: sp.exp(tka + eka), cl2: sp.exp(tcl + ecl), v2: sp.exp(tv + ev)}
common = dict(
    eta=[eka, ecl, ev], omega=[0.6, 0.3, 0.1], observe=center / v2, error=pk.Additive(0.7)
)
classical = pk.PKModel(
    states=[depot2, center],
    odes=[-ka2 * depot2, ka2 * depot2 - cl2 / v2 * center],
    individual=individual,
    theta={tka: 0.45, tcl: 1.0, tv: 3.45},
    **common,
)

hidden = 1 if QUICK else 2
w1, b1, w2 = (sp.symbols(f"{s}_0:{hidden}") for s in ("w1", "b1", "w2"))
weights = [*w1, *b1, *w2]
nw = {w: sp.Symbol(f"nn_{w}") for w in weights}  # the weights as individual parameters


def z(tt):
    return sum(nw[w2[j]] * sp.tanh(nw[w1[j]] * tt + nw[b1[j]]) for j in range(hidden))


g = 4 / (1 + 3 * sp.exp(-(z(t / 10) - z(0))))  # g in (0, 4), g(0) = 1
hybrid_pk = pk.PKModel(
    states=[depot2, center],
    odes=[-ka2 * g * depot2, ka2 * g * depot2 - cl2 / v2 * center],
    individual={**individual, **{nw[w]: w for w in weights}},
    theta={tka: 0.45, tcl: 1.0, tv: 3.45, **{w: 0.0 for w in weights}},
    t=t,
    **common,
)""",
        """fit0 = pk.fit(classical, theoph)
fits = []
for seed in (0,) if QUICK else (0, 1):
    x0 = hybrid_pk.pack()
    x0[3 : 3 + len(weights)] = 0.3 * np.random.default_rng(seed).standard_normal(len(weights))
    l2 = {w: 0.5 for w in weights}
    fits.append(pk.fit(hybrid_pk, theoph, x0=x0, l2=l2, maxiter=8 if QUICK else 500))
    f = fits[-1]
    print(f"seed {seed}: OFV {f.ofv:.3f} ({f.message}, {f.seconds:.1f} s)")
best = min(fits, key=lambda f: f.ofv + f.penalty)
for name, m, f in (("classical", classical, fit0), ("hybrid", hybrid_pk, best)):
    ka_, cl_, v_ = np.exp([f.theta["tka"], f.theta["tcl"], f.theta["tv"]])
    print(
        f"{name:9s}: OFV {f.ofv:8.3f}, AIC {f.ofv + 2 * m.size:8.3f} ({m.size} parameters); "
        f"ka {ka_:.3f} 1/h, CL {cl_:.3f} L/h, V {v_:.2f} L; add.sd {f.sd['add']:.3f} mg/L"
    )
if len(fits) > 1:
    tv_ = np.array([np.exp([f.theta["tka"], f.theta["tcl"], f.theta["tv"]]) for f in fits])
    print("largest relative difference between seeds (ka, CL, V):", np.abs(tv_[1] / tv_[0] - 1))""",
        """fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
for ax, (name, m, f) in zip(axes, (("classical", classical, fit0), ("hybrid", hybrid_pk, best))):
    pk.vpc(m, theoph, f, n_sim=30 if QUICK else 300, seed=0).plot(ax=ax)
    ax.set_title(f"{name}: OFV {f.ofv:.1f}, AIC {f.ofv + 2 * m.size:.1f}")
    ax.set_xlabel("time (h)")
axes[0].set_ylabel("theophylline (mg/L)")
plt.show()""",
    ],
    # ------------------------------------------------------------------------------------
    "population_pk_study.ipynb": [
        Md(
            "# A population PK study from a clinic's table: BLQ rows, covariates, a search\n\n"
            "A study of 60 adults given 320 mg orally, sampled 8 times over a day, as the clinic "
            "exports it: a CSV with `ID TIME AMT DV EVID MDV CMT CENS WT SEX AGE`, `.` for "
            "missing, `SEX` as text, samples below the 0.4 mg/L limit of quantification flagged "
            "`CENS=1` with `DV` at the limit. Each sample was also assayed for a biomarker whose "
            "level the drug lowers: a second endpoint, `DVID=2` (the concentrations are "
            "`DVID=1`). The data are simulated here (so the truth is "
            "known): clearance allometric in body weight, `CL = 3.2 (WT/70)^0.75`, a volume 20% "
            "smaller in women, age without effect. We read the table, fit a base model by FOCE-I "
            "with the M3 likelihood for the censored rows, search the covariates stepwise (as "
            "PsN's `scm`), and judge the final model by its covariance step, a log-likelihood "
            "profile, a bootstrap and a visual predictive check; last, the biomarker joins the "
            "concentrations in a joint PK/PD fit."
        ),
        QUICK,
        """import csv
import tempfile
from pathlib import Path

import sympy as sp

from scichains import pk

rng = np.random.default_rng(2026)
n = 24 if QUICK else 60
times = [0.5, 1, 2, 4, 6, 8, 12, 24]
LLOQ = 0.4
wt = rng.uniform(45.0, 125.0, n).round(1)
sex = rng.choice(["M", "F"], n)
age = rng.integers(19, 80, n)
eta = rng.multivariate_normal(np.zeros(3), np.diag([0.2, 0.06, 0.04]), n)
ka = 1.4 * np.exp(eta[:, 0])
cl = 3.2 * (wt / 70) ** 0.75 * np.exp(eta[:, 1])
v = 35.0 * np.where(sex == "F", 0.8, 1.0) * np.exp(eta[:, 2])
pd_rng = np.random.default_rng(7)  # the biomarker's own draws
e0 = 80.0 * np.exp(pd_rng.normal(0.0, np.sqrt(0.02), n))  # its baseline

path = Path(tempfile.mkdtemp()) / "study.csv"
with open(path, "w", newline="") as fh:
    table = csv.writer(fh)
    table.writerow(
        ["ID", "TIME", "AMT", "DV", "EVID", "MDV", "CMT", "DVID", "CENS", "WT", "SEX", "AGE"]
    )
    for i in range(n):
        table.writerow([i + 1, 0, 320, ".", 1, 1, 1, ".", 0, wt[i], sex[i], age[i]])
        k = cl[i] / v[i]
        for t in times:
            c = 320 * ka[i] / (v[i] * (ka[i] - k)) * (np.exp(-k * t) - np.exp(-ka[i] * t))
            dv = c * (1 + 0.12 * rng.standard_normal())
            blq = dv < LLOQ
            row = [i + 1, t, ".", LLOQ if blq else round(dv, 3), 0, 0, 2, 1, int(blq)]
            table.writerow(row + [wt[i], sex[i], age[i]])
            # the biomarker: baseline E0 lowered by Imax C / (IC50 + C), additive assay error
            effect = e0[i] * (1 - 0.6 * c / (3.0 + c)) + 3.0 * pd_rng.standard_normal()
            row = [i + 1, t, ".", round(effect, 2), 0, 0, 2, 2, 0]
            table.writerow(row + [wt[i], sex[i], age[i]])
print(path.read_text().splitlines()[:5])""",
        Md(
            "`read_events` takes the file as written; a text column needs its codes "
            "(`categories`), otherwise it is refused by name, never dropped. The PK analysis "
            "comes first, on the concentrations alone: `exclude` leaves the biomarker records "
            "out as NONMEM's `IGNORE=(DVID.EQ.2)` does, and `drop` the `DVID` column itself "
            "(a one-endpoint model refuses a table that has one)."
        ),
        """data = pk.read_events(
    path, categories={"SEX": {"M": 0, "F": 1}}, exclude={"DVID": 2}, drop=["DVID"]
)
censored = sum(int(s.cens.sum()) for s in data.subjects)
print(
    f"{len(data.subjects)} subjects, {data.n_obs} samples ({censored} below the LLOQ), "
    f"covariates {data.covariates}"
)""",
        Md(
            "## The base model\n\n"
            "One compartment with first-order absorption, log-normal random effects, a "
            "proportional error; FOCE-I, and the M3 likelihood for the censored samples (the "
            "default with a `CENS` column)."
        ),
        """depot, center, KA, CL, V = sp.symbols("depot center ka cl v")
tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
base = pk.PKModel(
    states=[depot, center],
    odes=[-KA * depot, KA * depot - CL / V * center],
    individual={KA: sp.exp(tka + eka), CL: sp.exp(tcl + ecl), V: sp.exp(tv + ev)},
    theta={tka: 0.0, tcl: 1.0, tv: 3.0},
    eta=[eka, ecl, ev],
    omega=[0.3, 0.3, 0.3],
    observe=center / V,
    error=pk.Proportional(0.2),
)
fit0 = pk.fit(base, data)
print(
    f"OFV {fit0.ofv:.3f}; CL {np.exp(fit0.theta['tcl']):.2f} L/h, "
    f"V {np.exp(fit0.theta['tv']):.1f} L; omega {np.round(np.diag(fit0.omega), 3)}"
)""",
        Md(
            "## Stepwise covariate search\n\n"
            "Candidates: weight on CL and on V (power, centred on the median weight), sex on CL "
            "and V (a factor `exp(th)` for women), age on CL (linear). Forward inclusion at "
            "p < 0.05 (a drop in OFV above 3.84), then backward elimination at p < 0.01 (6.63)."
        ),
        """candidates = [
    ("cl", "WT", "power"),
    ("v", "WT", "power"),
    ("cl", "SEX", "categorical"),
    ("v", "SEX", "categorical"),
    ("cl", "AGE", "linear"),
]
scm = pk.covariate_search(base, data, candidates, base=fit0)
print(scm.table())
print("\\nfinal relations:", ", ".join(str(r) for r in scm.relations) or "none")
final, fit = scm.model, scm.fit""",
        Md(
            "## How sure are the estimates?\n\n"
            "Three answers that need not agree when data are few: the covariance step "
            "(standard errors from the curvature at the minimum), the log-likelihood profile "
            "of one parameter (where the refitted OFV rises by 3.84), and a nonparametric "
            "bootstrap (subjects resampled, every replicate refitted)."
        ),
        """cov = pk.covariance(final, data, fit)
for name, value, se in zip(fit.theta, fit.theta.values(), cov.se_theta):
    print(
        f"{name:>8}: {value:8.4f}  SE {se:.4f}  Wald 95% [{value - 1.96 * se:.4f}, "
        f"{value + 1.96 * se:.4f}]"
    )
focus = scm.relations[0].name if scm.relations else "tcl"
prof = pk.profile(final, data, fit, focus)
print(f"profile of {focus}: 95% [{prof.lower:.4f}, {prof.upper:.4f}] ({prof.values.size} fits)")
prof.plot()
plt.show()""",
        """boot = pk.bootstrap(final, data, fit, n=5 if QUICK else 40, seed=1, progress=False)
print(
    f"{boot.n} resamples: {np.count_nonzero(boot.status == 'ok')} converged, {boot.seconds:.0f} s"
)
for name, (est, median, low, high, se) in boot.table().items():
    print(f"{name:>14}: {est:8.4f}  median {median:8.4f}  95% [{low:.4f}, {high:.4f}]  SE {se:.4f}")""",
        """pk.vpc(final, data, fit, n_sim=50 if QUICK else 200).plot()
plt.show()""",
        Md(
            "The truth on the model's scale: a relation is centred on the covariate's median "
            "(here the median weight), so `tcl` is log CL of a man of that weight; the weight "
            "exponent is 0.75, `v_SEX = log 0.8`, and age does nothing. What the search keeps "
            "depends on the study's size and the spread of the covariates: with 24 subjects "
            "(the reduced run of the test suite) a relation may not enter at all."
        ),
        """w_ref = np.median([s.covariates["WT"] for s in data.subjects])
truth = {
    "tka": np.log(1.4),
    "tcl": np.log(3.2 * (w_ref / 70) ** 0.75),
    "tv": np.log(35.0),
    "cl_WT": 0.75,
    "v_SEX": np.log(0.8),
    "cl_AGE": 0.0,
    "v_WT": 0.0,
    "cl_SEX": 0.0,
}
print(f"median weight {w_ref:.1f} kg")
for name, value in fit.theta.items():
    print(f"{name:>8}: estimate {value:8.4f}, truth {truth[name]:8.4f}")""",
        Md(
            "## Both endpoints: a joint PK/PD fit\n\n"
            "The biomarker falls with the concentration: `E = E0 (1 - Imax C / (IC50 + C))`, a "
            "baseline that differs between subjects, an additive assay error. The joint model "
            "keeps the final PK model as the search left it (its individual parameters, "
            "covariate relations included, and its estimates as the start), adds the PD "
            "parameters, and gives each endpoint its own prediction and error model, keyed by "
            "`DVID`. The whole table is read this time, both endpoints."
        ),
        """both = pk.read_events(path, categories={"SEX": {"M": 0, "F": 1}})
e0_, imax, ic50 = sp.symbols("e0 imax ic50")
te0, timax, tic50, ee0 = sp.symbols("te0 timax tic50 eta_e0")
conc = center / V
pkpd = pk.PKModel(
    states=final.states,
    odes=final.odes,
    individual={
        **dict(zip(final.phi, final.phi_exprs)),
        e0_: sp.exp(te0 + ee0),
        imax: 1 / (1 + sp.exp(-timax)),  # between 0 and 1
        ic50: sp.exp(tic50),
    },
    theta={
        **dict(zip(final.theta_symbols, fit.theta.values())),
        te0: np.log(70.0),
        timax: 0.0,
        tic50: np.log(5.0),
    },
    eta=[*final.eta, ee0],
    omega=[*np.diag(fit.omega), 0.1],
    covariates=final.covariates,
    observe={1: conc, 2: e0_ * (1 - imax * conc / (ic50 + conc))},
    error={1: pk.Proportional(fit.sd["prop"]), 2: pk.Additive(5.0)},
)
joint = pk.fit(pkpd, both)
th = joint.theta
print(f"{joint.message} OFV {joint.ofv:.2f}, {joint.seconds:.0f} s")
print(
    f"E0 {np.exp(th['te0']):.1f} (truth 80), Imax {1 / (1 + np.exp(-th['timax'])):.3f} (0.6), "
    f"IC50 {np.exp(th['tic50']):.2f} mg/L (3), assay SD {joint.sd['add[2]']:.2f} (3), "
    f"omega E0 {joint.omega[-1, -1]:.4f} (0.02)"
)
for name in fit.theta:  # the PK estimates move little: the biomarker adds little about them
    print(f"{name:>8}: PK alone {fit.theta[name]:8.4f}, joint {th[name]:8.4f}")""",
        Md(
            "Diagnostics by endpoint: the residual table has a `DVID` column, the "
            "goodness-of-fit plot a row of panels per endpoint, and a VPC checks one endpoint."
        ),
        """res = pk.residuals(pkpd, both, joint)
pk.gof_plot(res)
plt.show()
pk.vpc(pkpd, both, joint, n_sim=50 if QUICK else 200, endpoint=2).plot()
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


THREADS = {"ensembles.ipynb": "2", "blog_benchmarks.ipynb": "2"}
"""numba threads a notebook is executed with (default 1)."""


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
    env = {"NUMBA_NUM_THREADS": THREADS.get(path.name, "1"), "SCICHAINS_QUICK": "0"}
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
