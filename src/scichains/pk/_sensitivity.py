"""Forward sensitivities of a PK model up to third order, generated with SymPy.

For ``dx/dt = f(x, phi, t) + rate`` (``n`` states, ``m`` individual parameters ``phi``, a
piecewise-constant input ``rate`` per state: zero-order infusions) the augmented state is

    y = [x, S1, S2(, S3)],  S_o[a, I] = d^o x_a / dphi_I  (I: sorted index tuples of length o)

with ``dS_{I+(l,)}/dt = D_l (dS_I/dt)``, where ``D_l`` is the total derivative along
``phi_l`` (``D_l e = de/dphi_l + sum_{a, I} de/dS[a, I] S[a, sorted(I + (l,))]``, ``S[a, ()]
= x_a``). The rates and the doses do not depend on ``phi``, so the sensitivities start at
zero and are continuous across a bolus dose. The augmented system is an ordinary
:class:`~scichains.ode.SymbolicModel` (compiled once per model per machine); the observation
``g(x, phi)`` and its total derivatives are generated the same way, as vectorised NumPy
functions of the saved states. Second order serves FOCE-I's exact gradient; Laplace's needs
the third.
"""

from __future__ import annotations

import itertools

import numpy as np


def pair_index(m: int) -> np.ndarray:
    """``idx[k, l]``: the column of ``(k, l)`` (either order) in the packed ``k <= l`` layout."""
    idx = np.zeros((m, m), dtype=np.int64)
    for c, (k, ll) in enumerate(itertools.combinations_with_replacement(range(m), 2)):
        idx[k, ll] = idx[ll, k] = c
    return idx


class Sensitivities:
    """The augmented system of a model (sensitivities up to ``order``, 2 or 3) and its
    observation derivatives.

    Parameters
    ----------
    states, phi : SymPy symbols (``n`` and ``m`` of them)
    rhs : SymPy expressions, ``rhs[a] = dx_a/dt`` (without infusion input)
    observe : SymPy expression ``g(x, phi)`` (the prediction of one observation)
    t : the time symbol when ``rhs`` depends on it
    order : 2 (values, first and second derivatives) or 3
    bioavailability : optional list of ``n`` SymPy expressions in ``phi``: the fraction of a
        dose into each state that arrives (boluses: the jump, with its derivatives;
        infusions: the rate is scaled)
    """

    def __init__(self, states, phi, rhs, observe, t=None, order: int = 2, bioavailability=None):
        import sympy as sp

        from ..ode._symbolic import SymbolicModel

        if order not in (2, 3):
            raise ValueError(f"order must be 2 or 3, got {order}")
        n, m = len(states), len(phi)
        self.n, self.m, self.order = n, m, order
        self.pairs = pair_index(m)
        self.npair = m * (m + 1) // 2
        tuples = {
            o: list(itertools.combinations_with_replacement(range(m), o))
            for o in range(1, order + 1)
        }
        X = [{(): states[a]} for a in range(n)]
        for o in range(1, order + 1):
            for a in range(n):
                for c, tup in enumerate(tuples[o]):
                    X[a][tup] = sp.Symbol(f"_S{o}_{a}_{c}", real=True)
        rates = [sp.Symbol(f"_rate_{a}", real=True) for a in range(n)]

        def D(e, ll):
            out = sp.diff(e, phi[ll])
            for a in range(n):
                for tup, sym in X[a].items():
                    if len(tup) >= order:
                        continue
                    d = sp.diff(e, sym)
                    if d != 0:
                        out += d * X[a][tuple(sorted(tup + (ll,)))]
            return out

        F = (
            [sp.Integer(1)] * n
            if bioavailability is None
            else [sp.sympify(e) for e in bioavailability]
        )
        # the right-hand side of every augmented state, by differentiating a lower one
        rhs_of = [{(): sp.sympify(rhs[a]) + rates[a] * F[a]} for a in range(n)]
        for o in range(1, order + 1):
            for a in range(n):
                for tup in tuples[o]:
                    rhs_of[a][tup] = D(rhs_of[a][tup[:-1]], tup[-1])
        aug_states = list(states)
        eqs = [rhs_of[a][()] for a in range(n)]
        for o in range(1, order + 1):
            for a in range(n):
                for tup in tuples[o]:
                    aug_states.append(X[a][tup])
                    eqs.append(rhs_of[a][tup])
        self.model = SymbolicModel(aug_states, list(phi) + rates, eqs, t=t)
        self.size = len(aug_states)
        # a bolus of amount A into state a adds A * d^o F_a / dphi_I to S[a, I]
        where = {sym: i for i, sym in enumerate(aug_states)}
        self._bolus = []
        for a in range(n):
            if F[a] == 1:
                self._bolus.append(None)
                continue
            tups = [()] + [tup for o in range(1, order + 1) for tup in tuples[o]]
            idx = np.array([where[X[a][tup]] for tup in tups], dtype=np.int64)
            exprs = [F[a].diff(*[phi[k] for k in tup]) if tup else F[a] for tup in tups]
            fn = sp.lambdify(list(phi), exprs, modules="numpy", cse=True)
            self._bolus.append((idx, fn))

        g = {(): sp.sympify(observe)}
        for o in range(1, order + 1):
            for tup in tuples[o]:
                g[tup] = D(g[tup[:-1]], tup[-1])
        self._obs_tuples = [()] + [tup for o in range(1, order + 1) for tup in tuples[o]]
        args = aug_states + list(phi)
        self._g = sp.lambdify(args, [g[t_] for t_ in self._obs_tuples], modules="numpy", cse=True)

    def add_bolus(self, y: np.ndarray, state: int, amount: float, phi: np.ndarray) -> None:
        """Add a bolus of ``amount`` into ``state`` to the augmented state ``y`` (in place)."""
        b = self._bolus[state]
        if b is None:
            y[state] += amount
            return
        idx, fn = b
        y[idx] += amount * np.asarray(fn(*phi), dtype=np.float64)

    def observe(self, y: np.ndarray, phi: np.ndarray):
        """``(g, g_phi, g_phiphi[, g_phiphiphi])`` at saved augmented states ``y`` (shape
        ``(T, size)``): shapes ``(T,)``, ``(T, m)``, ``(T, m, m)``, ``(T, m, m, m)``
        (symmetric)."""
        T, m = y.shape[0], self.m
        cols = [y[:, i] for i in range(self.size)] + [np.full(T, v) for v in phi]
        out = self._g(*cols)
        g = np.empty(T)
        g1 = np.empty((T, m))
        g2 = np.empty((T, m, m))
        g3 = np.empty((T, m, m, m)) if self.order == 3 else None
        for tup, v in zip(self._obs_tuples, out):
            if len(tup) == 0:
                g[:] = v
            elif len(tup) == 1:
                g1[:, tup[0]] = v
            elif len(tup) == 2:
                g2[:, tup[0], tup[1]] = v
                g2[:, tup[1], tup[0]] = v
            else:
                for perm in set(itertools.permutations(tup)):
                    g3[(slice(None), *perm)] = v
        if self.order == 3:
            return g, g1, g2, g3
        return g, g1, g2
