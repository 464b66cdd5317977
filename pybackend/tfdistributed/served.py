"""Training served by R's main thread: ``fit``/``evaluate`` started on a training thread that
reads an R generator's :class:`~tfdistributed.generators.BatchFeed`.

The R package's ``fit_distributed()``/``evaluate_distributed()`` with a
``dataset_from_generator()`` call :func:`start_fit`/:func:`start_evaluate`, then serve the
generator from R's main thread until the returned
:class:`~tfdistributed.generators.TrainingJob` ends (rpkg/R/generators.R: ``run_served``).

A module of its own, above :mod:`tfdistributed.training`: starting training needs
``training.fit``/``evaluate``, and ``generators`` (the feed, a data-layer module the training
layer may use) must not import the training layer. Here both are imported plainly, without
looking the entry points up by name.
"""

from __future__ import annotations

from .generators import TrainingJob, check_epochs, check_strategy
from .training import evaluate, fit


def start_fit(model, feed, **kwargs) -> TrainingJob:
    """Start ``tfdistributed.fit(model, feed.dataset(), **kwargs)`` on a training thread.

    Refuses first, on the calling thread, what cannot stream from an R generator (the strategy,
    :func:`~tfdistributed.generators.check_strategy`; epochs that would end at a NULL where Keras
    reads ahead, :func:`~tfdistributed.generators.check_epochs`).

    Raises:
        GeneratorError: see above.

    Example:
        >>> job = start_fit(model, feed, epochs=2, verbose=0)    # doctest: +SKIP
    """
    check_strategy(model, kwargs.get("strategy"), "fit")
    check_epochs(model, kwargs.get("strategy"), kwargs.get("steps_per_epoch"), "fit")
    return TrainingJob(fit, {"model": model, "x": feed.dataset(), **kwargs}, feed).start()


def start_evaluate(model, feed, **kwargs) -> TrainingJob:
    """Start ``tfdistributed.evaluate(model, feed.dataset(), **kwargs)`` on a training thread,
    after the same checks as :func:`start_fit` (with ``steps`` for ``steps_per_epoch``)."""
    check_strategy(model, kwargs.get("strategy"), "evaluate")
    check_epochs(model, kwargs.get("strategy"), kwargs.get("steps"), "evaluate")
    return TrainingJob(evaluate, {"model": model, "x": feed.dataset(), **kwargs}, feed).start()


__all__ = ["start_evaluate", "start_fit"]
