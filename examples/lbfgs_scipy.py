"""Fit a small MLP with scipy's L-BFGS on the flat parameter vector, then with Adam, and compare.

python examples/lbfgs_scipy.py
"""

import numpy as np
import scipy.optimize

import scichains as sc


def main():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (2000, 2))
    y = np.sin(X[:, :1]) * np.cos(X[:, 1:])  # shape (2000, 1)
    chain = sc.SimpleChain(2, sc.Dense(24, "tanh"), sc.Dense(24, "tanh"), sc.Dense(1))
    cwl = chain.add_loss(sc.SquaredLoss(y))

    # scipy: fun(p) -> (loss, grad) on float64 parameters
    fun = sc.loss_and_grad(cwl, X)
    p0 = chain.init_params(seed=1, dtype=np.float64)
    res = scipy.optimize.minimize(fun, p0, jac=True, method="L-BFGS-B", options={"maxiter": 2000})
    print(
        f"L-BFGS-B: loss {fun(p0)[0]:.4g} -> {res.fun:.3g} in {res.nit} iterations ({res.message})"
    )

    # the same parameters keep working with the rest of the API
    yhat = chain(X, res.x)
    print(f"max abs error of the L-BFGS fit: {np.abs(yhat - y).max():.3g}")

    p = chain.init_params(seed=1, dtype=np.float64)
    losses = sc.train_unbatched(p, cwl, X, sc.Adam(3e-3), 3000)
    print(f"Adam(3e-3), 3000 full-batch steps: loss {losses[0]:.4g} -> {losses[-1]:.3g}")


if __name__ == "__main__":
    main()
