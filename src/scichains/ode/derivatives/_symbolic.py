"""SymbolicModel: a right-hand side written as SymPy expressions, compiled with its exact vjp.

The user describes the physics (states, parameters, equations), with an optional network
whose outputs are opaque symbols. SymPy differentiates the physics exactly; the network's
derivatives come from the chain's compiled vjp (chain rule through its inputs and outputs).
The generated source is written to a cache directory and imported, so numba caches its
machine code like any module: one compilation per model per machine. A model solved only
forward (``vjp=False``: e.g. the forward-sensitivity systems of :mod:`scichains.pk`) skips
the vjp, which for a large system costs far more to generate and compile than the
right-hand side; it is then generated on first use, as a module of its own.
"""

from __future__ import annotations

import threading

import numpy as np

from ...nn._chain import ChainKernel, SimpleChain
from ...nn._compiled import M_ROWS
from .._abi import NO_NETWORK, register_cfunc
from ._codegen import _sympy, assign, load

_VJP_LOCK = threading.Lock()


class NetworkTerm:
    """A network inside a :class:`SymbolicModel`.

    Parameters
    ----------
    chain : SimpleChain mapping a vector of ``len(inputs)`` to a vector
    inputs : SymPy expressions of the states, parameters and time, one per network input
    name : the outputs are the symbols ``name_0, name_1, ...`` (also ``term[j]``)
    """

    def __init__(self, chain: SimpleChain, inputs, name: str = "U"):
        sp = _sympy()
        if not isinstance(chain, SimpleChain):
            raise TypeError("NetworkTerm needs a SimpleChain")
        inputs = [sp.sympify(e) for e in inputs]
        if chain.input_shape != (len(inputs),):
            raise ValueError(
                f"the chain takes input shape {chain.input_shape}, but {len(inputs)} input "
                "expressions were given"
            )
        if len(chain.output_shape()) != 1:
            raise ValueError("the chain must output a vector")
        if not name.isidentifier():
            raise ValueError(f"network name {name!r} is not an identifier")
        self.chain = chain
        self.inputs = inputs
        self.name = name
        self.outputs = [sp.Symbol(f"{name}_{j}", real=True) for j in range(chain.n_out)]

    def __getitem__(self, j):
        return self.outputs[j]

    def __len__(self) -> int:
        return len(self.outputs)


class SymbolicModel:
    """du/dt = f(u, p, t) from SymPy expressions, with exact generated derivatives.

    Parameters
    ----------
    states : SymPy symbols, one per state (``n``)
    params : SymPy symbols of the physical parameters
    equations : SymPy expressions, ``equations[i]`` = du_i/dt, in the states, parameters,
        the time symbol and the network's output symbols
    network : NetworkTerm, optional: one network (several terms of a model are several
        outputs of it)
    t : the time symbol, if the equations depend on time
    vjp : True (default): generate and compile the exact vjp with the right-hand side.
        False: only the right-hand side now; the vjp is generated (its own module) on the
        first use of :attr:`vjp` or of ``problem(..., vjp=True)``. For models only solved
        forward, where the vjp would be most of the build time (it differentiates
        ``v^T f`` along every state and parameter).
    rhs_codegen : ``"numba"`` (default): the right-hand side as numba code; ``"llvm"``: its
        arithmetic emitted as LLVM IR by one numba intrinsic
        (``scichains.ode.derivatives._llvm_expr``), which compiles a right-hand side of
        thousands of operations in a fraction of the time (numba types each operation
        separately). For models without a network whose
        equations use only arithmetic and smooth elementary functions; any other model falls
        back to ``"numba"`` (``self.rhs_codegen`` says which was used).
    intermediates : optional sequence of ``(symbol, expression)``: values computed in this
        order before the equations, which (and later intermediates) may use their symbols;
        the expressions use states, parameters, time and earlier intermediates (models
        without a network). Common subexpressions the caller knows, e.g. the partial
        derivatives of a right-hand side that all its sensitivity equations share: the
        equations stay small, so generating the code is fast. The vjp (and
        :attr:`equations`) see them substituted.

    The parameter vector is flat: the physical parameters in the order given, then the
    network's parameters (``chain.num_params`` of them). :meth:`pack` builds it and
    :meth:`views` names its parts. :meth:`problem` returns an :class:`ODEProblem` with the
    compiled right-hand side and its exact vjp, ready for :mod:`scichains.adjoint`.

    Non-smooth functions: the derivative of ``Max``/``Min``/``Abs`` uses SymPy's Heaviside
    and sign with ``Heaviside(0) = 1/2`` (the mean of the two one-sided slopes).
    """

    def __init__(
        self,
        states,
        params,
        equations,
        network: NetworkTerm | None = None,
        t=None,
        vjp: bool = True,
        rhs_codegen: str = "numba",
        intermediates=None,
    ):
        sp = _sympy()
        states = list(states)
        params = list(params)
        equations = [sp.sympify(e) for e in equations]
        inter = [(k, sp.sympify(e)) for k, e in (intermediates or ())]
        if len(equations) != len(states):
            raise ValueError(f"{len(states)} states but {len(equations)} equations")
        if not states:
            raise ValueError("a model needs at least one state")
        names = [str(s) for s in states + params] + ([str(t)] if t is not None else [])
        if network is not None:
            if not isinstance(network, NetworkTerm):
                raise TypeError("network must be a NetworkTerm")
            names += [str(o) for o in network.outputs]
        if inter and network is not None:
            raise ValueError("intermediates are supported for models without a network")
        names += [str(k) for k, _ in inter]
        dup = {x for x in names if names.count(x) > 1}
        if dup:
            raise ValueError(f"symbol names used twice: {sorted(dup)}")
        for s in states + params + ([t] if t is not None else []) + [k for k, _ in inter]:
            if not isinstance(s, sp.Symbol):
                raise TypeError(
                    f"states, params, t and intermediates must be SymPy symbols, got {s!r}"
                )
        self.states = states
        self.params = params
        self.equations = equations  # as given (SymPy; intermediates substituted below)
        self.t = t
        self.network = network
        self.n = len(states)
        self.n_phys = len(params)
        self.n_net = 0 if network is None else network.chain.num_params
        self.num_params = self.n_phys + self.n_net
        # every symbol becomes a real symbol with a safe name in the generated code
        rename = {s: sp.Symbol(f"u_{i}", real=True) for i, s in enumerate(states)}
        rename.update({s: sp.Symbol(f"p_{i}", real=True) for i, s in enumerate(params)})
        if t is not None:
            rename[t] = sp.Symbol("t", real=True)
        if network is not None:
            outs = network.outputs
            rename.update({o: sp.Symbol(f"U_{j}", real=True) for j, o in enumerate(outs)})
        allowed = set(rename)
        for j, (k, e) in enumerate(inter):
            extra = e.free_symbols - allowed
            if extra:
                raise ValueError(
                    f"intermediate {k} uses symbols that are neither states, parameters, time "
                    f"nor earlier intermediates: {sorted(map(str, extra))}"
                )
            rename[k] = sp.Symbol(f"q_{j}", real=True)
            allowed.add(k)
        for i, e in enumerate(equations):
            extra = e.free_symbols - allowed
            if extra:
                raise ValueError(
                    f"equation {i} uses symbols that are neither states, parameters, time, "
                    f"network outputs nor intermediates: {sorted(map(str, extra))}"
                )
        if network is not None:
            for m, e in enumerate(network.inputs):
                extra = e.free_symbols - (allowed - set(network.outputs))
                if extra:
                    raise ValueError(
                        f"network input {m} uses unknown symbols: {sorted(map(str, extra))}"
                    )
        self._eqs = [e.xreplace(rename) for e in equations]
        self._inter = [(rename[k], e.xreplace(rename)) for k, e in inter]
        if inter:
            full = {}
            for k, e in inter:
                full[k] = e.xreplace(full)
            self.equations = [e.xreplace(full) for e in equations]
        self._inputs = [] if network is None else [e.xreplace(rename) for e in network.inputs]
        if not isinstance(vjp, bool):
            raise TypeError(f"vjp must be True or False, got {vjp!r}")
        if rhs_codegen not in ("numba", "llvm"):
            raise ValueError(f"rhs_codegen must be 'numba' or 'llvm', got {rhs_codegen!r}")
        self.rhs_codegen = "llvm" if rhs_codegen == "llvm" and network is None else "numba"
        self.eager_vjp = vjp
        self.source = self._generate(f=True, vjp=vjp)
        self._module = load(self.source)
        self.rhs = self._module.f
        register_cfunc(self.rhs, self._module.f_cfunc, True)
        self._vjp = None
        self.vjp_source = None  # the vjp's own module (vjp=False, once generated)
        if vjp:
            self._vjp = self._module.vjp
            register_cfunc(self._vjp, self._module.vjp_cfunc, True)

    @property
    def vjp(self):
        """The compiled exact vjp ``vjp(v, u, p, t, k, ubar, pbar)`` writing ``ubar = v^T
        df/du`` and ``pbar = v^T df/dp`` (generated and compiled on first use when the model
        was built with ``vjp=False``)."""
        with _VJP_LOCK:  # threads asking at once generate it once
            if self._vjp is None:
                self.vjp_source = self._generate(f=False, vjp=True)
                mod = load(self.vjp_source)
                register_cfunc(mod.vjp, mod.vjp_cfunc, True)
                self._vjp = mod.vjp
        return self._vjp

    @property
    def has_vjp(self) -> bool:
        """Whether the vjp is generated and compiled already."""
        return self._vjp is not None

    # ----------------------------------------------------------------- parameter layout
    def pack(self, network=None, **values) -> np.ndarray:
        """The flat float64 parameter vector from named physical values (all required) and the
        network's flat parameters (``network=``, required when the model has one)."""
        p = np.zeros(self.num_params)
        names = [str(s) for s in self.params]
        unknown = set(values) - set(names)
        if unknown:
            raise ValueError(f"unknown parameters: {sorted(unknown)}; the model has {names}")
        missing = [x for x in names if x not in values]
        if missing:
            raise ValueError(f"missing parameter values: {missing}")
        for i, x in enumerate(names):
            p[i] = float(values[x])
        if self.network is not None:
            if network is None:
                raise ValueError("give the network's parameters: network=chain.init_params(...)")
            w = np.asarray(network, dtype=np.float64)
            if w.shape != (self.n_net,):
                raise ValueError(
                    f"network parameters must have shape ({self.n_net},), got {w.shape}"
                )
            p[self.n_phys :] = w
        elif network is not None:
            raise ValueError("this model has no network")
        return p

    def views(self, p: np.ndarray) -> dict:
        """Named views into ``p``: each physical parameter as a length-1 view, and the
        network's slice under the network's name. They alias ``p``."""
        if p.shape != (self.num_params,):
            raise ValueError(f"p must have shape ({self.num_params},), got {p.shape}")
        out = {str(s): p[i : i + 1] for i, s in enumerate(self.params)}
        if self.network is not None:
            out[self.network.name] = p[self.n_phys :]
        return out

    def kernel(self) -> ChainKernel:
        """Fresh network kernels (with the model's scratch space) for the generated code."""
        if self.network is None:
            return NO_NETWORK
        k = self.network.chain.kernel(np.float64)
        rows = int(k.meta[M_ROWS])
        nin, nout = len(self._inputs), len(self.network.outputs)
        return k._replace(work=np.zeros(rows + 2 * (nin + nout)))

    def problem(self, u0, tspan, p, vjp: bool | None = None, mass_matrix=None):
        """An :class:`ODEProblem` with this model's compiled right-hand side and vjp.

        ``vjp``: whether the problem carries the exact vjp (adjoint gradients, the stiff
        solvers' Jacobians); None (default): as the model was built (``SymbolicModel(...,
        vjp=...)``). ``vjp=True`` on a model built without it generates it first.
        ``mass_matrix``: ``M`` of ``M du/dt = f`` (a zero row makes that equation algebraic,
        ``0 = f_i``; see :class:`ODEProblem`)."""
        from ...nn._validate import as_real
        from .._problem import ODEProblem

        p = as_real(p, "p")
        if p.shape != (self.num_params,):
            raise ValueError(
                f"p must have shape ({self.num_params},) ({self.n_phys} physical + "
                f"{self.n_net} network parameters), got {p.shape}"
            )
        u0 = as_real(u0, "u0")
        if u0.shape != (self.n,):
            raise ValueError(f"u0 must have shape ({self.n},) for this model, got {u0.shape}")
        if vjp is None:
            vjp = self.eager_vjp
        return ODEProblem(
            self.rhs,
            u0,
            tspan,
            p,
            kernel=self.kernel(),
            vjp=self.vjp if vjp else None,
            mass_matrix=mass_matrix,
        )

    # ----------------------------------------------------------------- code generation
    def _program(self):
        """The right-hand side as an LLVM program (``_llvm_expr``), or None."""
        from ._llvm_expr import program

        sp = _sympy()
        inputs = {sp.Symbol(f"u_{i}", real=True): ("u", i) for i in range(self.n)}
        inputs.update({sp.Symbol(f"p_{i}", real=True): ("p", i) for i in range(self.n_phys)})
        inputs[sp.Symbol("t", real=True)] = ("t",)
        defs = []
        if self._inter:  # their own common subexpressions first: the equations use them
            temps, reduced = sp.cse([e for _, e in self._inter], symbols=sp.numbered_symbols("_y"))
            defs += list(temps) + [(q, e) for (q, _), e in zip(self._inter, reduced)]
        temps, reduced = sp.cse(list(self._eqs), symbols=sp.numbered_symbols("_x"))
        return program(range(self.n), reduced, defs + list(temps), inputs)

    def _generate(self, f: bool = True, vjp: bool = True) -> str:
        """The source of a module with the right-hand side ``f`` and/or the vjp ``vjp``
        (each with its C-callable ``f_cfunc``/``vjp_cfunc``)."""
        sp = _sympy()
        n, nphys = self.n, self.n_phys
        u = [sp.Symbol(f"u_{i}", real=True) for i in range(n)]
        pp = [sp.Symbol(f"p_{i}", real=True) for i in range(nphys)]
        v = [sp.Symbol(f"v_{i}", real=True) for i in range(n)]
        net = self.network
        nin = len(self._inputs)
        nout = 0 if net is None else len(net.outputs)
        U = [sp.Symbol(f"U_{j}", real=True) for j in range(nout)]
        zb = [sp.Symbol(f"zb_{m}", real=True) for m in range(nin)]
        rows = 0 if net is None else int(self.kernel().meta[M_ROWS])
        head = ["    " + f"u_{i} = u[{i}]" for i in range(n)]
        head += ["    " + f"p_{i} = p[{i}]" for i in range(nphys)]
        netfwd = []
        if net is not None:
            o = nphys
            e = o + self.n_net
            zi, zo, vu, zbar = rows, rows + nin, rows + nin + nout, rows + nin + 2 * nout
            netfwd += [
                "    w = k.work",
                f"    zin = w[{zi}:{zi + nin}]",
                f"    zout = w[{zo}:{zo + nout}]",
            ]
            netfwd += assign([f"zin[{m}]" for m in range(nin)], self._inputs, "a")
            netfwd += [f"    chain_forward(k, p[{o}:{e}], zin, zout)"]
            netfwd += ["    " + f"U_{j} = zout[{j}]" for j in range(nout)]
        lines = [
            "# generated by scichains.ode.SymbolicModel: do not edit",
            "import math",
            "",
            "import numba",
            "",
            "from scichains._jit import FLAGS",
            "from scichains._status import call_status5, call_status7",
            "from scichains.nn import chain_forward, chain_vjp",
            "from scichains.ode._abi import RHS_SIGNATURE, VJP_SIGNATURE",
            "",
            "_CF = {k: v for k, v in FLAGS.items() if k != 'nogil'}",
            "",
        ]
        prog = self._program() if f and self.rhs_codegen == "llvm" else None
        if f and prog is None:
            self.rhs_codegen = "numba"
        if prog is not None:
            lines += [
                "from scichains.ode.derivatives._llvm_expr import evaluator",
                "",
                f"_PROGRAM = {prog!r}",
                "_run = evaluator(_PROGRAM)",
                "",
                "",
                "def _f(du, u, p, t, k):",
                "    _run(du, u, p, t)",
            ]
        elif f:
            f_body = head + netfwd
            if self._inter:
                names = [str(q) for q, _ in self._inter]
                f_body += assign(names, [e for _, e in self._inter], "y")
            f_body += assign([f"du[{i}]" for i in range(n)], self._eqs, "x")
            lines += [
                "",
                "def _f(du, u, p, t, k):",
                *f_body,
            ]
        if f:
            lines += [
                "",
                "",
                "f = numba.njit(**FLAGS)(_f)",
                "# compiled (or loaded from the cache) before the C-callable that calls it, so",
                "# that it calls the same machine code whether compiled in this process or loaded",
                "# from the cache (loaded first, it would use its own inlined copy, optimised",
                "# differently: results differing in the last bits between processes)",
                "f.compile(RHS_SIGNATURE.args)",
                "",
                "",
                "def _f_status(du, u, p, t, k):",
                "    return call_status5(f, du, u, p, t, k)",
                "",
                "",
                "f_cfunc = numba.cfunc(RHS_SIGNATURE, **_CF)(_f_status)",
                "",
            ]
        if not vjp:
            return "\n".join(lines)
        # vjp: the physics' part of v^T df/d(u, p, U), then the network's vjp, then the chain
        # rule through the network's inputs
        eqs = self._eqs
        if self._inter:  # the vjp differentiates through the intermediates
            full = {}
            for q, e in self._inter:
                full[q] = e.xreplace(full)
            eqs = [e.xreplace(full) for e in eqs]
        vf = sum((v[i] * eqs[i] for i in range(n)), sp.Integer(0))
        vjp_body = head + ["    " + f"v_{i} = v[{i}]" for i in range(n)]
        total = vf
        if net is not None:
            vU_exprs = [vf.diff(x) for x in U]
            total = vf + sum((zb[m] * self._inputs[m] for m in range(nin)), sp.Integer(0))
            grads = [total.diff(x) for x in u] + [total.diff(x) for x in pp]
            needs_U = any(set(U) & g.free_symbols for g in vU_exprs + grads)
            if needs_U:
                vjp_body += netfwd
            else:  # chain_vjp runs the network's forward pass itself
                vjp_body += netfwd[:2]
                vjp_body += assign([f"zin[{m}]" for m in range(nin)], self._inputs, "a")
            vjp_body += [f"    vU = w[{vu}:{vu + nout}]", f"    zbar = w[{zbar}:{zbar + nin}]"]
            vjp_body += assign([f"vU[{j}]" for j in range(nout)], vU_exprs, "y")
            vjp_body += [f"    chain_vjp(k, p[{o}:{e}], zin, vU, zbar, pbar[{o}:{e}])"]
            vjp_body += ["    " + f"zb_{m} = zbar[{m}]" for m in range(nin)]
        else:
            grads = [total.diff(x) for x in u] + [total.diff(x) for x in pp]
        targets = [f"ubar[{i}]" for i in range(n)] + [f"pbar[{i}]" for i in range(nphys)]
        vjp_body += assign(targets, grads, "z")
        lines += [
            "",
            "def _vjp(v, u, p, t, k, ubar, pbar):",
            *vjp_body,
            "",
            "",
            "vjp = numba.njit(**FLAGS)(_vjp)",
            "vjp.compile(VJP_SIGNATURE.args)  # before its C-callable, as f above",
            "",
            "",
            "def _vjp_status(v, u, p, t, k, ubar, pbar):",
            "    return call_status7(vjp, v, u, p, t, k, ubar, pbar)",
            "",
            "",
            "vjp_cfunc = numba.cfunc(VJP_SIGNATURE, **_CF)(_vjp_status)",
            "",
        ]
        return "\n".join(lines)
