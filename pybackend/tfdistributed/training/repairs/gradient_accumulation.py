"""``gradient_accumulation``: Keras' gradient accumulation cannot run under a strategy, and its
accumulators would not hold what several replicas accumulated.

Keras (``BaseOptimizer._backend_apply_gradients``) chooses between applying the accumulated
gradients and adding to the accumulators with an ``ops.cond`` in each replica, and both
branches reach ``merge_call`` (the update, and TensorFlow's accumulator increments), which
TensorFlow forbids inside a branch: ``SGD(gradient_accumulation_steps=4)`` failed under
``mirrored``, ``central_storage``, ``multi_worker_mirrored`` and ``parameter_server`` with
"`merge_call` called while defining a new graph or a tf.function" (keras-team/keras#20582).
The condition is taken in cross-replica context here, where Keras' own
``LossScaleOptimizer`` takes its own for the same reason: one ``merge_call``, then each branch
runs the replicas' part with ``call_for_each_replica``.

What is accumulated is what one device accumulates. Each replica adds its own gradients,
weighted by its share of the step's examples (:func:`~.uneven_batches.weighted_by_share`: a
batch split unevenly over the replicas counts as on one device), to accumulators that are
TensorFlow's variables for per-replica state (``synchronization="on_read"``, ``"sum"``:
reading one outside a replica gives the sum over the replicas, so a checkpoint or backup holds
the sum, and restoring it splits it over the replicas); Keras' accumulators were mirrored
variables holding a different value on each replica, of which a checkpoint kept the first.
Every N-th step the replicas' accumulated gradients are all-reduced once (compressed under a
strategy marked for it), averaged over the N steps, clipped (after the all-reduce, as on one
device) and applied: N steps of B examples
update as one step of N x B on one device, and the gradients cross between workers once per
update, not once per step. Under ``central_storage`` the accumulators are one variable on the
parameter device, to which every replica's share is added.
"""

from __future__ import annotations

from .common import Repair, in_a_replica_needing_merge_call, source
from .uneven_batches import weighted_by_share, weights_applied

ACCUMULATOR = "gradient_accumulator"  # the name Keras gives each accumulator


def detect(trainer) -> bool:
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    step = source(BaseOptimizer._backend_apply_gradients)
    return "gradient_accumulation_steps" in step and "ops.cond(" in step


def apply(trainer) -> None:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    apply_gradients = TFOptimizer._backend_apply_gradients
    add_from_reference = TFOptimizer.add_variable_from_reference

    def _backend_apply_gradients(self, grads, trainable_variables):
        if not _accumulates_under_a_strategy(self):
            return apply_gradients(self, grads, trainable_variables)
        _accumulate_or_update(self, list(grads), list(trainable_variables))
        _moving_averages(self)

    def add_variable_from_reference(self, reference_variable, name=None, initializer="zeros"):
        if name == ACCUMULATOR and self._distribution_strategy.num_replicas_in_sync > 1:
            return _per_replica_accumulator(self, reference_variable, initializer)
        return add_from_reference(self, reference_variable, name=name, initializer=initializer)

    _backend_apply_gradients.__tfdistributed_original__ = apply_gradients
    add_variable_from_reference.__tfdistributed_original__ = add_from_reference
    TFOptimizer._backend_apply_gradients = _backend_apply_gradients
    TFOptimizer.add_variable_from_reference = add_variable_from_reference


def _accumulates_under_a_strategy(optimizer) -> bool:
    """Whether ``optimizer`` accumulates gradients in a replica of a strategy whose updates
    need ``merge_call`` (every strategy but the default, XLA on GPUs aside)."""
    return bool(optimizer.gradient_accumulation_steps) and in_a_replica_needing_merge_call()


def _per_replica_accumulator(optimizer, reference, initializer):
    """An accumulator for ``reference`` that each replica adds to on its own, summed when read
    outside the replicas (TensorFlow's sync-on-read variable), named as Keras names it."""
    from keras.src import backend, initializers

    name = f"{reference.path.replace('/', '_')}_{ACCUMULATOR}" if hasattr(reference, "path") \
        else f"{str(reference.name).replace('/', '_').replace(':', '_')}_{ACCUMULATOR}"
    colocate = reference.value if isinstance(reference, backend.Variable) else reference
    with optimizer._distribution_strategy.extended.colocate_vars_with(colocate):
        with backend.name_scope(optimizer.name, caller=optimizer):
            variable = backend.Variable(
                initializer=initializers.get(initializer), shape=reference.shape,
                dtype=reference.dtype, trainable=False, aggregation="sum",
                synchronization="on_read", name=name)
    optimizer._track_variable(variable)
    return variable


def _accumulate_or_update(optimizer, grads, variables) -> None:
    """Keras' accumulation step with its condition taken outside the replicas: add this step's
    gradients to the accumulators, or (every N-th step) apply them with the accumulated ones."""
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    grads = [tf.convert_to_tensor(g) for g in weighted_by_share(context, grads)]
    accumulators = [optimizer._accumulated_gradients[optimizer._get_variable_index(v)]
                    for v in variables]

    def update(grads):
        _apply_accumulated(optimizer, grads, accumulators, variables)

    def increment(grads):
        for grad, accumulator in zip(grads, accumulators):
            accumulator.value.assign_add(tf.cast(grad, accumulator.dtype))

    def decide(distribution, grads):
        steps = optimizer.gradient_accumulation_steps
        tf.cond(tf.equal((optimizer._iterations + 1) % steps, 0),
                lambda: distribution.extended.call_for_each_replica(update, args=(grads,)),
                lambda: distribution.extended.call_for_each_replica(increment, args=(grads,)))

    context.merge_call(decide, args=(grads,))


def _apply_accumulated(optimizer, grads, accumulators, variables) -> None:
    """In each replica, on the N-th step: the N steps' gradients all-reduced once, averaged,
    clipped, applied; the accumulators emptied."""
    import tensorflow as tf
    from keras.src import backend

    replicas = tf.distribute.get_replica_context().num_replicas_in_sync
    steps = optimizer.gradient_accumulation_steps
    local = [(_share(a, replicas) + tf.cast(g, a.dtype)) / steps
             for g, a in zip(grads, accumulators)]
    with weights_applied():  # compressed, when the strategy is marked for it
        pairs = optimizer._all_reduce_sum_gradients(list(zip(local, variables)))
    reduced = [g for g, _ in pairs]
    reduced = optimizer._clip_gradients(reduced)
    optimizer._apply_weight_decay(variables)
    tf_variables = [v.value if isinstance(v, backend.Variable) else v for v in variables]
    tf.__internal__.distribute.interim.maybe_merge_call(
        optimizer._distributed_tf_update_step, optimizer._distribution_strategy,
        list(zip(reduced, tf_variables)), optimizer.learning_rate)
    for accumulator in accumulators:
        accumulator.value.assign(tf.zeros_like(accumulator.value))


def _share(accumulator, replicas):
    """This replica's part of an accumulator: its own (sync-on-read), or an equal part of one
    shared by the replicas (central storage's, or one replica's)."""
    import tensorflow as tf

    value = accumulator.value
    if isinstance(value, tf.distribute.DistributedValues):
        return tf.identity(value)  # the replica's own component
    return tf.identity(value) / float(replicas)


def _moving_averages(optimizer) -> None:
    """What Keras does after the update, with EMA: the moving averages follow the weights at
    every step, and overwrite them every ``ema_overwrite_frequency`` steps (which
    ``ema_overwrite`` makes possible under a strategy)."""
    from keras.src import ops

    if not optimizer.use_ema:
        return
    optimizer._update_model_variables_moving_average(optimizer._trainable_variables)
    if optimizer.ema_overwrite_frequency:
        ops.cond((optimizer.iterations + 1) % optimizer.ema_overwrite_frequency == 0,
                 lambda: optimizer._overwrite_model_variables_with_average_value(
                     optimizer._trainable_variables),
                 lambda: None)


REPAIR = Repair(name="gradient_accumulation", defect=__doc__, upstream=("keras-team/keras#20582",),
                detect=detect, apply=apply, after=("uneven_batches", "clip_after_all_reduce"))
