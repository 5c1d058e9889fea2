"""Censored observations (below or above a limit, or in an interval): the M3 and M4 terms.

An observation with ``CENS = 1`` is known only to lie below its ``DV`` (the lower limit of
quantification, LLOQ), and above ``LIMIT`` where one is given; ``CENS = -1``: above its
``DV`` (and below ``LIMIT``). Its term of the inner objective is ``-2 log`` of that
probability under the residual error model (Beal 2001, M3), with ``s = sqrt(R(f))``:

    l = -2 log Phi((LLOQ - f) / s)                               below LLOQ
    l = -2 log(Phi((DV - f) / s) - Phi((LIMIT - f) / s))           in (LIMIT, DV)
    l = -2 log Phi((f - DV) / s)                                 above DV

M4 (positive quantities): every observation is known to be positive, so each term is
conditioned on ``y > 0``: ``+2 log Phi(f / s)`` is added to every observation's term (an
observed one's density and a censored one's probability), and a censored one below the LLOQ
lies in ``(max(0, LIMIT), LLOQ)``. With the exponential error model everything is on the
log scale (limits included; a limit of 0 is ``-inf`` there, and M4 is M3).

SymPy differentiates these through the functions below, whose derivatives close over a few
ratios (``LogPhi' = Mills``, ``Mills' = -Mills (z + Mills)``; ``LogD(a, b) = log(Phi(b) -
Phi(a))`` with ``d/da = -Ra``, ``d/db = Rb``, ``Ra = phi(a) / (Phi(b) - Phi(a))``, ...),
evaluated in NumPy from ``log_ndtr`` so that they stay finite far in the tails.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class LogPhi(sp.Function):
    """``log Phi(z)``."""

    def fdiff(self, argindex=1):
        return Mills(self.args[0])


class Mills(sp.Function):
    """``phi(z) / Phi(z)``."""

    def fdiff(self, argindex=1):
        z = self.args[0]
        m = Mills(z)
        return -m * (z + m)


class LogD(sp.Function):
    """``log(Phi(b) - Phi(a))`` of ``(a, b)``, ``a < b``."""

    def fdiff(self, argindex=1):
        a, b = self.args
        return -Ra(a, b) if argindex == 1 else Rb(a, b)


class Ra(sp.Function):
    """``phi(a) / (Phi(b) - Phi(a))``."""

    def fdiff(self, argindex=1):
        a, b = self.args
        if argindex == 1:
            return -a * Ra(a, b) + Ra(a, b) ** 2
        return -Ra(a, b) * Rb(a, b)


class Rb(sp.Function):
    """``phi(b) / (Phi(b) - Phi(a))``."""

    def fdiff(self, argindex=1):
        a, b = self.args
        if argindex == 1:
            return Ra(a, b) * Rb(a, b)
        return -b * Rb(a, b) - Rb(a, b) ** 2


def _log_ndtr(z):
    from scipy.special import log_ndtr

    return log_ndtr(z)


def _log_phi_density(z):
    return -0.5 * np.square(z) - _LOG_SQRT_2PI


def _mills(z):
    z = np.asarray(z, dtype=np.float64)
    return np.exp(_log_phi_density(z) - _log_ndtr(z))


def _log1mexp(x):
    """``log(1 - exp(x))`` for ``x <= 0``."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _log_d(a, b):
    """``log(Phi(b) - Phi(a))``, from the tail where both are smaller (no cancellation)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    upper = a > 0  # both in the upper tail: Phi(-a) - Phi(-b)
    hi = np.where(upper, _log_ndtr(-a), _log_ndtr(b))
    lo = np.where(upper, _log_ndtr(-b), _log_ndtr(a))
    with np.errstate(invalid="ignore", divide="ignore"):
        return hi + _log1mexp(lo - hi)


def _ra(a, b):
    return np.exp(_log_phi_density(a) - _log_d(a, b))


def _rb(a, b):
    return np.exp(_log_phi_density(b) - _log_d(a, b))


NUMPY_FUNCTIONS = {"LogPhi": _log_ndtr, "Mills": _mills, "LogD": _log_d, "Ra": _ra, "Rb": _rb}


class CensoringPlan:
    """One subject's observations by kind, on the scale of the objective (``log`` with the
    exponential error model): ``normal`` (indices with a density), ``left`` (indices, upper
    limits), ``right`` (indices, lower limits), ``interval`` (indices, lower, upper),
    ``truncation`` (indices, bounds: M4's ``y > 0``), as ``(idx, *limits)`` tuples.

    ``m4`` and ``log``: for all observations (bools) or each (``(n,)`` bools: several
    endpoints, each with its own likelihood of censored observations and error model)."""

    __slots__ = ("normal", "left", "right", "interval", "truncation", "any")

    def __init__(self, dv, cens, limit, m4, log):
        n = dv.size
        cens = np.zeros(n) if cens is None else np.asarray(cens, dtype=np.float64)
        limit = np.full(n, np.nan) if limit is None else np.asarray(limit, dtype=np.float64)
        log = np.broadcast_to(np.asarray(log, dtype=bool), (n,))
        m4 = np.broadcast_to(np.asarray(m4, dtype=bool), (n,)) & ~log  # M4 on y's own scale
        lower = np.where(cens == 1, limit, np.nan)
        upper = np.where(cens == -1, limit, np.nan)
        lower = np.where((cens == 1) & m4, np.fmax(np.nan_to_num(lower, nan=0.0), 0.0), lower)
        with np.errstate(divide="ignore", invalid="ignore"):
            dv = np.where(log, np.log(np.where(log, dv, 1.0)), dv)
            lower = np.where(
                log & ~np.isnan(lower), np.log(np.fmax(np.where(log, lower, 1.0), 0.0)), lower
            )
            upper = np.where(log, np.log(np.where(log, upper, 1.0)), upper)
        lo_ok = np.isfinite(lower)
        hi_ok = np.isfinite(upper)
        idx = np.arange(n)
        self.normal = idx[cens == 0]
        left = (cens == 1) & ~lo_ok
        self.left = (idx[left], dv[left])
        right = (cens == -1) & ~hi_ok
        self.right = (idx[right], dv[right])
        i1 = (cens == 1) & lo_ok
        i2 = (cens == -1) & hi_ok
        self.interval = (
            np.concatenate([idx[i1], idx[i2]]),
            np.concatenate([lower[i1], dv[i2]]),
            np.concatenate([dv[i1], upper[i2]]),
        )
        self.truncation = (idx[m4], np.zeros(int(m4.sum())))
        self.any = bool(np.any(cens != 0) or self.truncation[0].size)
