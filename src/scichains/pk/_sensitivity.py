"""Second-order forward sensitivities of a PK model, generated with SymPy.

For ``dx/dt = f(x, phi, t) + rate`` (``n`` states, ``m`` individual parameters ``phi``, a
piecewise-constant input ``rate`` per state: zero-order infusions) the augmented state is

    y = [x, S, S2],  S[a, k] = dx_a/dphi_k,  S2[a, kl] = d2x_a/(dphi_k dphi_l)  (k <= l),

with ``dS_k/dt = D_k f`` and ``dS2_kl/dt = D_l D_k f``, where ``D_l`` is the total derivative
along ``phi_l`` (``D_l e = sum_a de/dx_a S[a, l] + sum_{a,k} de/dS[a, k] S2[a, kl] +
de/dphi_l``). The rates and the doses do not depend on ``phi``, so the sensitivities start at
zero and are continuous across a bolus dose. The augmented system is an ordinary
:class:`~scichains.ode.SymbolicModel` (compiled once per model per machine); the observation
``g(x, phi)`` and its first and second total derivatives are generated the same way, as
vectorised NumPy functions of the saved states.
"""

from __future__ import annotations

import numpy as np


def pair_index(m: int) -> np.ndarray:
    """``idx[k, l]``: the column of ``(k, l)`` (either order) in the packed ``k <= l`` layout."""
    idx = np.zeros((m, m), dtype=np.int64)
    c = 0
    for k in range(m):
        for ll in range(k, m):
            idx[k, ll] = idx[ll, k] = c
            c += 1
    return idx


class Sensitivities:
    """The augmented (second-order) system of a model and its observation derivatives.

    Parameters
    ----------
    states, phi : SymPy symbols (``n`` and ``m`` of them)
    rhs : SymPy expressions, ``rhs[a] = dx_a/dt`` (without infusion input)
    observe : SymPy expression ``g(x, phi)`` (the prediction of one observation)
    t : the time symbol when ``rhs`` depends on it
    """

    def __init__(self, states, phi, rhs, observe, t=None):
        import sympy as sp

        from ..ode._symbolic import SymbolicModel

        n, m = len(states), len(phi)
        self.n, self.m = n, m
        self.pairs = pair_index(m)
        npair = m * (m + 1) // 2
        self.npair = npair
        S = [[sp.Symbol(f"_S_{a}_{k}", real=True) for k in range(m)] for a in range(n)]
        S2 = [[sp.Symbol(f"_S2_{a}_{c}", real=True) for c in range(npair)] for a in range(n)]
        rates = [sp.Symbol(f"_rate_{a}", real=True) for a in range(n)]

        def D(e, ll):
            out = sp.diff(e, phi[ll])
            for a in range(n):
                out += sp.diff(e, states[a]) * S[a][ll]
                for k in range(m):
                    d = sp.diff(e, S[a][k])
                    if d != 0:
                        out += d * S2[a][self.pairs[k, ll]]
            return out

        f = [sp.sympify(e) for e in rhs]
        f1 = [[D(f[a], k) for k in range(m)] for a in range(n)]
        f2 = [[None] * npair for _ in range(n)]
        for a in range(n):
            for k in range(m):
                for ll in range(k, m):
                    f2[a][self.pairs[k, ll]] = D(f1[a][k], ll)
        aug_states = list(states)
        aug_states += [S[a][k] for a in range(n) for k in range(m)]
        aug_states += [S2[a][c] for a in range(n) for c in range(npair)]
        eqs = [f[a] + rates[a] for a in range(n)]
        eqs += [f1[a][k] for a in range(n) for k in range(m)]
        eqs += [f2[a][c] for a in range(n) for c in range(npair)]
        self.model = SymbolicModel(aug_states, list(phi) + rates, eqs, t=t)
        self.size = len(aug_states)

        g = sp.sympify(observe)
        g1 = [D(g, k) for k in range(m)]
        g2 = [D(g1[k], ll) for k in range(m) for ll in range(m)]
        args = aug_states + list(phi)
        self._g = sp.lambdify(args, [g, *g1, *g2], modules="numpy", cse=True)

    def observe(self, y: np.ndarray, phi: np.ndarray):
        """``(g, g_phi, g_phiphi)`` at saved augmented states ``y`` (shape ``(T, size)``):
        shapes ``(T,)``, ``(T, m)``, ``(T, m, m)``."""
        T, m = y.shape[0], self.m
        cols = [y[:, i] for i in range(self.size)] + [np.full(T, v) for v in phi]
        out = self._g(*cols)
        vals = np.empty((T, 1 + m + m * m))
        for i, v in enumerate(out):
            vals[:, i] = v  # broadcasts constants
        return vals[:, 0], vals[:, 1 : 1 + m], vals[:, 1 + m :].reshape(T, m, m)
