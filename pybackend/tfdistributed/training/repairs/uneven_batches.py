"""``uneven_batches``: a batch split unevenly over the replicas does not update as one device.

Keras makes each replica's loss the mean over *its* examples divided by the number of
replicas, and sums the gradients. That equals one device's mean over the global batch only
when every replica has as many examples. A last batch smaller than the global batch is split
unevenly (1 example over 2 workers: 1 and 0), and its update is then not one device's:
measured on the digits model, 2 workers ended epoch 2 with loss 0.354 where one device had
0.364. Each replica's gradients are weighted by its share of the examples here, inside the
same all-reduce (the example counts travel with the gradients, no extra round trip), so the
update is the global mean's whatever the split; with even shares the weight is 1.
Under a strategy marked for gradient compression (:mod:`tfdistributed.strategies.compression`) this
is where the gradients go to 16 bits: the counts and carried values then travel in a small 32-bit
all-reduce of their own, before the gradients'. The gradients' all-reduce is packed
(:func:`tfdistributed.strategies.packing.gradient_options`: the strategy's ``bytes_per_pack``, else
packs for a big gradient), which TensorFlow alone never does for a replica's all-reduce.
Under a strategy marked for PowerSGD (:mod:`tfdistributed.strategies.lowrank`) the gradients
go low-rank here instead, weighted the same way; its state (``Q`` matrices, error buffers) is
made when the optimizer is built and saved with it, so backups hold it.

Three pieces of this machinery are public, for the repairs that build on it: the replica's
example count while a train step is traced (:func:`counting_examples`), other scalars that
travel in the gradients' all-reduce (:func:`carried_in_all_reduce`, which
``logs_with_gradients`` uses for the step's logs), and gradients weighted by the replica's
share before they are accumulated and all-reduced later (:func:`weighted_by_share`, then
:func:`weights_applied`, for ``gradient_accumulation``).
"""

from __future__ import annotations

import contextlib
import threading

from ...strategies.compression import (compressed_all_reduce, gradient_compression,
                                       powersgd_options)
from ...strategies.packing import gradient_options
from ...strategies.lowrank import build_state, powersgd_all_reduce, reset_if_resized
from .common import Repair, dtype_of, source

_local_batch = threading.local()  # the replica's batch size while its train_step is traced
_carried = threading.local()  # scalars for the gradients' all-reduce, while it is traced
_POWERSGD_STATE = "_tfd_powersgd"  # the optimizer's PowerSGD state, if it was built with one


def detect(trainer) -> bool:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer
    from keras.src.losses import loss

    per_replica_mean = "1.0 / num_replicas" in source(loss.scale_loss_for_distribution)
    return per_replica_mean and "all_reduce" in source(TFOptimizer._all_reduce_sum_gradients)


@contextlib.contextmanager
def counting_examples(data):
    """While a replica's train step on ``data`` is traced: its number of examples, by which
    the gradient all-reduce weights its gradients."""
    import tensorflow as tf
    from keras.src import tree
    from keras.src.trainers.data_adapters import data_adapter_utils

    x, _, _ = data_adapter_utils.unpack_x_y_sample_weight(data)
    first = next((i for i in tree.flatten(x) if i is not None), None)
    previous = getattr(_local_batch, "size", None)
    _local_batch.size = None if first is None else tf.shape(first)[0]
    try:
        yield
    finally:
        _local_batch.size = previous


@contextlib.contextmanager
def carried_in_all_reduce(values):
    """Have the next gradient all-reduce traced in this thread and graph carry ``values``
    (this replica's scalars) too; yields ``{index in values: mean over the replicas}``, filled
    once it has run (those of another dtype than the gradients' are left out)."""
    import tensorflow as tf

    means: dict = {}
    _carried.values, _carried.means = list(values), means
    _carried.graph = tf.compat.v1.get_default_graph()
    try:
        yield means
    finally:
        _carried.values = _carried.means = _carried.graph = None


def weighted_by_share(context, grads) -> list:
    """This replica's ``grads`` weighted by its share of the step's examples, so that their sum
    over the replicas is one device's gradient of the whole step, however the batch was split
    (one all-reduce of the example counts, carrying the step's logs when they ride); as they are
    where that is moot (one replica, or a count unknown: a custom train step)."""
    import tensorflow as tf

    size = getattr(_local_batch, "size", None)
    replicas = context.num_replicas_in_sync
    if size is None or replicas == 1:
        return list(grads)
    local = tf.cast(size, tf.float32)
    riders = _take_carried(tf.float32)
    reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [local] + [v for _, v in riders])
    if riders:  # their mean over the replicas, as reduce_per_replica's
        _carried.means.update({slot: r / float(replicas)
                               for (slot, _), r in zip(riders, reduced[1:])})
    weight = local * float(replicas) / reduced[0]
    return [None if g is None else _scaled(g, weight) for g in grads]


@contextlib.contextmanager
def weights_applied():
    """While the gradients all-reduced in this thread already are weighted by their replica's
    share (:func:`weighted_by_share`, then accumulated): they are summed as they are, compressed
    when the strategy is marked for it."""
    previous = getattr(_local_batch, "size", None), getattr(_local_batch, "weighted", False)
    _local_batch.size, _local_batch.weighted = None, True
    try:
        yield
    finally:
        _local_batch.size, _local_batch.weighted = previous


def _take_carried(dtype) -> list:
    """``[(index, value)]`` of the carried values that can ride in this all-reduce: traced in
    its graph (not, say, inside a ``tf.cond`` branch of a loss-scaling optimizer), of its dtype."""
    import tensorflow as tf

    values = getattr(_carried, "values", None)
    if not values or _carried.graph is not tf.compat.v1.get_default_graph():
        return []
    _carried.values = None  # taken once: clip_after_all_reduce may call the all-reduce again
    return [(i, v) for i, v in enumerate(values) if dtype_of(v) == dtype]


def apply(trainer) -> None:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    train_step = trainer.TensorFlowTrainer.train_step
    all_reduce = TFOptimizer._all_reduce_sum_gradients
    build = BaseOptimizer.build

    def _train_step(self, data):
        with counting_examples(data):
            return train_step(self, data)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return _weighted_all_reduce(self, all_reduce, grads_and_vars)

    def _build(self, variables):
        build(self, variables)
        _build_powersgd_state(self, variables)

    _train_step.__tfdistributed_original__ = train_step
    _all_reduce_sum_gradients.__tfdistributed_original__ = all_reduce
    _build.__tfdistributed_original__ = build
    trainer.TensorFlowTrainer.train_step = _train_step
    TFOptimizer._all_reduce_sum_gradients = _all_reduce_sum_gradients
    BaseOptimizer.build = _build


def _build_powersgd_state(optimizer, variables) -> None:
    """PowerSGD's state for an optimizer built under a strategy marked for it, an attribute of
    the optimizer that Keras saves and loads with it (a backup holds it). A loss-scaling
    optimizer has none: its inner optimizer all-reduces."""
    strategy = getattr(optimizer, "_distribution_strategy", None)
    options = None if strategy is None else powersgd_options(strategy)
    if (options is None or gradient_compression(strategy) != "powersgd"
            or hasattr(optimizer, "inner_optimizer")):
        return
    variables = list(variables)
    with strategy.scope():
        state = build_state(variables, [optimizer._var_key(v) for v in variables], options)
    setattr(optimizer, _POWERSGD_STATE, state)


def _weighted_all_reduce(optimizer, all_reduce, grads_and_vars):
    """The optimizer's all-reduce of ``grads_and_vars``, each replica's gradients weighted by
    its share of the examples (``all_reduce``: Keras' own, used as it is where that is moot)."""
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    size = getattr(_local_batch, "size", None)
    pairs = list(grads_and_vars)
    grads = [g for g, _ in pairs if g is not None]
    state = getattr(optimizer, _POWERSGD_STATE, None)
    if state is not None and context is not None and context.num_replicas_in_sync == 1:
        reset_if_resized(state, 1)  # a job shrunk to one replica keeps no stale errors
    accumulated = getattr(_local_batch, "weighted", False)
    if (context is None or context.num_replicas_in_sync == 1 or not grads
            or (optimizer.gradient_accumulation_steps and not accumulated)):
        return all_reduce(optimizer, pairs)
    strategy = tf.distribute.get_strategy()
    kind = gradient_compression(strategy)
    dtypes = {g.dtype.base_dtype for g in grads}
    if kind == "powersgd" and state is not None and dtypes in ({tf.float32}, {tf.float64}):
        return _powersgd_all_reduce(context, optimizer, pairs, size, state,
                                    gradient_options(strategy, auto=False))
    if kind in ("fp16", "bf16") and dtypes <= {tf.float32, tf.float64}:
        # Packed only at a size set: the 16-bit all-reduce cannot overlap (packing's docstring).
        return _compressed_all_reduce(context, pairs, grads, size, kind,
                                      gradient_options(strategy, auto=False))
    if size is None:
        return all_reduce(optimizer, pairs)
    # Replica r's gradient is mean_r / R; the global mean's is sum_r n_r * mean_r / N.
    # One all-reduce packs its tensors into one buffer, so they must share a dtype: the
    # example count takes the gradients' (exact for float32/64 counts below 2**24).
    dtypes = {g.dtype.base_dtype for g in grads}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    if dtype not in (tf.float32, tf.float64):
        return _weighted_sum_apart(context, pairs, grads, size)
    local = tf.cast(size, dtype)
    weight = local * float(context.num_replicas_in_sync)
    riders = _take_carried(dtype)
    reduced = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                 [_scaled(g, weight) for g in grads] + [local]
                                 + [v for _, v in riders],
                                 options=gradient_options(strategy, grads))
    if riders:  # their mean over the replicas, as reduce_per_replica's
        _carried.means.update({slot: r / float(context.num_replicas_in_sync)
                               for (slot, _), r in zip(riders, reduced[len(grads) + 1:])})
    total = reduced[len(grads)]
    averaged = iter(_scaled(g, total, divide=True) for g in reduced[:len(grads)])
    return [(None if g is None else next(averaged), v) for g, v in pairs]


def _compressed_all_reduce(context, pairs, grads, size, kind, options):
    """The gradients in 16 bits
    (:func:`tfdistributed.strategies.compression.compressed_all_reduce`), weighted by the
    replicas' example counts (even shares where the count is unknown: a custom train step), the
    carried float32 values exact in its first, 32-bit, all-reduce."""
    import tensorflow as tf

    local = tf.constant(1.0) if size is None else tf.cast(size, tf.float32)
    riders = _take_carried(tf.float32)
    means, sums = compressed_all_reduce(context, grads, local, [v for _, v in riders], kind,
                                        options)
    if riders:  # their mean over the replicas, as reduce_per_replica's
        _carried.means.update({slot: s / float(context.num_replicas_in_sync)
                               for (slot, _), s in zip(riders, sums)})
    averaged = iter(means)
    return [(None if g is None else next(averaged), v) for g, v in pairs]


def _powersgd_all_reduce(context, optimizer, pairs, size, state, options):
    """The gradients low-rank (:func:`tfdistributed.strategies.lowrank.powersgd_all_reduce`),
    weighted by the replicas' example counts, the carried values in its first all-reduce."""
    import tensorflow as tf

    live = [(g, v) for g, v in pairs if g is not None]
    dtype = live[0][0].dtype.base_dtype
    local = tf.constant(1, dtype) if size is None else tf.cast(size, dtype)
    riders = _take_carried(dtype)
    entries = [state.entries.get(optimizer._var_key(v)) for _, v in live]
    means, sums = powersgd_all_reduce(context, [g for g, _ in live], entries, state, local,
                                      [v for _, v in riders], optimizer.iterations, options)
    if riders:  # their mean over the replicas, as reduce_per_replica's
        _carried.means.update({slot: s / float(context.num_replicas_in_sync)
                               for (slot, _), s in zip(riders, sums)})
    averaged = iter(means)
    return [(None if g is None else next(averaged), v) for g, v in pairs]


def _weighted_sum_apart(context, pairs, grads, size):
    """Gradients of several dtypes, or of a 16-bit one (whose integers are exact only up to
    256 or 2048): the example count goes in an all-reduce of its own, in float32."""
    import tensorflow as tf

    local = tf.cast(size, tf.float32)
    total = context.all_reduce(tf.distribute.ReduceOp.SUM, local)
    share = local * float(context.num_replicas_in_sync) / total
    reduced = iter(context.all_reduce(tf.distribute.ReduceOp.SUM,
                                      [_scaled(g, share) for g in grads]))
    return [(None if g is None else next(reduced), v) for g, v in pairs]


def _scaled(gradient, factor, divide=False):
    import tensorflow as tf

    def op(values):
        factor_ = tf.cast(factor, values.dtype)
        return values / factor_ if divide else values * factor_

    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(op(gradient.values), gradient.indices, gradient.dense_shape)
    return op(gradient)


REPAIR = Repair(name="uneven_batches", defect=__doc__, upstream=(), detect=detect, apply=apply)
