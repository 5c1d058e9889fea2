"""The sensitivity algorithms: how :func:`scichains.adjoint.gradient` differentiates a solve."""

from __future__ import annotations


class SensitivityAlgorithm:
    """Base class of the ``sensealg`` choices."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class DiscreteAdjoint(SensitivityAlgorithm):
    """Back-propagate through the accepted Runge-Kutta steps: the exact gradient of the
    discretised solution (step sizes held fixed), what an optimiser actually sees. Keeps the
    stages of every step (memory ``steps x stages x n``). With a method that has a continuous
    extension (Tsit5, DP5, BS3) the steps do not land on the save times: the states there are
    interpolated, exactly as :func:`scichains.ode.solve` returns them, and the sweep
    differentiates through the interpolant (as diffrax's default adjoint does); this is what
    makes many save points cheap. The continuous adjoints land on every save time. The
    default with the explicit RK methods."""


class _Continuous(SensitivityAlgorithm):
    mode = -1

    def __init__(
        self, rtol: float | None = None, atol: float | None = None, checkpointing: bool = False
    ):
        self.rtol = rtol
        self.atol = atol
        self.checkpointing = bool(checkpointing)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rtol={self.rtol}, atol={self.atol}, "
            f"checkpointing={self.checkpointing})"
        )


class InterpolatingAdjoint(_Continuous):
    """Integrate the continuous adjoint ODE backward with the forward method's tableau and
    step-size control, reading ``u(t)`` from the forward solve's stored steps (cubic Hermite,
    memory ``2 n`` numbers per forward step; no re-solve is needed, so no checkpoints).
    The default with CVODE. Its gradient approximates the exact one to the tolerances;
    ``rtol``/``atol`` of the backward solve default to the forward solve's.

    ``checkpointing=True`` (SciMLSensitivity's option of that name): the forward solve keeps
    only the states at the save points and doses (the checkpoints), one segment at a time;
    the backward pass re-solves each segment from its checkpoint before integrating the
    adjoint over it. Memory: one segment's steps instead of all of them, for about twice the
    forward work. The segments restart the step-size controller at each checkpoint, so the
    solution differs from the uncheckpointed one within the tolerances.

    Parameters
    ----------
    rtol : float, optional
        Relative tolerance of the backward (adjoint) solve; default None: the forward solve's.
    atol : float, optional
        Absolute tolerance of the backward (adjoint) solve; default None: the forward solve's.
    checkpointing : bool
        Keep only the checkpoints in the forward pass and re-solve each segment backward, as
        above (default False).
    """

    mode = 0


class QuadratureAdjoint(_Continuous):
    """As :class:`InterpolatingAdjoint`, but only the adjoint state ``lam`` (``n`` numbers) is
    under error control: the parameter gradient, the integral of ``lam^T df/dp``, is a
    quadrature with the method's weights on the adjoint's own steps. Fewer steps when there
    are many parameters; the quadrature error is not estimated.

    Parameters
    ----------
    rtol : float, optional
        Relative tolerance of the backward (adjoint) solve; default None: the forward solve's.
    atol : float, optional
        Absolute tolerance of the backward (adjoint) solve; default None: the forward solve's.
    checkpointing : bool
        As for :class:`InterpolatingAdjoint` (default False).
    """

    mode = 1


class BacksolveAdjoint(_Continuous):
    """Integrate ``u`` backward together with the adjoint (torchdiffeq's method), restarting
    ``u`` from the forward values at every save point and dose (SciMLSensitivity's
    ``checkpointing=true`` for it). ``checkpointing=True`` here also keeps only the
    checkpoints in the forward pass, as for :class:`InterpolatingAdjoint`. Memory-light;
    unstable for dissipative or stiff problems, whose backward integration blows up: prefer
    :class:`InterpolatingAdjoint` there.

    Parameters
    ----------
    rtol : float, optional
        Relative tolerance of the backward solve (of ``u`` and the adjoint); default None: the
        forward solve's.
    atol : float, optional
        Absolute tolerance of the backward solve; default None: the forward solve's.
    checkpointing : bool
        Keep only the checkpoints in the forward pass, as for :class:`InterpolatingAdjoint`
        (default False).
    """

    mode = 2


class ForwardSensitivity(SensitivityAlgorithm):
    """Integrate the sensitivities ``S = du/d(p, u0)`` alongside ``u`` (``n (1 + len(p) + n)``
    equations, all under the solver's error control), then ``dL/dp = sum_i S(t_i)^T dL/du_i``.
    Best for few parameters (pharmacometric models); its cost grows with ``len(p)``."""
