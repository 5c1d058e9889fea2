"""The input values as parameters: gradients with respect to a measured or designed signal
(optimal control, a forcing fitted with the model).

:meth:`ODEProblem.with_input_parameters` makes, from a problem with ``inputs=`` (a constant,
linear or cubic :class:`~scichains.ode.Interpolation` of ``N`` samples and ``m`` channels), a
problem whose parameters are ``[p, values.ravel()]``: its compiled right-hand side
interpolates the values it reads from the parameters' tail (the same interpolant, the same
stops at the samples) and calls the user's ``f(du, u, p, t, x)`` with ``p`` the head. Its vjp
is the automatic one of ``f`` with respect to ``(u, p, x)`` (a network's model gives its own,
``input_split_vjp``: ``NeuralODE(..., inputs=)``), whose ``x`` part is spread over the
samples by the interpolation weights: ``dL/d values[i, c]`` comes out of every
sensitivity method as the tail of ``dL/dp``. These interpolants are linear in the values: a
zero-order hold weighs one sample, a line two (``1 - s/h`` and ``s/h``), a natural cubic
spline all of them (each piece's cubic for each sample, from the spline of that sample
alone). Akima's spline is not linear in its samples and is refused.
"""

from __future__ import annotations

import numpy as np

from ._inputs import (
    SPLIT_HEAD,
    SPLIT_TAIL,
    _coefficients,
    _compiled,
    search_source,
    split_vjp,
    stack_vector,
    with_kernel,
)

# the interval of t (as the Interpolation's own evaluation finds it: ts[i] <= t < ts[i + 1],
# the last sample's value from ts[-1] on, the first's up to ts[0]), the value as its table
# gives it (y_i + s (y_(i+1) - y_i) / h for a line), and the weight w = s / h of sample i + 1
# (1 - w of sample i)
_LOCATE = (
    search_source("_TS", "_N")
    + """
    h = 1.0
    if _LINEAR and i + 1 < _N:
        h = _TS[i + 1] - _TS[i]
    else:
        s = 0.0
    w = s / h
    j = i + 1 if i + 1 < _N else i
    for c in range(_M):
        y0 = p[_NP + i * _M + c]
        x[c] = y0 + s * ((p[_NP + j * _M + c] - y0) / h)
"""
)

# a natural cubic spline is linear in the samples too, but each piece depends on all of them:
# _L[i, d, e] is coefficient d of piece i for sample e alone (NumPy's own table of the unit
# samples), and the weight of sample e at t is that piece's cubic in s
_CUBIC = (
    search_source("_TS", "_N")
    + """
    for c in range(_M):
        x[c] = 0.0
    for e in range(_N):
        be = _L[i, 0, e] + s * (_L[i, 1, e] + s * (_L[i, 2, e] + s * _L[i, 3, e]))
        if be != 0.0:
            for c in range(_M):
                x[c] += be * p[_NP + e * _M + c]
"""
)
_SCATTER = """
    for c in range(_M):
        xb = qbar[_NP + c]
        pbar[_NP + i * _M + c] += (1.0 - w) * xb
        if w != 0.0:
            pbar[_NP + j * _M + c] += w * xb
"""
_CUBIC_SCATTER = """
    for e in range(_N):
        be = _L[i, 0, e] + s * (_L[i, 1, e] + s * (_L[i, 2, e] + s * _L[i, 3, e]))
        if be != 0.0:
            for c in range(_M):
                pbar[_NP + e * _M + c] += be * qbar[_NP + c]
"""
MAX_CUBIC_SAMPLES = 256
"""The most samples of a cubic input whose samples may be parameters (its table of weights
has ``4 N^2`` entries, compiled into the adapters)."""


def _sources(kind: str, kernel: bool) -> tuple[str, str]:
    """The sources of the right-hand side and of the vjp (``kernel``: the automatic vjp takes
    the network kernels ``k``) for inputs of ``kind``."""
    locate, scatter = (_CUBIC, _CUBIC_SCATTER) if kind == "cubic" else (_LOCATE, _SCATTER)
    rhs = (
        "\ndef input_parameter_rhs(du, u, p, t):\n    x = _stack(_M)\n"
        + locate
        + "\n    _user(du, u, p[:_NP], t, x)\n"
    )
    if kernel:  # a network right-hand side f(du, u, p, t, x, k)
        rhs = rhs.replace("(du, u, p, t):", "(du, u, p, t, k):").replace("t, x)", "t, x, k)")
    # the automatic vjp of f in (u, [p, x]) (as for inputs that are data), then x's part
    # spread over the samples
    vjp = (
        SPLIT_HEAD.replace("input_auto_vjp", "input_parameter_vjp")
        + locate
        + SPLIT_TAIL
        + "\n    for r in range(_NP, pbar.shape[0]):\n        pbar[r] = 0.0\n"
        + scatter
    )
    return rhs, with_kernel(vjp) if kernel else vjp


def input_parameter_functions(prob, network: bool, automatic_vjp):
    """``(rhs, vjp, how, p, input_slice)`` of :meth:`ODEProblem.with_input_parameters` for
    ``prob`` (``network``: it has network kernels; ``automatic_vjp``: the maker of exact vjps,
    ``scichains.ode.derivatives``); ``TypeError``/``ValueError`` for what is not supported."""
    interp = prob.inputs
    if getattr(prob, "input_slice", None) is not None:
        raise TypeError("with_input_parameters: the input samples are parameters already")
    if interp is None:
        raise TypeError(
            "with_input_parameters: this problem takes no inputs (make it with inputs=)"
        )
    if interp.kind == "akima":
        raise ValueError(
            "with_input_parameters: 'akima' inputs are not supported (Akima's spline is not "
            "linear in its samples); use 'constant', 'linear' or 'cubic'"
        )
    if interp.kind == "cubic" and interp.ts.size > MAX_CUBIC_SAMPLES:
        raise ValueError(
            f"with_input_parameters: a cubic input of more than {MAX_CUBIC_SAMPLES} samples "
            f"(got {interp.ts.size}): its table of weights grows as the square; use 'linear'"
        )
    split = getattr(prob, "input_split_vjp", None) if network else None  # made by its model
    if network and split is None:
        raise TypeError(
            "with_input_parameters: a right-hand side with network kernels needs the vjp with "
            "respect to (u, [p, x]) its model gives (NeuralODE(..., inputs=).problem())"
        )
    if prob.user_vjp is not None and split is None:
        raise TypeError(
            "with_input_parameters differentiates the right-hand side with respect to the "
            "inputs by its automatic vjp; a given vjp(v, u, p, t, x, ubar, pbar) has no x "
            "part: make the problem without vjp="
        )
    if prob.mass_matrix is not None:
        raise TypeError("with_input_parameters: not for a problem with a mass matrix")
    n_p, N, M = int(prob.p.size), int(interp.ts.size), int(interp.m)
    env = {
        "_TS": interp.ts,
        "_N": N,
        "_M": M,
        "_NP": n_p,
        "_LINEAR": interp.kind == "linear",
        "_stack": stack_vector,
        "_user": prob.user_f,
    }
    if interp.kind == "cubic":
        unit = np.eye(N)
        env["_L"] = np.stack([_coefficients(interp.ts, unit[:, [e]], "cubic")[:, :, 0]
                              for e in range(N)], axis=-1)  # fmt: skip
    rhs_source, _ = _sources(interp.kind, network)
    rhs = _compiled(rhs_source, "input_parameter_rhs", env)
    if split is not None:  # v, u, [p, x], t, k -> ubar, [pbar, xbar]
        vjp, how, takes_k = split, "given by the model", True
    else:
        vjp, how, takes_k = split_vjp(
            prob.user_f, interp, prob.u0, prob.p, prob.tspan[0], True, automatic_vjp
        )
    _, vjp_source = _sources(interp.kind, takes_k)
    vjp = _compiled(vjp_source, "input_parameter_vjp", {**env, "_vjp": vjp})
    p = np.concatenate([prob.p, interp.values.ravel()])
    return rhs, vjp, how, p, slice(n_p, n_p + N * M)
