"""The matrix-exponential data set of the SimpleChains.jl blog post, shared by all peers.

X: N random 2x2 matrices (float32 standard normal), flattened row-major to 4 features;
Y: vec(expm(A)) computed by scipy in float64, stored as float32. Samples along the first axis.
"""

import numpy as np
from scipy.linalg import expm


def make(n: int, seed: int):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, 2, 2)).astype(np.float32)
    Y = np.stack([expm(a.astype(np.float64)) for a in A]).reshape(n, 4).astype(np.float32)
    return A.reshape(n, 4), Y


def dataset(n: int = 10_000):
    """(Xtrain, Ytrain, Xtest, Ytest)."""
    X, Y = make(n, 1)
    Xt, Yt = make(n, 2)
    return X, Y, Xt, Yt


def initial_weights():
    """The scichains initial parameters, as per-layer (W (out, in), b) float32 pairs."""

    chain = model()
    p = chain.init_params(seed=0, dtype=np.float32)
    return [(v["W"].copy(), v["b"].copy()) for v in chain.params(p)]


def model():
    import scichains as sc

    return sc.SimpleChain(4, sc.Dense(32, "tanh"), sc.Dense(16, "tanh"), sc.Dense(4))


# multiply-adds per sample of one training step: forward sum(in*out), backward dW sum(in*out)
# plus dX for every layer but the first
MACS_FORWARD = 4 * 32 + 32 * 16 + 16 * 4
MACS_STEP = 2 * MACS_FORWARD + (32 * 16 + 16 * 4)
