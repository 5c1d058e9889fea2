"""The array contract of every public entry point that hands arrays to compiled code (issue 27,
item 2): a wrong length, dtype, layout or type, or an output sharing memory with an input,
raises a clear exception naming the argument, before any kernel runs, and leaves every input
(and an optimizer's state) as it was. Read-only inputs of another layout or dtype are
converted, and give the results of their contiguous copies.

The kernels run without bounds checks, so a case that gets past the checks may write out of
bounds (``Adam().step(p, g)`` with a 3-entry ``g`` for a 148-entry ``p`` did: no error, ``p``
changed at scattered positions): every case runs in one subprocess, which reports each
outcome as it goes, so that a crash cannot take the test runner with it and shows the case
that caused it.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import scichains

_SCRIPT = textwrap.dedent(
    r'''
    import json, os, sys, tempfile
    import numba
    import numpy as np
    import scichains as sc
    from scichains import nn

    print("FILE", sc.__file__, flush=True)
    rng = np.random.default_rng(0)
    chain = sc.SimpleChain(4, sc.Dense(8, "tanh"), sc.Dense(12))
    P = chain.num_params  # 148
    p = chain.init_params(seed=1)  # float32
    g = rng.standard_normal(P).astype(np.float32)
    X = rng.standard_normal((16, 4)).astype(np.float32)
    y = rng.standard_normal((16, 12)).astype(np.float32)
    cwl = chain.add_loss(sc.SquaredLoss(y))
    labels = rng.integers(0, 12, 16)

    def strided(a):
        """A non-contiguous view holding the values of ``a``."""
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        return wide[..., ::2]

    def readonly(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    def snapshot(objs):
        out = []
        for o in objs:
            if isinstance(o, nn.Optimizer):
                out.append(("opt", None if o.state is None else o.state.copy(), o.t.copy()))
            elif isinstance(o, np.ndarray):
                out.append(("array", o.copy(), None))
            else:
                out.append(("other", json.dumps(repr(o)), None))
        return out

    def equal(a, b):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")

    def same(a, b):
        for (ka, xa, ta), (kb, xb, tb) in zip(a, b):
            if ka == "opt" and (
                (xa is None) != (xb is None)
                or (xa is not None and not equal(xa, xb))
                or not equal(ta, tb)
            ):
                return False
            if ka == "array" and not equal(xa, xb):
                return False
            if ka == "other" and xa != xb:
                return False
        return True

    def case(name, call, *watch):
        """Run ``call()``; report its exception (or None) and whether every object in
        ``watch`` (arrays, optimizers) is unchanged."""
        print("START", name, flush=True)
        before = snapshot(watch)
        try:
            r = call()
            exc, msg = None, repr(r)[:200]
        except Exception as e:
            kinds = [k.__name__ for k in (TypeError, ValueError) if isinstance(e, k)]
            exc, msg = (kinds or [type(e).__name__])[0], str(e)
        rec = {"name": name, "exc": exc, "msg": msg, "unchanged": same(before, snapshot(watch))}
        print("CASE", json.dumps(rec), flush=True)

    # ---------------------------------------------------------------- optimizers' step
    for O in (sc.Adam, sc.AdamW, sc.SGD):
        n = O.__name__
        opt = O(1e-2)
        opt.step(p.copy(), g)  # state bound to a 148-vector, step count 1
        q = p.copy()
        case(f"{n}.step g short", lambda: opt.step(q, g[:3]), q, g, opt)
        case(f"{n}.step g long", lambda: opt.step(q, np.ones(P + 5, np.float32)), q, opt)
        case(f"{n}.step g 2-D", lambda: opt.step(q, g.reshape(-1, 1)), q, g, opt)
        case(f"{n}.step p list", lambda: opt.step(list(q), g), q, g, opt)
        case(f"{n}.step p float16", lambda: opt.step(q.astype(np.float16), g), q, g, opt)
        case(f"{n}.step p int", lambda: opt.step(np.zeros(P, np.int64), g), q, g, opt)
        case(f"{n}.step p complex", lambda: opt.step(q.astype(complex), g), q, g, opt)
        case(f"{n}.step p object", lambda: opt.step(q.astype(object), g), q, g, opt)
        ps = strided(q)
        case(f"{n}.step p strided", lambda: opt.step(ps, g), ps, g, opt)
        pr = readonly(q)
        case(f"{n}.step p read-only", lambda: opt.step(pr, g), pr, g, opt)
        case(f"{n}.step p 2-D", lambda: opt.step(q.reshape(4, -1), g), q, g, opt)
        case(f"{n}.step g complex", lambda: opt.step(q, g.astype(complex)), q, g, opt)
        case(f"{n}.step g object", lambda: opt.step(q, g.astype(object)), q, g, opt)
        case(f"{n}.step g=p", lambda: opt.step(q, q), q, opt)
        buf = np.concatenate([p, p])
        a, b = buf[:P], buf[P // 2 : P // 2 + P]
        case(f"{n}.step g overlaps p", lambda: opt.step(a, b), buf, opt)
        case(f"{n}.step g is the state", lambda: opt.step(q, opt.state[0]), q, opt)
        gn = g.copy()
        gn[7] = np.nan
        case(f"{n}.step g NaN", lambda: opt.step(q, gn), q, gn, opt)
        gi = g.copy()
        gi[-1] = -np.inf
        case(f"{n}.step g inf", lambda: opt.step(q, gi), q, gi, opt)
        # a vector of another length would start fresh state: not when the step is refused
        q2 = np.zeros(10, np.float32)
        case(f"{n}.step new p, g NaN", lambda: opt.step(q2, np.full(10, np.nan)), q2, opt)
        case(f"{n}.step new p, g short", lambda: opt.step(q2, np.ones(3)), q2, opt)

        # read-only g of another layout, dtype or type: converted, same result
        def same_update(g_other, O=O):
            o1, o2 = O(1e-2), O(1e-2)
            a, b = p.copy(), p.copy()
            for _ in range(3):
                o1.step(a, g)
                o2.step(b, g_other)
            assert np.array_equal(a, b), np.abs(a - b).max()
            return "same"

        case(f"{n}.step g strided ok", lambda: same_update(strided(g)), g)
        case(f"{n}.step g float64 ok", lambda: same_update(g.astype(np.float64)), g)
        case(f"{n}.step g list ok", lambda: same_update(list(g)), g)

    class Custom(nn.Optimizer):
        def hyper(self):
            return np.zeros(6)

    class ShortHyper(sc.Adam):
        def hyper(self):
            return np.zeros(2)

    o64 = sc.Adam()
    p64 = p.astype(np.float64)
    o64.step(p64, g.astype(np.float64))
    g64 = g.astype(np.float64)
    g64[100] = np.inf
    case("Adam.step float64 g inf", lambda: o64.step(p64, g64), p64, g64, o64)
    case("Adam.step float64 g float32 ok", lambda: o64.step(p64, g), g)
    q = p.copy()
    case("Optimizer().step", lambda: nn.Optimizer().step(q, g), q, g)
    case("custom optimizer step", lambda: Custom().step(q, g), q, g)
    case("short hyper step", lambda: ShortHyper().step(q, g), q, g)
    o = sc.Adam()
    o.lr = "0.1"
    case("lr a string", lambda: o.step(q, g), q, g)
    o = sc.Adam()

    def set_state(value):
        o.state = value

    case("state wrong shape", lambda: set_state(np.zeros((3, P), np.float32)))
    case("state wrong dtype", lambda: set_state(np.zeros((2, P), np.int64)))
    case("state strided", lambda: set_state(strided(np.zeros((2, P), np.float32))))

    # ---------------------------------------------------------------- valgrad
    def vg(*args, **kw):
        return sc.valgrad(cwl, *args, **kw)

    G = np.zeros(P, np.float32)
    case("valgrad p short", lambda: vg(X, p[:-1], G), p, G, X)
    case("valgrad p float16", lambda: vg(X, p.astype(np.float16), G), p, G, X)
    case("valgrad p int", lambda: vg(X, np.zeros(P, int), G), G, X)
    case("valgrad p complex", lambda: vg(X, p.astype(complex), G), p, G, X)
    case("valgrad p object", lambda: vg(X, p.astype(object), G), p, G, X)
    case("valgrad p list", lambda: vg(X, list(p), G), p, G, X)
    ps = strided(p)
    case("valgrad p strided", lambda: vg(X, ps, G), ps, G, X)
    case("valgrad grad short", lambda: vg(X, p, np.zeros(3, np.float32)), p, X)
    case("valgrad grad long", lambda: vg(X, p, np.zeros(P + 1, np.float32)), p, X)
    case("valgrad grad float64", lambda: vg(X, p, np.zeros(P)), p, X)
    case("valgrad grad list", lambda: vg(X, p, [0.0] * P), p, X)
    Gs = strided(np.zeros(P, np.float32))
    case("valgrad grad strided", lambda: vg(X, p, Gs), p, X, Gs)
    Gr = readonly(np.zeros(P, np.float32))
    case("valgrad grad read-only", lambda: vg(X, p, Gr), p, X, Gr)
    q = p.copy()
    case("valgrad grad=p", lambda: vg(X, q, q), q, X)
    buf = np.concatenate([p, p])
    a, b = buf[:P], buf[P // 2 : P // 2 + P]
    case("valgrad grad overlaps p", lambda: vg(X, a, b), buf, X)
    yy = y.copy()
    cwl_y = chain.add_loss(sc.SquaredLoss(yy))
    Gy = yy.reshape(-1)[:P]
    case("valgrad grad in the targets", lambda: sc.valgrad(cwl_y, X, p, Gy), p, X, yy)
    Xw = X.copy()
    case("valgrad grad_x=X", lambda: vg(Xw, p, G, Xw), p, Xw, G)
    case("valgrad grad_x shape", lambda: vg(X, p, G, np.zeros((16, 3), np.float32)), p, X, G)
    case("valgrad grad_x float64", lambda: vg(X, p, G, np.zeros((16, 4))), p, X, G)
    gxs = strided(np.zeros((16, 4), np.float32))
    case("valgrad grad_x strided", lambda: vg(X, p, G, gxs), p, X, G, gxs)
    both = np.zeros(P + 64, np.float32)
    case(
        "valgrad grad_x overlaps grad",
        lambda: vg(X, p, both[:P], both[P - 8 : P + 56].reshape(16, 4)),
        p,
        X,
        both,
    )
    case("valgrad X width", lambda: vg(np.zeros((16, 5), np.float32), p, G), p, G)
    case("valgrad X complex", lambda: vg(X.astype(complex), p, G), p, G, X)
    case("valgrad X object", lambda: vg(X.astype(object), p, G), p, G, X)
    case("valgrad targets short", lambda: vg(X, p, G, targets=y[:5]), p, G, X, y)
    case("valgrad not a chain with loss", lambda: sc.valgrad(chain, X, p, G), p, G, X)
    case("valgrad step fraction", lambda: vg(X, p, G, step=1.5), p, G, X)
    case("valgrad step str", lambda: vg(X, p, G, step="1"), p, G, X)
    case("valgrad train str", lambda: vg(X, p, G, train="no"), p, G, X)

    def vg_same(Xo, **kw):
        g1, g2 = np.zeros(P, np.float32), np.zeros(P, np.float32)
        v1, v2 = vg(X, p, g1, threads=1), vg(Xo, p, g2, threads=1, **kw)
        assert v1 == v2 and np.array_equal(g1, g2)
        return "same"

    case("valgrad X strided ok", lambda: vg_same(strided(X)), p, X)
    case("valgrad X list ok", lambda: vg_same(X.tolist()), p, X)
    case("valgrad X float64 ok", lambda: vg_same(X.astype(np.float64)), p, X)

    def disjoint_views():
        # p and grad in one buffer, side by side: allowed
        buf = np.zeros(2 * P, np.float32)
        buf[:P] = p
        g1 = np.zeros(P, np.float32)
        v1 = vg(X, p, g1, threads=1)
        v2 = vg(X, buf[:P], buf[P:], threads=1)
        assert v1 == v2 and np.array_equal(g1, buf[P:])
        return "same"

    case("valgrad disjoint views ok", disjoint_views, p, X)

    # ---------------------------------------------------------------- loss_and_grad
    case("loss_and_grad dtype float16", lambda: nn.loss_and_grad(cwl, X, dtype=np.float16), X)
    case("loss_and_grad dtype complex", lambda: nn.loss_and_grad(cwl, X, dtype=complex), X)
    case("loss_and_grad not a chain with loss", lambda: nn.loss_and_grad(chain, X), X)
    fun = nn.loss_and_grad(cwl, X, dtype=np.float32, threads=1)
    case("loss_and_grad fun p short", lambda: fun(p[:-1]), p)
    case("loss_and_grad fun p complex", lambda: fun(p.astype(complex)), p)
    case("loss_and_grad fun p object", lambda: fun(p.astype(object)), p)

    def fun_same(po):
        v1, g1 = fun(p)
        v2, g2 = fun(po)
        assert v1 == v2 and np.array_equal(g1, g2)
        return "same"

    case("loss_and_grad fun p strided ok", lambda: fun_same(strided(p)), p)
    case("loss_and_grad fun p list ok", lambda: fun_same(list(p)), p)

    # ---------------------------------------------------------------- evaluate_loss, accuracy
    case("evaluate_loss p short", lambda: nn.evaluate_loss(cwl, X, p[:-1]), p, X)
    case("evaluate_loss p strided", lambda: nn.evaluate_loss(cwl, X, strided(p)), p, X)
    case("evaluate_loss p float16", lambda: nn.evaluate_loss(cwl, X, p.astype(np.float16)), X)
    case("evaluate_loss not a chain with loss", lambda: nn.evaluate_loss(chain, X, p), X, p)
    acc = sc.accuracy_and_loss
    case("accuracy labels fraction", lambda: acc(cwl, X, labels + 0.5, p), X, p, labels)
    case("accuracy labels complex", lambda: acc(cwl, X, labels.astype(complex), p), X, p)
    case("accuracy labels short", lambda: acc(cwl, X, labels[:5], p), X, p, labels)
    case("accuracy labels 2-D", lambda: acc(cwl, X, np.zeros((16, 2), int), p), X, p)
    case("accuracy p list", lambda: acc(cwl, X, labels, list(p)), X, p, labels)
    case("accuracy not a chain with loss", lambda: acc(chain, X, labels, p), X, p, labels)
    case("accuracy labels float ok", lambda: acc(cwl, X, labels.astype(float), p), X, p)

    # ---------------------------------------------------------------- losses, penalties
    LCE = sc.LogitCrossEntropyLoss
    case("LogitCrossEntropyLoss labels 2-D", lambda: LCE(np.zeros((8, 2), int)))
    case("LogitCrossEntropyLoss labels complex", lambda: LCE(np.zeros(8, complex)))
    case("LogitCrossEntropyLoss labels (N, 1) ok", lambda: LCE(np.zeros((8, 1), int)))
    case("SquaredLoss targets object", lambda: sc.SquaredLoss(y.astype(object)), y)
    case("SquaredLoss targets complex", lambda: sc.SquaredLoss(y.astype(complex)), y)
    case("L2Penalty NaN", lambda: sc.L2Penalty(float("nan")))
    case("L1Penalty str", lambda: sc.L1Penalty("0.1"))

    # ---------------------------------------------------------------- the chain
    case("chain p short", lambda: chain(X, p[:-1]), X, p)
    case("chain p float16", lambda: chain(X, p.astype(np.float16)), X, p)
    case("chain p list", lambda: chain(X, list(p)), X, p)
    case("chain p strided", lambda: chain(X, strided(p)), X, p)
    case("chain X complex", lambda: chain(X.astype(complex), p), X, p)
    case("chain X object", lambda: chain(X.astype(object), p), X, p)

    def chain_same():
        assert np.array_equal(chain(X, p), chain(strided(X), p))
        return "same"

    case("chain X strided ok", chain_same, X, p)
    case("params p strided", lambda: chain.params(strided(p)), p)
    case("params p list", lambda: chain.params(list(p)), p)
    case("kernel dtype float16", lambda: chain.kernel(np.float16))
    d = tempfile.mkdtemp()
    case("save p strided", lambda: nn.save(os.path.join(d, "a.npz"), chain, strided(p)), p)
    case("save p list", lambda: nn.save(os.path.join(d, "a.npz"), chain, list(p)), p)

    # ---------------------------------------------------------------- training
    def tu(q, iters=1, **kw):
        return sc.train_unbatched(q, cwl, X, sc.Adam(), iters, **kw)

    q = p.copy()
    case("train p list", lambda: tu(list(q)), q, X)
    case("train p float16", lambda: tu(q.astype(np.float16)), q, X)
    case("train p short", lambda: tu(q[:-1]), q, X)
    qs = strided(q)
    case("train p strided", lambda: tu(qs), qs, X)
    qr = readonly(q)
    case("train p read-only", lambda: tu(qr), qr, X)
    qx = p.copy()
    Xq = qx[:64].reshape(16, 4)
    case("train p shares memory with X", lambda: sc.train_unbatched(qx, cwl, Xq, sc.Adam(), 1), qx)
    case("train iters negative", lambda: tu(q, -1), q, X)
    case("train iters fraction", lambda: tu(q, 1.5), q, X)
    case("train iters str", lambda: tu(q, "2"), q, X)
    case("train callback_every 0", lambda: tu(q, 1, callback=print, callback_every=0), q, X)
    tb = sc.train_batched
    case("train_batched epochs str", lambda: tb(q, cwl, X, sc.Adam(), "1", 4), q, X)
    case("train_batched batch_size 0", lambda: tb(q, cwl, X, sc.Adam(), 1, 0), q, X)
    case("train_batched batch_size fraction", lambda: tb(q, cwl, X, sc.Adam(), 1, 2.5), q, X)
    case("train custom optimizer", lambda: sc.train_unbatched(q, cwl, X, Custom(), 1), q, X)
    case("train short hyper", lambda: sc.train_unbatched(q, cwl, X, ShortHyper(), 1), q, X)

    # ---------------------------------------------------------------- compiled entry points
    @numba.njit
    def forward(k, p, x, out):
        nn.chain_forward(k, p, x, out)

    p64 = p.astype(np.float64)
    k = chain.kernel(np.float64)
    small = nn.ChainKernel(k.spec, k.fspec, k.meta, np.zeros(2), k.samples)
    out = np.zeros(12)
    x0 = X[0].astype(float)
    case("chain_forward k.work short", lambda: forward(small, p64, x0, out), out, small.work)
    print("DONE", flush=True)
    '''
)

#: case -> (the exception's class, ``TypeError`` or ``ValueError`` (or a subclass), or None
#: for success; a regular expression its message, or the repr of the result, must match
#: (``re.search``)). Every case must leave the arrays and optimizers it watches unchanged
#: (a success watches only its read-only inputs).
_OPT = {
    "g short": ("ValueError", r"g must have shape \(148,\) like p, got \(3,\)"),
    "g long": ("ValueError", r"g must have shape \(148,\)"),
    "g 2-D": ("ValueError", r"g must have shape \(148,\)"),
    "p list": ("TypeError", r"p must be a numpy array"),
    "p float16": ("TypeError", r"p must be float32 or float64, got dtype float16"),
    "p int": ("TypeError", r"p must be float32 or float64, got dtype int64"),
    "p complex": ("TypeError", r"p must be float32 or float64"),
    "p object": ("TypeError", r"p must be float32 or float64"),
    "p strided": ("ValueError", r"p must be a contiguous array"),
    "p read-only": ("ValueError", r"p must be writeable"),
    "p 2-D": ("ValueError", r"p must be one-dimensional"),
    "g complex": ("TypeError", r"g must hold real numbers"),
    "g object": ("TypeError", r"g must hold real numbers"),
    "g=p": ("ValueError", r"g shares memory with p"),
    "g overlaps p": ("ValueError", r"g shares memory with p"),
    "g is the state": ("ValueError", r"g shares memory with p \(or p or g with the optim"),
    "g NaN": ("ValueError", r"g contains NaN or infinite values \(1 of 148, .* index 7"),
    "g inf": ("ValueError", r"g contains NaN or infinite values"),
    "new p, g NaN": ("ValueError", r"g contains NaN"),
    "new p, g short": ("ValueError", r"g must have shape \(10,\)"),
    "g strided ok": (None, "same"),
    "g float64 ok": (None, "same"),
    "g list ok": (None, "same"),
}
_HYPER = r"hyper\(\) must return a float64 array of shape \(6,\)"
EXPECT = {f"{o}.step {k}": v for o in ("Adam", "AdamW", "SGD") for k, v in _OPT.items()}
EXPECT.update(
    {
        "Adam.step float64 g inf": ("ValueError", r"g contains NaN or inf.*index 100: inf"),
        "Adam.step float64 g float32 ok": (None, "None"),
        "Optimizer().step": ("TypeError", r"Optimizer is not an optimizer the compiled code"),
        "custom optimizer step": ("TypeError", r"Custom is not an optimizer the compiled code"),
        "short hyper step": ("TypeError", "ShortHyper." + _HYPER),
        "lr a string": ("TypeError", "Adam." + _HYPER),
        "state wrong shape": ("ValueError", r"state must have shape \(2, num_params\)"),
        "state wrong dtype": ("TypeError", r"state must be float32 or float64"),
        "state strided": ("ValueError", r"state must be a writeable contiguous array"),
        "valgrad p short": ("ValueError", r"parameters must have shape \(148,\)"),
        "valgrad p float16": ("TypeError", r"parameters must be float32 or float64"),
        "valgrad p int": ("TypeError", r"parameters must be float32 or float64"),
        "valgrad p complex": ("TypeError", r"parameters must be float32 or float64"),
        "valgrad p object": ("TypeError", r"parameters must be float32 or float64"),
        "valgrad p list": ("TypeError", r"parameters must be a numpy array"),
        "valgrad p strided": ("ValueError", r"parameters must be a contiguous array"),
        "valgrad grad short": ("ValueError", r"grad must have shape \(148,\)"),
        "valgrad grad long": ("ValueError", r"grad must have shape \(148,\)"),
        "valgrad grad float64": ("TypeError", r"grad must have dtype float32"),
        "valgrad grad list": ("TypeError", r"grad must be a numpy array"),
        "valgrad grad strided": ("ValueError", r"grad must be a writeable contiguous array"),
        "valgrad grad read-only": ("ValueError", r"grad must be a writeable contiguous array"),
        "valgrad grad=p": ("ValueError", r"grad shares memory with p"),
        "valgrad grad overlaps p": ("ValueError", r"grad shares memory with p"),
        "valgrad grad in the targets": ("ValueError", r"grad shares memory with the targets"),
        "valgrad grad_x=X": ("ValueError", r"grad_x shares memory with X"),
        "valgrad grad_x shape": ("ValueError", r"grad_x must have shape \(16, 4\)"),
        "valgrad grad_x float64": ("TypeError", r"grad_x must have dtype float32"),
        "valgrad grad_x strided": ("ValueError", r"grad_x must be a writeable contiguous"),
        "valgrad grad_x overlaps grad": ("ValueError", r"grad_x shares memory with grad"),
        "valgrad X width": ("ValueError", r"X must have shape \(N, 4\), got \(16, 5\)"),
        "valgrad X complex": ("TypeError", r"X must hold real numbers"),
        "valgrad X object": ("TypeError", r"X must hold real numbers"),
        "valgrad targets short": ("ValueError", r"targets must have shape \(16, 12\)"),
        "valgrad not a chain with loss": ("TypeError", r"valgrad needs a chain with a loss"),
        "valgrad step fraction": ("ValueError", r"step must be a whole number"),
        "valgrad step str": ("TypeError", r"step must be an integer"),
        "valgrad train str": ("TypeError", r"train must be True or False"),
        "valgrad X strided ok": (None, "same"),
        "valgrad X list ok": (None, "same"),
        "valgrad X float64 ok": (None, "same"),
        "valgrad disjoint views ok": (None, "same"),
        "loss_and_grad dtype float16": ("TypeError", r"dtype must be float32 or float64"),
        "loss_and_grad dtype complex": ("TypeError", r"dtype must be float32 or float64"),
        "loss_and_grad not a chain with loss": ("TypeError", r"loss_and_grad needs a chain"),
        "loss_and_grad fun p short": ("ValueError", r"parameters must have shape \(148,\)"),
        "loss_and_grad fun p complex": ("TypeError", r"p must hold real numbers"),
        "loss_and_grad fun p object": ("TypeError", r"p must hold real numbers"),
        "loss_and_grad fun p strided ok": (None, "same"),
        "loss_and_grad fun p list ok": (None, "same"),
        "evaluate_loss p short": ("ValueError", r"parameters must have shape \(148,\)"),
        "evaluate_loss p strided": ("ValueError", r"parameters must be a contiguous array"),
        "evaluate_loss p float16": ("TypeError", r"parameters must be float32 or float64"),
        "evaluate_loss not a chain with loss": ("TypeError", r"evaluate_loss needs a chain"),
        "accuracy labels fraction": ("TypeError", r"labels must be integers, got dtype float"),
        "accuracy labels complex": ("TypeError", r"labels must be integers, got dtype complex"),
        "accuracy labels short": ("ValueError", r"labels must have shape \(16,\), got \(5,\)"),
        "accuracy labels 2-D": ("ValueError", r"labels must be class indices of shape \(N,\)"),
        "accuracy p list": ("TypeError", r"parameters must be a numpy array"),
        "accuracy not a chain with loss": ("TypeError", r"accuracy_and_loss needs a chain"),
        "accuracy labels float ok": (None, r"^\("),
        "LogitCrossEntropyLoss labels 2-D": ("ValueError", r"labels must be class indices"),
        "LogitCrossEntropyLoss labels complex": ("TypeError", r"labels must be integers"),
        "LogitCrossEntropyLoss labels (N, 1) ok": (None, "LogitCrossEntropyLoss"),
        "SquaredLoss targets object": ("TypeError", r"targets must be real numbers"),
        "SquaredLoss targets complex": ("TypeError", r"targets must be real numbers"),
        "L2Penalty NaN": ("ValueError", r"L2Penalty: lam must be finite"),
        "L1Penalty str": ("TypeError", r"L1Penalty: lam must be a real number"),
        "chain p short": ("ValueError", r"parameters must have shape \(148,\)"),
        "chain p float16": ("TypeError", r"parameters must be float32 or float64"),
        "chain p list": ("TypeError", r"parameters must be a numpy array"),
        "chain p strided": ("ValueError", r"parameters must be a contiguous array"),
        "chain X complex": ("TypeError", r"X must hold real numbers"),
        "chain X object": ("TypeError", r"X must hold real numbers"),
        "chain X strided ok": (None, "same"),
        "params p strided": ("ValueError", r"parameters must be a contiguous array"),
        "params p list": ("TypeError", r"parameters must be a numpy array"),
        "kernel dtype float16": ("TypeError", r"dtype must be float32 or float64"),
        "save p strided": ("ValueError", r"parameters must be a contiguous array"),
        "save p list": ("TypeError", r"parameters must be a numpy array"),
        "train p list": ("TypeError", r"parameters must be a numpy array"),
        "train p float16": ("TypeError", r"parameters must be float32 or float64"),
        "train p short": ("ValueError", r"parameters must have shape \(148,\)"),
        "train p strided": ("ValueError", r"parameters must be a contiguous array"),
        "train p read-only": ("ValueError", r"parameters must be writeable"),
        "train p shares memory with X": ("ValueError", r"p shares memory with X"),
        "train iters negative": ("ValueError", r"iters must be at least 0, got -1"),
        "train iters fraction": ("ValueError", r"iters must be a whole number, got 1.5"),
        "train iters str": ("TypeError", r"iters must be an integer"),
        "train callback_every 0": ("ValueError", r"callback_every must be at least 1"),
        "train_batched epochs str": ("TypeError", r"epochs must be an integer"),
        "train_batched batch_size 0": ("ValueError", r"batch_size must be at least 1"),
        "train_batched batch_size fraction": ("ValueError", r"batch_size must be a whole"),
        "train custom optimizer": ("TypeError", r"Custom is not an optimizer the compiled"),
        "train short hyper": ("TypeError", "ShortHyper." + _HYPER),
        "chain_forward k.work short": ("ValueError", r"chain_forward: k.work has length 2"),
    }
)


@pytest.fixture(scope="module")
def outcomes():
    """Every case of ``_SCRIPT``, run in one subprocess against this scichains."""
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(scichains.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    lines = r.stdout.splitlines()
    assert lines and lines[0] == f"FILE {scichains.__file__}", r.stdout[:500] + r.stderr[-2000:]
    got = {}
    started = None
    for line in lines:
        if line.startswith("START "):
            started = line[6:]
        elif line.startswith("CASE "):
            rec = json.loads(line[5:])
            got[rec["name"]] = rec
    done = lines[-1] == "DONE"
    crash = None if done else (started, r.returncode, r.stderr[-3000:])
    return got, crash


def test_every_case_ran(outcomes):
    got, crash = outcomes
    assert crash is None, (
        f"the subprocess died (at case {crash[0]!r}, status {crash[1]}):\n{crash[2]}"
    )
    assert sorted(got) == sorted(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_case(outcomes, name):
    got, crash = outcomes
    if name not in got:
        pytest.fail(f"no outcome: the subprocess died at case {crash and crash[0]!r}: {crash}")
    rec = got[name]
    exc, pattern = EXPECT[name]
    assert rec["exc"] == exc, f"{name}: expected {exc}, got {rec['exc']}: {rec['msg']}"
    assert re.search(pattern, rec["msg"]), f"{name}: message {rec['msg']!r}"
    assert "numba" not in rec["msg"].lower(), rec["msg"]
    assert rec["unchanged"], f"{name}: an input (or the optimizer's state) was changed"
