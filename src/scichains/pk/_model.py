"""PKModel: typical values, random effects, individual parameters, ODE, observation, error."""

from __future__ import annotations

import numpy as np

from ._endpoints import endpoint_spec, error_names
from ._omega import Block, OmegaLayout
from ._rules import rule_specs
from ._sensitivity import Sensitivities


class PKModel:
    """A nonlinear mixed-effects model, written in SymPy.

    Parameters
    ----------
    states : SymPy symbols of the ODE states (``n``); dose ``CMT = k`` goes into
        ``states[k - 1]`` (amounts)
    odes : SymPy expressions, ``odes[a] = d states[a] / dt``, in the states, the individual
        parameters and ``t``; or a plain compiled function ``f(du, u, p, t)`` (``@njit``) with
        ``u`` the states and ``p`` the individual parameters in the order of ``individual``,
        traced once to SymPy for its exact derivatives (``ValueError`` with the reason when
        it cannot be: a branch on a value, a non-smooth function, a network)
    individual : dict ``{symbol: expression}``: the individual parameters (``m``), each a
        function of the typical values, the random effects and the covariates, e.g.
        ``{cl: tvcl * exp(eta_cl) * (WT / 70)**0.75}``
    theta : dict ``{symbol: initial value}``: the typical values (fixed effects, ``p``), on
        the scale the expressions use (e.g. ``log CL``, or ``CL`` per kg as NONMEM's
        ``THETA(1)*WT``: :func:`fit` scales the estimated vector internally, so either scale
        converges); a value may be a tuple ``(low, init, up)`` or ``(low, init)`` (NONMEM's
        ``$THETA (0, 0.0047)``): bounds, ``None`` or ``-inf``/``inf`` for none, with
        ``low < init < up`` (``ValueError`` otherwise); :func:`fit` keeps the estimate inside
        them (``theta_bounds``)
    eta : SymPy symbols of the random effects (``q``)
    omega : initial covariance of ``eta``: a vector of ``q`` variances (a diagonal omega,
        estimated as such) or a ``(q, q)`` symmetric positive-definite matrix (a full omega)
    observe : SymPy expression of the prediction in the states and individual parameters
        (e.g. ``center / v``); or, for several endpoints (a joint PK/PD model, parent and
        metabolite), a dict ``{dvid: expression}`` keyed by the ``DVID`` of their observation
        records (:func:`read_events`), e.g. ``{1: center / v, 2: emax * c / (ec50 + c)}``
    error : an :class:`ErrorModel` (``Additive``, ``Proportional``, ``Combined``,
        ``Exponential``) with the initial standard deviation(s); with several endpoints a dict
        with the same keys, one error model each (``ValueError`` naming an endpoint without
        one): each endpoint has its own standard deviations (named ``prop[2]``, ``add[1]``,
        ...: the error model's names with the endpoint's ``DVID``), its own log transform
        (``Exponential``) and its own censored observations
    covariates : SymPy symbols used in ``individual``; their names, upper-cased, are the event
        table's covariate columns (``WT`` for the symbol ``wt`` or ``WT``)
    t : the time symbol, if ``odes`` depend on time
    bioavailability : optional dict ``{state: expression}``: the fraction of each dose into
        that state that arrives, a function of the individual parameters (e.g.
        ``{depot: f_oral}`` with ``f_oral: 1 / (1 + exp(-(tf + eta_f)))`` in ``individual``);
        differentiable like every other parameter. A bolus of ``AMT`` adds ``F * AMT``; an
        infusion keeps its duration and runs at ``F * rate`` (as NONMEM does for infusions
        whose duration is given, ``RATE=-2``; NONMEM keeps a given ``RATE`` and stretches
        the duration instead)
    lag : optional dict ``{state: expression}``: the lag time of the doses into that state
        (NONMEM's ``ALAG``), a function of the individual parameters (e.g. ``{depot: tlag}``
        with ``tlag: exp(ttlag + eta_tlag)`` in ``individual``), in the data's time unit: a
        dose recorded at ``t`` arrives at ``t + lag`` (an infusion starts and ends ``lag``
        later). Differentiable to every order the estimation needs, although the solution is
        not smooth at the dose time (see ``Sensitivities.lagged_jump``); needs an autonomous
        ODE (no ``t``)
    networks : :class:`Network` terms used in ``odes`` (or ``observe``) by their output
        symbols: a SimpleChain of the states and individual parameters (random effects as
        inputs, DeepPumas style); its weights are added to the typical values (named
        ``name_w0, ...``, after those of ``theta``, initial values the term's weights) and
        enter the equations as individual parameters equal to them
    duration : optional dict ``{state: expression}``: the duration of the zero-order inputs
        into that state whose records say ``RATE=-2`` (NONMEM's ``D1``, ``D2``, ...: a
        zero-order absorption of modelled length), a function of the individual parameters
        (e.g. ``{depot: d1}`` with ``d1: exp(td1 + eta_d1)``), in the data's time unit: the
        dose ``F * AMT`` runs in at ``F * AMT / D`` from its time (plus its lag) for ``D``.
        Differentiable like a lag time (the input's end moves with ``D``, see
        ``Sensitivities.lagged_jump``); needs an autonomous ODE (no ``t``)
    rate : optional dict ``{state: expression}``: the rate of the zero-order inputs into that
        state whose records say ``RATE=-1`` (NONMEM's ``R1``), the same way: the dose
        ``F * AMT`` runs in at ``R`` for ``F * AMT / R`` (as NONMEM keeps a rate and stretches
        the duration; a state has a modelled duration or a modelled rate, not both)
    rules : :class:`DoseRule` s: doses the model gives itself when a condition on the states
        crosses zero (a dose whenever the concentration falls below a threshold), with the
        dose times' derivatives in the fit (see ``Sensitivities.rule_jump``); needs an
        autonomous ODE (no ``t``) and no steady-state doses in the data
    iov_eta : SymPy symbols of inter-occasion random effects (``q_o``; NONMEM's IOV etas),
        used in ``individual`` like ``eta`` (e.g. ``cl: exp(tcl + eta_cl + kappa_cl)``): each
        occasion of a subject draws its own values, all occasions from one covariance
        (NONMEM's ``$OMEGA BLOCK SAME``). The occasion of each record is the event table's
        ``OCC`` column (a whole number from 1 to ``occasions``, carried forward like a
        time-varying covariate: a dose record with ``OCC=2`` starts occasion 2 at its time);
        the model adds ``OCC`` to its covariates
    iov_omega : the initial covariance of ``iov_eta`` (``q_o`` variances or a full
        ``(q_o, q_o)`` matrix, as ``omega``)
    occasions : the number of occasions ``K >= 2`` (the largest ``OCC``; needed with
        ``iov_eta``). The random effects of the model are then ``eta`` followed by the
        occasion effects of occasion 1, 2, ..., K (``q = len(eta) + K q_o``; named
        ``kappa_occ1``, ``kappa_occ2``, ... for ``kappa``; the EBEs ``fit.etas`` hold them in
        that order, zero for occasions a subject does not have, which do not change its
        likelihood); ``omega`` of a fit is that ``(q, q)`` block-diagonal matrix

    The estimated vector ``x`` (see :meth:`pack`) is ``[theta, omega, log sd]``: ``theta`` as
    given; omega as its Cholesky factor ``L`` (``Omega = L L^T``) by rows of its lower
    triangle with the diagonal as ``log L_kk`` (a diagonal omega: ``log`` of the standard
    deviations only), with inter-occasion effects that of ``eta``'s block, then that of
    ``iov_eta``'s once; the error model's standard deviations as logs (several endpoints:
    each endpoint's in turn, in the order of ``observe``; ``error_names`` names them).

    Attributes of several endpoints: ``dvids`` (the endpoints' ``DVID`` values in order, or
    None for a single ``observe`` expression), ``observes`` and ``errors`` (each endpoint's
    expression and error model, lists also for one), ``error_names``.
    """

    def __init__(
        self,
        states,
        odes,
        individual: dict,
        theta: dict,
        eta,
        omega,
        observe,
        error,
        covariates=(),
        t=None,
        bioavailability: dict | None = None,
        lag: dict | None = None,
        networks=(),
        iov_eta=(),
        iov_omega=None,
        occasions: int = 0,
        duration: dict | None = None,
        rate: dict | None = None,
        rules=(),
    ):
        import sympy as sp

        from ._network import Network

        self.states = list(states)
        if not isinstance(individual, dict) or not individual:
            raise TypeError("individual must be a non-empty dict {symbol: expression}")
        if callable(odes):
            odes, t = _traced(odes, self.states, list(individual), t)
        eta, covariates, networks = list(eta), list(covariates), list(networks)
        self._arguments = _arguments(
            self.states, odes, individual, theta, eta, omega, observe, error, covariates, t,
            bioavailability, lag, networks, list(iov_eta), iov_omega, occasions, duration, rate,
            rules,
        )  # fmt: skip
        self.odes = [sp.sympify(e) for e in odes]
        self.networks = list(networks)
        if self.networks:
            if not isinstance(theta, dict):
                raise TypeError("theta must be a non-empty dict {symbol: initial value}")
            individual, theta = dict(individual), dict(theta)
            sub = {}
            for net in self.networks:
                if not isinstance(net, Network):
                    raise TypeError("networks must be pk.Network terms")
                individual.update(zip(net.phi_symbols, net.theta_symbols))
                theta.update(zip(net.theta_symbols, net.weights0))
                sub.update(zip(net.outputs, net.expressions))
            self.odes = [e.xreplace(sub) for e in self.odes]
            if isinstance(observe, dict):
                observe = {k: sp.sympify(e).xreplace(sub) for k, e in observe.items()}
            else:
                observe = sp.sympify(observe).xreplace(sub)
        if len(self.odes) != len(self.states):
            raise ValueError(f"{len(self.states)} states but {len(self.odes)} equations")
        if not isinstance(theta, dict) or not theta:
            raise TypeError("theta must be a non-empty dict {symbol: initial value}")
        self.dvids, observes, self.errors = endpoint_spec(observe, error)
        self.phi = list(individual)
        self.phi_exprs = [sp.sympify(individual[k]) for k in self.phi]
        self.theta_symbols = list(theta)
        self.theta0, self.theta_bounds = _theta_values(theta)
        self.eta = list(eta)
        self.covariates = list(covariates)
        self.error = error
        self.observe = observe if self.dvids is not None else sp.sympify(observe)
        self.observes = [sp.sympify(e) for e in observes]
        self.t = t
        q = len(self.eta)
        if q == 0:
            raise ValueError("a population model needs at least one random effect")
        om, self.omega_diagonal = _omega_block(omega, q, "omega")
        self.iov_eta = list(iov_eta)
        blocks = [Block(map(str, self.eta), 0, 1, self.omega_diagonal)]
        self.occasions = 0
        if self.iov_eta or occasions:
            om, blocks = self._expand_occasions(om, blocks, iov_omega, occasions)
        elif iov_omega is not None:
            raise ValueError("iov_omega is given without iov_eta")
        self.omega0 = om
        self.omega_layout = OmegaLayout(blocks, len(self.eta))
        # symbols: every name once
        names = [str(s) for s in self.states + self.phi + self.theta_symbols + self.eta]
        names += [str(s) for s in self.iov_eta]
        names += [str(s) for s in self.covariates] + ([str(t)] if t is not None else [])
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise ValueError(f"symbol names used twice: {dup}")
        allowed_ind = set(self.theta_symbols) | set(self.eta) | set(self.covariates)
        for k, e in zip(self.phi, self.phi_exprs):
            extra = e.free_symbols - allowed_ind
            if extra:
                raise ValueError(
                    f"the expression of {k} uses {sorted(map(str, extra))}: neither typical "
                    "values (theta), random effects (eta) nor covariates"
                )
        allowed_ode = set(self.states) | set(self.phi) | ({t} if t is not None else set())
        for a, e in enumerate(self.odes):
            extra = e.free_symbols - allowed_ode
            if extra:
                raise ValueError(
                    f"equation {a} uses {sorted(map(str, extra))}: neither states, individual "
                    "parameters nor t (write typical values and etas into `individual`)"
                )
        for k, e in enumerate(self.observes):
            extra = e.free_symbols - set(self.states) - set(self.phi)
            if extra:
                which = "" if self.dvids is None else f" of endpoint {self.dvids[k]}"
                raise ValueError(
                    f"the observation{which} uses unknown symbols {sorted(map(str, extra))}"
                )
        self.covariate_names = [str(c).upper() for c in self.covariates]
        self.bioavailability = None
        if bioavailability:
            F = [sp.Integer(1)] * len(self.states)
            for k, e in bioavailability.items():
                if k not in self.states:
                    raise ValueError(f"bioavailability is given for {k}, which is not a state")
                e = sp.sympify(e)
                extra = e.free_symbols - set(self.phi)
                if extra:
                    raise ValueError(
                        f"the bioavailability of {k} uses {sorted(map(str, extra))}: write it in "
                        "the individual parameters"
                    )
                F[self.states.index(k)] = e
            self.bioavailability = F
        self.lag = None
        self.lagged_states = ()
        if lag:
            L = [sp.Integer(0)] * len(self.states)
            for k, e in lag.items():
                if k not in self.states:
                    raise ValueError(f"a lag time is given for {k}, which is not a state")
                e = sp.sympify(e)
                extra = e.free_symbols - set(self.phi)
                if extra:
                    raise ValueError(
                        f"the lag time of {k} uses {sorted(map(str, extra))}: write it in the "
                        "individual parameters"
                    )
                L[self.states.index(k)] = e
            if t is not None:
                raise ValueError(
                    "a lag time needs an autonomous ODE (the equations use t): the dose-time "
                    "derivatives are expanded along the flow"
                )
            self.lag = L
            self.lagged_states = tuple(self.states.index(k) for k in lag)
        self.duration, timed = _durations(self.states, self.phi, duration, t, "duration")
        self.rate, rated = _durations(self.states, self.phi, rate, t, "rate")
        both = sorted(str(self.states[a]) for a in set(timed) & set(rated))
        if both:
            raise ValueError(f"{both} have both a modelled duration and a modelled rate")
        self.timed_states = tuple(sorted(timed + rated))  # the input channels, in order
        self.rules = rule_specs(rules, self.states, self.phi, t, self.lagged_states)
        self._sens2 = None  # built on first use (a large phi system may never be)
        self._linear = None
        # the individual-parameter block and its derivatives (NumPy, generated once)
        th, et = self.theta_symbols, self.eta
        m, p = len(self.phi), len(th)
        exprs = list(self.phi_exprs)
        exprs += [e.diff(x) for e in self.phi_exprs for x in et]
        exprs += [e.diff(x) for e in self.phi_exprs for x in th]
        exprs += [e.diff(x).diff(y) for e in self.phi_exprs for x in et for y in et]
        exprs += [e.diff(x).diff(y) for e in self.phi_exprs for x in et for y in th]
        self._ind = sp.lambdify([*th, *et, *self.covariates], exprs, modules="numpy", cse=True)
        self._ind3 = None
        self._sens3 = None
        self._dirs = {}
        # individual parameters that are a typical value itself (network weights): constant
        # derivatives in the system along eta and theta
        self.identity = {
            k: self.theta_symbols.index(e)
            for k, e in enumerate(self.phi_exprs)
            if e in self.theta_symbols
        }
        self.n, self.m, self.p, self.q = len(self.states), m, p, len(self.eta)
        self.n_omega = self.omega_layout.n
        self.error_names = error_names(self.dvids, self.errors)
        self.r = len(self.error_names)
        self.size = p + self.n_omega + self.r

    def __reduce__(self):
        """Pickled by description: the arguments it was made with (SymPy expressions,
        numbers, the error model, the networks; a traced compiled right-hand side as its
        SymPy equations). Unpickling builds the model again from them, so nothing compiled
        travels: the generated code is made again (the same text: numba loads the compiled
        system from its cache) and the results are the same bit for bit."""
        return (_rebuild, (self._arguments,))

    def _expand_occasions(self, om, blocks, iov_omega, occasions):
        """Occasion copies of the inter-occasion effects: ``kappa`` becomes ``sum_k [OCC = k]
        kappa_occk`` in the individual parameters; omega gains one block per occasion."""
        import sympy as sp

        if not self.iov_eta:
            raise ValueError("occasions is given without iov_eta (the inter-occasion effects)")
        if isinstance(occasions, bool) or not isinstance(occasions, (int, np.integer)):
            raise TypeError(f"occasions must be a whole number >= 2, got {occasions!r}")
        K = int(occasions)
        if K < 2:
            raise ValueError(
                f"occasions must be >= 2 with iov_eta (one occasion is between-subject "
                f"variability: write it in eta), got {K}"
            )
        if iov_omega is None:
            raise ValueError("iov_eta needs iov_omega: the initial variances of the occasions")
        qo = len(self.iov_eta)
        omo, diag_o = _omega_block(iov_omega, qo, "iov_omega")
        unused = [
            str(k) for k in self.iov_eta if not any(k in e.free_symbols for e in self.phi_exprs)
        ]
        if unused:
            raise ValueError(f"iov_eta {unused} appear in no individual parameter")
        occ = next((c for c in self.covariates if str(c).upper() == "OCC"), None)
        if occ is None:
            occ = sp.Symbol("OCC", real=True)
            self.covariates.append(occ)
        copies = [
            [sp.Symbol(f"{k}_occ{j}", real=True) for k in self.iov_eta] for j in range(1, K + 1)
        ]
        sub = {
            k: sp.Add(*[_indicator(occ, j + 1, K) * copies[j][a] for j in range(K)])
            for a, k in enumerate(self.iov_eta)
        }
        self.phi_exprs = [e.xreplace(sub) for e in self.phi_exprs]
        qb = len(self.eta)
        blocks.append(Block(map(str, self.iov_eta), qb, K, diag_o))
        self.eta = self.eta + [s for c in copies for s in c]
        full = np.zeros((qb + K * qo, qb + K * qo))
        full[:qb, :qb] = om
        for j in range(K):
            full[qb + j * qo : qb + (j + 1) * qo, qb + j * qo : qb + (j + 1) * qo] = omo
        self.occasions = K
        self.occasion_symbol = occ
        return full, blocks

    @property
    def linear_in_states(self) -> bool:
        """Whether the ODE is ``dx/dt = A(phi, t) x``: every equation linear in the states
        without a term free of them (superposition holds: ``SS=2``)."""
        if self._linear is None:
            import sympy as sp

            zero = {s: 0 for s in self.states}
            self._linear = all(
                sp.simplify(e.xreplace(zero)) == 0
                and all(
                    sp.simplify(sp.diff(e, a, b)) == 0 for a in self.states for b in self.states
                )
                for e in self.odes
            )
        return self._linear

    # ---------------------------------------------------------------- individual block
    def individual(self, theta, eta, cov):
        """``phi, phi_eta (m, q), phi_theta (m, p), phi_eta_eta (m, q, q),
        phi_eta_theta (m, q, p)`` at one subject's ``theta``, ``eta`` and covariates."""
        m, p, q = self.m, self.p, self.q
        v = np.array(self._ind(*theta, *eta, *cov), dtype=np.float64)
        o = 0
        phi = v[o : o + m]
        o += m
        pe = v[o : o + m * q].reshape(m, q)
        o += m * q
        pt = v[o : o + m * p].reshape(m, p)
        o += m * p
        pee = v[o : o + m * q * q].reshape(m, q, q)
        o += m * q * q
        pet = v[o : o + m * q * p].reshape(m, q, p)
        return phi, pe, pt, pee, pet

    def individual3(self, theta, eta, cov):
        """Third derivatives of the individual parameters: ``phi_eta_eta_eta (m, q, q, q)``
        and ``phi_eta_eta_theta (m, q, q, p)`` (generated on first use)."""
        m, p, q = self.m, self.p, self.q
        if self._ind3 is None:
            import sympy as sp

            th, et = self.theta_symbols, self.eta
            ex = [e.diff(a, b, c) for e in self.phi_exprs for a in et for b in et for c in et]
            ex += [e.diff(a, b, c) for e in self.phi_exprs for a in et for b in et for c in th]
            self._ind3 = sp.lambdify([*th, *et, *self.covariates], ex, modules="numpy", cse=True)
        v = np.array(self._ind3(*theta, *eta, *cov), dtype=np.float64)
        return v[: m * q**3].reshape(m, q, q, q), v[m * q**3 :].reshape(m, q, q, p)

    @property
    def sens(self):
        """The second-order augmented system along the individual parameters."""
        if self._sens2 is None:
            self._sens2 = self._system(2)
        return self._sens2

    def _system(self, order: int, **kw):
        """The augmented system of this model (``Sensitivities``) to ``order``."""
        rules = [
            (r.when, self.states.index(r.into), r.direction, r.amount, r.max_doses)
            for r in self.rules
        ]
        return Sensitivities(
            self.states, self.phi, self.odes, self.observes, t=self.t, order=order,
            bioavailability=self.bioavailability, lag=self.lag, duration=self.duration,
            rate=self.rate, rules=rules, **kw,
        )  # fmt: skip

    def system_sizes(self, order: int = 2) -> tuple[int, int]:
        """Augmented-state sizes ``(along phi, along eta and theta)`` of the two forms."""
        from math import comb

        m, q, p, n = self.m, self.q, self.p, self.n
        along_phi = 1 + sum(comb(m + o - 1, o) for o in range(1, order + 1))
        along_z = 1 + q + p + q * (q + 1) // 2 + q * p
        if order == 3:
            along_z += q * (q + 1) * (q + 2) // 6 + q * (q + 1) // 2 * p
        return n * along_phi, n * along_z

    def sensitivities(self, order: int):
        """The augmented system of second (``self.sens``) or third order (built on first
        use: Laplace's gradient needs it)."""
        if order == 2:
            return self.sens
        if self._sens3 is None:
            self._sens3 = self._system(3)
        return self._sens3

    def directional(self, order: int):
        """The augmented system along the random effects and typical values (order 2 or 3;
        built on first use): subjects whose covariates change in time use it, with the
        individual parameters and their derivatives as its parameters, piece by piece."""
        if order not in (2, 3):
            raise ValueError(f"order must be 2 or 3, got {order}")
        if self._dirs.get(order) is None:
            self._dirs[order] = self._system(
                order, directions=(self.q, self.p), identity=self.identity
            )
        return self._dirs[order]

    # ---------------------------------------------------------------- parameter layout
    def omega_from(self, w):
        """``(Omega, [dOmega/dw_c])`` from the omega block ``w`` of ``x``."""
        return self.omega_layout.matrix(w)

    def pack(self, theta=None, omega=None, sd=None) -> np.ndarray:
        """The estimated vector ``x`` from ``theta`` (``p`` values), ``omega`` (``(q, q)`` or
        ``q`` variances; with occasions also one variance per random effect as the model
        writes them, ``eta`` then ``iov_eta``) and the error model's standard deviations
        (defaults: the initial values)."""
        theta = self.theta0 if theta is None else np.asarray(theta, dtype=np.float64)
        om = self.omega0 if omega is None else np.asarray(omega, dtype=np.float64)
        if om.ndim == 1:
            short = len(self.omega_layout.names)
            om = self.omega_layout.expand(om) if om.shape == (short,) else np.diag(om)
        if sd is None:
            sd = np.concatenate([e.initial for e in self.errors])
        sd = np.asarray(sd, dtype=np.float64)
        if sd.shape != (self.r,):
            raise ValueError(
                f"sd must hold the {self.r} standard deviation(s) {self.error_names}, got "
                f"shape {sd.shape}"
            )
        if om.shape != (self.q, self.q):
            raise ValueError(
                f"omega must have shape ({self.q},) or ({self.q}, {self.q}), got {om.shape}"
            )
        w = self.omega_layout.entries(om)
        return np.concatenate([theta, w, np.log(sd)])

    def unpack(self, x):
        """``(theta, Omega, sd)`` of an estimated vector ``x`` (new arrays)."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.size,):
            raise ValueError(f"x must have shape ({self.size},), got {x.shape}")
        p, no = self.p, self.n_omega
        om, _ = self.omega_from(x[p : p + no])
        return x[:p].copy(), om, np.exp(x[p + no :])

    def parameter_names(self) -> list[str]:
        """Names of the entries of ``x``."""
        names = [str(s) for s in self.theta_symbols]
        names += self.omega_layout.parameter_names()
        names += [f"log_{n}" for n in self.error_names]
        return names


def _durations(states, phi, duration, t, what="duration"):
    """``(durations (n SymPy expressions, 0 for none) or None, the states that have one)``
    of the ``duration`` (or ``rate``) dict (``ValueError`` for a state that is not one, an
    expression in other symbols than the individual parameters, a time-dependent ODE)."""
    import sympy as sp

    if not duration:
        return None, ()
    out = [sp.Integer(0)] * len(states)
    for k, e in duration.items():
        if k not in states:
            raise ValueError(f"a {what} is given for {k}, which is not a state")
        e = sp.sympify(e)
        extra = e.free_symbols - set(phi)
        if extra:
            raise ValueError(
                f"the {what} of {k} uses {sorted(map(str, extra))}: write it in the "
                "individual parameters"
            )
        if e == 0:
            raise ValueError(f"the {what} of {k} is 0")
        out[states.index(k)] = e
    if t is not None:
        raise ValueError(
            f"a modelled {what} needs an autonomous ODE (the equations use t): the end of the "
            "input is expanded along the flow"
        )
    return out, tuple(states.index(k) for k in duration)


def _omega_block(omega, q: int, what: str):
    """``(matrix (q, q), diagonal)`` of an initial covariance given as ``q`` variances or a
    ``(q, q)`` symmetric positive-definite matrix (``ValueError`` naming ``what``)."""
    om = np.asarray(omega, dtype=np.float64)
    if om.shape == (q,):
        if np.any(~np.isfinite(om)) or np.any(om <= 0):
            raise ValueError(f"{what} variances must be positive and finite")
        return np.diag(om), True
    if om.shape == (q, q):
        if not np.all(np.isfinite(om)) or not np.allclose(om, om.T):
            raise ValueError(f"{what} must be symmetric and finite")
        try:
            np.linalg.cholesky(om)
        except np.linalg.LinAlgError:
            raise ValueError(f"{what} must be positive definite") from None
        return om, False
    raise ValueError(f"{what} must have shape ({q},) or ({q}, {q}), got {om.shape}")


def _indicator(occ, k: int, K: int):
    """1 where ``occ == k`` and 0 at the other whole numbers ``1..K``: Lagrange's basis
    polynomial, smooth, so that the generated derivatives are plain arithmetic. The zeros are
    exact in floating point (a factor is 0); the one is a product of whole numbers over
    their own product, exact while they stay below 2^53 (1 to rounding beyond 9 occasions)."""
    import sympy as sp

    num = sp.Mul(*[occ - i for i in range(1, K + 1) if i != k], evaluate=False)
    den = 1
    for i in range(1, K + 1):
        if i != k:
            den *= k - i
    return num / den


def _theta_values(theta: dict):
    """``(initial values (p,), bounds (p, 2))`` of the ``theta`` dict: each value a number or a
    tuple ``(low, init)`` / ``(low, init, up)`` (``None`` for no bound)."""
    init, bounds = [], []
    for k, v in theta.items():
        if isinstance(v, (tuple, list)):
            if len(v) not in (2, 3):
                raise ValueError(
                    f"theta {k}: a tuple must be (low, init) or (low, init, up), got {v!r}"
                )
            low = -np.inf if v[0] is None else float(v[0])
            up = np.inf if len(v) < 3 or v[2] is None else float(v[2])
            x = float(v[1])
            if np.isnan(low) or np.isnan(up) or low == np.inf or up == -np.inf:
                raise ValueError(f"theta {k}: bounds ({low}, {up}) are not valid")
            if not (np.isfinite(x) and low < x < up):
                raise ValueError(
                    f"theta {k}: the initial value {x:g} must be finite and strictly inside "
                    f"its bounds ({low:g}, {up:g})"
                )
        else:
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise TypeError(
                    f"theta {k}: the initial value must be a number or a tuple (low, init, up), "
                    f"got {v!r}"
                ) from None
            if not np.isfinite(x):
                raise ValueError(f"theta {k}: the initial value must be finite, got {x}")
            low, up = -np.inf, np.inf
        init.append(x)
        bounds.append((low, up))
    return np.array(init, dtype=np.float64), np.array(bounds, dtype=np.float64).reshape(-1, 2)


def _arguments(
    states, odes, individual, theta, eta, omega, observe, error, covariates, t, bio, lag, nets,
    iov_eta, iov_omega, occasions, duration, rate, rules,
) -> dict:  # fmt: skip
    """The constructor's arguments (copies of the containers), as :meth:`PKModel.__reduce__`
    sends them."""

    def copied(d):
        return dict(d) if isinstance(d, dict) else d

    return {
        "states": list(states),
        "odes": list(odes),
        "individual": dict(individual),
        "theta": copied(theta),
        "eta": list(eta),
        "omega": np.array(omega) if isinstance(omega, np.ndarray) else omega,
        "observe": copied(observe),
        "error": copied(error),
        "covariates": list(covariates),
        "t": t,
        "bioavailability": copied(bio),
        "lag": copied(lag),
        "networks": list(nets),
        "iov_eta": list(iov_eta),
        "iov_omega": np.array(iov_omega) if isinstance(iov_omega, np.ndarray) else iov_omega,
        "occasions": occasions,
        "duration": copied(duration),
        "rate": copied(rate),
        "rules": list(rules),
    }


def _rebuild(arguments: dict) -> PKModel:
    return PKModel(**arguments)


def _traced(f, states, phi, t):
    """The equations of a plain compiled right-hand side, in the model's symbols."""
    import sympy as sp

    from ..ode.derivatives._trace import NotTraceable, trace_rhs

    try:
        u, p, tt, eqs, calls = trace_rhs(f, len(states), len(phi))
    except NotTraceable as e:
        raise ValueError(
            f"the compiled right-hand side cannot be traced to SymPy ({e}); the exact FOCE-I "
            "and Laplace gradients need its second and third derivatives: write the equations "
            "in SymPy"
        ) from None
    if calls:
        raise ValueError(
            "a network called inside a compiled right-hand side cannot be traced; write the "
            "equations in SymPy with the network as a pk.Network term"
        )
    sub = dict(zip(u, states))
    sub.update(zip(p, phi))
    uses_t = any(tt in e.free_symbols for e in eqs)
    if uses_t:
        if t is None:
            t = sp.Symbol("t", real=True)
        sub[tt] = t
    return [e.xreplace(sub) for e in eqs], t
