"""A network inside the dynamics of a PK model (DeepPumas style): a SimpleChain whose
inputs are expressions of the states and individual parameters (random effects among
them), and whose weights are typical values of the model.

FOCE-I needs the second derivatives of the predictions along the random effects (and the
mixed ones along the typical values), Laplace the third, so the sensitivity system needs
the network's derivatives of those orders, along its inputs and its weights. The compiled
chain gives its value and a vector-Jacobian product (first order) only; a chain of
:class:`~scichains.nn.Dense` layers with smooth activations is therefore expanded into
SymPy (its weights as symbols, laid out as the chain lays out ``p``), from which the
sensitivity system is generated like the rest of the model. The expansion is checked
against the chain's own forward pass when the term is built.
"""

from __future__ import annotations

import numpy as np

# activations with derivatives of every order (relu and elu have kinks: the second
# derivative FOCE-I needs does not exist at them)
_SMOOTH = ("identity", "tanh", "sigmoid", "softplus", "gelu", "swish", "abs2", "cube", "rbf")


def _activation(name, z):
    import sympy as sp

    if name == "identity":
        return z
    if name == "tanh":
        return sp.tanh(z)
    if name == "sigmoid":
        return 1 / (1 + sp.exp(-z))
    if name == "softplus":
        return sp.log(1 + sp.exp(z))
    if name == "gelu":
        k0 = sp.sqrt(2 / sp.pi)
        return z / 2 * (1 + sp.tanh(k0 * (z + sp.Float(0.044715) * z**3)))
    if name == "swish":
        return z / (1 + sp.exp(-z))
    if name == "abs2":
        return z**2
    if name == "cube":
        return z**3
    if name == "rbf":
        return sp.exp(-(z**2))
    raise AssertionError(name)


class Network:
    """A :class:`~scichains.nn.SimpleChain` term for :class:`PKModel`'s equations.

    Parameters
    ----------
    chain : SimpleChain of ``Dense`` layers with smooth activations (identity, tanh,
        sigmoid, softplus, gelu, swish, abs2, cube, rbf), input shape ``(len(inputs),)``
    inputs : SymPy expressions of the model's states, individual parameters (e.g. a
        random effect passed through ``individual``: ``{z: eta_nn}``) and time (the symbol
        given to ``PKModel(t=...)``), one per input
    name : the outputs are the symbols ``name_0, name_1, ...`` (also ``term[j]``); the
        weights become typical values ``name_w0, name_w1, ...`` in the chain's layout
    weights : initial weights (``(chain.num_params,)``); default
        ``chain.init_params(seed)`` in float64
    anchor : optional ``{symbol: value}`` (symbols of the inputs): the term's outputs are
        then ``nn(inputs) - nn(inputs with symbol = value)``, zero at the anchor whatever the
        weights. An identifiability aid: e.g. ``{t: 0}`` in ``ka depot exp(nn[0])`` keeps
        ``ka`` the absorption rate constant at the dose (the network only shapes how it
        changes afterwards); a bias of the last layer cancels (give it ``bias=False``).

    ``ValueError`` for another layer type, a non-smooth activation, a wrong number of
    inputs or weights, an anchor on a symbol the inputs do not use.
    """

    def __init__(
        self,
        chain,
        inputs,
        name: str = "nn",
        weights=None,
        seed: int = 0,
        anchor: dict | None = None,
    ):
        import sympy as sp

        from ..nn import Dense, SimpleChain

        if not isinstance(chain, SimpleChain):
            raise TypeError("Network needs a scichains.nn.SimpleChain")
        if not name.isidentifier():
            raise ValueError(f"network name {name!r} is not an identifier")
        inputs = [sp.sympify(e) for e in inputs]
        if chain.input_shape != (len(inputs),):
            raise ValueError(
                f"the chain takes input shape {chain.input_shape}, but {len(inputs)} input "
                "expressions were given"
            )
        for i, layer in enumerate(chain.layers):
            if not isinstance(layer, Dense):
                raise ValueError(
                    f"layer {i} is {type(layer).__name__}: a network in a PK model's dynamics "
                    "takes Dense layers (expanded for exact derivatives of every order)"
                )
            if layer.activation.name not in _SMOOTH:
                raise ValueError(
                    f"layer {i}: activation {layer.activation.name} is not smooth; FOCE-I needs "
                    f"second derivatives and Laplace third (use one of {list(_SMOOTH)})"
                )
        if weights is None:
            weights = chain.init_params(seed=seed, dtype=np.float64)
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (chain.num_params,):
            raise ValueError(f"weights must have shape ({chain.num_params},), got {weights.shape}")
        if not np.all(np.isfinite(weights)):
            raise ValueError("the network's weights must be finite")
        self.chain, self.inputs, self.name = chain, inputs, name
        self.weights0 = weights.copy()
        self.outputs = [sp.Symbol(f"{name}_{j}", real=True) for j in range(chain.n_out)]
        self.theta_symbols = [sp.Symbol(f"{name}_w{k}", real=True) for k in range(weights.size)]
        # the weights as individual parameters (equal to their typical values)
        self.phi_symbols = [sp.Symbol(f"_{name}_p{k}", real=True) for k in range(weights.size)]
        self.expressions = self._expand(self.inputs, self.phi_symbols)
        self._check()
        self.anchor = None
        if anchor:
            used = set().union(*(e.free_symbols for e in self.inputs))
            sub = {}
            for k, val in dict(anchor).items():
                k = sp.sympify(k)
                if k not in used:
                    raise ValueError(f"anchor: {k} is not a symbol of the network's inputs")
                val = float(val)
                if not np.isfinite(val):
                    raise ValueError(f"anchor: the value of {k} must be finite, got {val}")
                sub[k] = sp.Integer(int(val)) if val.is_integer() else sp.Float(val)
            self.anchor = sub
            self.expressions = [e - e.xreplace(sub) for e in self.expressions]

    def __getitem__(self, j):
        return self.outputs[j]

    def __len__(self) -> int:
        return len(self.outputs)

    def _expand(self, inputs, w):
        """The chain's outputs as SymPy expressions of ``inputs`` and the weight symbols."""
        chain = self.chain
        starts = {(i, name): (off, shape) for i, name, off, shape in chain.offsets}
        x = list(inputs)
        for i, layer in enumerate(chain.layers):
            off, (n_out, n_in) = starts[(i, "W")]
            b = starts.get((i, "b"))
            z = []
            for o in range(n_out):
                acc = sum(w[off + o * n_in + k] * x[k] for k in range(n_in))
                if b is not None:
                    acc += w[b[0] + o]
                z.append(_activation(layer.activation.name, acc))
            x = z
        return x

    def _check(self):
        """The expansion against a NumPy forward pass of the chain at random inputs (the
        layout of ``chain.offsets`` and the activations' reference formulas; the compiled
        chain is not needed, so building a model compiles none of its kernels)."""
        import sympy as sp

        rng = np.random.default_rng(0)
        X = rng.normal(size=(3, len(self.inputs)))
        syms = [sp.Symbol(f"_x{k}") for k in range(len(self.inputs))]
        fn = sp.lambdify([*syms, *self.phi_symbols], self._expand(syms, self.phi_symbols))
        got = np.array([np.asarray(fn(*row, *self.weights0), dtype=np.float64) for row in X])
        ref = _numpy_forward(self.chain, X, self.weights0)
        if not np.allclose(got, ref, rtol=1e-10, atol=1e-12):
            raise AssertionError("the SymPy expansion of the chain disagrees with its forward")


def _numpy_forward(chain, X, w):
    """``chain(X, w)`` for a chain of Dense layers, in NumPy (``X``: ``(batch, inputs)``)."""
    starts = {(i, name): (off, shape) for i, name, off, shape in chain.offsets}
    x = X
    for i, layer in enumerate(chain.layers):
        off, (n_out, n_in) = starts[(i, "W")]
        z = x @ w[off : off + n_out * n_in].reshape(n_out, n_in).T
        b = starts.get((i, "b"))
        if b is not None:
            z = z + w[b[0] : b[0] + n_out]
        x = layer.activation(z)
    return x
