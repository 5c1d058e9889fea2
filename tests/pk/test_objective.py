"""The FOCE-I / Laplace objective against an independent NumPy/SciPy implementation, and its
exact gradient against central differences."""

import numpy as np
import pytest
import scipy.optimize

from scichains import pk

from .models import oral_f_model, oral_model, regimen_data, theoph_subset


def closed_form(phi, amount, t):
    ka, cl, v = phi
    k = cl / v
    return amount * ka / (v * (ka - k)) * (np.exp(-k * t) - np.exp(-ka * t))


def reference_ofv(model, data, x, method):
    """OFV from the closed-form one-compartment solution: EBEs by SciPy's BFGS, the Jacobian
    and the Hessian by central differences; the FOCE-I weight written out by hand."""
    theta, om, sd = model.unpack(x)
    oinv = np.linalg.inv(om)
    name = type(model.error).__name__

    def var(f):
        if name == "Additive":
            return np.full_like(f, sd[0] ** 2)
        if name == "Proportional":
            return (sd[0] * f) ** 2
        return sd[0] ** 2 + (sd[1] * f) ** 2  # Combined

    def dvar(f):
        if name == "Additive":
            return np.zeros_like(f)
        if name == "Proportional":
            return 2 * sd[0] ** 2 * f
        return 2 * sd[1] ** 2 * f

    total = 0.0
    for s in data.subjects:
        amount = s.doses[0].amount

        def pred(eta, s=s, amount=amount):
            return closed_form(np.exp(theta + eta), amount, s.times)

        def L(eta, s=s, pred=pred):
            f = pred(eta)
            R = var(f)
            return np.sum((s.dv - f) ** 2 / R + np.log(R)) + eta @ oinv @ eta

        res = scipy.optimize.minimize(L, np.zeros(3), method="BFGS", options={"gtol": 1e-9})
        eta = res.x
        h = 1e-6
        G = np.stack([(pred(eta + h * e) - pred(eta - h * e)) / (2 * h) for e in np.eye(3)], axis=1)
        if method == "focei":
            f = pred(eta)
            R = var(f)
            w = 1 / R + dvar(f) ** 2 / (2 * R**2)
            A = oinv + (G.T * w) @ G
        else:
            k = 1e-4
            H = np.empty((3, 3))
            for a, ea in enumerate(np.eye(3)):
                for b, eb in enumerate(np.eye(3)):
                    H[a, b] = (
                        L(eta + k * ea + k * eb)
                        - L(eta + k * ea - k * eb)
                        - L(eta - k * ea + k * eb)
                        + L(eta - k * ea - k * eb)
                    ) / (4 * k * k)
            A = 0.5 * H
        total += L(eta) + np.linalg.slogdet(om)[1] + np.linalg.slogdet(A)[1]
    return total


@pytest.mark.parametrize(
    "error, method",
    [
        (pk.Additive(0.7), "focei"),
        (pk.Additive(0.7), "laplace"),
        (pk.Combined(0.3, 0.1), "focei"),
        (pk.Proportional(0.15), "focei"),
    ],
)
def test_objective_matches_an_independent_implementation(error, method):
    data = theoph_subset(4, drop_t0=isinstance(error, pk.Proportional))
    model = oral_model(error)
    x = model.pack(theta=[0.4, 1.0, 3.5], omega=[0.4, 0.07, 0.02])
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-10, atol=1e-12)
    assert obj.value(x) == pytest.approx(reference_ofv(model, data, x, method), abs=2e-5)


def fd_gradient(obj, x, h=1e-4):
    g = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = h
        g[k] = (obj.value(x + e) - obj.value(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize(
    "error, full, covariate, method",
    [
        (pk.Additive(0.7), False, False, "focei"),
        (pk.Combined(0.3, 0.1), True, False, "focei"),
        (pk.Proportional(0.15), False, True, "focei"),
        (pk.Exponential(0.2), False, False, "focei"),
        (pk.Additive(0.7), True, True, "laplace"),
        pytest.param(pk.Combined(0.3, 0.1), False, False, "laplace", marks=pytest.mark.slow),
        (pk.Exponential(0.2), True, False, "laplace"),
    ],
)
def test_gradient_matches_central_differences(error, full, covariate, method):
    # full omega: a Cholesky factor with off-diagonal entries; a covariate on CL
    data = theoph_subset(4, drop_t0=not isinstance(error, pk.Additive))
    omega = [[0.4, 0.02, 0.01], [0.02, 0.07, 0.005], [0.01, 0.005, 0.02]] if full else None
    model = oral_model(error, omega=omega or (0.4, 0.07, 0.02), covariate=covariate)
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=[0.4, 1.0, 3.5])
    f, g = obj.value_and_grad(x)
    assert f == pytest.approx(obj.value(x), abs=1e-9)
    fd = fd_gradient(obj, x)
    np.testing.assert_allclose(g, fd, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("method", ["focei", "laplace"])
def test_gradient_with_bioavailability_infusions_and_repeats(tmp_path, method):
    model = oral_f_model()
    data = regimen_data(tmp_path, model)
    obj = pk.PopulationObjective(model, data, method=method, rtol=1e-11, atol=1e-13)
    x = model.pack(theta=[0.35, 0.9, 3.3, 0.8])
    f, g = obj.value_and_grad(x)
    np.testing.assert_allclose(g, fd_gradient(obj, x), rtol=2e-5, atol=2e-5)


def test_methods_and_shapes_are_checked():
    model = oral_model()
    data = theoph_subset(2)
    with pytest.raises(ValueError, match="method must be 'focei' or 'laplace'"):
        pk.PopulationObjective(model, data, method="foce")
    with pytest.raises(ValueError, match=r"x must have shape \(7,\)"):
        pk.PopulationObjective(model, data).value(np.zeros(3))


def test_subject_without_observations_contributes_nothing():
    data = theoph_subset(3)
    s = data.subjects[1]
    empty = pk.Subject(99, s.doses, s.times[:0], s.dv[:0], s.rows[:0], s.covariates)
    more = pk.EventData([*data.subjects, empty], data.covariates)
    model = oral_model()
    x = model.pack()
    a = pk.PopulationObjective(model, data).value_and_grad(x)
    obj = pk.PopulationObjective(model, more)
    b = obj.value_and_grad(x)
    assert a[0] == pytest.approx(b[0], abs=1e-10)
    np.testing.assert_allclose(a[1], b[1], atol=1e-10)
    assert np.all(obj.etas[-1] == 0)
    assert obj.predict(x)[-1].size == 0


def test_bad_model_and_data_combinations():
    data = theoph_subset(2)
    with pytest.raises(ValueError, match=r"covariates \['WT'\] that the data lack"):
        pk.PopulationObjective(oral_model(covariate=True), pk.EventData(data.subjects, ()))
    s = data.subjects[0]
    zero = pk.Subject(1, s.doses, s.times, s.dv * 0, s.rows, s.covariates)
    with pytest.raises(ValueError, match="subject ID 1, row .*: the exponential error model"):
        pk.PopulationObjective(oral_model(pk.Exponential(0.2)), pk.EventData([zero], ()))


def test_model_definition_errors_name_the_problem():
    import sympy as sp

    x, ka, tka, eka = sp.symbols("x ka tka eta_ka")
    base = dict(
        states=[x],
        odes=[-ka * x],
        individual={ka: sp.exp(tka + eka)},
        theta={tka: 0.0},
        eta=[eka],
        omega=[0.1],
        observe=x,
        error=pk.Additive(1.0),
    )
    pk.PKModel(**base)
    with pytest.raises(ValueError, match="bioavailability is given for y"):
        pk.PKModel(**base, bioavailability={sp.Symbol("y"): 0.5 * ka})
    with pytest.raises(ValueError, match=r"bioavailability of x uses \['tka'\]"):
        pk.PKModel(**base, bioavailability={x: tka})
    with pytest.raises(ValueError, match=r"equation 0 uses \['tka'\]"):
        pk.PKModel(**{**base, "odes": [-tka * x]})
    with pytest.raises(ValueError, match=r"omega must have shape \(1,\) or \(1, 1\)"):
        pk.PKModel(**{**base, "omega": [0.1, 0.2]})
    with pytest.raises(ValueError, match="positive definite"):
        pk.PKModel(**{**base, "omega": [[-1.0]]})
    with pytest.raises(ValueError, match="standard deviations must be positive"):
        pk.Additive(-1.0)
    with pytest.raises(TypeError, match="ErrorModel instance"):
        pk.PKModel(**{**base, "error": pk.Additive})


def test_one_objective_in_two_threads_at_once_is_refused():
    import threading

    model = oral_model()
    obj = pk.PopulationObjective(model, theoph_subset(2))
    x = model.pack()
    inner = obj._inner
    started, release = threading.Event(), threading.Event()

    def slow_inner(*args):
        started.set()
        release.wait(30)
        return inner(*args)

    obj._inner = slow_inner
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("v", obj.value(x)))
    worker.start()
    assert started.wait(30)
    with pytest.raises(RuntimeError, match="one objective per thread"):
        obj.value(x)
    release.set()
    worker.join(30)
    obj._inner = inner
    assert out["v"] == pytest.approx(pk.PopulationObjective(model, theoph_subset(2)).value(x))
