"""``ema_overwrite``: an optimizer that overwrites the weights with their moving averages every
N steps cannot run under a strategy.

With ``use_ema=True`` and ``ema_overwrite_frequency=N``, Keras
(``BaseOptimizer._backend_apply_gradients``) decides in each replica, with an ``ops.cond``,
whether this step copies the moving averages into the weights; the copy updates mirrored
variables, which needs ``merge_call``, and TensorFlow forbids that inside a branch: the
optimizer failed under ``mirrored``, ``central_storage``, ``multi_worker_mirrored`` and
``parameter_server`` with "`merge_call` called while defining a new graph or a tf.function",
the defect of ``gradient_accumulation`` (keras-team/keras#20582). The copy needs no
synchronisation: every replica holds the same averages and the same weights, so here each
replica copies its own averages into its own weights (central storage's replicas, the one
copy), inside Keras' own condition, without ``merge_call``.
"""

from __future__ import annotations

from .common import Repair, in_a_replica_needing_merge_call, source


def detect(trainer) -> bool:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    step = source(BaseOptimizer._backend_apply_gradients)
    copy = source(TFOptimizer._overwrite_model_variables_with_average_value)
    return "ema_overwrite_frequency" in step and "ops.cond(" in step and "extended.update" in copy


def apply(trainer) -> None:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    overwrite = TFOptimizer._overwrite_model_variables_with_average_value

    def _overwrite_model_variables_with_average_value(self, trainable_variables):
        if not in_a_replica_needing_merge_call():
            return overwrite(self, trainable_variables)
        for variable, average in zip(trainable_variables, self._model_variables_moving_average):
            if average is not None:
                _replicas_own(variable).assign(_replicas_own(average))

    _overwrite_model_variables_with_average_value.__tfdistributed_original__ = overwrite
    TFOptimizer._overwrite_model_variables_with_average_value = \
        _overwrite_model_variables_with_average_value


def _replicas_own(variable):
    """The TensorFlow variable this replica reads and writes behind a Keras variable: its own
    copy of a mirrored one, the one variable of central storage's (or of a single replica)."""
    import tensorflow as tf

    value = getattr(variable, "value", variable)
    if isinstance(value, tf.distribute.DistributedValues):
        return value._get_on_device_or_primary()
    return getattr(value, "_v", value)  # central storage's AggregatingVariable wraps one


REPAIR = Repair(name="ema_overwrite", defect=__doc__, upstream=("keras-team/keras#20582",),
                detect=detect, apply=apply)
