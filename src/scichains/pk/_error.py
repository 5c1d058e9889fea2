"""Residual error models: the variance ``R(f)`` of an observation around its prediction ``f``.

Each model has standard-deviation parameters (positive; estimated on the log scale) and a
variance written in SymPy, from which the per-observation terms of the objective and their
derivatives are generated once:

    l(y, f)  = (y - f)^2 / R + log R              (minus twice the log density, less log 2 pi)
    w(f)     = 1 / R + (dR/df)^2 / (2 R^2)        (Fisher information of f: FOCE-I's weight)

``Exponential`` is the log-transform-both-sides model: ``log y = log f + eps`` (the objective
is then that of ``log y``; observations must be positive).
"""

from __future__ import annotations

import numpy as np


class ErrorModel:
    """Base class: ``names`` of the standard deviations, their ``initial`` values, and the
    variance ``variance(f, sd)`` (SymPy). ``log_transform``: the model compares ``log y``
    with ``log f``."""

    names: tuple = ()
    log_transform = False

    def __init__(self, *initial: float):
        vals = np.asarray(initial, dtype=np.float64)
        if vals.shape != (len(self.names),):
            raise ValueError(
                f"{type(self).__name__} takes {len(self.names)} standard deviation(s) "
                f"({', '.join(self.names)}), got {len(vals)}"
            )
        if not np.all(np.isfinite(vals)) or np.any(vals <= 0):
            raise ValueError(
                f"{type(self).__name__}: standard deviations must be positive, got {list(vals)}"
            )
        self.initial = vals
        self._funcs = None

    def variance(self, f, sd):  # pragma: no cover - abstract
        raise NotImplementedError

    def __getstate__(self):
        # the generated functions (a closure over lambdify's output) are made again where
        # the model is unpickled (``functions`` builds them on first use)
        state = self.__dict__.copy()
        state["_funcs"] = None
        state.pop("_censored", None)
        return state

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={v:g}" for n, v in zip(self.names, self.initial))
        return f"{type(self).__name__}({args})"

    def functions(self):
        """Generated NumPy functions of ``(y, f, log_sd...)``: ``l, l_f, l_ff, l_s, l_fs, w,
        w_f, w_s, l_fff, l_ffs`` (``_s``: derivatives along each log standard deviation,
        shape ``(len(f), r)``)."""
        if self._funcs is not None:
            return self._funcs
        import sympy as sp

        y, f = sp.symbols("y f", real=True)
        u = sp.symbols(f"u0:{len(self.names)}", real=True)
        sd = [sp.exp(x) for x in u]
        R = self.variance(f, sd)
        ell = (y - f) ** 2 / R + sp.log(R)
        w = 1 / R + sp.diff(R, f) ** 2 / (2 * R**2)
        self._funcs = _generate([y], f, u, ell, w)
        return self._funcs

    def censored_functions(self, kind: str):
        """Generated functions of the terms of a censored observation (see
        :mod:`._censoring`), with the outputs of :meth:`functions`; ``kind``:

        - ``"left"``: ``(b, f, log_sd...)``, ``l = -2 log Phi((b - f) / s)`` (below ``b``:
          M3's below-quantification observation);
        - ``"right"``: ``(a, f, log_sd...)``, ``l = -2 log Phi((f - a) / s)`` (above ``a``);
        - ``"interval"``: ``(a, b, f, log_sd...)``, ``l = -2 log(Phi((b - f)/s) -
          Phi((a - f)/s))``;
        - ``"truncation"``: ``(t, f, log_sd...)``, ``l = +2 log Phi((f - t) / s)``: the
          observation is known to be above ``t`` (M4's positive quantities, ``t = 0``);

        with ``s = sqrt(R(f))``. The FOCE-I weight ``w`` is the Gauss-Newton one: the
        second derivative of ``l`` in the standardised limit(s) ``z`` times ``(dz/df)^2 / 2``
        (the exact half curvature in ``f`` for an additive error; never negative for the
        first three kinds).
        """
        cache = self.__dict__.setdefault("_censored", {})
        if kind in cache:
            return cache[kind]
        if kind not in ("left", "right", "interval", "truncation"):
            raise ValueError(f"unknown censoring kind {kind!r}")
        import sympy as sp

        from ._censoring import LogD, LogPhi

        # f without assumptions: sqrt((sd f)^2) stays a square root (as real, SymPy makes it
        # sd |f|, whose third derivative is a DiracDelta)
        f = sp.Symbol("f")
        u = sp.symbols(f"u0:{len(self.names)}", real=True)
        sd = [sp.exp(x) for x in u]
        s = sp.sqrt(self.variance(f, sd))
        za, zb = sp.symbols("za zb", real=True)
        a, b, t = sp.symbols("a b t", real=True)
        if kind == "left":
            args, h, zs = [b], -2 * LogPhi(zb), {zb: (b - f) / s}
        elif kind == "right":
            args, h, zs = [a], -2 * LogPhi(za), {za: (f - a) / s}
        elif kind == "interval":
            args, h, zs = [a, b], -2 * LogD(za, zb), {za: (a - f) / s, zb: (b - f) / s}
        else:
            args, h, zs = [t], 2 * LogPhi(za), {za: (f - t) / s}
        ell = h.subs(zs)
        zsym = list(zs)
        J = [sp.diff(zs[z], f) for z in zsym]
        w = (
            sum(
                sp.diff(h, z1, z2).subs(zs) * J[i] * J[j]
                for i, z1 in enumerate(zsym)
                for j, z2 in enumerate(zsym)
            )
            / 2
        )
        cache[kind] = _generate(args, f, u, ell, w)
        return cache[kind]


def _generate(data, f, u, ell, w):
    """NumPy functions of ``(*data, f, *u)`` of ``l, l_f, l_ff, l_s, l_fs, w, w_f, w_s,
    l_fff, l_ffs`` (see :meth:`ErrorModel.functions`) from the expressions ``ell``, ``w``."""
    import sympy as sp

    from ._censoring import NUMPY_FUNCTIONS

    ell_f = sp.diff(ell, f)
    ell_ff = sp.diff(ell_f, f)
    exprs = [ell, ell_f, ell_ff]
    exprs += [sp.diff(ell, x) for x in u] + [sp.diff(ell_f, x) for x in u]
    exprs += [w, sp.diff(w, f)] + [sp.diff(w, x) for x in u]
    exprs += [sp.diff(ell_ff, f)] + [sp.diff(ell_ff, x) for x in u]
    fn = sp.lambdify([*data, f, *u], exprs, modules=[NUMPY_FUNCTIONS, "numpy"], cse=True)
    r = len(u)

    def evaluate(*args):
        *values, fv, log_sd = args
        out = fn(*values, fv, *log_sd)
        out = [np.broadcast_to(np.asarray(o, dtype=np.float64), fv.shape) for o in out]

        def cols(a):
            return np.stack(out[a : a + r], axis=1)

        ell, ell_f, ell_ff = out[0], out[1], out[2]
        w, w_f = out[3 + 2 * r], out[4 + 2 * r]
        ell_fff = out[5 + 3 * r]
        return (
            ell,
            ell_f,
            ell_ff,
            cols(3),
            cols(3 + r),
            w,
            w_f,
            cols(5 + 2 * r),
            ell_fff,
            cols(6 + 3 * r),
        )

    return evaluate


class Additive(ErrorModel):
    """``y = f + eps``, ``Var eps = add^2`` (same units as the observations).

    Parameters
    ----------
    *initial : float
        One value: the starting value of the standard deviation ``add``, in the units of the
        observations (``Additive(0.5)``). Positive and finite (estimated on the log scale);
        another count of values, or a value that is not positive and finite, raises
        ``ValueError``.
    """

    names = ("add",)

    def variance(self, f, sd):
        return sd[0] ** 2


class Proportional(ErrorModel):
    """``y = f (1 + eps)``, ``Var = (prop f)^2`` (``prop``: a fraction, 0.1 = 10%).

    Parameters
    ----------
    *initial : float
        One value: the starting value of ``prop``, a fraction without units
        (``Proportional(0.1)``). Positive and finite (estimated on the log scale); another
        count of values, or a value that is not positive and finite, raises ``ValueError``.
    """

    names = ("prop",)

    def variance(self, f, sd):
        return (sd[0] * f) ** 2


class Combined(ErrorModel):
    """``Var = add^2 + (prop f)^2`` (variances summed: NONMEM's ``Y = F + F*EPS(1) + EPS(2)``
    with two SIGMAs, nlmixr2's ``add() + prop()``).

    Parameters
    ----------
    *initial : float
        Two values: the starting values of ``add`` (units of the observations) and of
        ``prop`` (a fraction), in that order (``Combined(0.5, 0.1)``). Positive and finite
        (estimated on the log scale); another count of values, or a value that is not
        positive and finite, raises ``ValueError``.
    """

    names = ("add", "prop")

    def variance(self, f, sd):
        return sd[0] ** 2 + (sd[1] * f) ** 2


class Exponential(ErrorModel):
    """``log y = log f + eps``, ``Var eps = sd^2`` (log-transform both sides; ``y > 0``).

    Parameters
    ----------
    *initial : float
        One value: the starting value of ``sd``, the standard deviation on the log scale
        (about the coefficient of variation for small values; ``Exponential(0.2)``).
        Positive and finite (estimated on the log scale); another count of values, or a
        value that is not positive and finite, raises ``ValueError``.
    """

    names = ("sd",)
    log_transform = True

    def variance(self, f, sd):
        return sd[0] ** 2
