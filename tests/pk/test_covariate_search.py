"""Stepwise covariate modelling (pk.covariate_search) on data simulated with one true
relation (body weight on clearance, allometric) and covariates that do nothing."""

from concurrent.futures import ThreadPoolExecutor

import matplotlib
import numpy as np
import pytest
import sympy as sp

from scichains import pk

matplotlib.use("Agg")

TIMES = np.array([0.5, 1.0, 2.0, 4.0, 8.0, 12.0])


def one_compartment(weight_on_cl: bool):
    center, cl, v = sp.symbols("center cl v")
    tcl, tv, ecl, ev = sp.symbols("tcl tv eta_cl eta_v")
    wt = sp.Symbol("WT")
    cl_expr = sp.exp(tcl + ecl) * ((wt / 70) ** sp.Rational(3, 4) if weight_on_cl else 1)
    return pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: cl_expr, v: sp.exp(tv + ev)},
        theta={tcl: np.log(3.0), tv: np.log(30.0)},
        eta=[ecl, ev],
        omega=[0.05, 0.05],
        observe=center / v,
        error=pk.Proportional(0.1),
        covariates=[wt] if weight_on_cl else (),
    )


@pytest.fixture(scope="module")
def study():
    """40 subjects, 100 mg IV at 0, six samples; CL = 3 (WT/70)^0.75 exp(eta); AGE and SEX
    drawn independently of everything."""
    rng = np.random.default_rng(11)
    n = 40
    cov = {
        "WT": rng.uniform(40.0, 110.0, n),
        "AGE": rng.uniform(20.0, 80.0, n),
        "SEX": rng.integers(0, 2, n).astype(float),
    }
    subjects = [
        pk.Subject(i + 1, [pk.Dose(0.0, 100.0, 0, row=1)], TIMES.copy(), np.ones(TIMES.size),
                   np.arange(2, 2 + TIMES.size), {k: float(v[i]) for k, v in cov.items()})
        for i in range(n)
    ]  # fmt: skip
    data = pk.EventData(subjects, tuple(cov))
    truth = one_compartment(True)
    x = truth.pack(theta=[np.log(3.0), np.log(30.0)], omega=[0.04, 0.02], sd=[0.1])
    etas = rng.multivariate_normal(np.zeros(2), np.diag([0.04, 0.02]), n)
    out = []
    for s, f in zip(subjects, pk.PopulationObjective(truth, data).predict(x, etas)):
        dv = f * (1 + 0.1 * rng.standard_normal(f.size))
        out.append(pk.Subject(s.id, s.doses, s.times, dv, s.rows, s.covariates))
    return pk.EventData(out, tuple(cov))


CANDIDATES = [("cl", "WT", "power"), ("v", "WT"), ("cl", "AGE", "linear"),
              ("cl", "SEX", "categorical")]  # fmt: skip


def test_the_true_relation_enters_and_nothing_else(study):
    res = pk.covariate_search(one_compartment(False), study, CANDIDATES)
    print(res.table())
    assert res.relations == [pk.Relation("cl", "WT", "power")]
    assert res.fit.theta["cl_WT"] == pytest.approx(0.75, abs=0.25)
    # the first round's drop for weight on clearance is large; the final fit is the minimum
    # of the final model (refitted alone from its own initial values: the same OFV)
    first = [s for s in res.steps if s.phase == "forward" and s.chosen][0]
    assert first.dofv > 20.0
    assert res.forward_ofv[0] == res.fit.ofv
    alone = pk.fit(res.model, study)
    assert alone.ofv == pytest.approx(res.fit.ofv, abs=1e-3)
    assert [str(s) for s in res.model.theta_symbols] == ["tcl", "tv", "cl_WT"]
    # backward: removing it would raise the OFV by the forward drop (the same two models)
    back = [s for s in res.steps if s.phase == "backward"]
    assert len(back) == 1 and not back[0].chosen and back[0].dofv > res.backward_dofv
    assert res.forward_dofv == pytest.approx(3.8415, abs=1e-4)
    assert res.backward_dofv == pytest.approx(6.6349, abs=1e-4)
    assert [(s.phase, s.round) for s in res.steps] == [("base", 0)] + [("forward", 1)] * 4 + [
        ("forward", 2)
    ] * 3 + [("backward", 1)]
    ax = res.plot()
    assert ax.get_ylabel() == "OFV"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["forward 1", "forward 2", "backward 1"]


def test_an_executor_gives_the_same_search(study, capsys):
    cands = CANDIDATES[:2]
    serial = pk.covariate_search(one_compartment(False), study, cands, backward=None, progress=True)
    err = capsys.readouterr().err
    assert "covariate search: 4" in err  # the base fit and three candidates
    with ThreadPoolExecutor(2) as ex:
        threaded = pk.covariate_search(
            one_compartment(False), study, cands, backward=None, executor=ex
        )
    assert threaded.relations == serial.relations
    assert [s.ofv for s in threaded.steps] == [s.ofv for s in serial.steps]


def test_bad_candidates_are_named(study):
    base = one_compartment(False)
    with pytest.raises(ValueError, match="no individual parameter 'ka'"):
        pk.covariate_search(base, study, [("ka", "WT")])
    with pytest.raises(ValueError, match="no covariate 'HT'"):
        pk.covariate_search(base, study, [("cl", "HT")])
    with pytest.raises(ValueError, match="coded 0/1"):
        pk.covariate_search(base, study, [("cl", "WT", "categorical")])
    with pytest.raises(ValueError, match="unknown kind"):
        pk.Relation("cl", "WT", "quadratic")
    with pytest.raises(ValueError, match="repeat"):
        pk.covariate_search(base, study, [("cl", "WT"), ("cl", "WT", "power")])
    with pytest.raises(ValueError, match="significance"):
        pk.covariate_search(base, study, [("cl", "WT")], forward=5)
    with pytest.raises(TypeError, match="x0"):
        pk.covariate_search(base, study, [("cl", "WT")], x0=base.pack())
