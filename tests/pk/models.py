"""Models shared by the pk tests."""

import numpy as np
import sympy as sp

from scichains import pk


def oral_model(error=None, omega=(0.6, 0.3, 0.1), covariate=False, odes=None):
    """nlmixr2's one-compartment Theophylline model (log-normal ka, CL, V)."""
    depot, center, ka, cl, v = sp.symbols("depot center ka cl v")
    tka, tcl, tv, eka, ecl, ev = sp.symbols("tka tcl tv eta_ka eta_cl eta_v")
    wt = sp.Symbol("WT")
    cl_expr = sp.exp(tcl + ecl) * ((wt / 70) ** sp.Rational(3, 4) if covariate else 1)
    return pk.PKModel(
        states=[depot, center],
        odes=odes or [-ka * depot, ka * depot - cl / v * center],
        individual={ka: sp.exp(tka + eka), cl: cl_expr, v: sp.exp(tv + ev)},
        theta={tka: 0.45, tcl: 1.0, tv: 3.45},
        eta=[eka, ecl, ev],
        omega=np.asarray(omega),
        observe=center / v,
        error=error or pk.Additive(0.7),
        covariates=[wt] if covariate else (),
    )


def iv_model():
    center, cl, v = sp.symbols("center cl v")
    tcl, tv, ecl = sp.symbols("tcl tv eta_cl")
    return pk.PKModel(
        states=[center],
        odes=[-cl / v * center],
        individual={cl: sp.exp(tcl + ecl), v: sp.exp(tv)},
        theta={tcl: np.log(3.0), tv: np.log(20.0)},
        eta=[ecl],
        omega=[0.1],
        observe=center / v,
        error=pk.Additive(0.5),
    )


def theoph_subset(k=12, drop_t0=False):
    """The first ``k`` Theophylline subjects (optionally without the time-0 samples, where a
    proportional error has zero variance)."""
    data = pk.theophylline()
    subjects = []
    for s in data.subjects[:k]:
        keep = s.times > 0 if drop_t0 else np.ones(s.times.size, bool)
        subjects.append(
            pk.Subject(s.id, s.doses, s.times[keep], s.dv[keep], s.rows[keep], s.covariates)
        )
    return pk.EventData(subjects, data.covariates)


def oral_f_model(method_error=None):
    """The oral model with a logistic bioavailability (typical value and random effect)."""
    depot, center, ka, cl, v, f = sp.symbols("depot center ka cl v f")
    tka, tcl, tv, tf = sp.symbols("tka tcl tv tf")
    eka, ecl, ef = sp.symbols("eta_ka eta_cl eta_f")
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={
            ka: sp.exp(tka + eka),
            cl: sp.exp(tcl + ecl),
            v: sp.exp(tv),
            f: 1 / (1 + sp.exp(-(tf + ef))),
        },
        theta={tka: 0.3, tcl: 1.0, tv: 3.4, tf: 1.0},
        eta=[eka, ecl, ef],
        omega=[0.3, 0.1, 0.2],
        observe=center / v,
        error=method_error or pk.Combined(0.2, 0.1),
        bioavailability={depot: f},
    )


REGIMEN_CSV = (
    "ID,TIME,DV,AMT,RATE,DUR,II,ADDL,EVID\n"
    "1,0,.,300,0,0,0,0,1\n1,0.5,1,0,0,0,0,0,0\n1,2,1,0,0,0,0,0,0\n1,6,1,0,0,0,0,0,0\n"
    "1,12,.,200,0,3,0,0,1\n1,13,1,0,0,0,0,0,0\n1,16,1,0,0,0,0,0,0\n1,24,1,0,0,0,0,0,0\n"
    "2,0,.,100,0,0,8,2,1\n2,1,1,0,0,0,0,0,0\n2,9,1,0,0,0,0,0,0\n2,17,1,0,0,0,0,0,0\n"
    "2,20,1,0,0,0,0,0,0\n"
    "3,0,.,250,0,0,0,0,1\n3,1,1,0,0,0,0,0,0\n3,3,1,0,0,0,0,0,0\n3,8,1,0,0,0,0,0,0\n"
)


def regimen_data(tmp_path, model):
    """Boluses, an infusion and repeats into the depot; DV simulated from ``model`` at its
    initial values with 10% noise (seed 0)."""
    path = tmp_path / "regimen.csv"
    path.write_text(REGIMEN_CSV)
    data = pk.read_events(path)
    obj = pk.PopulationObjective(model, data)
    rng = np.random.default_rng(0)
    etas = rng.normal(0, 0.3, (len(data), model.q))
    subjects = []
    for s, f in zip(data.subjects, obj.predict(model.pack(), etas)):
        dv = f * (1 + 0.1 * rng.standard_normal(f.size)) + 0.05
        subjects.append(pk.Subject(s.id, s.doses, s.times, dv, s.rows, s.covariates))
    return pk.EventData(subjects, data.covariates)


def lag_model(error=None, omega=(0.4, 0.07, 0.05), theta=(0.45, 1.0, 3.45, -2.3)):
    """The oral model with a log-normal lag time on the depot's doses (NONMEM's ALAG1)."""
    depot, center, ka, cl, v, tlag = sp.symbols("depot center ka cl v tlag")
    tka, tcl, tv, ttlag = sp.symbols("tka tcl tv ttlag")
    eka, ecl, etl = sp.symbols("eta_ka eta_cl eta_tlag")
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center],
        individual={
            ka: sp.exp(tka + eka),
            cl: sp.exp(tcl + ecl),
            v: sp.exp(tv),
            tlag: sp.exp(ttlag + etl),
        },
        theta=dict(zip([tka, tcl, tv, ttlag], theta)),
        eta=[eka, ecl, etl],
        omega=np.asarray(omega),
        observe=center / v,
        error=error or pk.Additive(0.7),
        lag={depot: tlag},
    )


def nn_model(hidden: int = 0, seed: int = 0, scale: float = 0.3):
    """DeepPumas style: the absorption rate ``ka depot exp(nn(depot / 320, eta_nn))``, a
    SimpleChain 2 -> hidden (tanh) -> 1 (0: 2 -> 1 tanh) whose second input is a random
    effect."""
    import scichains as sc

    depot, center, ka, cl, v, z = sp.symbols("depot center ka cl v z")
    tka, tcl, tv = sp.symbols("tka tcl tv")
    ecl, ev, enn = sp.symbols("eta_cl eta_v eta_nn")
    if hidden:
        chain = sc.SimpleChain(2, sc.Dense(hidden, "tanh"), sc.Dense(1))
    else:
        chain = sc.SimpleChain(2, sc.Dense(1, "tanh"))
    w = chain.init_params(seed=seed, dtype=np.float64) * scale
    net = pk.Network(chain, [depot / 320, z], name="nn", weights=w)
    rate = ka * depot * sp.exp(net[0])
    return pk.PKModel(
        states=[depot, center],
        odes=[-rate, rate - cl / v * center],
        individual={ka: sp.exp(tka), cl: sp.exp(tcl + ecl), v: sp.exp(tv + ev), z: enn},
        theta={tka: 0.45, tcl: 1.0, tv: 3.45},
        eta=[ecl, ev, enn],
        omega=[0.1, 0.02, 0.5],
        observe=center / v,
        error=pk.Additive(0.7),
        networks=[net],
    )


SIM_TIMES = np.array([0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 24.0])
SIM_TRUTH = {"theta": [np.log(1.5), np.log(2.7), np.log(32.0)], "omega": [0.3, 0.1, 0.05]}


def simulated_oral(error, sd, n_subjects=16, seed=0):
    """``(model, data, x_true)``: the oral model (omega 0.3, 0.1, 0.05; ka 1.5, CL 2.7, V 32)
    with ``error`` (an ErrorModel, standard deviations ``sd``) and data simulated at the
    truth by :func:`simulated_data`."""
    model = oral_model(error=error, omega=SIM_TRUTH["omega"])
    x_true = model.pack(theta=SIM_TRUTH["theta"], omega=SIM_TRUTH["omega"], sd=sd)
    omega = np.diag(SIM_TRUTH["omega"])
    return model, simulated_data(model, x_true, n_subjects, seed, omega), x_true


def simulated_data(model, x, n_subjects, seed=0, omega=None):
    """``n_subjects`` given 320 mg into the first state at time 0 and sampled at
    ``SIM_TIMES``, DV simulated from ``model`` at ``x`` (an Additive, Proportional or
    Combined error; the EBEs, drawn from ``omega`` (default: that of ``x``), then the
    residuals, with ``seed``)."""
    rows = np.arange(2, 2 + SIM_TIMES.size)
    subjects = [
        pk.Subject(i + 1, [pk.Dose(0.0, 320.0, 0, row=1)], SIM_TIMES.copy(), np.ones(7), rows)
        for i in range(n_subjects)
    ]
    data = pk.EventData(subjects, ())
    _, omega_x, sd = model.unpack(x)
    omega = omega_x if omega is None else omega
    rng = np.random.default_rng(seed)
    etas = rng.multivariate_normal(np.zeros(model.q), omega, n_subjects)
    names = list(model.error.names)
    out = []
    for s, f in zip(subjects, pk.PopulationObjective(model, data).predict(x, etas)):
        var = np.zeros_like(f)
        if "add" in names:
            var += sd[names.index("add")] ** 2
        if "prop" in names:
            var += (sd[names.index("prop")] * f) ** 2
        dv = f + np.sqrt(var) * rng.standard_normal(f.size)
        out.append(pk.Subject(s.id, s.doses, s.times, dv, s.rows))
    return pk.EventData(out, ())


def perturbed_start(model, x_true, seed):
    """Typical values, omega variances and standard deviations of ``x_true``, each times
    ``U(0.9, 1.1)`` (``default_rng(100 + seed)``), packed."""
    rng = np.random.default_rng(100 + seed)
    theta, omega, sd = model.unpack(x_true)
    theta = theta * rng.uniform(0.9, 1.1, theta.size)
    variances = np.diag(omega) * rng.uniform(0.9, 1.1, model.q)
    return model.pack(theta=theta, omega=variances, sd=sd * rng.uniform(0.9, 1.1, sd.size))


def capacity_model(tc=5.991464547107982):
    """The oral model with an elimination that stops at a capacity ``cmax = exp(tc)`` of the
    central compartment, ``cl / v center sqrt(1 - center / cmax)``: once the absorbed amount
    would pass ``cmax`` the square root is NaN and the solve fails mid-span (a dose of 320 mg
    peaks near 280 mg: below ``tc`` about 5.75 the solves fail, at the default 5.99 the
    elimination is slowed at the peak, far above it is linear). Default ``tc``: log 400."""
    depot, center, ka, cl, v, cmax = sp.symbols("depot center ka cl v cmax")
    tka, tcl, tv, tc_ = sp.symbols("tka tcl tv tc")
    eka, ecl = sp.symbols("eta_ka eta_cl")
    return pk.PKModel(
        states=[depot, center],
        odes=[-ka * depot, ka * depot - cl / v * center * sp.sqrt(1 - center / cmax)],
        individual={
            ka: sp.exp(tka + eka),
            cl: sp.exp(tcl + ecl),
            v: sp.exp(tv),
            cmax: sp.exp(tc_),
        },
        theta={tka: np.log(1.5), tcl: np.log(2.7), tv: np.log(32.0), tc_: float(tc)},
        eta=[eka, ecl],
        omega=[0.3, 0.1],
        observe=center / v,
        error=pk.Additive(0.3),
    )


def neonatal_model(natural=True, init=(0.0047, 1.0, 0.1), millilitres=False, omega=(0.1, 0.1)):
    """Issue 29's neonatal model as a NONMEM control stream writes it: one compartment, IV
    bolus, ``CL = th1 * WT * exp(eta_cl)`` (L/h), ``V = th2 * WT * (1 + th3 [APGR < 5]) *
    exp(eta_v)`` (L; ``millilitres``: mL, so that ``th2`` is near 1000), proportional error.
    ``natural=False``: the same model with ``th1, th2, th3`` written as ``exp`` of the
    estimated values (initial values their logs)."""
    center, cl, v = sp.symbols("center cl v")
    th1, th2, th3, ecl, ev = sp.symbols("th1 th2 th3 eta_cl eta_v")
    wt, apgr = sp.symbols("WT APGR")
    low_apgar = sp.Piecewise((1, apgr < 5), (0, True))
    c = 1000 if millilitres else 1
    if natural:
        t1, t2, t3 = th1, th2, th3
        theta = dict(zip([th1, th2, th3], init))
    else:
        t1, t2, t3 = sp.exp(th1), sp.exp(th2), sp.exp(th3)
        theta = dict(zip([th1, th2, th3], np.log(init)))
    return pk.PKModel(
        states=[center],
        odes=[-c * cl / v * center],
        individual={cl: t1 * wt * sp.exp(ecl), v: t2 * wt * (1 + t3 * low_apgar) * sp.exp(ev)},
        theta=theta,
        eta=[ecl, ev],
        omega=list(omega),
        observe=c * center / v,
        error=pk.Proportional(0.1),
        covariates=[wt, apgr],
    )


NEONATAL_TRUTH = {"theta": (0.0055, 0.95, 0.25), "omega": (0.05, 0.03), "prop": 0.12}


def neonatal_data(seed=2, n_subjects=30, millilitres=False):
    """``n_subjects`` neonates (WT U(0.6, 3.5) kg, APGR 1..10), 20 mg/kg IV at time 0,
    samples at one random time in each of [1, 4], [12, 36], [48, 96] and [120, 168] h; DV
    simulated from :func:`neonatal_model` at :data:`NEONATAL_TRUTH` (V in mL with
    ``millilitres``)."""
    rng = np.random.default_rng(seed)
    subjects = []
    row = 0
    for i in range(n_subjects):
        wt, apgr = rng.uniform(0.6, 3.5), float(rng.integers(1, 11))
        dose = pk.Dose(0.0, 20 * wt, 0, row=row + 1)
        times = np.sort(rng.uniform([1, 12, 48, 120], [4, 36, 96, 168]))
        rows = np.arange(row + 2, row + 2 + times.size)
        row += 1 + times.size
        cov = {"WT": wt, "APGR": apgr}
        subjects.append(pk.Subject(i + 1, [dose], times, np.ones(times.size), rows, cov))
    data = pk.EventData(subjects, ("WT", "APGR"))
    model = neonatal_model(millilitres=millilitres)
    theta = np.array(NEONATAL_TRUTH["theta"]) * ([1, 1000, 1] if millilitres else 1)
    om = NEONATAL_TRUTH["omega"]
    x = model.pack(theta=theta, omega=list(om), sd=[NEONATAL_TRUTH["prop"]])
    etas = rng.multivariate_normal(np.zeros(2), np.diag(om), n_subjects)
    out = []
    for s, f in zip(subjects, pk.PopulationObjective(model, data).predict(x, etas)):
        dv = f * (1 + NEONATAL_TRUTH["prop"] * rng.standard_normal(f.size))
        out.append(pk.Subject(s.id, s.doses, s.times, dv, s.rows, s.covariates))
    return pk.EventData(out, ("WT", "APGR"))
