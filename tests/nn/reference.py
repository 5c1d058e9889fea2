"""A plain-numpy reference implementation of dense chains, independent of the library."""

import numpy as np

K0 = np.sqrt(2.0 / np.pi)
K1 = 0.044715


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


def act(name, z):
    """(f(z), f'(z)) in float64."""
    if name == "identity":
        return z, np.ones_like(z)
    if name == "relu":
        return np.maximum(z, 0), (z > 0).astype(float)
    if name == "tanh":
        t = np.tanh(z)
        return t, 1 - t * t
    if name == "sigmoid":
        s = _sig(z)
        return s, s * (1 - s)
    if name == "softplus":
        return np.log1p(np.exp(-np.abs(z))) + np.maximum(z, 0), _sig(z)
    if name == "gelu":
        u = K0 * (z + K1 * z**3)
        t = np.tanh(u)
        return 0.5 * z * (1 + t), 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * K0 * (1 + 3 * K1 * z * z)
    if name == "swish":
        s = _sig(z)
        return z * s, s + z * s * (1 - s)
    if name == "elu":
        return np.where(z > 0, z, np.expm1(np.minimum(z, 0))), np.where(z > 0, 1.0, np.exp(z))
    if name == "abs2":
        return z * z, 2 * z
    if name == "cube":
        return z**3, 3 * z * z
    if name == "rbf":
        e = np.exp(-z * z)
        return e, -2 * z * e
    raise KeyError(name)


def central_differences(f, x, h=1e-6):
    """Central finite differences of the scalar ``f`` at ``x`` (any shape), in float64."""
    g = np.zeros_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = h
        g.flat[j] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def squared_loss_input_differences(forward, X, Y, h=1e-6):
    """Central differences, in every input ``X[s, ...]``, of the squared loss
    ``mean_s sum_o (forward(X)[s, o] - Y[s, o])^2`` (SquaredLoss), in float64. Sample ``s``'s
    term depends on ``X[s]`` alone, so one coordinate is stepped in every sample at once: two
    calls of the batched ``forward`` per input coordinate instead of two per entry of ``X``
    (the differences of each sample's own term: what ``central_differences`` of the whole loss
    gives, with less rounding noise)."""
    N = X.shape[0]
    Y = Y.reshape(N, -1)
    g = np.zeros_like(X, dtype=np.float64)
    flat = g.reshape(N, -1)
    for j in range(flat.shape[1]):
        e = np.zeros(X.shape[1:])
        e.flat[j] = h
        up = ((forward(X + e).reshape(N, -1) - Y) ** 2).sum(axis=1) / N
        down = ((forward(X - e).reshape(N, -1) - Y) ** 2).sum(axis=1) / N
        flat[:, j] = (up - down) / (2 * h)
    return g


def unpack(p, sizes, bias=True):
    """Slice a flat vector by hand: per layer W (out, in) row-major then b."""
    out, off = [], 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        W = p[off : off + n_in * n_out].reshape(n_out, n_in)
        off += n_in * n_out
        b = p[off : off + n_out] if bias else np.zeros(n_out)
        off += n_out if bias else 0
        out.append((W, b))
    assert off == p.size
    return out


def forward(p, X, sizes, acts):
    """Outputs (N, n_out) and the per-layer cache."""
    h = np.asarray(X, dtype=np.float64)
    cache = []
    for (W, b), a in zip(unpack(p, sizes), acts):
        z = h @ W.T + b
        y, d = act(a, z)
        cache.append((h, d))
        h = y
    return h, cache


def loss(kind, out, target):
    N = out.shape[0]
    if kind == "squared":
        r = out - target
        return np.sum(r * r) / N, 2 * r / N
    if kind == "absolute":
        r = out - target
        return np.sum(np.abs(r)) / N, np.sign(r) / N
    if kind == "logitce":
        zmax = out.max(axis=1, keepdims=True)
        e = np.exp(out - zmax)
        s = e.sum(axis=1, keepdims=True)
        lse = np.log(s)[:, 0] + zmax[:, 0]
        val = np.mean(lse - out[np.arange(N), target])
        g = e / s
        g[np.arange(N), target] -= 1
        return val, g / N
    raise KeyError(kind)


def valgrad(p, X, sizes, acts, kind, target):
    """Loss, dL/dp and dL/dX by the chain rule in numpy."""
    out, cache = forward(p, X, sizes, acts)
    val, g = loss(kind, out, target)
    grads = []
    for (W, _b), (h, d) in zip(reversed(unpack(p, sizes)), reversed(cache)):
        gz = g * d
        grads.append((gz.T @ h, gz.sum(axis=0)))
        g = gz @ W
    flat = np.concatenate([np.concatenate([gW.ravel(), gb]) for gW, gb in reversed(grads)])
    return val, flat, g
