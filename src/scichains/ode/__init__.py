"""scichains.ode: explicit Runge-Kutta and stiff (Rosenbrock, ESDIRK, Radau) solvers whose stepping
loop is compiled.

``solve(ODEProblem(f, u0, tspan, p), saveat=..., rtol=..., atol=...)`` (the default solver
switches between Tsit5 and Rodas5P as the problem turns stiff; ``solver=Tsit5()`` etc.);
many trajectories: ``solve_ensemble(EnsembleProblem(prob, u0s=..., ps=...), saveat=...)``.
"""

from ._abi import RHS_SIGNATURE, VJP_SIGNATURE
from ._auto import AutoSwitch, AutoTsit5Rodas5P
from ._events import Event
from ._inputs import Interpolation
from ._problem import FrozenGlobalWarning, ODEProblem
from ._solution import ODESolveError, ReturnCode, Solution
from ._solve import solve
from .cvode._sundials import CVODE_BDF, CVODE_Adams, CVODESolver
from .derivatives._symbolic import NetworkTerm, SymbolicModel
from .ensemble._problem import EnsembleProblem, EnsembleSolution
from .ensemble._solve import solve_ensemble
from .explicit._tableaus import BS3, DP5, RK4, SOLVERS, Euler, ExplicitRK, Tsit5, Vern7
from .stiff._esdirk import ESDIRK, ESDIRK_SOLVERS, KenCarp4, Kvaerno5
from .stiff._radau import RadauIIA, RadauIIA5
from .stiff._rosenbrock import STIFF_SOLVERS, Rodas5P, Rosenbrock, Rosenbrock23

__all__ = [
    "AutoSwitch",
    "AutoTsit5Rodas5P",
    "CVODE_Adams",
    "CVODE_BDF",
    "CVODESolver",
    "BS3",
    "DP5",
    "ESDIRK",
    "ESDIRK_SOLVERS",
    "RHS_SIGNATURE",
    "RK4",
    "SOLVERS",
    "Euler",
    "EnsembleProblem",
    "Event",
    "EnsembleSolution",
    "KenCarp4",
    "Kvaerno5",
    "NetworkTerm",
    "ExplicitRK",
    "FrozenGlobalWarning",
    "Interpolation",
    "ODEProblem",
    "ODESolveError",
    "ReturnCode",
    "RadauIIA",
    "RadauIIA5",
    "Rodas5P",
    "Rosenbrock",
    "Rosenbrock23",
    "STIFF_SOLVERS",
    "Solution",
    "SymbolicModel",
    "Tsit5",
    "VJP_SIGNATURE",
    "Vern7",
    "solve",
    "solve_ensemble",
]
