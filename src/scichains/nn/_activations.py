"""Activation functions: named descriptors, and the compiled loop that applies them.

An activation is data (an integer code) so that one cached kernel serves every chain. The loop
for each activation is selected once per layer, never per element, so each loop vectorises.

During the forward pass every activation stores its derivative ``f'(z)`` next to its output, so
the vector-Jacobian product never recomputes it.
"""

from __future__ import annotations

import numpy as np

from .._jit import inline_kernel, kernel
from . import _math

IDENTITY, RELU, TANH, SIGMOID, SOFTPLUS, GELU, SWISH, ELU, ABS2, CUBE, RBF = range(11)


class ActivationFunction:
    """A named elementwise function ``y = f(z)`` understood by the compiled kernels.

    Instances are the public objects ``scichains.nn.tanh``, ``scichains.nn.relu``, ...; anywhere
    an activation is expected, its name (``"tanh"``) works as well. They are made once, here:
    the compiled kernels know only the codes of these built-in activations, so constructing a
    new instance does not add an activation.

    Parameters
    ----------
    name : str
        The public name (``"tanh"``), as accepted wherever an activation is expected.
    code : int
        The integer that selects the compiled loop for this activation in every kernel.
    formula : str
        The formula in words (``"max(z, 0)"``), for documentation only.

    Calling an instance on an array applies the exact float64 reference formula (a float64
    array of the same shape); the kernels compute in the parameters' dtype.
    """

    __slots__ = ("name", "code", "formula")

    def __init__(self, name: str, code: int, formula: str):
        self.name = name
        self.code = code
        self.formula = formula

    def __repr__(self) -> str:
        return f"scichains.nn.{self.name}"

    def __call__(self, z):
        """Apply the activation to a numpy array (the exact float64 formula, for reference)."""
        return _REFERENCE[self.code](np.asarray(z, dtype=np.float64))


identity = ActivationFunction("identity", IDENTITY, "z")
relu = ActivationFunction("relu", RELU, "max(z, 0)")
tanh = ActivationFunction("tanh", TANH, "tanh(z)")
sigmoid = ActivationFunction("sigmoid", SIGMOID, "1 / (1 + exp(-z))")
softplus = ActivationFunction("softplus", SOFTPLUS, "log(1 + exp(z))")
gelu = ActivationFunction(
    "gelu", GELU, "z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))  (the tanh form, as NNlib)"
)
swish = ActivationFunction("swish", SWISH, "z sigmoid(z)")
elu = ActivationFunction("elu", ELU, "z if z > 0 else exp(z) - 1")
abs2 = ActivationFunction("abs2", ABS2, "z^2")
cube = ActivationFunction("cube", CUBE, "z^3")
rbf = ActivationFunction("rbf", RBF, "exp(-z^2)")

ACTIVATIONS = {
    a.name: a for a in (identity, relu, tanh, sigmoid, softplus, gelu, swish, elu, abs2, cube, rbf)
}
_ALIASES = {"silu": "swish", "linear": "identity", "gaussian": "rbf"}
BY_CODE = {a.code: a for a in ACTIVATIONS.values()}


def get_activation(act) -> ActivationFunction:
    """Resolve a name or an :class:`ActivationFunction`; unknown names raise ``ValueError``."""
    if isinstance(act, ActivationFunction):
        return act
    if act is None:
        return identity
    if isinstance(act, str):
        key = act.lower()
        key = _ALIASES.get(key, key)
        if key in ACTIVATIONS:
            return ACTIVATIONS[key]
        raise ValueError(
            f"unknown activation {act!r}; known: {sorted(ACTIVATIONS) + sorted(_ALIASES)}"
        )
    raise TypeError(
        f"activation must be a name or a scichains.nn activation object, got {type(act).__name__}"
    )


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


_K0 = np.sqrt(2.0 / np.pi)
_K1 = 0.044715
_REFERENCE = {
    IDENTITY: lambda z: z.copy(),
    RELU: lambda z: np.maximum(z, 0.0),
    TANH: np.tanh,
    SIGMOID: _sig,
    SOFTPLUS: lambda z: np.logaddexp(z, 0.0),
    GELU: lambda z: 0.5 * z * (1.0 + np.tanh(_K0 * (z + _K1 * z**3))),
    SWISH: lambda z: z * _sig(z),
    ELU: lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0.0))),
    ABS2: lambda z: z * z,
    CUBE: lambda z: z**3,
    RBF: lambda z: np.exp(-z * z),
}


@inline_kernel
def apply_activation(code, z, y, d, n):
    """Write ``f(z[:n])`` into ``y[:n]`` and ``f'(z[:n])`` into ``d[:n]``.

    ``d`` may be ``z`` itself (each element is read before it is written); ``y`` must not be:
    writing the result over its input lets LLVM turn ``relu`` into masked stores, which are
    microcoded and ~7x slower on AMD Zen. For the identity, ``y = z`` is copied and ``d`` is
    not touched. All are 1-D contiguous arrays of one float dtype.
    """
    one = z.dtype.type(1.0)
    zero = z.dtype.type(0.0)
    if code == IDENTITY:
        for j in range(n):
            y[j] = z[j]
    elif code == RELU:
        for j in range(n):
            x = z[j]
            pos = x > zero
            y[j] = x if pos else zero
            d[j] = one if pos else zero
    elif code == TANH:
        for j in range(n):
            t = _math.tanh(z[j])
            y[j] = t
            d[j] = one - t * t
    elif code == SIGMOID:
        for j in range(n):
            s = one / (one + _math.exp(-z[j]))
            y[j] = s
            d[j] = s * (one - s)
    elif code == SOFTPLUS:
        for j in range(n):
            x = z[j]
            e = _math.exp(-abs(x))
            inv = one / (one + e)
            y[j] = max(x, zero) + _math.log1p_unit(e)
            d[j] = inv if x >= zero else e * inv
    elif code == GELU:
        # 1 + tanh(u) = 2 sigmoid(2u), written with exp to avoid cancellation for z << 0
        k0 = z.dtype.type(2.0 * 0.7978845608028654)
        k1 = z.dtype.type(0.044715)
        k3 = z.dtype.type(3.0 * 0.044715)
        for j in range(n):
            x = z[j]
            x2 = x * x
            s = one / (one + _math.exp(-k0 * (x + k1 * x2 * x)))
            y[j] = x * s
            d[j] = s + x * s * (one - s) * k0 * (one + k3 * x2)
    elif code == SWISH:
        for j in range(n):
            x = z[j]
            s = one / (one + _math.exp(-x))
            y[j] = x * s
            d[j] = s + x * s * (one - s)
    elif code == ELU:
        for j in range(n):
            x = z[j]
            e = _math.exp(min(x, zero))
            pos = x > zero
            y[j] = x if pos else e - one
            d[j] = one if pos else e
    elif code == ABS2:
        two = z.dtype.type(2.0)
        for j in range(n):
            x = z[j]
            y[j] = x * x
            d[j] = two * x
    elif code == CUBE:
        three = z.dtype.type(3.0)
        for j in range(n):
            x = z[j]
            x2 = x * x
            y[j] = x2 * x
            d[j] = three * x2
    elif code == RBF:
        mtwo = z.dtype.type(-2.0)
        for j in range(n):
            x = z[j]
            e = _math.exp(-x * x)
            y[j] = e
            d[j] = mtwo * x * e


@kernel
def activate(code, w, z0, y0, d0, n):
    """:func:`apply_activation` on ``w[z0:z0+n]`` into ``w[y0:]`` and ``w[d0:]``.

    The slices are made here, next to the loops (``apply_activation`` is inlined): handing
    slices to another compiled function costs calls into numba's reference counting, which
    outweigh a 50-element activation.
    """
    apply_activation(code, w[z0 : z0 + n], w[y0 : y0 + n], w[d0 : d0 + n], n)
