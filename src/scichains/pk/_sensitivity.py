"""Forward sensitivities of a PK model up to third order, generated with SymPy.

For ``dx/dt = f(x, phi, t) + rate`` (``n`` states, ``m`` individual parameters ``phi``, a
piecewise-constant input ``rate`` per state: zero-order infusions) the augmented state is

    y = [x, S1, S2(, S3)],  S_o[a, I] = d^o x_a / dphi_I  (I: sorted index tuples of length o)

with ``dS_{I+(l,)}/dt = D_l (dS_I/dt)``, where ``D_l`` is the total derivative along
``phi_l`` (``D_l e = de/dphi_l + sum_{a, I} de/dS[a, I] S[a, sorted(I + (l,))]``, ``S[a, ()]
= x_a``). The rates and the doses do not depend on ``phi``, so the sensitivities start at
zero and are continuous across a bolus dose. The augmented system is an ordinary
:class:`~scichains.ode.SymbolicModel` without a vjp (it is only solved forward; compiled
once per model per machine); the observation
``g(x, phi)`` and its total derivatives are generated the same way, as vectorised NumPy
functions of the saved states. Second order serves FOCE-I's exact gradient; Laplace's needs
the third.
"""

from __future__ import annotations

import itertools

import numpy as np


def pair_index(m: int) -> np.ndarray:
    """``idx[k, l]``: the column of ``(k, l)`` (either order) in the packed ``k <= l`` layout."""
    idx = np.zeros((m, m), dtype=np.int64)
    for c, (k, ll) in enumerate(itertools.combinations_with_replacement(range(m), 2)):
        idx[k, ll] = idx[ll, k] = c
    return idx


class Sensitivities:
    """The augmented system of a model (sensitivities up to ``order``, 2 or 3) and its
    observation derivatives.

    Parameters
    ----------
    states, phi : SymPy symbols (``n`` and ``m`` of them)
    rhs : SymPy expressions, ``rhs[a] = dx_a/dt`` (without infusion input)
    observe : SymPy expression ``g(x, phi)`` (the prediction of one observation), or a list
        of them (several endpoints: each observation row names its own, see :meth:`observe`)
    t : the time symbol when ``rhs`` depends on it
    order : 2 (values, first and second derivatives) or 3
    bioavailability : optional list of ``n`` SymPy expressions in ``phi``: the fraction of a
        dose into each state that arrives (boluses: the jump, with its derivatives;
        infusions: the rate is scaled)
    lag : optional list of ``n`` SymPy expressions in ``phi``: the lag time of each state's
        doses (0: none); see :meth:`lagged_jump`
    rules : optional list of ``(g, state, direction, amount, max_doses)``: dosing rules, a
        dose of ``amount`` into ``state`` where ``g(x, phi)`` crosses zero in ``direction``,
        at most ``max_doses`` (None: no limit) per subject (see :meth:`rule_jump`)
    directions : None (derivatives along ``phi``) or ``(q, p)``: derivatives along ``q``
        random effects and ``p`` typical values instead, those whose index tuples have at
        most one typical value (all FOCE-I and Laplace need), with the derivatives of
        ``phi`` along them as parameters of the system (``param_layout``). This is the form
        for individual parameters that change in time (time-varying covariates): the
        parameters change from segment to segment while the augmented state stays
        continuous, because it holds derivatives along quantities that do not change.
    identity : direction mode: ``{i: l}`` for individual parameters equal to the typical
        value ``l`` (network weights): their derivatives are constants, not parameters
    duration : optional list of ``n`` SymPy expressions in ``phi``: the modelled duration
        ``D_a`` of each state's zero-order inputs of ``RATE=-2`` (0: none). Such a state has
        a second input channel, the amount of its modelled inputs running, entering as
        ``F_a amount / D_a``; the input's end moves with ``D_a`` (see :meth:`lagged_jump`)
    rate : optional list of ``n`` SymPy expressions: the modelled rate ``R_a`` of each
        state's ``RATE=-1`` inputs (0: none): the second channel counts the inputs running,
        entering as ``count R_a``; an input of ``AMT`` ends ``F_a AMT / R_a`` after its start
        (NONMEM keeps the rate and stretches the duration by the bioavailability)

    Parameters of the augmented system: ``phi`` (``m``), in direction mode the derivatives
    ``d^o phi_i / dz_I`` (``param_layout``: ``(i, I)`` per entry), then the input channels
    (``n_channels``): one rate per state, then the running amount of the modelled-duration
    inputs of each state in ``timed`` (in that order).
    """

    def __init__(
        self,
        states,
        phi,
        rhs,
        observe,
        t=None,
        order: int = 2,
        bioavailability=None,
        lag=None,
        directions=None,
        identity=None,
        duration=None,
        rate=None,
        rules=None,
    ):
        import sympy as sp

        from ..ode.derivatives._symbolic import SymbolicModel

        if order not in (2, 3):
            raise ValueError(f"order must be 2 or 3, got {order}")
        n, m = len(states), len(phi)
        self.n, self.m, self.order = n, m, order
        self.pairs = pair_index(m)
        self.npair = m * (m + 1) // 2
        self.directions = directions
        if directions is None:
            nd = m
            tuples = {
                o: list(itertools.combinations_with_replacement(range(m), o))
                for o in range(1, order + 1)
            }
        else:
            q, pth = directions
            nd = q + pth
            # sorted tuples put the typical values (indices >= q) last; at most one of them
            tuples = {
                o: [
                    tup
                    for tup in itertools.combinations_with_replacement(range(nd), o)
                    if sum(k >= q for k in tup) <= 1
                ]
                for o in range(1, order + 1)
            }
        self.nd = nd
        X = [{(): states[a]} for a in range(n)]
        for o in range(1, order + 1):
            for a in range(n):
                for c, tup in enumerate(tuples[o]):
                    X[a][tup] = sp.Symbol(f"_S{o}_{a}_{c}", real=True)
        # P[i][I] = d^|I| phi_i / dz_I: symbols in direction mode, constants along phi
        P = [{(): phi[i]} for i in range(m)]
        self.param_layout = []
        pars = []
        for o in range(1, order + 1):
            for i in range(m):
                for c, tup in enumerate(tuples[o]):
                    if directions is None:
                        P[i][tup] = sp.Integer(1 if tup == (i,) else 0)
                    elif identity and i in identity:
                        # phi_i is the typical value theta_l: direction q + l
                        P[i][tup] = sp.Integer(1 if tup == (directions[0] + identity[i],) else 0)
                    else:
                        P[i][tup] = sp.Symbol(f"_P{o}_{i}_{c}", real=True)
                        pars.append(P[i][tup])
                        self.param_layout.append((i, tup))
        self.n_params = m + len(pars)
        rates = [sp.Symbol(f"_rate_{a}", real=True) for a in range(n)]
        zero = [sp.Integer(0)] * n
        self.duration = zero if duration is None else [sp.sympify(e) for e in duration]
        self.rate = zero if rate is None else [sp.sympify(e) for e in rate]
        self.timed = tuple(a for a in range(n) if self.duration[a] != 0 or self.rate[a] != 0)
        rates += [sp.Symbol(f"_amount_{a}", real=True) for a in self.timed]
        self.n_channels = len(rates)

        # D_l of each symbol an expression can hold (everything else is constant along the
        # directions: t, the rates)
        kind = {}
        for i in range(m):
            kind[phi[i]] = ("P", i, ())
            for tup, sym in P[i].items():
                if 0 < len(tup) < order and isinstance(sym, sp.Symbol):
                    kind[sym] = ("P", i, tup)
        for a in range(n):
            for tup, sym in X[a].items():
                if len(tup) < order:
                    kind[sym] = ("X", a, tup)
        # The partial derivatives of the right-hand side along its arguments (states, then
        # individual parameters) are symbols _F{a}_{I} while the sensitivity equations are
        # formed, replaced by their expressions at the end: differentiating the expanded
        # chain rule instead (expressions growing with every order) is most of the build
        # time of a model with a network.
        args = list(states) + list(phi)
        partial = {}
        fsym = {}

        def F_of(a, I):
            """The symbol of d^|I| rhs[a] / d args[I] (I sorted), or 0 where it vanishes."""
            key = (a, I)
            if key not in partial:
                e = sp.sympify(rhs[a]) if not I else sp.diff(F_expr(a, I[:-1]), args[I[-1]])
                partial[key] = e
                if e != 0:
                    sym = sp.Symbol(f"_F{a}_{'_'.join(map(str, I))}", real=True)
                    fsym[key] = sym
                    kind[sym] = ("F", a, I)
            return fsym.get(key, sp.Integer(0))

        def F_expr(a, I):
            F_of(a, I)
            return partial[(a, I)]

        def D_symbol(s_, ll):
            k = kind.get(s_)
            if k is None:
                return sp.Integer(0)
            what, i, tup = k
            if what == "P":
                return P[i][tuple(sorted(tup + (ll,)))]
            if what == "X":
                return X[i][tuple(sorted(tup + (ll,)))]
            terms = []  # the chain rule of rhs[a]'s partial along its arguments
            for b in range(n):
                d = X[b][(ll,)]
                if d != 0:
                    f_ = F_of(i, tuple(sorted(tup + (b,))))
                    if f_ != 0:
                        terms.append(f_ * d)
            for j_ in range(m):
                d = P[j_][(ll,)]
                if d != 0:
                    f_ = F_of(i, tuple(sorted(tup + (n + j_,))))
                    if f_ != 0:
                        terms.append(f_ * d)
            return sp.Add(*terms)

        def D(e, ll):
            """The total derivative of ``e`` along direction ``ll``."""
            terms = []
            for s_ in e.free_symbols:
                ds = D_symbol(s_, ll)
                if ds != 0:
                    d = sp.diff(e, s_)
                    if d != 0:
                        terms.append(d * ds)
            return sp.Add(*terms)

        F = (
            [sp.Integer(1)] * n
            if bioavailability is None
            else [sp.sympify(e) for e in bioavailability]
        )
        # the input channels of each state: (channel symbol, its multiplier)
        self._inputs = [[(rates[a], F[a])] for a in range(n)]
        for c, a in enumerate(self.timed):
            # a modelled duration: F AMT over D; a modelled rate: R, for F AMT / R (NONMEM
            # keeps a rate and stretches the duration by F)
            g = F[a] / self.duration[a] if self.duration[a] != 0 else self.rate[a]
            self._inputs[a].append((rates[n + c], g))
        # the right-hand side of every augmented state, by differentiating a lower one
        rhs_of = [
            {(): F_of(a, ()) + sp.Add(*[r * g for r, g in self._inputs[a]])} for a in range(n)
        ]
        for o in range(1, order + 1):
            for a in range(n):
                for tup in tuples[o]:
                    rhs_of[a][tup] = D(rhs_of[a][tup[:-1]], tup[-1])
        intermediates = [(sym, partial[key]) for key, sym in fsym.items()]
        aug_states = list(states)
        eqs = [rhs_of[a][()] for a in range(n)]
        for o in range(1, order + 1):
            for a in range(n):
                for tup in tuples[o]:
                    aug_states.append(X[a][tup])
                    eqs.append(rhs_of[a][tup])
        parsyms = list(phi) + pars
        # solved forward only (explicit Runge-Kutta): no vjp, which for these systems would
        # cost far more to generate and compile than the right-hand side
        self.model_rates = rates
        self.model = SymbolicModel(
            aug_states,
            parsyms + rates,
            eqs,
            t=t,
            vjp=False,
            rhs_codegen="llvm",
            intermediates=intermediates,
        )
        self.size = len(aug_states)
        # a bolus of amount A into state a adds A * D_I F_a to S[a, I]
        where = {sym: i for i, sym in enumerate(aug_states)}
        all_tuples = [()] + [tup for o in range(1, order + 1) for tup in tuples[o]]
        self._bolus = []
        for a in range(n):
            if F[a] == 1:
                self._bolus.append(None)
                continue
            idx = np.array([where[X[a][tup]] for tup in all_tuples], dtype=np.int64)
            vals = {(): F[a]}
            for tup in all_tuples[1:]:
                vals[tup] = D(vals[tup[:-1]], tup[-1])
            exprs = [vals[tup] for tup in all_tuples]
            fn = sp.lambdify(parsyms, exprs, modules="numpy", cse=True)
            self._bolus.append((idx, fn))

        # kept for the dose-time jumps of lagged doses (generated on first use)
        self._states, self._phi, self._X, self._tuples = list(states), list(phi), X, tuples
        self._parsyms = parsyms
        self._f = [sp.sympify(e) for e in rhs]
        self._F, self._where, self._D, self._aug = F, where, D, aug_states
        self.lag = None if lag is None else [sp.sympify(e) for e in lag]
        self._lag_fn = None
        if self.lag is not None:
            if t is not None:
                raise ValueError(
                    "a lag time needs an autonomous right-hand side (the ODE uses t): the "
                    "dose-time shift is expanded along the flow of f(x, phi)"
                )
            self._lag_fn = sp.lambdify(list(phi), self.lag, modules="numpy")
        self._duration_fn = None
        if self.timed:
            if t is not None:
                raise ValueError(
                    "a modelled duration needs an autonomous right-hand side (the ODE uses t)"
                )
            over_f = [r / F[a] if r != 0 else sp.Integer(0) for a, r in enumerate(self.rate)]
            self._duration_fn = sp.lambdify(list(phi), [self.duration, over_f], modules="numpy")
        self._jumps = {}
        # (condition g(x, phi), state dosed, direction, amount, max doses or None) per rule
        self.rules = [] if rules is None else [(sp.sympify(r[0]), *r[1:]) for r in rules]
        self._rule_events = None  # their ode.Events, made on first use
        if self.rules and t is not None:
            raise ValueError(
                "a dosing rule needs an autonomous right-hand side (the ODE uses t): the "
                "dose-time shift is expanded along the flow of f(x, phi)"
            )

        self._obs_tuples = all_tuples
        args = aug_states + parsyms
        exprs = list(observe) if isinstance(observe, (list, tuple)) else [observe]
        if not exprs:
            raise ValueError("observe: give at least one observation expression")
        self.n_endpoints = len(exprs)
        self._gs = []
        for expr in exprs:
            g = {(): sp.sympify(expr)}
            for tup in all_tuples[1:]:
                g[tup] = D(g[tup[:-1]], tup[-1])
            self._gs.append(
                sp.lambdify(args, [g[t_] for t_ in self._obs_tuples], modules="numpy", cse=True)
            )

    def lag_values(self, phi: np.ndarray) -> np.ndarray | None:
        """The lag time of each state's doses at ``phi`` (``(n,)``), or None without lags."""
        if self._lag_fn is None:
            return None
        return np.asarray(self._lag_fn(*phi[: self.m]), dtype=np.float64).reshape(self.n)

    def duration_values(self, phi: np.ndarray) -> np.ndarray | None:
        """``(2, n)``: the modelled duration (``RATE=-2``) and rate over the bioavailability
        (``RATE=-1``: an input of ``AMT`` lasts ``AMT`` over it) of each state's inputs at
        ``phi`` (0 where none), or None without modelled inputs."""
        if self._duration_fn is None:
            return None
        d, r = self._duration_fn(*phi[: self.m])
        return np.array([[float(x) for x in d], [float(x) for x in r]], dtype=np.float64)

    def lagged_jump(self, y, state, amount, r_before, r_after, phi, end=False) -> np.ndarray:
        """The augmented state just after lagged events into ``state`` at one time (a bolus
        of ``amount``, the input channels changing from ``r_before`` to ``r_after``, each
        ``(n_channels,)``), from the state ``y`` just before; a new array. ``end``: the events
        are the ends of modelled-duration inputs, at the dose time plus the lag plus the
        duration (the time that moves is ``tlag + D`` instead of ``tlag``).

        A dose at ``tau = t_d + tlag(phi)`` is non-smooth in time but smooth in ``tlag``:
        with ``h = tlag - tlag_0`` the state at ``tau_0`` that continues into the true
        solution after the dose is ``Phi+_{-h}(Phi-_{h}(x^-) + J)`` (flow ``h`` with the
        rates before, the jump ``J = F amount``, flow back ``h`` with the rates after), for
        either sign of ``h``. Its Taylor expansion in ``h`` to the system's order (Lie
        series of ``f``) composed with the phi-derivatives of ``x^-`` gives every entry of
        the jump exactly; at first order ``dx^+/dtlag = f^-(x^-) - f^+(x^+)``.
        """
        fn = self._jump(state, end=bool(end))
        return np.asarray(fn(*y, *phi, *r_before, *r_after, amount), dtype=np.float64).reshape(
            self.size
        )

    def shifted(self, y, state, rates, phi) -> np.ndarray:
        """The augmented state of ``y`` carried back by the lag time of ``state``'s doses
        (``(n_channels,)`` input channels ``rates`` running): ``y`` is the state at ``T0``, a
        time that moves as ``T0 - (tlag - tlag_0)``; a new array. For a steady-state dose with
        a lag: the state at the record's time is the periodic orbit ``II - tlag`` after the
        previous arrival, solved for ``II - tlag_0`` and carried by this shift (the second
        half of :meth:`lagged_jump`'s expansion)."""
        fn = self._jump(state, shift=True)
        return np.asarray(fn(*y, *phi, *rates, *rates, 0.0), dtype=np.float64).reshape(self.size)

    def rule_jump(self, y, k, amount, rates, phi) -> np.ndarray:
        """The augmented state just after a dose of ``amount`` given by rule ``k`` at the time
        ``tau`` where its condition ``g(x, phi)`` crossed zero, from the state ``y`` just
        before (``rates``: the input channels running); a new array.

        As :meth:`lagged_jump`, with the dose time moving as ``tau(phi)``, defined
        implicitly by ``G(h) = g(Phi_h(x^-), phi) = 0`` (``h = tau - tau_0``, ``Phi`` the flow
        before the dose). Along ``phi_l``, ``dh/dphi_l = -D_l G(h) / G'(h)`` is itself a
        function of ``h``: its Taylor coefficients come by dividing the series of
        ``G(h) = sum_j gamma_j h^j`` (``gamma_j = L_f^j g / j!``); at first order
        ``dtau/dphi_l = -(g_x S_l + g_phi_l) / (g_x f)``, the implicit-function derivative.
        """
        fn = self._jump(self.rules[k][1], rule=k)
        return np.asarray(fn(*y, *phi, *rates, *rates, amount), dtype=np.float64).reshape(self.size)

    def rule_events(self) -> list:
        """One terminal :class:`~scichains.ode.Event` per rule (made on first use, kept: a
        solve reuses the compiled tables of the same events)."""
        if self._rule_events is None:
            from ._rules import rule_event

            made = [rule_event(r[0], self._states, self._phi, r[2]) for r in self.rules]
            self._rule_events = made
        return self._rule_events

    def _jump(self, state, end=False, shift=False, rule=None):
        """The generated function of :meth:`_make_jump`, made on first use."""
        key = (state, end, shift, rule)
        fn = self._jumps.get(key)
        if fn is None:
            fn = self._jumps[key] = self._make_jump(state, end=end, shift=shift, rule=rule)
        return fn

    def _make_jump(self, a, end=False, shift=False, rule=None):
        import math

        import sympy as sp

        n, K = self.n, self.order
        states, X, F = self._states, self._X, self._F
        h = sp.Symbol("_h", real=True)
        nc = self.n_channels
        rm = [sp.Symbol(f"_rm_{c}", real=True) for c in range(nc)]
        rp = [sp.Symbol(f"_rp_{c}", real=True) for c in range(nc)]
        amt = sp.Symbol("_amount", real=True)
        channel = {r: c for c, r in enumerate(self.model_rates)}

        def inputs(b, r):
            return sp.Add(*[r[channel[sym]] * g for sym, g in self._inputs[b]])

        fm = [self._f[b] + inputs(b, rm) for b in range(n)]
        fp = [self._f[b] + inputs(b, rp) for b in range(n)]

        def lie(e, f):
            return sum((sp.diff(e, states[b]) * f[b] for b in range(n)), sp.Integer(0))

        def series(b, f, sign):
            term, acc = states[b], states[b]
            for k in range(1, K + 1):
                term = lie(term, f)
                acc += (sign * h) ** k / math.factorial(k) * term
            return acc

        if shift or end:  # no dose here: the flow back from the moved time only (shift), or
            # the input's end (the amount is that of the input, which sets its length)
            z = list(states) if shift else [series(b, fm, 1) for b in range(n)]
        else:
            z = [series(b, fm, 1) + (amt * F[a] if b == a else 0) for b in range(n)]
        back = {states[b]: z[b] for b in range(n)}
        ytil = [series(b, fp, -1).xreplace(back) for b in range(n)]
        # The entries are D_I ytil at h = 0 with h = tlag(phi) - tlag_0 (or a rule's dose time
        # less its value here). Work on the Taylor coefficients in h: with dh/dphi_l = sum_j
        # d_lj h^j (a lag's: d_l0 = dtlag/dphi_l only), D_l (sum c_k h^k) = sum (D_l c_k +
        # sum_i (i + 1) c_{i+1} d_l,k-i) h^k, truncated at the degree the remaining
        # derivatives can still reach.
        if rule is None:
            moving = sp.Integer(0) if self.lag is None else self.lag[a]
            if end:  # a duration, or F times the amount over the rate
                moving += self.duration[a] if self.duration[a] != 0 else amt * F[a] / self.rate[a]
            # dh/dphi_l as a series in h: a lag's does not depend on h
            dh = [[self._D(moving, ll)] + [sp.Integer(0)] * (K - 1) for ll in range(self.nd)]
        else:
            dh = self._rule_shift(self.rules[rule][0], fm, lie)
        out = [None] * self.size
        for b in range(n):
            coef = [
                sp.diff(ytil[b], h, j).xreplace({h: 0}) / math.factorial(j) for j in range(K + 1)
            ]
            vals = {(): coef}
            out[self._where[X[b][()]]] = coef[0]
            for o in range(1, K + 1):
                for tup in self._tuples[o]:
                    prev, ll = vals[tup[:-1]], tup[-1]
                    cs = []
                    for k in range(K - o + 1):
                        e = self._D(prev[k], ll)
                        for i in range(k + 1):  # (d/dh sum_k c_k h^k) times dh/dphi_l
                            if dh[ll][k - i] != 0:
                                e += (i + 1) * prev[i + 1] * dh[ll][k - i]
                        cs.append(e)
                    vals[tup] = cs
                    out[self._where[X[b][tup]]] = cs[0]
        args = self._aug + self._parsyms + rm + rp + [amt]
        return sp.lambdify(args, out, modules="numpy", cse=True)

    def _rule_shift(self, g, f, lie):
        """``dh/dphi_l`` of a rule's dose time as ``K`` Taylor coefficients in ``h`` per
        direction ``l`` (see :meth:`rule_jump`): ``M(h) d_l(h) = -N_l(h)`` with ``M = G'``
        and ``N_l = D_l G`` at fixed ``h``, solved order by order."""
        import math

        import sympy as sp

        K = self.order
        gam, term = [g], g
        for j in range(1, K + 1):
            term = lie(term, f)
            gam.append(term / math.factorial(j))
        M = [(i + 1) * gam[i + 1] for i in range(K)]
        out = []
        for ll in range(self.nd):
            N = [self._D(gam[j], ll) for j in range(K)]
            d = []
            for k in range(K):
                acc = -N[k] - sp.Add(*[M[i] * d[k - i] for i in range(1, k + 1)])
                d.append(acc / M[0])
            out.append(d)
        return out

    def add_bolus(self, y: np.ndarray, state: int, amount: float, phi: np.ndarray) -> None:
        """Add a bolus of ``amount`` into ``state`` to the augmented state ``y`` (in place)."""
        b = self._bolus[state]
        if b is None:
            y[state] += amount
            return
        idx, fn = b
        y[idx] += amount * np.asarray(fn(*phi), dtype=np.float64)

    def _values(self, y, par, endpoint):
        """The observation expressions' derivative tuples at each row, each row from its own
        endpoint's expression (``endpoint``: ``(T,)`` integers, or None for one expression)."""
        T = y.shape[0]
        if endpoint is None:
            if self.n_endpoints > 1:
                raise ValueError(
                    f"this system has {self.n_endpoints} observation expressions: give each "
                    "row's endpoint"
                )
            return self._gs[0](*self._columns(y, par))
        endpoint = np.asarray(endpoint)
        if (
            endpoint.shape != (T,)
            or endpoint.dtype.kind not in "iu"
            or np.any((endpoint < 0) | (endpoint >= self.n_endpoints))
        ):
            raise ValueError(
                f"endpoint must be ({T},) integers in 0..{self.n_endpoints - 1}, got {endpoint!r}"
            )
        par = np.asarray(par, dtype=np.float64)
        out = [np.empty(T) for _ in self._obs_tuples]
        for k in np.unique(endpoint):
            rows = endpoint == k
            vals = self._gs[k](*self._columns(y[rows], par if par.ndim == 1 else par[rows]))
            for buf, v in zip(out, vals):
                buf[rows] = v
        return out

    def observe(self, y: np.ndarray, phi: np.ndarray, endpoint=None):
        """``(g, g_phi, g_phiphi[, g_phiphiphi])`` at saved augmented states ``y`` (shape
        ``(T, size)``): shapes ``(T,)``, ``(T, m)``, ``(T, m, m)``, ``(T, m, m, m)``
        (symmetric). ``phi``: ``(m,)``, or ``(T, m)`` (one row per observation).
        ``endpoint``: with several observation expressions, the index of each row's
        (``(T,)`` integers; ``ValueError`` when missing or out of range)."""
        if self.directions is not None:
            raise ValueError("observe_directions gives the derivatives of this system")
        T, m = y.shape[0], self.m
        out = self._values(y, phi, endpoint)
        g = np.empty(T)
        g1 = np.empty((T, m))
        g2 = np.empty((T, m, m))
        g3 = np.empty((T, m, m, m)) if self.order == 3 else None
        for tup, v in zip(self._obs_tuples, out):
            if len(tup) == 0:
                g[:] = v
            elif len(tup) == 1:
                g1[:, tup[0]] = v
            elif len(tup) == 2:
                g2[:, tup[0], tup[1]] = v
                g2[:, tup[1], tup[0]] = v
            else:
                for perm in set(itertools.permutations(tup)):
                    g3[(slice(None), *perm)] = v
        if self.order == 3:
            return g, g1, g2, g3
        return g, g1, g2

    def _columns(self, y, par):
        T = y.shape[0]
        par = np.asarray(par, dtype=np.float64)
        if par.ndim == 1:
            pc = [np.full(T, v) for v in par]
        else:
            pc = [par[:, k] for k in range(par.shape[1])]
        return [y[:, i] for i in range(self.size)] + pc

    def observe_directions(self, y: np.ndarray, par: np.ndarray, endpoint=None):
        """Direction mode: ``(g (T,), g_eta (T, q), g_theta (T, p), g_eta_eta (T, q, q),
        g_eta_theta (T, q, p), g_eta3 (T, q, q, q) | None, g_eta_eta_theta (T, q, q, p) |
        None)`` at saved states ``y`` with parameter rows ``par`` (``(T, n_params)`` or
        ``(n_params,)``); ``endpoint`` as for :meth:`observe`."""
        q, pth = self.directions
        T = y.shape[0]
        out = self._values(y, par, endpoint)
        g = np.empty(T)
        G, Ft = np.empty((T, q)), np.empty((T, pth))
        Hf, B = np.empty((T, q, q)), np.empty((T, q, pth))
        Tf = np.empty((T, q, q, q)) if self.order == 3 else None
        Tt = np.empty((T, q, q, pth)) if self.order == 3 else None
        for tup, v in zip(self._obs_tuples, out):
            th = [k - q for k in tup if k >= q]
            et = [k for k in tup if k < q]
            if len(tup) == 0:
                g[:] = v
            elif len(tup) == 1:
                if th:
                    Ft[:, th[0]] = v
                else:
                    G[:, et[0]] = v
            elif len(tup) == 2:
                if th:
                    B[:, et[0], th[0]] = v
                else:
                    Hf[:, et[0], et[1]] = v
                    Hf[:, et[1], et[0]] = v
            elif th:
                Tt[:, et[0], et[1], th[0]] = v
                Tt[:, et[1], et[0], th[0]] = v
            else:
                for perm in set(itertools.permutations(et)):
                    Tf[(slice(None), *perm)] = v
        return g, G, Ft, Hf, B, Tf, Tt

    def direction_params(self, phi, pe, pt, pee, pet, peee=None, peet=None) -> np.ndarray:
        """Direction mode: the parameter vector (``n_params``, without rates) from the
        individual parameters and their derivatives (``PKModel.individual`` and
        ``individual3``)."""
        q = self.directions[0]
        out = np.empty(self.n_params)
        out[: self.m] = phi
        for c, (i, tup) in enumerate(self.param_layout):
            th = [k - q for k in tup if k >= q]
            et = [k for k in tup if k < q]
            if len(tup) == 1:
                v = pt[i, th[0]] if th else pe[i, et[0]]
            elif len(tup) == 2:
                v = pet[i, et[0], th[0]] if th else pee[i, et[0], et[1]]
            else:
                v = peet[i, et[0], et[1], th[0]] if th else peee[i, et[0], et[1], et[2]]
            out[self.m + c] = v
        return out
