"""``strategy_aware_fit``: a plain ``model.fit``/``evaluate``/``predict`` goes where Keras alone
cannot.

``Model.fit``/``evaluate``/``predict`` know nothing of parameter-server strategies
(keras-team/keras#18624) nor of multi-worker file writes. Under a ``ParameterServerStrategy``
they go to tfdistributed's coordinator trainer (:func:`tfdistributed.training.fit_from_keras`
and its siblings); in a multi-worker job the callbacks that write files are made chief-only
(:func:`tfdistributed.checkpoints.safe_callbacks`). Under every strategy, what Keras would fail
on deep inside (``batch_size=64.0``: a TensorFlow op error; a list of numbers as data:
"Unrecognized data type" and a page of them) is refused first with a message naming the
argument (:func:`tfdistributed._args.check_keras_call`), a dataset over an R generator,
which would hang on R's main thread, is refused at once, and so is a multi-worker strategy
built for 1 worker in a task whose TF_CONFIG names several
(:func:`tfdistributed.watch.tfconfig.check_not_alone`).

This is routing to :mod:`tfdistributed.training`, not a repair of Keras' own code, but it is
installed, reported and switched off like one: training builds its record with
:func:`strategy_aware_fit` (handing over its entry points, so that nothing here imports it) and
``import tfdistributed`` gives it to :func:`tfdistributed.compat.install`.
"""

from __future__ import annotations

from typing import Callable

from ._args import check_keras_call
from .checkpoints import safe_callbacks
from .data import check_dataset
from .repairs import Repair
from .repairs.common import source
from .watch.tfconfig import check_not_alone


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
        if _is_parameter_server(self):
            return routes["fit"](self, *args, **kwargs)
        if "callbacks" in kwargs:
            kwargs["callbacks"] = _safe(kwargs["callbacks"])
        elif len(args) > 5:  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
            args = (*args[:5], _safe(args[5]), *args[6:])
        return originals["fit"](self, *args, **kwargs)

    def evaluate(self, *args, **kwargs):
        check_keras_call(originals["evaluate"], self, args, kwargs)
        _refuse_r_generator(originals["evaluate"], self, args, kwargs, "model.evaluate")
        if _is_parameter_server(self):
            return routes["evaluate"](self, *args, **kwargs)
        return originals["evaluate"](self, *args, **kwargs)

    def predict(self, *args, **kwargs):
        check_keras_call(originals["predict"], self, args, kwargs)
        if _is_parameter_server(self):
            return routes["predict"](self, *args, **kwargs)
        return originals["predict"](self, *args, **kwargs)

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
    import inspect

    import tensorflow as tf

    try:
        bound = inspect.signature(method).bind(model, *args, **kwargs).arguments
    except TypeError:
        return  # a wrong call: Keras' own message says which argument
    for name in ("x", "validation_data"):
        if isinstance(bound.get(name), tf.data.Dataset):
            check_dataset(bound[name], what)


def _strategy(model):
    """The strategy Keras trains ``model`` under: the one it was built in, else the current."""
    import tensorflow as tf

    return getattr(model, "_distribute_strategy", None) or tf.distribute.get_strategy()


def _is_parameter_server(model) -> bool:
    import tensorflow as tf

    strategy = getattr(model, "_distribute_strategy", None)
    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


def _safe(callbacks):
    return safe_callbacks(callbacks) if callbacks else callbacks
