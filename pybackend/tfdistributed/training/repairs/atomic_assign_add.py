"""``atomic_assign_add``: Keras' ``assign_add`` is a read then a write, which aggregated
variables sum wrongly.

Keras implements ``Variable.assign_add``/``assign_sub`` as ``assign(self + value)``: a read,
then a write. Under ``CentralStorageStrategy`` a metric's SUM-aggregated variable is then
written as ``sum over replicas of (total + local)``, so ``fit``/``evaluate`` report wrong
losses and metrics while the weights are right; under parameter-server training concurrent
workers lose updates. TensorFlow's own ``assign_add`` aggregates the increments.
"""

from __future__ import annotations

from .common import Repair, source


def detect(trainer) -> bool:
    from keras.src.backend.common import variables

    return "self.assign(self + value)" in source(variables.Variable.assign_add)


def apply(trainer) -> None:
    import tensorflow as tf
    from keras.src.backend.common import variables
    from keras.src.backend.common.stateless_scope import in_stateless_scope
    from keras.src.backend.tensorflow.core import Variable

    def atomic(name):
        fallback = getattr(variables.Variable, name)

        def update(self, value):
            if in_stateless_scope():
                return fallback(self, value)
            value = self._convert_to_tensor(value, dtype=self._dtype)
            return getattr(self._value, name)(tf.cast(value, self._value.dtype))

        update.__name__ = name
        update.__tfdistributed_original__ = fallback
        return update

    Variable.assign_add = atomic("assign_add")
    Variable.assign_sub = atomic("assign_sub")


REPAIR = Repair(name="atomic_assign_add", defect=__doc__, upstream=(), detect=detect, apply=apply)
