"""The covariance of the random effects as blocks: between subjects, and between occasions.

Omega is block diagonal: the between-subject block (``q_b`` random effects), then, with
inter-occasion variability, one block of the ``q_o`` inter-occasion random effects per
occasion, every one equal to the first (NONMEM's ``$OMEGA BLOCK SAME``). Each block is
diagonal (estimated as the logs of its standard deviations) or full (its Cholesky factor
``L`` by rows of the lower triangle, the diagonal as ``log L_kk``). The omega part ``w`` of
the estimated vector holds the between-subject block's entries, then those of the occasion
block once: copies share them, so ``dOmega/dw`` of a shared entry has it in every copy.
"""

from __future__ import annotations

import numpy as np


class Block:
    """One estimated block: ``names`` of its random effects (the occasion block: the names
    the model writes, not the per-occasion copies), ``start`` (its first copy's first index in
    the expanded random effects), ``copies`` (1, or the number of occasions) and ``diagonal``.
    """

    def __init__(self, names, start: int, copies: int, diagonal: bool):
        self.names, self.start, self.copies, self.diagonal = list(names), start, copies, diagonal
        self.size = len(self.names)
        k = self.size
        self.n = k if diagonal else k * (k + 1) // 2
        self.pairs = [(i, i) for i in range(k)] if diagonal else [
            (i, j) for i in range(k) for j in range(i + 1)
        ]  # fmt: skip

    def matrix(self, w):
        """``(B, [dB/dw_c])`` of this block's entries ``w``."""
        k = self.size
        if self.diagonal:
            sd2 = np.exp(2.0 * np.asarray(w, dtype=np.float64))
            d = []
            for c in range(k):
                e = np.zeros((k, k))
                e[c, c] = 2.0 * sd2[c]
                d.append(e)
            return np.diag(sd2), d
        L = np.zeros((k, k))
        for c, (i, j) in enumerate(self.pairs):
            L[i, j] = np.exp(w[c]) if i == j else w[c]
        d = []
        for i, j in self.pairs:
            dL = np.zeros((k, k))
            dL[i, j] = L[i, j] if i == j else 1.0
            d.append(dL @ L.T + L @ dL.T)
        return L @ L.T, d

    def entries(self, B) -> np.ndarray:
        """The block's estimated parameters ``w`` from its matrix ``B``."""
        if self.diagonal:
            return 0.5 * np.log(np.diag(B))
        L = np.linalg.cholesky(B)
        return np.array([np.log(L[i, i]) if i == j else L[i, j] for i, j in self.pairs])

    def parameter_names(self) -> list[str]:
        """Names of the block's entries of ``x``."""
        if self.diagonal:
            return [f"log_sd({n})" for n in self.names]
        return [
            f"log_L({self.names[i]})" if i == j else f"L({self.names[i]},{self.names[j]})"
            for i, j in self.pairs
        ]


class OmegaLayout:
    """Omega of ``q`` expanded random effects from ``blocks`` (see the module docstring)."""

    def __init__(self, blocks, q: int):
        self.blocks, self.q = list(blocks), q
        self.n = sum(b.n for b in self.blocks)

    def matrix(self, w):
        """``(Omega (q, q), [dOmega/dw_c] (n of them))``."""
        w = np.asarray(w, dtype=np.float64)
        om = np.zeros((self.q, self.q))
        d = []
        o = 0
        for b in self.blocks:
            B, dB = b.matrix(w[o : o + b.n])
            o += b.n
            for c in range(b.copies):
                s = b.start + c * b.size
                om[s : s + b.size, s : s + b.size] = B
            for e in dB:
                full = np.zeros((self.q, self.q))
                for c in range(b.copies):
                    s = b.start + c * b.size
                    full[s : s + b.size, s : s + b.size] = e
                d.append(full)
        return om, d

    def entries(self, om) -> np.ndarray:
        """``w`` from a ``(q, q)`` omega (each block read from its first copy; ``ValueError``
        when a copy differs from the first or an entry outside the blocks is not zero)."""
        om = np.asarray(om, dtype=np.float64)
        inside = np.zeros((self.q, self.q), dtype=bool)
        w = []
        for b in self.blocks:
            s = b.start
            B = om[s : s + b.size, s : s + b.size]
            for c in range(b.copies):
                s = b.start + c * b.size
                inside[s : s + b.size, s : s + b.size] = True
                if c and not np.array_equal(om[s : s + b.size, s : s + b.size], B):
                    raise ValueError(
                        f"omega: the block of occasion {c + 1} differs from that of occasion 1 "
                        "(the occasions share one block)"
                    )
            if b.diagonal and np.any(B != np.diag(np.diag(B))):
                raise ValueError(
                    f"omega: the block of {', '.join(b.names)} is diagonal; give variances"
                )
            w.append(b.entries(B))
        if np.any(om[~inside] != 0):
            raise ValueError("omega: entries between blocks must be zero")
        return np.concatenate(w)

    def reported(self) -> list[tuple[str, int, int]]:
        """Each estimated element of omega as ``(label, i, j)``: its position in the expanded
        matrix (an occasion block's first copy) and a label (``kappa`` for a variance,
        ``eta_a,eta_b`` for a covariance), in the order of ``w``."""
        out = []
        for b in self.blocks:
            for i, j in b.pairs:
                label = b.names[i] if i == j else f"{b.names[i]},{b.names[j]}"
                out.append((label, b.start + i, b.start + j))
        return out

    def parameter_names(self) -> list[str]:
        return [n for b in self.blocks for n in b.parameter_names()]

    def variance(self, name: str) -> tuple[int, int] | None:
        """``(c, i)``: the entry of ``w`` and the expanded index of the variance of random
        effect ``name`` (a diagonal block's; ``ValueError`` in a full block); None when no block
        has that name."""
        o = 0
        for b in self.blocks:
            if name in b.names:
                if not b.diagonal:
                    raise ValueError(f"{name} is one random effect of a full omega block")
                k = b.names.index(name)
                return o + k, b.start + k
            o += b.n
        return None

    def expand(self, variances) -> np.ndarray:
        """The ``(q, q)`` diagonal omega of one variance per name of :attr:`names` (occasion
        effects once)."""
        v = np.asarray(variances, dtype=np.float64)
        out = []
        o = 0
        for b in self.blocks:
            out += list(v[o : o + b.size]) * b.copies
            o += b.size
        return np.diag(out)

    @property
    def names(self) -> list[str]:
        """The random effects as the model writes them (occasion effects once)."""
        return [n for b in self.blocks for n in b.names]
