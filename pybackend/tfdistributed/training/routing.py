"""``strategy_aware_fit``: a plain ``model.fit``/``evaluate``/``predict`` goes where Keras alone
cannot.

``Model.fit``/``evaluate``/``predict`` know nothing of parameter-server strategies
(keras-team/keras#18624) nor of multi-worker file writes. Under a ``ParameterServerStrategy``
they go to tfdistributed's coordinator trainer (:func:`tfdistributed.training.fit_from_keras`
and its siblings); in a multi-worker job the callbacks that write files are made chief-only
(:func:`tfdistributed.training.checkpoints.safe_callbacks`). Under every strategy, what Keras would
fail on deep inside (``batch_size=64.0``: a TensorFlow op error; a list of numbers as data:
"Unrecognized data type" and a page of them) is refused first with a message naming the
argument (:func:`tfdistributed._args.check_keras_call`), and a dataset over an R generator,
which would hang on R's main thread, is refused at once. In a multi-worker job a dataset (the
data, and ``fit``'s ``validation_data``) goes through the shard pre-flight of every entry point
(:func:`tfdistributed.data.sharding.shard_for_workers`), once per call, before the first step: under
the ``"auto"`` policy, fewer files than workers means sharding by data (announced once) instead
of TensorFlow's error at the first step, and an explicit policy that cannot work is our
:class:`~tfdistributed.errors.ShardingError`. A multi-worker strategy built for 1 worker in a
task whose TF_CONFIG names several is refused too
(:func:`tfdistributed.cluster.live.check_not_alone`), and so is a Keras option that cannot be
honoured under the model's strategy (:func:`tfdistributed.training.options.check_options`,
e.g. ``jit_compile=True`` under ``mirrored``). And Keras' own shuffle of arrays
(``shuffle=True``, its default) takes one order on every worker of a multi-worker job
(:func:`tfdistributed.training.seeds.keras_shuffles_alike`): unseeded, each worker drew its own
and an "epoch" trained some examples twice and others never. At the normal end of a
multi-worker ``model.fit`` (keras3's R ``fit()`` is one), every worker waits for the others
before it goes on (:func:`tfdistributed.cluster.leave.leave_together`), as at the end of
tfdistributed's ``fit()``: none leaves while a slower peer still reads from it.

This is routing to :mod:`tfdistributed.training`, not a repair of Keras' own code, but it is
installed, reported and switched off like one: training builds its record with
:func:`strategy_aware_fit` (handing over its entry points, so that nothing here imports it) and
``import tfdistributed`` gives it to :func:`tfdistributed.training.compat.install`.
"""

from __future__ import annotations

import contextlib
from typing import Callable

from .._args import check_keras_call
from .checkpoints import safe_callbacks
from .options import check_options
from .seeds import keras_shuffles_alike
from ..data.plan import check_dataset
from .repairs.common import Repair
from .repairs.common import source
from ..data.sharding import shard_for_workers
from ..strategies.make import input_workers
from ..watch.recorder import examples_per_step, recorder_for, telling_failure
from ..cluster.leave import end_of_training, leave_together
from ..cluster.live import check_not_alone


def strategy_aware_fit(fit_from_keras: Callable, evaluate_from_keras: Callable,
                       predict_from_keras: Callable) -> Repair:
    """The routing as a repair record, sending parameter-server calls to these entry points
    (each takes the model and ``Model.<method>``'s own arguments)."""
    routes = {"fit": fit_from_keras, "evaluate": evaluate_from_keras,
              "predict": predict_from_keras}
    return Repair(name="strategy_aware_fit", defect=__doc__, upstream=("keras-team/keras#18624",),
                  detect=keras_knows_no_coordinator, apply=lambda trainer: route(trainer, routes))


def keras_knows_no_coordinator(trainer) -> bool:
    """Whether Keras' trainer still ignores parameter-server strategies (no ClusterCoordinator)."""
    return "ClusterCoordinator" not in source(trainer)


def route(trainer, routes: dict) -> None:
    """Wrap Keras' ``fit``/``evaluate``/``predict``: arguments checked, then
    ``routes[method](model, ...)`` under a parameter-server strategy, else Keras' own."""
    cls = trainer.TensorFlowTrainer
    originals = {name: getattr(cls, name) for name in ("fit", "evaluate", "predict")}

    def fit(self, *args, **kwargs):
        check_keras_call(originals["fit"], self, args, kwargs)
        _refuse_r_generator(originals["fit"], self, args, kwargs, "model.fit")
        check_not_alone(_strategy(self), "model.fit")
        check_options(self, _strategy(self), "model.fit")
        if _is_parameter_server(self):
            return routes["fit"](self, *args, **kwargs)
        bound = _bound(originals["fit"], self, args, kwargs)
        if bound is None:  # a wrong call: Keras' own message says which argument
            return originals["fit"](self, *args, **kwargs)
        _shard(bound, self, "model.fit")
        given = bound.arguments
        given["callbacks"] = recorder_for(self, _safe(given.get("callbacks")),
                                          examples_per_step(given.get("x"),
                                                            given.get("batch_size")))
        with telling_failure(), _shuffled_alike(self, given):
            history = originals["fit"](*bound.args, **bound.kwargs)
        if _collective_workers(self):  # no worker leaves while a peer still reads from it
            leave_together("Keras' model.fit()", end_of_training(self))
        return history

    def evaluate(self, *args, **kwargs):
        check_keras_call(originals["evaluate"], self, args, kwargs)
        _refuse_r_generator(originals["evaluate"], self, args, kwargs, "model.evaluate")
        if not kwargs.get("_use_cached_eval_dataset"):  # fit's own validation: checked by fit
            check_options(self, _strategy(self), "model.evaluate")
        if _is_parameter_server(self):
            return routes["evaluate"](self, *args, **kwargs)
        bound = _bound(originals["evaluate"], self, args, kwargs)
        # fit's own validation (_use_cached_eval_dataset) was checked by fit.
        if bound is None or kwargs.get("_use_cached_eval_dataset"):
            return originals["evaluate"](self, *args, **kwargs)
        _shard(bound, self, "model.evaluate")
        return originals["evaluate"](*bound.args, **bound.kwargs)

    def predict(self, *args, **kwargs):
        check_keras_call(originals["predict"], self, args, kwargs)
        check_options(self, _strategy(self), "model.predict")
        if _is_parameter_server(self):
            return routes["predict"](self, *args, **kwargs)
        bound = _bound(originals["predict"], self, args, kwargs)
        if bound is None:
            return originals["predict"](self, *args, **kwargs)
        _shard(bound, self, "model.predict")
        return originals["predict"](*bound.args, **bound.kwargs)

    for name, patched in (("fit", fit), ("evaluate", evaluate), ("predict", predict)):
        patched.__tfdistributed_original__ = originals[name]
        patched.__doc__ = originals[name].__doc__
        # inspect.signature() (help(), R's positional arguments) shows Keras' own parameters.
        patched.__wrapped__ = originals[name]
        setattr(cls, name, patched)


def _refuse_r_generator(method, model, args, kwargs, what) -> None:
    """A dataset over an R generator, trained or validated on from R's main thread, hangs:
    refuse it at once (``x``, and ``validation_data``; ``args``/``kwargs`` bound to Keras' own
    ``method``, as :func:`~tfdistributed._args.check_keras_call` binds them)."""
    import tensorflow as tf

    bound = _bound(method, model, args, kwargs)
    if bound is None:
        return  # a wrong call: Keras' own message says which argument
    bound = bound.arguments
    for name in ("x", "validation_data"):
        if isinstance(bound.get(name), tf.data.Dataset):
            check_dataset(bound[name], what)


def _bound(method, model, args, kwargs):
    """``model.method(*args, **kwargs)`` bound to Keras' own signature, or None if it does not
    bind (Keras' own error then says why)."""
    import inspect

    try:
        return inspect.signature(method).bind(model, *args, **kwargs)
    except TypeError:
        return None


def _shard(bound, model, what) -> None:
    """Each dataset among ``x`` and ``validation_data`` of a call ``bound`` to Keras' own
    signature through the shard pre-flight, in place, in a multi-worker job (else nothing to
    do, at no cost)."""
    import tensorflow as tf

    workers = input_workers(_strategy(model))
    if workers < 2:
        return
    data = "the training data" if what == "model.fit" else "the data"
    for name, label in (("x", data), ("validation_data", "the validation data")):
        if isinstance(bound.arguments.get(name), tf.data.Dataset):
            bound.arguments[name] = shard_for_workers(bound.arguments[name], workers,
                                                      f"{what}(), {label}")


def _shuffled_alike(model, given):
    """Keras shuffles arrays on each worker (``shuffle=True`` is its default): in a multi-worker
    job, in one order on every worker (:func:`tfdistributed.training.seeds.keras_shuffles_alike`);
    anything else needs nothing."""
    import tensorflow as tf
    from keras.src.trainers.data_adapters.array_data_adapter import can_convert_arrays

    strategy = _strategy(model)
    workers = input_workers(strategy)
    if workers < 2 or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) \
            or not given.get("shuffle", True) or given.get("x") is None \
            or not can_convert_arrays(tuple(given.get(k) for k in ("x", "y", "sample_weight"))):
        return contextlib.nullcontext()
    return keras_shuffles_alike(strategy, workers)


def _strategy(model):
    """The strategy Keras trains ``model`` under: the one its weights were made in (see
    :mod:`~tfdistributed.training.repairs.model_strategy_from_weights`), else the current."""
    return model.distribute_strategy


def _collective_workers(model) -> bool:
    """Whether ``model`` trains in lock step with other workers (multi-worker collectives)."""
    import tensorflow as tf

    strategy = _strategy(model)
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and input_workers(strategy) > 1)


def _is_parameter_server(model) -> bool:
    import tensorflow as tf

    return isinstance(model.distribute_strategy, tf.distribute.experimental.ParameterServerStrategy)


def _safe(callbacks):
    return safe_callbacks(callbacks) if callbacks else callbacks
