"""``central_storage_metric_assign``: metrics that accumulate with ``assign`` add up the
replicas' totals under ``CentralStorageStrategy``.

Many Keras metrics (``AUC``, ``Precision``/``Recall`` with thresholds, the confusion-matrix
family) accumulate with ``variable.assign(variable + increment)``. Under
``CentralStorageStrategy`` every replica reads the same central total and the SUM-aggregated
``assign`` adds the totals up: AUC 0.53 was reported where the truth was 0.75. There, an
``assign`` from a replica to a SUM-aggregated variable is applied as the increment it is
(``assign_add(value - current)``), which sums the replicas' increments, as one device would.
"""

from __future__ import annotations

from .common import Repair, source


def detect(trainer) -> bool:
    from keras.src.metrics import metrics_utils
    from tensorflow.python.distribute import ps_values

    read_then_write = "variable.assign(variable +" in source(metrics_utils)
    return read_then_write and hasattr(ps_values, "AggregatingVariable")


def apply(trainer) -> None:
    import tensorflow as tf
    from keras.src.backend.tensorflow.core import Variable
    from tensorflow.python.distribute import ps_values

    original = Variable._direct_assign

    def _direct_assign(self, value):
        inner = self._value
        if (isinstance(inner, ps_values.AggregatingVariable)
                and inner.aggregation == tf.VariableAggregation.SUM
                and isinstance(inner._distribute_strategy,
                               tf.distribute.experimental.CentralStorageStrategy)
                and not tf.distribute.in_cross_replica_context()):
            value = tf.cast(value, inner.dtype)
            inner.assign_add(value - inner.read_value())
            return
        original(self, value)

    _direct_assign.__tfdistributed_original__ = original
    Variable._direct_assign = _direct_assign


REPAIR = Repair(name="central_storage_metric_assign", defect=__doc__, upstream=(), detect=detect,
                apply=apply)
