"""``central_storage_updates``: state Keras updates in the forward pass cannot be updated
under ``CentralStorageStrategy``.

Keras creates non-trainable state updated in the forward pass (the seed of ``Dropout`` and
every random layer, ``BatchNormalization``'s moving statistics) with aggregation "none".
``CentralStorageStrategy`` keeps one copy of each variable and refuses a replica-context
update it cannot aggregate ("You must specify an aggregation method to update a
AggregatingVariable in Replica Context"). Such variables are created with
``ONLY_FIRST_REPLICA`` there: the first replica's update is kept, which is what
``MirroredStrategy`` exposes too (it reads the first replica's copy).
"""

from __future__ import annotations

from .common import Repair, source


def detect(trainer) -> bool:
    from keras.src.random import seed_generator
    from tensorflow.python.distribute import ps_values

    refuses = "aggregation_error_msg" in source(ps_values.AggregatingVariable)
    return refuses and 'aggregation="none"' in source(seed_generator.SeedGenerator)


def apply(trainer) -> None:
    import tensorflow as tf
    from keras.src.backend.tensorflow.core import Variable

    original = Variable._initialize

    def _initialize(self, value):
        strategy = tf.distribute.get_strategy()
        if (not self.trainable and self.aggregation == "none"
                and not isinstance(value, tf.Variable)
                and isinstance(strategy, tf.distribute.experimental.CentralStorageStrategy)
                and strategy.num_replicas_in_sync > 1):
            self._aggregation = "only_first_replica"
        return original(self, value)

    _initialize.__tfdistributed_original__ = original
    Variable._initialize = _initialize


REPAIR = Repair(name="central_storage_updates", defect=__doc__, upstream=(), detect=detect,
                apply=apply)
