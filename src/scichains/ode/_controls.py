"""The input values as parameters: gradients with respect to a measured or designed signal
(optimal control, a forcing fitted with the model).

:meth:`ODEProblem.with_input_parameters` makes, from a problem with ``inputs=`` (a constant
or linear :class:`~scichains.ode.Interpolation` of ``N`` samples and ``m`` channels), a
problem whose parameters are ``[p, values.ravel()]``: its compiled right-hand side
interpolates the values it reads from the parameters' tail (the same interpolant, the same
stops at the samples) and calls the user's ``f(du, u, p, t, x)`` with ``p`` the head. Its vjp
is the automatic one of ``f`` with respect to ``(u, p, x)``, whose ``x`` part is spread over
the samples by the interpolation weights: ``dL/d values[i, c]`` comes out of every
sensitivity method as the tail of ``dL/dp``. The interpolants are linear in the values:
a zero-order hold weighs one sample, a line two (``1 - s/h`` and ``s/h``).
"""

from __future__ import annotations

import numpy as np

from ._inputs import SPLIT, SPLIT_HEAD, SPLIT_TAIL, _compiled, search_source, stack_vector

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

_RHS = (
    """
def input_parameter_rhs(du, u, p, t):
    x = _stack(_M)
"""
    + _LOCATE
    + """
    _user(du, u, p[:_NP], t, x)
"""
)

# the automatic vjp of f in (u, [p, x]) (as for inputs that are data), then x's part spread
# over the samples
_VJP = (
    SPLIT_HEAD.replace("input_auto_vjp", "input_parameter_vjp")
    + _LOCATE
    + SPLIT_TAIL
    + """
    for r in range(_NP, pbar.shape[0]):
        pbar[r] = 0.0
    for c in range(_M):
        xb = qbar[_NP + c]
        pbar[_NP + i * _M + c] += (1.0 - w) * xb
        if w != 0.0:
            pbar[_NP + j * _M + c] += w * xb
"""
)
_VJP_K = _VJP.replace("t, ubar, pbar)", "t, k, ubar, pbar)").replace(
    "t, ubar, qbar)", "t, k, ubar, qbar)"
)


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
    if interp.kind not in ("constant", "linear"):
        raise ValueError(
            f"with_input_parameters: {interp.kind!r} inputs are not supported (the gradient "
            "with respect to the samples is made for 'constant' and 'linear' interpolation)"
        )
    if network:
        raise TypeError("with_input_parameters: not for a right-hand side with network kernels")
    if prob.user_vjp is not None:
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
    rhs = _compiled(_RHS, "input_parameter_rhs", env)
    split = _compiled(SPLIT, "input_split_rhs", {"_user": prob.user_f, "_NP": n_p})
    t0 = prob.tspan[0]
    q0 = np.concatenate([prob.p, interp(t0)])
    vjp, how = automatic_vjp(split, prob.u0, q0, t0, trace=True)
    takes_k = vjp.py_func.__code__.co_argcount == 7
    vjp = _compiled(_VJP_K if takes_k else _VJP, "input_parameter_vjp", {**env, "_vjp": vjp})
    p = np.concatenate([prob.p, interp.values.ravel()])
    return rhs, vjp, how, p, slice(n_p, n_p + N * M)
