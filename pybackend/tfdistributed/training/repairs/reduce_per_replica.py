"""``reduce_per_replica``: a multi-worker step's scalar outputs are reduced along an axis they
do not have.

``reduce_per_replica`` reduces the step's outputs across workers with
``strategy.reduce("MEAN", v, axis=0)``; the outputs are scalar metrics, so this fails with
"Invalid reduction dimension 0 for input with 0 dimensions" (keras-team/keras#20585). Scalars
are reduced with ``axis=None`` (the mean across replicas), everything else as before; a metric
result that is a variable (a user's ``result()`` returning ``self.count``) is read across
replicas. All the scalars of a step go in one all-reduce: one round trip between workers per
step instead of one per metric.

Outputs a train step already averaged over the workers (``logs_with_gradients`` sends them in
the gradients' all-reduce and marks them with :func:`mark_reduced`) are taken as they are.
"""

from __future__ import annotations

import threading

from .common import Repair, dtype_of, is_scalar_number, rank_of, source

# Log tensors a train step already averaged over the workers, by (graph, name): the step is
# traced in the replica's thread, reduce_per_replica in the caller's, with new Tensor objects.
_reduced_logs: dict = {}
_reduced_lock = threading.RLock()


def detect(trainer) -> bool:
    return 'strategy.reduce("MEAN", v, axis=0)' in source(trainer.reduce_per_replica)


def apply(trainer) -> None:
    from keras.src import tree

    original = trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if reduction == "auto" and not trainer._is_tpu_strategy(strategy):
            reduction = "mean"
        if reduction == "mean" and trainer._collective_all_reduce_multi_worker(strategy):
            return _mean_over_workers_packed(tree, values, strategy)
        return original(values, strategy, reduction)

    reduce_per_replica.__tfdistributed_original__ = original
    trainer.reduce_per_replica = reduce_per_replica


def mark_reduced(tensors) -> None:
    """Tell ``reduce_per_replica`` that these graph tensors already are means over the workers."""
    with _reduced_lock:
        for value in tensors:
            _reduced_logs[(id(value.graph), value.name)] = value  # holds the graph: no id reuse


def _mean_over_workers_packed(tree, values, strategy):
    """Every step output as the mean over all replicas, in one all-reduce for all the scalars.

    A train step returns a scalar per metric (loss, accuracy, ...). Reduced one by one, each is a
    separate collective, i.e. a round trip between workers in every step; packed into one
    vector they cost one. Non-scalar outputs and metric variables are reduced on their own.
    """
    import tensorflow as tf

    flat = tree.flatten(values)
    reduced = {}
    for i, v in enumerate(flat):
        done = _already_reduced(v)
        if done is not None:
            reduced[i] = done
    _forget_reduced_logs({value.graph for value in reduced.values()})
    scalar = [i for i, v in enumerate(flat) if i not in reduced and is_scalar_number(v)]
    reduced.update({i: _mean_over_workers(v, strategy) for i, v in enumerate(flat)
                    if i not in scalar and i not in reduced})
    if len(scalar) == 1:
        reduced[scalar[0]] = _mean_over_workers(flat[scalar[0]], strategy)
    elif scalar:
        dtypes = {dtype_of(flat[i]) for i in scalar}
        dtype = dtypes.pop() if len(dtypes) == 1 else tf.float64
        packed = strategy.run(lambda *xs: tf.stack([tf.cast(x, dtype) for x in xs]),
                              args=tuple(flat[i] for i in scalar))
        means = strategy.reduce("MEAN", packed, axis=None)
        for k, i in enumerate(scalar):
            reduced[i] = tf.cast(means[k], dtype_of(flat[i]))
    return tree.pack_sequence_as(values, [reduced[i] for i in range(len(flat))])


def _mean_over_workers(value, strategy):
    """One step output as the mean over all replicas of all workers.

    A metric whose ``result()`` returns its variable itself (``return self.count``) hands back
    a sync-on-read variable: read here, across replicas, it already is the global value.
    """
    import keras
    import tensorflow as tf

    if isinstance(value, (keras.Variable, tf.Variable)):
        return tf.convert_to_tensor(value)
    return strategy.reduce("MEAN", value, axis=None if rank_of(value) == 0 else 0)


def _already_reduced(value):
    """``value`` itself if a train step already averaged it over the workers, else None."""
    import tensorflow as tf

    parts = value.values if isinstance(value, tf.distribute.DistributedValues) else (value,)
    with _reduced_lock:
        if parts and all(isinstance(p, tf.Tensor) and not isinstance(p, tf.__internal__.EagerTensor)
                         and (id(p.graph), p.name) in _reduced_logs for p in parts):
            return parts[0]
    return None


def _forget_reduced_logs(graphs) -> None:
    with _reduced_lock:
        for key in [k for k, t in _reduced_logs.items() if t.graph in graphs]:
            del _reduced_logs[key]


REPAIR = Repair(name="reduce_per_replica", defect=__doc__, upstream=("keras-team/keras#20585",),
                detect=detect, apply=apply)
