"""Dosing rules: a dose given when a quantity of the model crosses a level.

A rule is part of the model, not of the data: a dose into a compartment whenever a
condition ``g(x, phi)`` in the states and individual parameters crosses zero (a trough
concentration falling below a threshold: ``center / v - 2``, direction -1). The time of
each such dose is found by the solver's root finding, and it moves with the parameters, so
its derivatives enter the sensitivities (``Sensitivities.rule_jump``).
"""

from __future__ import annotations

import math

import numpy as np


class DoseRule:
    """A dose triggered by the model's state.

    Parameters
    ----------
    when : SymPy expression ``g`` in the states and the individual parameters; the dose is
        given where ``g`` crosses zero in ``direction`` (e.g. ``center / v - 2``: when the
        concentration crosses 2)
    into : the state (a SymPy symbol of ``PKModel``'s ``states``) the dose goes into, as a
        bolus (scaled by that state's bioavailability, if the model has one)
    amount : the dose, a positive number in the data's amount unit
    direction : -1 (default): ``g`` falling through zero (a level reached from above);
        +1: rising; 0: both
    max_doses : at most this many doses by the rule per subject (None: no limit); after the
        last the rule gives no more

    The rule acts between a subject's first record and its last observation, in every
    solve of its predictions (the fit, simulations and diagnostics alike). A crossing is
    found as :class:`scichains.ode.Event` finds one (the sign of ``g`` at each step's end,
    then root finding on the step), so a crossing and recrossing within one step is not
    seen. A condition that is zero at a segment's start does not fire there.
    """

    def __init__(self, when, into, amount: float, direction: int = -1, max_doses=None):
        import sympy as sp

        self.when = sp.sympify(when)
        self.into = into
        if isinstance(amount, bool) or not isinstance(amount, (int, float, np.number)):
            raise TypeError(f"amount must be a number, got {amount!r}")
        if not (math.isfinite(amount) and amount > 0):
            raise ValueError(f"amount must be finite and positive, got {amount!r}")
        self.amount = float(amount)
        if isinstance(direction, bool) or direction not in (-1, 0, 1):
            raise ValueError(f"direction must be -1, 0 or +1, got {direction!r}")
        self.direction = int(direction)
        if max_doses is not None and (
            isinstance(max_doses, bool)
            or not isinstance(max_doses, (int, np.integer))
            or max_doses < 1
        ):
            raise ValueError(f"max_doses must be a positive integer or None, got {max_doses!r}")
        self.max_doses = None if max_doses is None else int(max_doses)

    def __repr__(self) -> str:
        cap = "" if self.max_doses is None else f", max_doses={self.max_doses}"
        return (
            f"DoseRule(when={self.when}, into={self.into}, amount={self.amount:g}, "
            f"direction={self.direction}{cap})"
        )


def rule_specs(rules, states, phi, t, lagged) -> list[DoseRule]:
    """The model's rules, checked against its symbols (``ValueError`` naming the problem)."""
    rules = list(rules)
    for k, r in enumerate(rules):
        if not isinstance(r, DoseRule):
            raise TypeError(f"rules[{k}] must be a pk.DoseRule, got {type(r).__name__}")
        if r.into not in states:
            raise ValueError(f"rules[{k}]: the dose goes into {r.into}, which is not a state")
        extra = r.when.free_symbols - set(states) - set(phi)
        if extra:
            raise ValueError(
                f"rules[{k}]: the condition uses {sorted(map(str, extra))}: write it in the "
                "states and the individual parameters"
            )
        if not r.when.free_symbols & set(states):
            raise ValueError(f"rules[{k}]: the condition {r.when} does not use the states")
        if states.index(r.into) in lagged:
            raise ValueError(f"rules[{k}]: a dose into a state with a lag time is not supported")
    if rules and t is not None:
        raise ValueError(
            "a dosing rule needs an autonomous ODE (the equations use t): the dose-time "
            "derivatives are expanded along the flow"
        )
    return rules


def rule_event(g, states, phi, direction: int):
    """A terminal :class:`~scichains.ode.Event` on ``g(x, phi)`` for the augmented system,
    whose state starts with ``x`` and whose parameters start with ``phi``: generated as the
    symbolic models are (every bit of a float constant kept; a module in the code cache, so
    numba's cache serves it in later processes)."""
    import sympy as sp

    from ..ode import Event
    from ..ode.derivatives._codegen import assign, load

    u, p = sp.IndexedBase("_u"), sp.IndexedBase("_p")
    sub = {s: u[i] for i, s in enumerate(states)}
    sub.update({s: p[j] for j, s in enumerate(phi)})
    lines = [
        "# generated by scichains.pk for a dosing rule's condition: do not edit",
        "import math",
        "",
        "import numba",
        "",
        "from scichains._jit import FLAGS",
        "",
        "",
        "def _g(_u, t, _p):",
        *assign(["value"], [g.xreplace(sub)], "r"),
        "    return float(value)",
        "",
        "",
        "condition = numba.njit(**FLAGS)(_g)",
        "",
    ]
    return Event(load("\n".join(lines)).condition, direction=direction, terminal=True)
