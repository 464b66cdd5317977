"""``symbolic_build``: Keras' shape probe all-reduces a batch, which multi-worker runs refuse.

``TensorFlowTrainer._maybe_symbolic_build`` calls ``strategy.reduce("MEAN", batch, axis=None)``
eagerly on a ``PerReplica`` batch only to learn its shapes. Under multi-worker collectives that
fails ("Attempt to convert a value (PerReplica...)"; keras-team/keras#20585,
tensorflow/tensorflow#72388). The first local replica's value has the same per-replica shapes
and needs no communication.

No batch is taken for it at all: the probe reads only each tensor's shape and dtype, which the
distributed dataset's element spec already gives (per replica, the batch dimension unknown as
in a one-device trace), so no distributed iterator is made for it. One made and dropped cost
~0.05-0.1 s of CPU on 2 devices or workers (its input functions traced, its pipeline started)
and, worse, drew a permutation from a reshuffling input: a strategy's first epoch then saw
the second order a one-device fit sees, and a seeded run could not be compared with one device.
And the probe is only built while the model, its compiled loss or its metrics are unbuilt (Keras'
own condition); after the first fit it reads nothing. If the element spec cannot be read (a
dataset from a function not built yet) or building from it fails, a batch is taken as Keras
takes it.
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


def batch_spec(iterator):
    """The shapes and dtypes of one replica's batch from Keras' epoch iterator, read from its
    distributed dataset's element spec (no iterator made), or None where it cannot be read."""
    import tensorflow as tf
    from tensorflow.python.distribute.values import PerReplicaSpec

    dataset = getattr(iterator, "_distributed_dataset", None)
    try:
        spec = dataset.element_spec
    except (AttributeError, ValueError, NotImplementedError):
        return None

    def one_replica(value_spec):
        if isinstance(value_spec, PerReplicaSpec):
            value_spec = value_spec._value_specs[0]
        return value_spec if hasattr(value_spec, "shape") and hasattr(value_spec, "dtype") \
            else None

    specs = tf.nest.map_structure(one_replica, spec)
    return None if any(v is None for v in tf.nest.flatten(specs)) else specs


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
            data_batch = batch_spec(iterator)
            if data_batch is not None:
                try:
                    with self.distribute_strategy.scope():
                        self._symbolic_build(data_batch=data_batch)
                    return
                except Exception:  # noqa: BLE001 - a model that needs a real batch: take one
                    data_batch = None
            # Keras 3.11+ yields (first step, last step, iterator), Keras 3.10 (step, iterator).
            for *_, it in iterator:
                data_batch = tree.map_structure(_first_local_value, next(it))
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    _maybe_symbolic_build.__tfdistributed_original__ = original
    trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build


REPAIR = Repair(name="symbolic_build", defect=__doc__,
                upstream=("keras-team/keras#20585", "tensorflow/tensorflow#72388"),
                detect=detect, apply=apply)
