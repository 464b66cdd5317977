"""``assign_without_read``: Keras reads every assigned variable back, an all-reduce each for a
metric's variables.

Not a defect but a cost: Keras assigns a variable with TensorFlow's ``assign``, which reads the
variable back by default, and ignores what it read. A metric's variables are sync-on-read
under ``tf.distribute``: read outside a step, on several workers, each is an all-reduce run
eagerly (about 4.5 ms each here). ``reset_metrics()``, at every epoch's start and in
``evaluate()``, paid one per metric variable (19 ms per epoch for a loss and an accuracy).
Such assignments are made without the read-back.

It wraps ``Variable._direct_assign`` as it finds it, so it comes after
``central_storage_metric_assign``, which patches the same method (for other variables).
"""

from __future__ import annotations

from .common import Repair, original, source


def detect(trainer) -> bool:
    from keras.src.backend.tensorflow.core import Variable

    return "read_value" not in source(Variable._direct_assign)


def apply(trainer) -> None:
    import tensorflow as tf
    from keras.src.backend.tensorflow.core import Variable
    from tensorflow.python.distribute import values

    previous = Variable._direct_assign  # central_storage_metric_assign's, if applied

    def _direct_assign(self, value):
        inner = self._value
        if isinstance(inner, values.SyncOnReadVariable):
            inner.assign(tf.cast(value, inner.dtype), read_value=False)
            return
        previous(self, value)

    _direct_assign.__tfdistributed_original__ = original(previous)
    Variable._direct_assign = _direct_assign


REPAIR = Repair(name="assign_without_read", defect=__doc__, upstream=(), detect=detect,
                apply=apply, after=("central_storage_metric_assign",))
