"""``symbolic_build``: Keras' shape probe all-reduces a batch, which multi-worker runs refuse.

``TensorFlowTrainer._maybe_symbolic_build`` calls ``strategy.reduce("MEAN", batch, axis=None)``
eagerly on a ``PerReplica`` batch only to learn its shapes. Under multi-worker collectives that
fails ("Attempt to convert a value (PerReplica...)"; keras-team/keras#20585,
tensorflow/tensorflow#72388). The first local replica's value has the same per-replica shapes
and needs no communication.

The probe is taken only when the symbolic build will read it: Keras makes a whole distributed
iterator for it (on 2 devices or workers ~0.05-0.1 s of CPU, its input functions traced and its
pipeline started) at the start of every ``fit``, every ``evaluate`` and every validation
pass, while the model, its compiled loss and its metrics are built by the first. Once they are,
the batch is never looked at (only the optimizer may still be built, from the weights), so the
iterator is not made.
"""

from __future__ import annotations

from .common import Repair, source

# Keras' own test, in Trainer._symbolic_build, of whether it reads the batch at all.
_READS_THE_BATCH = "if model_unbuilt or compile_metrics_unbuilt or compile_loss_unbuilt:"


def detect(trainer) -> bool:
    return ".reduce(" in source(trainer.TensorFlowTrainer._maybe_symbolic_build)


def keras_decides_by_what_is_built() -> bool:
    """Whether the installed Keras' symbolic build reads the batch only while something is
    unbuilt (read once, when the repair is applied: the source does not change)."""
    from keras.src.trainers.trainer import Trainer

    return _READS_THE_BATCH in source(Trainer._symbolic_build)


def reads_the_batch(model) -> bool:
    """Whether Keras' symbolic build of ``model`` would read a batch: the model, its compiled
    loss or its compiled metrics are not built yet."""
    compile_metrics = getattr(model, "_compile_metrics", None)
    compile_loss = getattr(model, "_compile_loss", None)
    return (not all(layer.built for layer in model._flatten_layers())
            or (compile_metrics is not None and not compile_metrics.built)
            or (compile_loss is not None and not compile_loss.built))


def apply(trainer) -> None:
    import tensorflow as tf
    from keras.src import tree

    original = trainer.TensorFlowTrainer._maybe_symbolic_build
    # Where the installed Keras no longer decides it that way, the probe is always taken.
    probe_only_when_unbuilt = keras_decides_by_what_is_built()

    def _first_local_value(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return value.values[0]
        return value

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return
        if iterator is not None and (not probe_only_when_unbuilt or reads_the_batch(self)):
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
