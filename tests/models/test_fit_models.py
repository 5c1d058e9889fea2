"""scichains.fit on neural ODEs: the same iterates as the hand-written loops it replaces (one
trajectory; mini-batches of trajectories through NeuralODE's batch=). The model is
test_neural_ode.py's spiral (its compiled kernels shared). Failures: tests/test_fit.py."""

import numpy as np

import scichains as sc
from scichains.adjoint import minibatches
from scichains.models import NeuralODE


def _spiral(seed=3):
    chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(16, "tanh"), sc.Dense(2))
    p = chain.init_params(seed=seed, dtype=np.float64)
    ts = np.linspace(0, 1.5, 30)
    node = NeuralODE(chain, (0.0, 1.5), ts)
    true_chain = sc.SimpleChain(2, sc.Activation("cube"), sc.Dense(16, "tanh"), sc.Dense(2))
    q = true_chain.init_params(seed=4, dtype=np.float64)
    truth = NeuralODE(true_chain, (0.0, 1.5), ts)
    return node, p, truth, q


def test_fit_takes_the_hand_written_loops_steps_on_a_neural_ode():
    node, p0, truth, q = _spiral()
    u0 = np.array([2.0, 0.0])
    data = truth.predict(u0, q)
    ref = p0.copy()
    opt = sc.Adam(0.01)
    losses = []
    for _ in range(40):
        loss, g = node.loss_and_grad(u0, ref, data)
        losses.append(loss)
        opt.step(ref, g)
    p = p0.copy()
    res = sc.fit(lambda x: node.loss_and_grad(u0, x, data), p, [(sc.Adam(0.01), 40)], keep="last")
    assert p.tobytes() == ref.tobytes()
    assert np.array_equal(res.history["loss"][:40], losses)
    assert res.loss == node.loss_and_grad(u0, p, data)[0] < 0.5 * losses[0]


def test_fit_minibatch_epochs_match_a_hand_written_epoch_loop():
    node, p0, truth, q = _spiral()
    rng = np.random.default_rng(1)
    m = 6
    U0 = np.stack([[2.0, 0.0]] * m) * rng.uniform(0.8, 1.0, (m, 1))
    data = np.stack([truth.predict(U0[i], q) for i in range(m)])

    ref = p0.copy()
    opt = sc.Adam(0.01)
    gen = np.random.default_rng(5)
    for _ in range(3):
        for batch in minibatches(m, 4, gen):
            _, g = node.loss_and_grad(U0, ref, data, batch=batch, threads=2)
            opt.step(ref, g)

    def objective(x, batch=None):
        return node.loss_and_grad(U0, x, data, batch=batch, threads=2)

    p = p0.copy()
    res = sc.fit(
        objective, p, [(sc.Adam(0.01), 3)], batch_size=4, trajectories=m, seed=5, keep="last"
    )
    assert p.tobytes() == ref.tobytes()
    assert len(res.history["loss"]) == 3 * 2 and list(res.history["epoch"]) == [0, 0, 1, 1, 2, 2]
    assert res.loss == node.loss_and_grad(U0, p, data)[0]  # all six trajectories
