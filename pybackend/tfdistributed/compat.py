"""Keras 3 x tf.distribute repairs, applied at their root, only where the defect is present.

Keras 3's TensorFlow trainer breaks under real multi-worker ``MultiWorkerMirroredStrategy``
(keras-team/keras#20585, tensorflow/tensorflow#72388). Two defects, both in
``keras/src/backend/tensorflow/trainer.py``:

``symbolic_build``
    ``TensorFlowTrainer._maybe_symbolic_build`` calls ``strategy.reduce("MEAN", batch,
    axis=None)`` eagerly on a ``PerReplica`` batch only to learn its shapes. Under multi-worker
    collectives that fails ("Attempt to convert a value (PerReplica...)"). The first local
    replica's value has the same per-replica shapes and needs no communication.

``reduce_per_replica``
    ``reduce_per_replica`` reduces the step's outputs across workers with
    ``strategy.reduce("MEAN", v, axis=0)``; the outputs are scalar metrics, so this fails with
    "Invalid reduction dimension 0 for input with 0 dimensions". Scalars are reduced with
    ``axis=None`` (the mean across replicas), everything else as before.

Each repair is gated twice: on the Keras major version, and on the defective code still being
in the installed Keras (read with ``inspect``), so an upstream fix turns our patch off by itself.
``apply()`` is idempotent and is called by every entry point that builds a strategy or trains.
Set ``TFDISTRIBUTED_DISABLE_COMPAT`` to ``all`` or a comma list of repair names to switch
repairs off (the tests use this to prove each defect is real on the installed Keras).
"""

from __future__ import annotations

import inspect
import os
import threading

_lock = threading.Lock()
_applied: dict[str, bool] = {}

REPAIRS = ("symbolic_build", "reduce_per_replica")


def _disabled() -> set[str]:
    value = os.environ.get("TFDISTRIBUTED_DISABLE_COMPAT", "")
    names = {v.strip() for v in value.split(",") if v.strip()}
    return set(REPAIRS) if "all" in names else names


def _trainer_module():
    import keras

    if not keras.__version__.startswith("3.") or keras.backend.backend() != "tensorflow":
        return None
    from keras.src.backend.tensorflow import trainer

    return trainer


def defect_present(name: str) -> bool:
    """Whether the installed Keras still has the defect ``name`` (ignores our own patch)."""
    trainer = _trainer_module()
    if trainer is None:
        return False
    if name == "symbolic_build":
        fn = getattr(trainer.TensorFlowTrainer._maybe_symbolic_build, "__tfdistributed_original__",
                     trainer.TensorFlowTrainer._maybe_symbolic_build)
        return ".reduce(" in inspect.getsource(fn)
    if name == "reduce_per_replica":
        fn = getattr(trainer.reduce_per_replica, "__tfdistributed_original__", trainer.reduce_per_replica)
        return 'strategy.reduce("MEAN", v, axis=0)' in inspect.getsource(fn)
    raise ValueError(f"unknown repair {name!r}; repairs are {REPAIRS}")


def _patch_symbolic_build(trainer) -> None:
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


def _patch_reduce_per_replica(trainer) -> None:
    from keras.src import tree

    original = trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if reduction == "auto" and not trainer._is_tpu_strategy(strategy):
            reduction = "mean"
        if reduction == "mean" and trainer._collective_all_reduce_multi_worker(strategy):
            return tree.map_structure(
                lambda v: strategy.reduce("MEAN", v, axis=None if _rank(v) == 0 else 0), values)
        return original(values, strategy, reduction)

    reduce_per_replica.__tfdistributed_original__ = original
    trainer.reduce_per_replica = reduce_per_replica


def _rank(value) -> int | None:
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    shape = getattr(value, "shape", None)
    return None if shape is None else shape.rank


_PATCHERS = {"symbolic_build": _patch_symbolic_build, "reduce_per_replica": _patch_reduce_per_replica}


def apply() -> dict[str, bool]:
    """Apply every repair whose defect is present and which is not disabled; idempotent.

    Returns ``{repair name: applied?}``.
    """
    with _lock:
        trainer = _trainer_module()
        disabled = _disabled()
        for name in REPAIRS:
            if _applied.get(name):
                continue
            if trainer is None or name in disabled or not defect_present(name):
                _applied[name] = False
                continue
            _PATCHERS[name](trainer)
            _applied[name] = True
        return dict(_applied)


def status() -> dict[str, dict[str, bool]]:
    """For each repair: is the defect in the installed Keras, and is our repair applied."""
    return {name: {"defect_present": defect_present(name), "applied": bool(_applied.get(name))}
            for name in REPAIRS}
