"""The per-subject work of :class:`~scichains.pk.PopulationObjective` on an executor's workers.

A chunk of consecutive subjects travels once, with the model's description (the arguments
it was made with, see :meth:`PKModel.__reduce__`) and the objective's settings. The worker
builds the model once per process (:func:`~scichains.parallel._transport.worker_cached`,
keyed by the description's token: the chunks of one objective on one worker share it) and
an objective over the chunk's subjects; each call then evaluates those subjects from the
warm starts the caller sends. Nothing is kept between calls but what was built, so a chunk
placed again on another worker gives the same results.
"""

from __future__ import annotations

from ..parallel._transport import new_token, worker_cached


class ModelDescription:
    """A :class:`PKModel` as another process builds it again: its arguments (SymPy
    expressions, numbers, the error model, networks) under the model's token (one per model
    object: the objectives of one model share what a worker built for it)."""

    def __init__(self, model):
        token = getattr(model, "_remote_token", None)
        if token is None:
            token = model._remote_token = new_token()
        self.token = token
        self.arguments = model._arguments

    def build(self, settings: dict):
        """The model, built once per process, with the augmented system the settings use
        (built under the cache's lock: threads of one worker that start at once wait for one
        build rather than each compiling it)."""
        from ._model import PKModel

        model = worker_cached(("pk-model", self.token), lambda: PKModel(**self.arguments))
        order = 3 if settings["method"] == "laplace" else 2
        mode = settings["sensitivities"]

        def system():
            return model.directional(order) if mode == "directions" else model.sensitivities(order)

        worker_cached(("pk-system", self.token, order, mode), system)
        return model


class PKChunk:
    """Subjects ``lo..lo+len(subjects)-1`` of a population objective as sent to a worker."""

    def __init__(self, description, subjects, covariates, settings, lo, objective_class):
        self.token = new_token()
        self.objective_class = objective_class  # PopulationObjective (passed in: no import)
        self.description = description
        self.subjects = list(subjects)
        self.covariates = covariates
        self.settings = dict(settings)
        self.lo = lo

    def objective(self):
        """The objective of the chunk's subjects, built once per process."""

        def make():
            from ._records import EventData

            model = self.description.build(self.settings)
            data = EventData(self.subjects, self.covariates)
            return self.objective_class(model, data, **self.settings)

        return worker_cached(("pk-chunk", self.token), make)


def chunks_for(model, data, settings: dict, bounds, objective_class) -> list[PKChunk]:
    """One :class:`PKChunk` per ``(lo, hi)`` of ``bounds``, sharing one description;
    ``objective_class`` (the population objective's class) builds each chunk's objective on
    the worker."""
    description = ModelDescription(model)
    return [
        PKChunk(description, data.subjects[lo:hi], data.covariates, settings, lo, objective_class)
        for lo, hi in bounds
    ]
