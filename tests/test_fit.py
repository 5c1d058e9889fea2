"""scichains.fit: the training loop, on objectives whose minimiser and steps are known exactly
(quadratics, Rosenbrock's function), against hand-written loops and SciPy run directly; and its
contracts: the point it leaves in p, failures, errors, callbacks, early stopping, mini-batches.
The neural-ODE and UDE cases are in tests/models/test_fit_models.py."""

import math

import numpy as np
import pytest
import scipy.optimize

import scichains as sc
from scichains.ode import ODESolveError, ReturnCode
from scichains.ode._solution import FailedSolve


def rosen(p):
    return float(scipy.optimize.rosen(p)), scipy.optimize.rosen_der(p)


class Quadratic:
    """sum_i w_i (p_i - c_i)^2, counting its calls."""

    def __init__(self, c, w=None):
        self.c = np.asarray(c, dtype=np.float64)
        self.w = np.ones_like(self.c) if w is None else np.asarray(w, dtype=np.float64)
        self.calls = 0

    def value_and_grad(self, p):
        self.calls += 1
        r = p - self.c
        return float(np.sum(self.w * r * r)), 2.0 * self.w * r, "extra items are ignored"


def hand_adam(fun, p, lr, n):
    """The loop every example wrote: n Adam steps, the loss before each."""
    opt = sc.Adam(lr)
    losses = []
    for _ in range(n):
        v, g = fun(p)[:2]
        losses.append(v)
        opt.step(p, g)
    return losses


def test_an_adam_stage_takes_the_same_steps_as_a_hand_written_loop():
    p0 = np.array([-1.2, 1.0, 0.3])
    ref = p0.copy()
    losses = hand_adam(rosen, ref, 0.01, 50)
    p = p0.copy()
    res = sc.fit(rosen, p, [(sc.Adam(0.01), 50)], keep="last")
    assert np.array_equal(p, ref)  # the same 50 updates, bit for bit
    assert np.array_equal(res.history["loss"][:50], losses)
    # the point after the last step is evaluated too: the loss reported is the loss at p
    assert res.loss == rosen(ref)[0] and res.history["loss"][-1] == res.loss
    assert list(res.history["iteration"]) == list(range(51))
    assert res.nit == 50 and res.nfev == 51 and res.status == "completed" and res.success
    assert np.array_equal(res.p, p) and res.p is not p


def test_keep_best_leaves_the_lowest_loss_seen():
    # a learning rate large enough to overshoot: the loss does not fall monotonically
    p = np.array([3.0])
    res = sc.fit(Quadratic([0.0]), p, [(sc.SGD(0.9), 20)])
    h = res.history
    k = int(np.argmin(h["loss"]))
    assert res.loss == h["loss"][k] == float(p[0] ** 2)
    assert k < len(h["loss"]) - 1 or h["loss"][-1] == h["loss"].min()


def test_lbfgs_stage_matches_scipy_run_directly():
    p0 = np.array([-1.2, 1.0, 0.8, 1.3])
    ref = scipy.optimize.minimize(
        rosen, p0, jac=True, method="L-BFGS-B", options={"maxiter": 500, "gtol": 1e-9}
    )
    p = p0.copy()
    res = sc.fit(rosen, p, [sc.LBFGS(500, gtol=1e-9)])
    assert np.array_equal(p, ref.x)
    assert res.loss == ref.fun and res.nit == ref.nit
    assert np.abs(rosen(p)[1]).max() < 1e-4  # (a stationary point: a local minimum in 4-D)
    # one row per accepted iterate, the start included, losses never rising
    assert len(res.history["loss"]) == ref.nit + 1
    assert np.all(np.diff(res.history["loss"]) <= 0)


def test_adam_then_lbfgs_does_not_evaluate_or_record_the_boundary_twice():
    q = Quadratic([1.0, -2.0, 0.5], w=[1.0, 10.0, 0.1])
    p = np.zeros(3)
    res = sc.fit(q, p, [(sc.Adam(0.1), 20), (sc.LBFGS(), 100)])
    h = res.history
    assert q.calls == res.nfev
    # the point Adam ended at is L-BFGS's start: one row for it
    assert np.count_nonzero(h["iteration"] == 20) == 1
    assert list(h["stage"][:21]) == [0] * 21 and set(h["stage"][21:]) == {1}
    np.testing.assert_allclose(p, q.c, atol=1e-6)
    assert [s["status"] for s in res.stages] == ["completed", "completed"]


def failing_after(fun, k, status=ReturnCode.DT_UNDERFLOW):
    """``fun`` whose solve 'fails' from its (k+1)-th call on."""
    calls = [0]

    def f(p):
        calls[0] += 1
        if calls[0] > k:
            raise ODESolveError(FailedSolve(status, 0.5))
        return fun(p)

    return f


def test_a_failed_solve_ends_the_fit_at_the_best_finite_point():
    p = np.array([-1.2, 1.0])
    res = sc.fit(failing_after(rosen, 30), p, [(sc.Adam(0.01), 100), sc.LBFGS()])
    assert res.status == "failed" and not res.success
    assert "solve failed" in res.message and "DT_UNDERFLOW" in res.message
    assert len(res.stages) == 1  # L-BFGS did not start
    assert res.loss == res.history["loss"].min() == rosen(p)[0]
    assert len(res.history["loss"]) == 30


def test_an_error_in_user_code_reaches_the_caller_and_p_is_left_at_the_best_point():
    best = {}

    def f(p):
        v, g = rosen(p)
        if v < best.get("v", math.inf):
            best["v"], best["p"] = v, p.copy()
        if len(best) and f.calls == 25:
            raise ZeroDivisionError("user's bug")
        f.calls += 1
        return v, g

    f.calls = 0
    p = np.array([-1.2, 1.0])
    with pytest.raises(ZeroDivisionError, match="user's bug"):
        sc.fit(f, p, [(sc.Adam(0.01), 100)])
    assert np.array_equal(p, best["p"])


def test_an_error_inside_the_solver_from_user_code_is_not_a_numerical_failure():
    p = np.array([-1.2, 1.0])
    with pytest.raises(ODESolveError, match="RHS_ERROR"):
        sc.fit(failing_after(rosen, 5, ReturnCode.RHS_ERROR), p, [(sc.Adam(0.01), 20)])
    with pytest.raises(ODESolveError, match="RHS_ERROR"):
        sc.fit(failing_after(rosen, 5, ReturnCode.RHS_ERROR), p, [sc.LBFGS()])


def test_keyboard_interrupt_leaves_p_at_the_best_point():
    def cb(info):
        if info.iteration == 15:
            raise KeyboardInterrupt

    p = np.array([-1.2, 1.0])
    seen = []
    with pytest.raises(KeyboardInterrupt):
        sc.fit(
            lambda q: seen.append(rosen(q)[0]) or rosen(q), p, [(sc.Adam(0.01), 50)], callback=cb
        )
    assert rosen(p)[0] == min(seen)


def test_nonfinite_values_end_a_first_order_stage_but_only_reject_a_line_search_point():
    def nan_beyond(x0):
        def f(p):
            v, g = rosen(p)
            return (math.nan, g) if p[0] > x0 else (v, g)

        return f

    p = np.array([-1.2, 1.0])
    res = sc.fit(nan_beyond(-1.1), p, [(sc.Adam(0.01), 200)])
    assert res.status == "failed" and "not finite" in res.message and p[0] <= -1.1
    assert res.loss == rosen(p)[0] == res.history["loss"].min()
    # L-BFGS: a NaN at a trial point makes the line search back off
    f = nan_beyond(0.5)
    p = np.array([-1.2, 1.0])
    res = sc.fit(f, p, [sc.LBFGS(200)])
    assert res.success and p[0] <= 0.5 and res.loss < rosen(np.array([-1.2, 1.0]))[0]


def test_an_undefined_first_trial_point_makes_lbfgs_back_off_not_stop():
    # SciPy's L-BFGS-B, given inf at the first trial point of a line search, stops at its
    # start and reports convergence; fit and ScipyFun give a finite rejected value instead
    from scichains import adjoint

    def f(p):  # minimum at 0.5; undefined past 0.8, where the first trial point (1.0) lies
        if p[0] > 0.8:
            raise adjoint.TooFewEvents("undefined here")
        return 50.0 * (p[0] - 0.5) ** 2, np.array([100.0 * (p[0] - 0.5)])

    p = np.zeros(1)
    res = sc.fit(f, p, [sc.LBFGS(100)], progress=False)
    assert p[0] == pytest.approx(0.5, abs=1e-6), res.message
    direct = scipy.optimize.minimize(adjoint.ScipyFun(f), np.zeros(1), jac=True, method="L-BFGS-B")
    assert direct.x[0] == pytest.approx(0.5, abs=1e-6), direct.message


def test_callback_sees_each_iterate_and_can_stop():
    seen = []

    def cb(info):
        seen.append((info.iteration, info.loss, info.p.copy()))
        assert not info.p.flags.writeable
        return info.iteration == 7

    p = np.array([-1.2, 1.0])
    res = sc.fit(rosen, p, [(sc.Adam(0.01), 50), sc.LBFGS()], callback=cb)
    assert res.status == "stopped" and res.success and len(res.stages) == 1
    assert [s[0] for s in seen] == list(range(8))
    for _, v, q in seen:
        assert v == rosen(q)[0]


def test_early_stopping_on_a_validation_set():
    # training pulls p to 1, the validation set prefers 0.5: the validation value falls until
    # p passes 0.5, then rises; patience 3 ends the Adam stage, L-BFGS starts from the best
    train = Quadratic([1.0])
    val = Quadratic([0.5])
    p = np.array([0.0])
    res = sc.fit(
        train,
        p,
        [(sc.Adam(0.05), 500)],
        validation=lambda q: val.value_and_grad(q)[0],
        patience=3,
    )
    h = res.history
    assert res.status == "early_stopped"
    k = int(np.nanargmin(h["val_loss"]))
    assert len(h["val_loss"]) == k + 4  # three validations without improvement after the best
    assert p[0] == pytest.approx(0.5, abs=0.05) and res.val_loss == h["val_loss"][k]
    assert res.loss == train.value_and_grad(p)[0]


class Trajectories:
    """m 'trajectories' with loss sum_i (p - c_i)^2 over a batch, like MultiObjective."""

    def __init__(self, c):
        self.c = np.asarray(c, dtype=np.float64)
        self.m = self.c.size
        self.batches = []

    def value_and_grad(self, p, batch=None):
        idx = np.arange(self.m) if batch is None else np.asarray(batch)
        self.batches.append(None if batch is None else idx.copy())
        r = p[0] - self.c[idx]
        return float(np.sum(r * r)), np.array([2.0 * np.sum(r)])


def test_minibatch_epochs_visit_every_trajectory_once_per_epoch():
    obj = Trajectories(np.linspace(-1.0, 1.0, 10))
    p = np.array([3.0])
    res = sc.fit(obj, p, [(sc.Adam(0.1), 4)], batch_size=3, seed=7)
    batches = [b for b in obj.batches if b is not None]
    assert len(batches) == 4 * 4  # ceil(10 / 3) batches per epoch
    for e in range(4):
        epoch = np.concatenate(batches[4 * e : 4 * e + 4])
        assert sorted(epoch) == list(range(10))
    assert list(res.history["epoch"]) == [e for e in range(4) for _ in range(4)]
    # the loss reported is the full objective at the returned point
    assert obj.batches[-1] is None and res.loss == obj.value_and_grad(p)[0]
    # the same seed, the same batches
    obj2 = Trajectories(np.linspace(-1.0, 1.0, 10))
    sc.fit(obj2, np.array([3.0]), [(sc.Adam(0.1), 4)], batch_size=3, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(obj.batches[:16], obj2.batches[:16]))


def test_minibatch_then_lbfgs_on_all_the_data():
    obj = Trajectories(np.linspace(-1.0, 1.0, 10))
    p = np.array([3.0])
    sc.fit(obj, p, [(sc.Adam(0.1), 3), sc.LBFGS()], batch_size=4)
    assert p[0] == pytest.approx(0.0, abs=1e-6)  # the mean of the c_i


def test_float32_parameters():
    q = Quadratic([1.0, 2.0])
    p = np.zeros(2, dtype=np.float32)
    res = sc.fit(lambda x: tuple(q.value_and_grad(x)[:2]), p, [(sc.Adam(0.1), 10), sc.LBFGS()])
    assert p.dtype == np.float32 and res.p.dtype == np.float32
    np.testing.assert_allclose(p, [1.0, 2.0], atol=1e-4)


def test_text_progress_without_tqdm(capsys, monkeypatch):
    import scichains._fit as fitmod

    monkeypatch.setattr(fitmod, "_use_tqdm", lambda progress: False)
    sc.fit(rosen, np.array([-1.2, 1.0]), [(sc.Adam(0.01), 5)], progress=True)
    err = capsys.readouterr().err
    assert "stage 0 Adam: 5/5" in err and "loss" in err


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"stages": []}, TypeError, "non-empty list"),
        ({"stages": [(sc.Adam, 5)]}, TypeError, "instance"),
        ({"stages": [("adam", 5)]}, TypeError, "must be scichains.Adam"),
        ({"stages": [(sc.Adam(0.1), 0)]}, ValueError, "iteration count"),
        ({"stages": [(sc.Adam(0.1), 2.5)]}, ValueError, "iteration count"),
        ({"patience": 3}, ValueError, "validation"),
        ({"batch_size": 4}, ValueError, "trajectories"),
        ({"trajectories": 4}, ValueError, "batch_size"),
        ({"keep": "first"}, ValueError, "keep"),
        ({"validate_every": 0}, ValueError, "validate_every"),
        ({"callback": 3}, TypeError, "callback"),
    ],
)
def test_bad_arguments_are_named(kwargs, exc, match):
    args = {"stages": [(sc.Adam(0.1), 5)], **kwargs}
    with pytest.raises(exc, match=match):
        sc.fit(rosen, np.array([-1.2, 1.0]), **args)


def test_bad_parameters_and_objectives():
    with pytest.raises(TypeError, match="float32 or float64"):
        sc.fit(rosen, np.array([1, 2]), [(sc.Adam(0.1), 5)])
    with pytest.raises(ValueError, match="writeable"):
        p = np.zeros(2)
        p.flags.writeable = False
        sc.fit(rosen, p, [(sc.Adam(0.1), 5)])
    with pytest.raises(TypeError, match="value_and_grad"):
        sc.fit(3, np.zeros(2), [(sc.Adam(0.1), 5)])
    with pytest.raises(ValueError, match="shape"):
        sc.fit(lambda p: (1.0, np.zeros(3)), np.zeros(2), [(sc.Adam(0.1), 5)])
    with pytest.raises(TypeError, match="must return"):
        sc.fit(lambda p: 1.0, np.zeros(2), [(sc.Adam(0.1), 5)])


def test_tqdm_progress_bar(capsys):
    pytest.importorskip("tqdm")
    sc.fit(rosen, np.array([-1.2, 1.0]), [(sc.Adam(0.01), 5), sc.LBFGS(3)], progress=True)
    err = capsys.readouterr().err
    assert "stage 0 Adam" in err and "stage 1 L-BFGS" in err and "5/5" in err
