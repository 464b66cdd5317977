"""Training served by R's main thread: ``fit``/``evaluate`` started on a training thread that
reads an R generator's :class:`~tfdistributed.r.feed.BatchFeed`.

The R package's ``fit_distributed()``/``evaluate_distributed()`` with a
``dataset_from_generator()`` call :func:`start_fit`/:func:`start_evaluate`, then serve the
generator from R's main thread until the returned
:class:`~tfdistributed.r.served.TrainingJob` ends (rpkg/R/generators.R: ``run_served``).

A module of its own, above :mod:`tfdistributed.training`: starting training needs
``training.fit``/``evaluate``, and ``generators`` (the feed, a data-layer module the training
layer may use) must not import the training layer. Here both are imported plainly, without
looking the entry points up by name.
"""

from __future__ import annotations

import threading
import warnings

from ..errors import GeneratorError
from ..training.trainer import evaluate, fit


class TrainingJob:
    """``target(**kwargs)`` on a daemon thread; R's main thread polls it and serves the feed."""

    def __init__(self, target, kwargs, feed=None, name="tfdistributed-training"):
        self._target = target
        self._kwargs = kwargs
        self._feed = feed
        self._done = threading.Event()
        self._result = None
        self._error = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self):
        try:
            with warnings.catch_warnings():
                # Keras warns "Your input ran out of data" at the end of every epoch of a
                # dataset of unknown length, i.e. wherever the generator returned NULL: that is
                # how such an epoch ends, not a problem. (The filter is process-wide while the
                # job runs; R's main thread only serves the generator meanwhile.)
                warnings.filterwarnings("ignore", message="Your input ran out of data")
                self._result = self._target(**self._kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            self._error = e
        finally:
            self._done.set()
            if self._feed is not None:
                self._feed.close()

    def start(self):
        self._thread.start()
        return self

    def wait(self, timeout=0.01) -> bool:
        """Whether the job has finished, waiting up to ``timeout`` seconds."""
        return self._done.wait(float(timeout))

    def stop(self, timeout=30.0) -> bool:
        """Close the feed (TensorFlow's next read raises) and join; False if still running."""
        if self._feed is not None:
            self._feed.close()
        self._thread.join(float(timeout))
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def result(self):
        """The target's return value, or its exception raised here."""
        if not self._done.is_set():
            raise GeneratorError("The training job is still running.")
        if self._error is not None:
            raise self._error
        return self._result


def _strategy_of(model, strategy):
    return strategy or model.distribute_strategy


def worker_context(model, strategy=None) -> dict:
    """``{"kind", "worker_index", "num_workers"}``: which input pipeline this process feeds.

    Under ``multi_worker_mirrored`` a chief is input pipeline 0 and worker ``i`` is ``i + 1``;
    without a chief, worker ``i`` is ``i``. Every other strategy has one input pipeline.
    """
    from ..strategies.make import strategy_info, strategy_kind

    strategy = _strategy_of(model, strategy)
    kind = strategy_kind(strategy)
    if kind != "multi_worker_mirrored":
        return {"kind": kind, "worker_index": 0, "num_workers": 1}
    info = strategy_info(strategy)
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    index = int(info["task_index"] or 0)
    if info["task_type"] == "worker" and spec.get("chief"):
        index += 1
    elif info["task_type"] == "chief":
        index = 0
    return {"kind": kind, "worker_index": index, "num_workers": int(info["num_workers"])}


def check_strategy(model, strategy=None, what="fit") -> dict:
    """:func:`worker_context`, refusing strategies whose input pipelines cannot call R."""
    context = worker_context(model, strategy)
    if context["kind"] == "parameter_server":
        raise GeneratorError(
            f"{what}() cannot stream from an R generator under the 'parameter_server' strategy: "
            f"each worker's input pipeline runs inside that worker's TensorFlow server, which "
            f"has no R session, and a from_generator() callback cannot be sent to another "
            f"process. Write the data as files instead: every worker then reads its share with "
            f"TensorFlow's own readers.",
            hints={"r": "With write_dataset_shards(), then dataset_from_files().",
                   "python": "With tfdistributed.write_shards(), then read_shards()."})
    if context["kind"] == "tpu":
        raise GeneratorError(f"{what}() cannot stream from an R generator to a TPU: TPU input "
                             f"pipelines run on the TPU host. Use files (write_dataset_shards()).")
    return context


# Strategies whose Keras input iterators are created lazily: only there can an epoch end where
# the generator returns NULL. Elsewhere (mirrored...) Keras creates the next epoch's iterator at
# the end of each epoch and throws it away, and a distributed iterator starts prefetching at
# once: it would take batches of the next epoch out of the feed and drop them.
LAZY_INPUT = ("default", "one_device")


def check_epochs(model, strategy=None, steps=None, what="fit"):
    """Refuse NULL-terminated passes where Keras would drop batches (see LAZY_INPUT).

    ``steps`` is fit's ``steps_per_epoch`` or evaluate's ``steps``. Seen here under
    ``mirrored``: fit lost the next epoch's first batches, and evaluate covered 388 of 450 test
    examples; with ``steps`` both see every batch.
    """
    kind = worker_context(model, strategy)["kind"]
    if steps is not None or kind in LAZY_INPUT:
        return
    name = "steps_per_epoch" if what == "fit" else "steps"
    per_worker = (" times the number of workers (each step uses 1/n of one batch of every "
                  "worker)" if kind == "multi_worker_mirrored" else "")
    raise GeneratorError(
        f"{what}() with a generator under the {kind!r} strategy needs `{name}`: there a pass "
        f"cannot end where the generator returns NULL (Keras would start reading ahead and drop "
        f"those batches). Pass {name} = the number of batches per "
        f"{'epoch' if what == 'fit' else 'pass over the data'}{per_worker}; a NULL then only "
        f"means that the generator starts over.")


def start_fit(model, feed, **kwargs) -> TrainingJob:
    """Start ``tfdistributed.fit(model, feed.dataset(), **kwargs)`` on a training thread.

    Refuses first, on the calling thread, what cannot stream from an R generator (the strategy,
    :func:`~tfdistributed.r.feed.check_strategy`; epochs that would end at a NULL where Keras
    reads ahead, :func:`~tfdistributed.r.feed.check_epochs`).

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

