"""The outer gradient of one subject's OFV term, ``dOFV_i/dx``, FOCE-I and Laplace.

The EBE moves with the parameters (``d eta_i/dx = -H^-1 d2L/(deta dx)``), so

    dOFV_i/dx = dOFV_i/dx|_eta - v^T d2L/(deta dx),   v = H^-1 dOFV_i/deta|_x,

from the subject's evaluation at its EBE (:class:`~._inner.SubjectTerms`: predictions, their
derivatives along eta and theta, the per-observation terms of the error model).
"""

from __future__ import annotations

import numpy as np


def focei_gradient(model, ev, eta, A, oinv, dom) -> np.ndarray:
    """``dOFV_i/dx`` (FOCE-I) of one subject at its EBE ``eta`` (see the module docstring)."""
    p, no = model.p, model.n_omega
    ell, ell_f, ell_ff, ell_s, ell_fs, w, w_f, w_s = ev.terms[:8]
    G, Hf, Ft, B = ev.G, ev.Hf, ev.Ft, ev.B
    Ai = np.linalg.inv(A)
    Z = G @ Ai  # rows: A^-1 g_j
    c = np.einsum("jq,jq->j", Z, G)  # g_j^T A^-1 g_j
    # d OFV / d eta at fixed x (the L part is ~0 at the EBE; kept for accuracy)
    dF_eta = ev.gL + G.T @ (w_f * c) + 2.0 * np.einsum("j,jam,ja->m", w, Hf, Z)
    v = np.linalg.solve(ev.H, dF_eta)
    g = np.zeros(model.size)
    # typical values
    part = Ft.T @ ell_f + Ft.T @ (w_f * c) + 2.0 * np.einsum("j,jap,ja->p", w, B, Z)
    cross = (G.T * ell_ff) @ Ft + np.einsum("j,jqp->qp", ell_f, B)
    g[:p] = part - v @ cross
    # omega
    for k, d in enumerate(dom):
        doi = -oinv @ d @ oinv
        part = eta @ doi @ eta + np.trace(oinv @ d) + np.sum(Ai * doi)
        g[p + k] = part - v @ (2.0 * doi @ eta)
    # residual error
    part = ell_s.sum(axis=0) + w_s.T @ c
    cross = G.T @ ell_fs
    g[p + no :] = part - v @ cross
    return g


def laplace_gradient(model, ev, eta, oinv, dom) -> np.ndarray:
    """As :func:`focei_gradient` with ``A = H / 2`` exact: ``d log det H`` needs the third
    derivatives of the predictions (``ev.Tf``, ``ev.Tt``) and of ``l``."""
    p, no = model.p, model.n_omega
    ell, ell_f, ell_ff, ell_s, ell_fs, _, _, _, ell_fff, ell_ffs = ev.terms
    G, Hf, Ft, B, Tf, Tt = ev.G, ev.Hf, ev.Ft, ev.B, ev.Tf, ev.Tt
    H = ev.H
    Hi = np.linalg.inv(H)
    Z = G @ Hi
    c = np.einsum("jq,jq->j", Z, G)  # g_j^T H^-1 g_j
    trHf = np.einsum("qr,jrq->j", Hi, Hf)  # tr(H^-1 Hf_j)
    # d log det H / d eta_m at fixed x: tr(H^-1 dH/deta_m)
    dF_eta = (
        ev.gL
        + G.T @ (ell_fff * c + ell_ff * trHf)
        + 2.0 * np.einsum("j,jam,ja->m", ell_ff, Hf, Z)
        + np.einsum("j,ab,jabm->m", ell_f, Hi, Tf)
    )
    v = np.linalg.solve(H, dF_eta)
    g = np.zeros(model.size)
    part = (
        Ft.T @ ell_f
        + Ft.T @ (ell_fff * c + ell_ff * trHf)
        + 2.0 * np.einsum("j,jap,ja->p", ell_ff, B, Z)
        + np.einsum("j,ab,jabp->p", ell_f, Hi, Tt)
    )
    cross = (G.T * ell_ff) @ Ft + np.einsum("j,jqp->qp", ell_f, B)
    g[:p] = part - v @ cross
    for k, d in enumerate(dom):
        doi = -oinv @ d @ oinv
        part = eta @ doi @ eta + np.trace(oinv @ d) + 2.0 * np.sum(Hi * doi)
        g[p + k] = part - v @ (2.0 * doi @ eta)
    part = ell_s.sum(axis=0) + ell_ffs.T @ c + ell_fs.T @ trHf
    g[p + no :] = part - v @ (G.T @ ell_fs)
    return g
