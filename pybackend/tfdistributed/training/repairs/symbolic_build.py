"""``symbolic_build``: Keras' shape probe all-reduces a batch, which multi-worker runs refuse.

``TensorFlowTrainer._maybe_symbolic_build`` calls ``strategy.reduce("MEAN", batch, axis=None)``
eagerly on a ``PerReplica`` batch only to learn its shapes. Under multi-worker collectives that
fails ("Attempt to convert a value (PerReplica...)"; keras-team/keras#20585,
tensorflow/tensorflow#72388). The first local replica's value has the same per-replica shapes
and needs no communication.
"""

from __future__ import annotations

from .common import Repair, source


def detect(trainer) -> bool:
    return ".reduce(" in source(trainer.TensorFlowTrainer._maybe_symbolic_build)


def apply(trainer) -> None:
    import tensorflow as tf
    from keras.src import tree

    original = trainer.TensorFlowTrainer._maybe_symbolic_build

    def _first_local_value(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return value.values[0]
        return value

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = tree.map_structure(_first_local_value, next(it))
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    _maybe_symbolic_build.__tfdistributed_original__ = original
    trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build


REPAIR = Repair(name="symbolic_build", defect=__doc__,
                upstream=("keras-team/keras#20585", "tensorflow/tensorflow#72388"),
                detect=detect, apply=apply)
