"""Keras 3 x tf.distribute repairs, applied at their root, only where the defect is present.

Every patch tfdistributed makes to Keras lives here, is listed in ``REPAIRS``, is reported by
:func:`status`, and can be switched off. They are installed as soon as Keras is imported in a
process that has imported tfdistributed (:func:`install`, run by ``import tfdistributed``; the R
package runs it when Python starts), so plain ``model.fit`` under a strategy the user built with
``tf.distribute`` directly is repaired too, not only :func:`tfdistributed.fit`.

``symbolic_build``
    ``TensorFlowTrainer._maybe_symbolic_build`` calls ``strategy.reduce("MEAN", batch,
    axis=None)`` eagerly on a ``PerReplica`` batch only to learn its shapes. Under multi-worker
    collectives that fails ("Attempt to convert a value (PerReplica...)"; keras-team/keras#20585,
    tensorflow/tensorflow#72388). The first local replica's value has the same per-replica
    shapes and needs no communication.

``reduce_per_replica``
    ``reduce_per_replica`` reduces the step's outputs across workers with
    ``strategy.reduce("MEAN", v, axis=0)``; the outputs are scalar metrics, so this fails with
    "Invalid reduction dimension 0 for input with 0 dimensions". Scalars are reduced with
    ``axis=None`` (the mean across replicas), everything else as before; a metric result that
    is a variable (a user's ``result()`` returning ``self.count``) is read across replicas.
    All the scalars of a step go in one all-reduce: one round trip between workers per step
    instead of one per metric.

``atomic_assign_add``
    Keras implements ``Variable.assign_add``/``assign_sub`` as ``assign(self + value)``: a read,
    then a write. Under ``CentralStorageStrategy`` a metric's SUM-aggregated variable is then
    written as ``sum over replicas of (total + local)``, so ``fit``/``evaluate`` report wrong
    losses and metrics while the weights are right; under parameter-server training concurrent
    workers lose updates. TensorFlow's own ``assign_add`` aggregates the increments.

``central_storage_updates``
    Keras creates non-trainable state updated in the forward pass (the seed of ``Dropout`` and
    every random layer, ``BatchNormalization``'s moving statistics) with aggregation "none".
    ``CentralStorageStrategy`` keeps one copy of each variable and refuses a replica-context
    update it cannot aggregate ("You must specify an aggregation method to update a
    AggregatingVariable in Replica Context"). Such variables are created with
    ``ONLY_FIRST_REPLICA`` there: the first replica's update is kept, which is what
    ``MirroredStrategy`` exposes too (it reads the first replica's copy).

``central_storage_metric_assign``
    Many Keras metrics (``AUC``, ``Precision``/``Recall`` with thresholds, the confusion-matrix
    family) accumulate with ``variable.assign(variable + increment)``. Under
    ``CentralStorageStrategy`` every replica reads the same central total and the SUM-aggregated
    ``assign`` adds the totals up: AUC 0.53 was reported where the truth was 0.75. There, an
    ``assign`` from a replica to a SUM-aggregated variable is applied as the increment it is
    (``assign_add(value - current)``), which sums the replicas' increments, as one device would.

``uneven_batches``
    Keras makes each replica's loss the mean over *its* examples divided by the number of
    replicas, and sums the gradients. That equals one device's mean over the global batch only
    when every replica has as many examples. A last batch smaller than the global batch is
    split unevenly (1 example over 2 workers: 1 and 0), and its update is then not one device's:
    measured on the digits model, 2 workers ended epoch 2 with loss 0.354 where one device had
    0.364. Each replica's gradients are weighted by its share of the examples here, inside the
    same all-reduce (the example counts travel with the gradients, no extra round trip), so the
    update is the global mean's whatever the split; with even shares the weight is 1.

``sharded_variable_updates``
    Keras routes every optimizer update through ``strategy.extended.update``, which colocates
    it with the variable; a variable split over parameter servers by a partitioner
    (``ShardedVariable``) has no single place and fails ("doesn't support being used as a
    reference"). :func:`update_shards_directly` makes one optimizer update such variables through
    their own ``assign``/``assign_sub``, which write each shard on its ps task; the
    parameter-server trainer applies it to models with partitioned variables.

``clip_after_all_reduce``
    Keras clips gradients (``clipnorm``, ``clipvalue``, ``global_clipnorm``) in each replica
    *before* summing them over the replicas, so with 2 or more replicas the update is not the one
    a single device makes from the same global batch (each replica's share is clipped on its
    own). The sum over replicas is taken first here, then clipped, as on one device.

``logs_with_gradients``
    Not a defect but a cost: under multi-worker collectives a Keras train step makes two
    all-reduces, one of the gradients and then one of its logs (loss and metric values), and
    each is a round trip between the workers that the step waits for (the second is 8 bytes,
    yet it cost 10-13% of the small bench CNN's step on 2 workers). Keras' own ``train_step``
    updates the weights and then computes the metrics from the forward pass's predictions;
    the metrics read nothing the update writes, so here they are computed first and their
    scalars travel in the gradients' all-reduce: one collective per step. Same values bit for
    bit (tested); only for Keras' own ``train_step`` and ``compute_metrics`` (a model that
    overrides either keeps Keras' order), and a metric that reads the model's weights would
    see them before the step's update. Requires ``uneven_batches`` (whose all-reduce carries
    them) and ``reduce_per_replica`` (which then skips them).

``assign_without_read``
    Another cost: Keras assigns a variable with TensorFlow's ``assign``, which reads the
    variable back by default, and ignores what it read. A metric's variables are
    sync-on-read under ``tf.distribute``: read outside a step, on several workers, each is an
    all-reduce run eagerly (about 4.5 ms each here). ``reset_metrics()``, at every epoch's
    start and in ``evaluate()``, paid one per metric variable (19 ms per epoch for a loss and
    an accuracy). Such assignments are made without the read-back.

``multi_worker_steps_per_execution``
    Keras runs ``steps_per_execution`` > 1 as a ``tf.while_loop`` that reads each batch as an
    optional and calls the step inside a ``tf.cond``; under multi-worker collectives TensorFlow
    cannot run that graph ("You must feed a value for placeholder tensor
    'while/.../cond/Placeholder'"), so such a model could not train on several workers at all.
    There the block's steps are chained in one function instead, each reading its batch with
    ``get_next`` (where the data ends inside a block, the steps before have run and Keras ends
    the epoch, as it does on one device), every op of a step waiting for that step's batch, and
    the step's outputs (loss, metrics) are averaged over the workers once, after the block's
    last step (with ``logs_with_gradients`` on, each step's logs already travel in its
    gradients' all-reduce and the block adds none). A last, shorter block is in the epoch's
    results but gets no batch-end callback (one device gives it one). An input with fewer
    batches than one block ends before Keras has any logs; that is refused with the fix.

``strategy_aware_fit``
    ``Model.fit``/``evaluate``/``predict`` know nothing of parameter-server strategies
    (keras-team/keras#18624) nor of multi-worker file writes. Under a ``ParameterServerStrategy``
    they go to tfdistributed's coordinator trainer; in a multi-worker job the callbacks that
    write files are made chief-only (:func:`tfdistributed.checkpoints.safe_callbacks`). Under
    every strategy, what Keras would fail on deep inside (``batch_size=64.0``: a TensorFlow op
    error; a list of numbers as data: "Unrecognized data type" and a page of them) is refused
    first with a message naming the argument (:func:`tfdistributed._args.check_keras_call`).

Each repair is gated on the Keras major version and on the defective code still being in the
installed Keras or TensorFlow (read with ``inspect``), so an upstream fix turns our patch off by
itself. ``apply()`` is idempotent. Set ``TFDISTRIBUTED_DISABLE_COMPAT`` to ``all`` or a comma
list of repair names to switch repairs off (the tests use this to prove each defect is real).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import os
import sys
import threading

from ._args import check_keras_call

_lock = threading.RLock()
_applied: dict[str, bool] = {}

# Order matters: clip_after_all_reduce wraps the all-reduce that uneven_batches weights.
REPAIRS = ("symbolic_build", "reduce_per_replica", "atomic_assign_add", "central_storage_updates",
           "central_storage_metric_assign", "uneven_batches", "sharded_variable_updates",
           "clip_after_all_reduce", "logs_with_gradients", "assign_without_read",
           "multi_worker_steps_per_execution", "strategy_aware_fit")


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


def _original(fn):
    return getattr(fn, "__tfdistributed_original__", fn)


def _source(fn) -> str:
    return inspect.getsource(_original(fn))


def defect_present(name: str) -> bool:
    """Whether the installed Keras still has the defect ``name`` (ignores our own patch)."""
    trainer = _trainer_module()
    if trainer is None:
        return False
    if name == "symbolic_build":
        return ".reduce(" in _source(trainer.TensorFlowTrainer._maybe_symbolic_build)
    if name == "reduce_per_replica":
        return 'strategy.reduce("MEAN", v, axis=0)' in _source(trainer.reduce_per_replica)
    if name == "atomic_assign_add":
        from keras.src.backend.common import variables

        return "self.assign(self + value)" in _source(variables.Variable.assign_add)
    if name == "central_storage_updates":
        from keras.src.random import seed_generator
        from tensorflow.python.distribute import ps_values

        refuses = "aggregation_error_msg" in inspect.getsource(ps_values.AggregatingVariable)
        return refuses and 'aggregation="none"' in inspect.getsource(seed_generator.SeedGenerator)
    if name == "central_storage_metric_assign":
        from keras.src.metrics import metrics_utils
        from tensorflow.python.distribute import ps_values

        read_then_write = "variable.assign(variable +" in inspect.getsource(metrics_utils)
        return read_then_write and hasattr(ps_values, "AggregatingVariable")
    if name == "uneven_batches":
        from keras.src.backend.tensorflow.optimizer import TFOptimizer
        from keras.src.losses import loss

        per_replica_mean = "1.0 / num_replicas" in inspect.getsource(
            loss.scale_loss_for_distribution)
        return per_replica_mean and "all_reduce" in _source(TFOptimizer._all_reduce_sum_gradients)
    if name == "sharded_variable_updates":
        from keras.src.backend.tensorflow.optimizer import TFOptimizer

        return "extended.update" in _source(TFOptimizer._distributed_tf_update_step)
    if name == "clip_after_all_reduce":
        from keras.src.backend.tensorflow.optimizer import TFOptimizer

        clip_first = _source(TFOptimizer._backend_apply_gradients).find("_clip_gradients")
        reduce_later = "_all_reduce_sum_gradients" in _source(TFOptimizer._backend_update_step)
        return clip_first >= 0 and reduce_later
    if name == "logs_with_gradients":
        source = _source(trainer.TensorFlowTrainer.train_step)
        update, metrics = source.find(".apply_gradients("), source.find(".compute_metrics(")
        return 0 <= update < metrics
    if name == "assign_without_read":
        from keras.src.backend.tensorflow.core import Variable

        return "read_value" not in _source(Variable._direct_assign)
    if name == "multi_worker_steps_per_execution":
        source = _source(trainer.TensorFlowTrainer._make_function)
        return "tf.while_loop" in source and "get_next_as_optional" in source
    if name == "strategy_aware_fit":
        return "ClusterCoordinator" not in inspect.getsource(trainer)
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
            return _mean_over_workers_packed(tree, values, strategy)
        return original(values, strategy, reduction)

    reduce_per_replica.__tfdistributed_original__ = original
    trainer.reduce_per_replica = reduce_per_replica


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
    scalar = [i for i, v in enumerate(flat) if i not in reduced and _packable(v)]
    reduced.update({i: _mean_over_workers(v, strategy) for i, v in enumerate(flat)
                    if i not in scalar and i not in reduced})
    if len(scalar) == 1:
        reduced[scalar[0]] = _mean_over_workers(flat[scalar[0]], strategy)
    elif scalar:
        dtypes = {_dtype(flat[i]) for i in scalar}
        dtype = dtypes.pop() if len(dtypes) == 1 else tf.float64
        packed = strategy.run(lambda *xs: tf.stack([tf.cast(x, dtype) for x in xs]),
                              args=tuple(flat[i] for i in scalar))
        means = strategy.reduce("MEAN", packed, axis=None)
        for k, i in enumerate(scalar):
            reduced[i] = tf.cast(means[k], _dtype(flat[i]))
    return tree.pack_sequence_as(values, [reduced[i] for i in range(len(flat))])


def _packable(value) -> bool:
    import keras
    import tensorflow as tf

    return (not isinstance(value, (keras.Variable, tf.Variable)) and _rank(value) == 0
            and _dtype(value) is not None and (_dtype(value).is_floating
                                               or _dtype(value).is_integer))


def _dtype(value):
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    return getattr(value, "dtype", None)


def _mean_over_workers(value, strategy):
    """One step output as the mean over all replicas of all workers.

    A metric whose ``result()`` returns its variable itself (``return self.count``) hands back
    a sync-on-read variable: read here, across replicas, it already is the global value.
    """
    import keras
    import tensorflow as tf

    if isinstance(value, (keras.Variable, tf.Variable)):
        return tf.convert_to_tensor(value)
    return strategy.reduce("MEAN", value, axis=None if _rank(value) == 0 else 0)


def _rank(value) -> int | None:
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    shape = getattr(value, "shape", None)
    return None if shape is None else shape.rank


def _patch_atomic_assign_add(trainer) -> None:
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


def _patch_central_storage_updates(trainer) -> None:
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


def _patch_central_storage_metric_assign(trainer) -> None:
    import tensorflow as tf
    from keras.src.backend.tensorflow.core import Variable
    from tensorflow.python.distribute import ps_values

    original = Variable._direct_assign

    def _direct_assign(self, value):
        inner = self._value
        if (isinstance(inner, ps_values.AggregatingVariable)
                and inner.aggregation == tf.VariableAggregation.SUM
                and isinstance(inner._distribute_strategy,
                               tf.distribute.experimental.CentralStorageStrategy)
                and not tf.distribute.in_cross_replica_context()):
            value = tf.cast(value, inner.dtype)
            inner.assign_add(value - inner.read_value())
            return
        original(self, value)

    _direct_assign.__tfdistributed_original__ = original
    Variable._direct_assign = _direct_assign


_local_batch = threading.local()  # the replica's batch size while its train_step is traced


def _patch_uneven_batches(trainer) -> None:
    import tensorflow as tf
    from keras.src import tree
    from keras.src.backend.tensorflow.optimizer import TFOptimizer
    from keras.src.trainers.data_adapters import data_adapter_utils

    train_step = trainer.TensorFlowTrainer.train_step
    all_reduce = TFOptimizer._all_reduce_sum_gradients

    def _train_step(self, data):
        x, _, _ = data_adapter_utils.unpack_x_y_sample_weight(data)
        first = next((i for i in tree.flatten(x) if i is not None), None)
        previous = getattr(_local_batch, "size", None)
        _local_batch.size = None if first is None else tf.shape(first)[0]
        try:
            if _logs_can_ride(self, trainer):
                return _train_step_logs_riding(self, data, train_step)
            return train_step(self, data)
        finally:
            _local_batch.size = previous

    def _all_reduce_sum_gradients(self, grads_and_vars):
        context = tf.distribute.get_replica_context()
        size = getattr(_local_batch, "size", None)
        pairs = list(grads_and_vars)
        grads = [g for g, _ in pairs if g is not None]
        if (size is None or context is None or context.num_replicas_in_sync == 1 or not grads
                or self.gradient_accumulation_steps):
            return all_reduce(self, pairs)
        # Replica r's gradient is mean_r / R; the global mean's is sum_r n_r * mean_r / N.
        # One all-reduce packs its tensors into one buffer, so they must share a dtype: the
        # example count takes the gradients' (exact for float32/64 counts below 2**24).
        dtypes = {g.dtype.base_dtype for g in grads}
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        if dtype not in (tf.float32, tf.float64):
            return _weighted_sum_apart(context, pairs, grads, size)
        local = tf.cast(size, dtype)
        weight = local * float(context.num_replicas_in_sync)
        riders = _take_riders(dtype)
        reduced = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                     [_scaled(g, weight) for g in grads] + [local]
                                     + [v for _, v in riders])
        if riders:  # the step's logs: their mean over the replicas, as reduce_per_replica's
            _riding.reduced = {slot: r / float(context.num_replicas_in_sync)
                               for (slot, _), r in zip(riders, reduced[len(grads) + 1:])}
        total = reduced[len(grads)]
        averaged = iter(_scaled(g, total, divide=True) for g in reduced[:len(grads)])
        return [(None if g is None else next(averaged), v) for g, v in pairs]

    def _weighted_sum_apart(context, pairs, grads, size):
        # Gradients of several dtypes, or of a 16-bit one (whose integers are exact only up to
        # 256 or 2048): the example count goes in an all-reduce of its own, in float32.
        local = tf.cast(size, tf.float32)
        total = context.all_reduce(tf.distribute.ReduceOp.SUM, local)
        share = local * float(context.num_replicas_in_sync) / total
        reduced = iter(context.all_reduce(tf.distribute.ReduceOp.SUM,
                                          [_scaled(g, share) for g in grads]))
        return [(None if g is None else next(reduced), v) for g, v in pairs]

    _train_step.__tfdistributed_original__ = train_step
    _all_reduce_sum_gradients.__tfdistributed_original__ = all_reduce
    trainer.TensorFlowTrainer.train_step = _train_step
    TFOptimizer._all_reduce_sum_gradients = _all_reduce_sum_gradients


_riding = threading.local()  # the step's logs, while its gradient all-reduce is traced
# While Keras' train step is traced in this (replica) thread: the optimizer whose
# apply_gradients calls are held back, and those calls. Per thread, since a worker with several
# devices traces one replica per thread at once.
_deferring = threading.local()
# Log tensors a train step already averaged over the workers, by (graph, name): the step is
# traced in the replica's thread, reduce_per_replica in the caller's, with new Tensor objects.
_reduced_logs: dict = {}


def _logs_can_ride(model, trainer) -> bool:
    """Whether this train step's logs can travel in its gradient all-reduce.

    Only Keras' own ``train_step`` and ``compute_metrics`` (which read nothing the update
    writes) under multi-worker collectives, where the logs would otherwise cost an all-reduce
    of their own in every step, and only while ``reduce_per_replica`` (which must then skip
    them) is ours. Not under XLA (``jit_compile``, Keras' default where there is a GPU): the
    step is then traced in a graph of its own, whose outputs ``reduce_per_replica`` cannot
    recognise, and this machine has no GPU to test it on.
    """
    stock = trainer.TensorFlowTrainer
    return (_applied.get("logs_with_gradients", False) and _applied.get("reduce_per_replica", False)
            and not model.jit_compile
            and _original(type(model).train_step) is _original(stock.train_step)
            and _original(type(model).compute_metrics) is _original(stock.compute_metrics)
            and model.optimizer is not None and not model.optimizer.gradient_accumulation_steps
            and trainer._collective_all_reduce_multi_worker(model.distribute_strategy))


def _train_step_logs_riding(model, data, train_step):
    """Keras' train step with the update after the metrics, the logs in the update's all-reduce.

    Keras updates the weights, then computes the metrics from the forward pass's predictions;
    the metrics read nothing the update writes, so computing them first gives the same values.
    Their scalars then go in the gradients' all-reduce: one collective per step, not two.
    """
    import tensorflow as tf
    from keras.src import tree

    optimizer = model.optimizer
    deferred = []
    previous = getattr(_deferring, "calls", None), getattr(_deferring, "optimizer", None)
    _deferring.calls, _deferring.optimizer = deferred, optimizer
    try:
        logs = train_step(model, data)
    finally:
        _deferring.calls, _deferring.optimizer = previous
    if len(deferred) != 1:  # no trainable weights: nothing to ride
        for grads_and_vars in deferred:
            optimizer.apply_gradients(grads_and_vars)
        return logs
    flat = tree.flatten(logs)
    slots = [i for i, v in enumerate(flat) if _packable(v)]
    _riding.values = [flat[i] for i in slots]
    _riding.graph = tf.compat.v1.get_default_graph()
    _riding.reduced = None
    try:
        optimizer.apply_gradients(deferred[0])
        reduced = _riding.reduced
    finally:
        _riding.values = _riding.reduced = _riding.graph = None
    if not reduced:
        return logs
    with _lock:
        for position, value in reduced.items():
            flat[slots[position]] = value
            _reduced_logs[(id(value.graph), value.name)] = value  # holds the graph: no id reuse
    return tree.pack_sequence_as(logs, flat)


def _take_riders(dtype) -> list:
    """``[(position, log value)]`` of the logs that can ride in this all-reduce: traced in its
    graph (not, say, inside a ``tf.cond`` branch of a loss-scaling optimizer), of its dtype."""
    import tensorflow as tf

    values = getattr(_riding, "values", None)
    if not values or _riding.graph is not tf.compat.v1.get_default_graph():
        return []
    _riding.values = None  # taken once: clip_after_all_reduce may call the all-reduce again
    return [(i, v) for i, v in enumerate(values) if _dtype(v) == dtype]


def _already_reduced(value):
    """``value`` itself if a train step already averaged it over the workers, else None."""
    import tensorflow as tf

    parts = value.values if isinstance(value, tf.distribute.DistributedValues) else (value,)
    with _lock:
        if parts and all(isinstance(p, tf.Tensor) and not isinstance(p, tf.__internal__.EagerTensor)
                         and (id(p.graph), p.name) in _reduced_logs for p in parts):
            return parts[0]
    return None


def _forget_reduced_logs(graphs) -> None:
    with _lock:
        for key in [k for k, t in _reduced_logs.items() if t.graph in graphs]:
            del _reduced_logs[key]


def _scaled(gradient, factor, divide=False):
    import tensorflow as tf

    def op(values):
        factor_ = tf.cast(factor, values.dtype)
        return values / factor_ if divide else values * factor_

    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(op(gradient.values), gradient.indices, gradient.dense_shape)
    return op(gradient)


def update_shards_directly(optimizer) -> None:
    """Let ``optimizer`` update partitioned variables.

    Keras routes every update through ``strategy.extended.update``, which colocates the update
    with the variable; a ``ShardedVariable`` has no single place ("doesn't support being used as
    a reference"). Its own ``assign``/``assign_sub`` already write each shard on its ps task,
    so partitioned variables are updated directly.
    """
    import tensorflow as tf

    if not apply().get("sharded_variable_updates"):
        return
    distributed_update = optimizer._distributed_tf_update_step
    if getattr(distributed_update, "updates_shards_directly", False):
        return

    def update(distribution, grads_and_vars, learning_rate):
        whole = []
        for grad, var in grads_and_vars:
            if isinstance(var, tf.__internal__.distribute.ShardedVariable):
                optimizer.update_step(grad, var, learning_rate)
            else:
                whole.append((grad, var))
        distributed_update(distribution, whole, learning_rate)

    update.updates_shards_directly = True
    optimizer._distributed_tf_update_step = update


def _patch_sharded_variable_updates(trainer) -> None:
    """Nothing global: :func:`update_shards_directly` patches one optimizer when asked."""


def _patch_logs_with_gradients(trainer) -> None:
    """``apply_gradients`` can be held back while a train step is traced (the train step that
    ``uneven_batches`` wraps decides when)."""
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    apply_gradients = BaseOptimizer.apply_gradients

    def _apply_gradients(self, grads_and_vars):
        if getattr(_deferring, "optimizer", None) is self:
            _deferring.calls.append(list(grads_and_vars))
            return self._iterations  # as Keras returns
        return apply_gradients(self, grads_and_vars)

    _apply_gradients.__tfdistributed_original__ = apply_gradients
    BaseOptimizer.apply_gradients = _apply_gradients


def _patch_clip_after_all_reduce(trainer) -> None:
    import tensorflow as tf
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    apply_gradients = TFOptimizer._backend_apply_gradients
    all_reduce = TFOptimizer._all_reduce_sum_gradients

    def _backend_apply_gradients(self, grads, trainable_variables):
        context = tf.distribute.get_replica_context()
        clips = any(getattr(self, k, None) is not None
                    for k in ("clipnorm", "clipvalue", "global_clipnorm"))
        if (not clips or context is None or context.num_replicas_in_sync == 1
                or self.gradient_accumulation_steps):
            return apply_gradients(self, grads, trainable_variables)
        reduced = all_reduce(self, list(zip(grads, trainable_variables)))
        self._tfd_gradients_reduced = True
        try:
            return apply_gradients(self, [g for g, _ in reduced], trainable_variables)
        finally:
            self._tfd_gradients_reduced = False

    def _all_reduce_sum_gradients(self, grads_and_vars):
        if getattr(self, "_tfd_gradients_reduced", False):
            return list(grads_and_vars)
        return all_reduce(self, grads_and_vars)

    _backend_apply_gradients.__tfdistributed_original__ = apply_gradients
    _all_reduce_sum_gradients.__tfdistributed_original__ = all_reduce
    TFOptimizer._backend_apply_gradients = _backend_apply_gradients
    TFOptimizer._all_reduce_sum_gradients = _all_reduce_sum_gradients


def _patch_assign_without_read(trainer) -> None:
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

    _direct_assign.__tfdistributed_original__ = _original(previous)
    Variable._direct_assign = _direct_assign


def _patch_multi_worker_steps_per_execution(trainer) -> None:
    original = trainer.TensorFlowTrainer._make_function

    def _make_function(self, step_function):
        if (self.steps_per_execution > 1 and not self.run_eagerly
                and trainer._collective_all_reduce_multi_worker(self.distribute_strategy)):
            return _chained_steps(self, step_function, trainer)
        return original(self, step_function)

    _make_function.__tfdistributed_original__ = original
    trainer.TensorFlowTrainer._make_function = _make_function


def _chained_steps(model, step_function, trainer):
    """Keras' train/test function for ``steps_per_execution`` > 1 on several workers: the
    block's steps one after the other in one ``tf.function``, the logs reduced after the last."""
    import tensorflow as tf

    from .errors import TrainingError

    strategy = model.distribute_strategy

    def on_its_batch(data):
        # Every op of a step waits for the step's batch. Ops that read no data (the optimizer's
        # step counter, which Adam's bias correction reads) would otherwise run while the
        # batch's get_next is still finding out that the data has ended: the counter then
        # counts a step that never ran. merge_call carries these dependencies into the updates.
        with tf.control_dependencies(tf.nest.flatten(data, expand_composites=True)):
            return step_function(data)

    def one_step(data):
        return strategy.run(on_its_batch, args=(data,))

    if model.jit_compile:  # one compiled op: it starts once all its inputs are there
        one_step = tf.function(one_step, reduce_retracing=True, jit_compile=True)

    @tf.autograph.experimental.do_not_convert
    def block(iterator):
        outputs = one_step(iterator.get_next())
        for _ in range(model.steps_per_execution - 1):
            outputs = one_step(iterator.get_next())
        return trainer.reduce_per_replica(outputs, strategy, reduction="auto")

    block = tf.function(block, reduce_retracing=True)

    def function(iterator):
        try:
            outputs = block(iterator)
        except tf.errors.OutOfRangeError:
            if getattr(iterator, "_tfdistributed_blocks_run", 0):
                raise  # the end of the data: Keras ends the epoch
            raise TrainingError(
                f"The data ended inside the first block of {model.steps_per_execution} steps "
                f"(steps_per_execution={model.steps_per_execution}): one pass over it has fewer "
                f"batches than that, and on several workers Keras has no result for such a "
                f"block. Compile the model with a steps_per_execution of at most the number of "
                f"batches, or use a smaller batch size.",
                hints={"r": "E.g. model$compile(..., steps_per_execution = 2L) inside "
                            "with(strategy$scope(), { ... })."}) from None
        iterator._tfdistributed_blocks_run = getattr(iterator, "_tfdistributed_blocks_run", 0) + 1
        return outputs

    return function


def _patch_strategy_aware_fit(trainer) -> None:
    cls = trainer.TensorFlowTrainer
    originals = {name: getattr(cls, name) for name in ("fit", "evaluate", "predict")}

    def fit(self, *args, **kwargs):
        from ._entry import entry

        check_keras_call(originals["fit"], self, args, kwargs)
        _refuse_r_generator(args, kwargs, "model.fit")
        if _is_parameter_server(self):
            return entry("fit_from_keras")(self, *args, **kwargs)
        if "callbacks" in kwargs:
            kwargs["callbacks"] = _safe(kwargs["callbacks"])
        elif len(args) > 5:  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
            args = (*args[:5], _safe(args[5]), *args[6:])
        return originals["fit"](self, *args, **kwargs)

    def evaluate(self, *args, **kwargs):
        from ._entry import entry

        check_keras_call(originals["evaluate"], self, args, kwargs)
        _refuse_r_generator(args, kwargs, "model.evaluate")
        if _is_parameter_server(self):
            return entry("evaluate_from_keras")(self, *args, **kwargs)
        return originals["evaluate"](self, *args, **kwargs)

    def predict(self, *args, **kwargs):
        from ._entry import entry

        check_keras_call(originals["predict"], self, args, kwargs)
        if _is_parameter_server(self):
            return entry("predict_from_keras")(self, *args, **kwargs)
        return originals["predict"](self, *args, **kwargs)

    for name, patched in (("fit", fit), ("evaluate", evaluate), ("predict", predict)):
        patched.__tfdistributed_original__ = originals[name]
        patched.__doc__ = originals[name].__doc__
        # inspect.signature() (help(), R's positional arguments) shows Keras' own parameters.
        patched.__wrapped__ = originals[name]
        setattr(cls, name, patched)


def _refuse_r_generator(args, kwargs, what) -> None:
    """A dataset over an R generator, trained from R's main thread, hangs: refuse it at once."""
    import tensorflow as tf

    from .data import check_dataset

    x = args[0] if args else kwargs.get("x")
    if isinstance(x, tf.data.Dataset):
        check_dataset(x, what)


def _is_parameter_server(model) -> bool:
    import tensorflow as tf

    strategy = getattr(model, "_distribute_strategy", None)
    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


def _safe(callbacks):
    from .checkpoints import safe_callbacks

    return safe_callbacks(callbacks) if callbacks else callbacks


def keras_method(model, name: str):
    """Keras' own ``fit``/``evaluate``/``predict`` of ``model``, bound, without our routing."""
    return _original(getattr(type(model), name)).__get__(model)


_PATCHERS = {"symbolic_build": _patch_symbolic_build,
             "reduce_per_replica": _patch_reduce_per_replica,
             "atomic_assign_add": _patch_atomic_assign_add,
             "central_storage_updates": _patch_central_storage_updates,
             "central_storage_metric_assign": _patch_central_storage_metric_assign,
             "uneven_batches": _patch_uneven_batches,
             "sharded_variable_updates": _patch_sharded_variable_updates,
             "clip_after_all_reduce": _patch_clip_after_all_reduce,
             "logs_with_gradients": _patch_logs_with_gradients,
             "assign_without_read": _patch_assign_without_read,
             "multi_worker_steps_per_execution": _patch_multi_worker_steps_per_execution,
             "strategy_aware_fit": _patch_strategy_aware_fit}


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


class _ApplyAfterKerasImport(importlib.abc.MetaPathFinder):
    """Runs :func:`apply` right after the top-level ``keras`` package has been imported.

    ``import tfdistributed`` must stay cheap (TensorFlow is imported lazily so TF_CONFIG and
    logical devices can still be set after it), yet a user's own ``model.fit`` must meet repaired
    Keras whichever of the two was imported first.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_apply(module):
            exec_module(module)
            _uninstall_hook()
            apply()

        loader.exec_module = exec_then_apply
        return spec


def _uninstall_hook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _ApplyAfterKerasImport)]


def install() -> None:
    """Have the repairs in place whenever Keras is used: now if Keras is loaded, else on import."""
    if "keras" in sys.modules and hasattr(sys.modules["keras"], "__version__"):
        apply()
    elif not any(isinstance(f, _ApplyAfterKerasImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _ApplyAfterKerasImport())
