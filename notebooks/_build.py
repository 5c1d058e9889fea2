"""Write the notebooks from the cells below (python notebooks/_build.py); the test suite runs
them (tests/test_notebooks.py) with SCICHAINS_QUICK=1, a reduced size, so they cannot rot."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = """import os
import sys

import matplotlib
import numpy as np

if os.environ.get("SCICHAINS_QUICK") == "1":
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
QUICK = os.environ.get("SCICHAINS_QUICK") == "1"  # reduced size (the test suite)
sys.path.insert(0, os.path.join(os.getcwd(), "..", "examples"))"""

NOTEBOOKS = {
    "neural_ode_spiral.ipynb": [
        "# A neural ODE fitted to the spiral\n\n"
        "du/dt = (u^3) A with A = [[-0.1, 2], [-2, -0.1]]: data at 30 points on [0, 1.5]; the "
        "model is `SimpleChain(2, Activation('cube'), Dense(50, 'tanh'), Dense(2))`, trained "
        "with Adam on gradients from the adjoint (Tsit5, rtol 1e-6).",
        SETUP,
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
    "lotka_volterra_discovery.ipynb": [
        "# Missing physics of Lotka-Volterra: UDE, then sparse regression\n\n"
        "Known: alpha x and -delta y. A network learns the rest from 31 noisy points; sparse "
        "regression turns it into equations (see `examples/lotka_volterra_ude.py`).",
        SETUP,
        """import lotka_volterra_ude as lv
data = lv.make_data()
model, chain = lv.ude_model()
# the full training takes seconds (the discovery needs a converged fit, even in QUICK mode)
p, losses = lv.train(model, chain, data)""",
        """best, table, lib_model, dropped = lv.discover(model, chain, p, data)
thr, Xi, Xi_fit, sse, score = best
print("\\n".join(lv.equations(Xi_fit)))""",
        """from scichains.ode import solve
t_fine = np.linspace(0, 3, 301)
fitted = solve(model.problem(lv.U0, (0, 3), p), saveat=t_fine).u
fig, ax = plt.subplots(1, 2, figsize=(10, 4))
ax[0].plot(lv.TS, data, "o")
ax[0].plot(t_fine, fitted, "-")
ax[0].set_title("UDE fit")
ax[1].semilogy(losses)
ax[1].set_title("loss")
plt.show()""",
    ],
    "theophylline_hybrid.ipynb": [
        "# Theophylline: classical population PK against a hybrid with network absorption\n\n"
        "Joint MAP fits of 12 subjects (see `examples/theophylline.py`).",
        SETUP,
        """import theophylline as th
pop_a, z_a, J_a = th.fit(th.classical(), np.log([1.5, 0.04, 0.5]))
model_b, chain = th.hybrid()
theta_b = np.concatenate([pop_a.split(z_a)[0], chain.init_params(seed=0, dtype=np.float64) * 0.1])
pop_b, z_b, J_b = th.fit(model_b, theta_b, maxiter=20 if QUICK else 1000)
print(f"J classical {J_a:.2f}, hybrid {J_b:.2f}")""",
        """fig, axes = plt.subplots(3, 4, figsize=(14, 9), sharex=True)
tt = np.linspace(0, 25, 251)
for i, ax in enumerate(axes.ravel()):
    s = pop_a.subjects[i]
    ax.plot(s.t, s.y[:, 1], "ko", ms=3)
    ax.plot(tt, pop_a.predict(z_a, i, tt)[:, 1], "-", label="classical")
    ax.plot(tt, pop_b.predict(z_b, i, tt)[:, 1], "--", label="hybrid")
    ax.set_title(f"subject {i + 1}")
axes[0, 0].legend()
plt.show()""",
        """res = np.concatenate(th.residuals(pop_a, z_a)), np.concatenate(th.residuals(pop_b, z_b))
plt.figure(figsize=(6, 3))
plt.hist(res, bins=20, label=["classical", "hybrid"])
plt.legend()
plt.title("residuals (mg/L)")
plt.show()""",
        """plt.figure(figsize=(6, 3))
plt.semilogy(pop_a.loss_history, label="classical")
plt.semilogy(pop_b.loss_history, label="hybrid")
plt.xlabel("L-BFGS iteration")
plt.legend()
plt.title("objective J")
plt.show()""",
    ],
}


def build():
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook()
        nb.cells = [new_markdown_cell(cells[0])] + [new_code_cell(c) for c in cells[1:]]
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    build()
