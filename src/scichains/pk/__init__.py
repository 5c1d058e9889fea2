"""scichains.pk: population pharmacokinetics as pharmacometricians work.

NONMEM-style event tables (:func:`read_events`: boluses, infusions, repeats, steady-state
doses, time-varying and categorical covariates, observations censored below or above a
limit), nonlinear mixed-effects models written in SymPy (:class:`PKModel`: typical values,
random effects with a diagonal or full omega and inter-occasion variability (an ``OCC``
column, one shared block per occasion), the individual-parameter block, the ODE, the
observation and its residual error model, or several endpoints selected by ``DVID`` with one
each (joint PK/PD), bioavailability, lag times and modelled zero-order input durations and
rates, :class:`Network` terms in the dynamics), and FOCE-I and Laplace estimation with exact
gradients (:func:`fit`, :class:`PopulationObjective`: the objective in NONMEM's -2
log-likelihood convention; typical values on any scale, with bounds, fixed parameters, the
M3/M4 likelihood of censored observations); the covariance step, shrinkage and residual
diagnostics (:func:`covariance`, :func:`shrinkage`, :func:`residuals`); plots
(:func:`gof_plot`, :func:`vpc`, prediction-corrected or not, with :func:`simulate`); model
evaluation (:func:`npde`, :func:`bootstrap`); stepwise covariate modelling
(:func:`covariate_search`), log-likelihood profiles (:func:`profile`).
"""

from ._bootstrap import Bootstrap, bootstrap
from ._covariate_search import CovariateSearch, Relation, covariate_search
from ._diagnostics import Covariance, covariance, residuals, shrinkage
from ._error import Additive, Combined, ErrorModel, Exponential, Proportional
from ._events import EventTableError, read_events, theophylline
from ._fit import FitResult, FitWarning, fit
from ._inner import InnerFailure
from ._model import PKModel
from ._network import Network
from ._npde import NPDE, npde
from ._objective import PopulationObjective
from ._plots import VPC, gof_plot, simulate, vpc
from ._predict import PKSolveError
from ._profile import Profile, profile
from ._records import Dose, EventData, Subject
from ._rules import DoseRule

__all__ = [
    "Additive",
    "Bootstrap",
    "Combined",
    "Covariance",
    "CovariateSearch",
    "Dose",
    "DoseRule",
    "ErrorModel",
    "EventData",
    "EventTableError",
    "Exponential",
    "FitResult",
    "FitWarning",
    "InnerFailure",
    "NPDE",
    "Network",
    "PKModel",
    "PKSolveError",
    "PopulationObjective",
    "Profile",
    "Proportional",
    "Relation",
    "Subject",
    "VPC",
    "bootstrap",
    "covariance",
    "covariate_search",
    "fit",
    "gof_plot",
    "npde",
    "profile",
    "read_events",
    "residuals",
    "shrinkage",
    "simulate",
    "theophylline",
    "vpc",
]
