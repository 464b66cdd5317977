"""Parameter-server training of Keras 3 models on ``tf.distribute.coordinator.ClusterCoordinator``.

Keras 3 ``fit`` does not support ``ParameterServerStrategy`` (keras-team/keras#18624), so
:func:`tfdistributed.fit` sends parameter-server strategies here. The chief process is the
*coordinator*: it holds no variables of its own (they live on the ``ps`` tasks) and schedules
training steps as closures onto the ``worker`` tasks, which run them asynchronously.

How the pieces map onto Keras:

- **Data.** What the input is (arrays, a dataset, a dataset function), the global batch and
  each replica's share, validation data and sample/class weights are decided by the input plan
  of :mod:`tfdistributed.data`, the same one the collective strategies use. Every worker builds
  its own input pipeline (``create_per_worker_dataset``) and reads only its shard: worker ``i``
  of ``n`` keeps every ``n``-th example starting at ``i``, repeated forever, in batches of
  ``global batch // replicas per worker``. Arrays are embedded in the pipeline that is sent to
  the workers (fine for in-memory data; for data bigger than ~1 GB pass a function that reads
  files). A ``tf.data.Dataset`` is serialized and *re-created on every
  worker* (so it must not depend on Python state of the chief), then sharded by batches. A
  callable ``dataset_fn(input_context)`` gets full control: ``input_context.input_pipeline_id``
  is the worker's index and ``num_input_pipelines`` the number of workers (its dataset is
  repeated; an epoch is ``steps_per_epoch`` steps).
- **Steps.** One step is ``model.train_step`` (so custom ``train_step``/``compute_loss``
  overrides keep working) run by ``strategy.run`` inside a ``tf.function`` scheduled with
  ``coordinator.schedule``, in blocks of the model's ``steps_per_execution`` steps (one
  closure, so one round trip between a worker and the coordinator, per block); ``join()``
  ends an epoch. An optimizer with ``use_ema`` ends training with its averages as the
  weights, as in Keras' ``fit``. Keras scales each replica's loss by the
  replicas in sync, i.e. ``tf.nn.compute_average_loss`` over the global batch.
- **Metrics.** The model's own metric objects (the compiled loss tracker and metrics) are built
  under the strategy scope, so their variables live on the ps tasks and every worker's step
  updates the same totals; they are read on the chief at the end of each epoch. Keras 3's
  ``assign_add`` is read-then-write, which loses updates when workers race; the
  ``atomic_assign_add`` repair of :mod:`tfdistributed.training.compat` makes it one TensorFlow op.
- **Callbacks** run on the chief at epoch boundaries only (steps are asynchronous, so there is no
  meaningful per-batch state): ``History`` (returned, as from Keras ``fit``), the progress line
  (one line per epoch), ``ModelCheckpoint``, ``EarlyStopping`` and custom callbacks;
  batch-level hooks are not called. ``checkpoint_dir=`` additionally writes a
  ``tf.train.Checkpoint`` of model and optimizer after every epoch and resumes from the latest.
- **Partitioned variables** (:func:`partitioner`) are split over the ps tasks; Keras 3's
  ``train_step`` cannot differentiate them, so such models train with an equivalent step that
  takes gradients per shard (:func:`_step_fn`).
- **Evaluation and prediction** run *inline on the chief*: the chief calls the model directly
  (its variables are read from the ps tasks) over the whole dataset in order, so results are
  exact and reproducible (``model.predict`` itself fails under this strategy).
- **Worker failures.** The coordinator re-queues the steps of a worker that goes away and the
  remaining workers run them, so training finishes as long as one worker is alive. A lost ps
  task ends the job (its variables are gone).
"""

from __future__ import annotations

from . import compat
from .._args import as_int, as_str
from ..cluster.environment import read_tf_config
from ..data.plan import plan_input
from ..errors import ArgumentTypeError, ShardingError
from .options import check_options

PARTITIONERS = ("min_size", "max_size", "fixed")
_FIT_EXTRAS = ("checkpoint_dir", "initial_epoch", "validation_freq", "validation_steps")


def coordinator_of(strategy):
    """The ``ClusterCoordinator`` of ``strategy`` (TensorFlow keeps one per strategy).

    Example:
        >>> coordinator_of(strategy).join()    # doctest: +SKIP
    """
    import tensorflow as tf

    return tf.distribute.coordinator.ClusterCoordinator(strategy)


def partitioner(kind="min_size", *, num_shards=None, min_shard_bytes=256 << 10,
                max_shard_bytes=None, max_shards=None):
    """A variable partitioner for ``make_strategy("parameter_server", variable_partitioner=...)``.

    Large variables (embeddings) are then split along their first axis over the ps tasks:

    - ``"min_size"``: shards of at least ``min_shard_bytes`` each, at most ``max_shards``.
    - ``"max_size"``: shards of at most ``max_shard_bytes`` each, at most ``max_shards``.
    - ``"fixed"``: exactly ``num_shards`` shards (fewer if the first axis is shorter).

    For ``"min_size"``, ``max_shards`` defaults to the number of ps tasks in TF_CONFIG (1
    without TF_CONFIG): more shards than ps tasks only add traffic. ``"max_size"`` has no cap
    unless given one.

    Args:
        kind: ``"min_size"``, ``"max_size"`` or ``"fixed"``.
        num_shards: ``"fixed"``'s number of shards.
        min_shard_bytes, max_shard_bytes, max_shards: the other kinds' limits.

    Returns:
        A ``tf.distribute.experimental.partitioners.Partitioner``.

    Raises:
        ArgumentTypeError: an unknown kind, or a limit that is not a whole number >= 1.

    Example:
        >>> strategy = make_strategy("parameter_server",
        ...                          variable_partitioner=partitioner("min_size"))  # doctest: +SKIP
    """
    import tensorflow as tf

    if max_shards is None and str(kind).lower() == "min_size":
        config = read_tf_config()
        max_shards = max(1, len(config["cluster"].get("ps", []))) if config else 1
    partitioners = tf.distribute.experimental.partitioners
    kind = as_str(kind, "kind").lower()
    if kind == "min_size":
        return partitioners.MinSizePartitioner(
            min_shard_bytes=as_int(min_shard_bytes, "min_shard_bytes", minimum=1),
            max_shards=as_int(max_shards, "max_shards", minimum=1))
    if kind == "max_size":
        return partitioners.MaxSizePartitioner(
            max_shard_bytes=as_int(max_shard_bytes, "max_shard_bytes", minimum=1),
            max_shards=as_int(max_shards, "max_shards", minimum=1, allow_none=True))
    if kind == "fixed":
        return partitioners.FixedShardsPartitioner(as_int(num_shards, "num_shards", minimum=1))
    raise ArgumentTypeError(f"Unknown partitioner kind {kind!r}; use one of "
                            f"{', '.join(PARTITIONERS)} (e.g. partitioner('min_size', "
                            f"max_shards=<number of ps tasks>)).")


def _num_workers(strategy) -> int:
    # ParameterServerStrategy keeps its resolver on itself, so the public
    # `strategy.cluster_resolver` (which asks `extended`) is None. Any other strategy (a test
    # calling this module directly) has one input pipeline.
    return int(getattr(strategy.extended, "_num_workers", 1))


def _plan(what, x, y=None, *, strategy, **kwargs):
    """The input plan for a direct call of this module's ``fit``/``evaluate``/``predict``
    (:func:`tfdistributed.fit` and friends make it themselves and call the ``*_planned``
    functions)."""
    return plan_input(what, x, y, kind="parameter_server",
                      replicas=int(strategy.num_replicas_in_sync), workers=_num_workers(strategy),
                      **kwargs)


def _worker_context(strategy, workers):
    """An InputContext naming the worker a dataset function runs on.

    ParameterServerStrategy's own context says "1 pipeline, id 0" on every worker (its workers
    are not in sync); sharding needs the worker's index, which is only known when the function
    runs on a worker, hence the call-time value.
    """
    import tensorflow as tf

    return tf.distribute.InputContext(
        num_input_pipelines=workers,
        input_pipeline_id=tf.distribute.coordinator.experimental_get_current_worker_index(),
        num_replicas_in_sync=strategy.num_replicas_in_sync)


def _need_targets(plan) -> None:
    if plan.source == "arrays" and plan.y is None:
        raise ArgumentTypeError(f"{plan.what}(): with arrays, pass the targets as `y`.")


def _train_source(plan):
    """``(dataset_fn(input_context), element_spec)``: what each worker reads for ``plan``."""
    import tensorflow as tf

    x = plan.x
    if plan.source == "function":
        local = x(tf.distribute.InputContext(1, 0, plan.replicas))
        if not isinstance(local, tf.data.Dataset):
            raise ArgumentTypeError(f"fit(): the dataset function must return a tf.data.Dataset, "
                                    f"got {type(local).__name__}.")
        return lambda context: x(context).repeat(), local.element_spec
    if plan.source == "dataset":
        from tensorflow.python.distribute.coordinator import values

        if 0 <= int(x.cardinality()) < plan.workers:
            raise ShardingError(
                f"fit(): the dataset has {int(x.cardinality())} batches, fewer than the "
                f"{plan.workers} workers, so some worker would get none. Use a smaller batch size "
                f"or more data.")
        # A dataset lives in the chief's memory and cannot be captured by a function that runs
        # on a worker; its graph can, and each worker rebuilds the dataset from it (what
        # ClusterCoordinator does for a dataset, plus this worker's shard).
        graph, spec = values.serialize_dataset_to_graph(x), x.element_spec

        def dataset_fn(context):
            dataset = values.deserialize_dataset_from_graph(graph, spec)
            return dataset.shard(context.num_input_pipelines, context.input_pipeline_id).repeat()

        return dataset_fn, spec
    _need_targets(plan)
    n, per_replica = plan.num_examples, plan.per_replica_batch

    def dataset_fn(context):
        ds = plan.examples().shard(context.num_input_pipelines, context.input_pipeline_id)
        if plan.shuffle:
            ds = ds.shuffle(max(1, n // context.num_input_pipelines), seed=plan.seed,
                            reshuffle_each_iteration=True)
        return ds.repeat().batch(per_replica, drop_remainder=True).prefetch(2)

    return dataset_fn, plan.examples().batch(per_replica).element_spec


def _per_worker_iterator(strategy, dataset_fn, workers):
    import tensorflow as tf

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(
            lambda _: dataset_fn(_worker_context(strategy, workers)))

    return iter(coordinator_of(strategy).create_per_worker_dataset(per_worker_dataset_fn))


def _build(model, strategy, element_spec):
    """Create every variable fit needs (model, compiled metrics and loss, optimizer) on the ps.

    Variables cannot be created inside a step running on a worker, and Keras would otherwise
    create metric and optimizer variables lazily during the first step.
    """
    with strategy.scope():
        model._symbolic_build(data_batch=element_spec)
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)


def _shards(variable):
    """The TensorFlow variables behind a Keras variable: its shards when it is partitioned."""
    import tensorflow as tf

    value = getattr(variable, "value", variable)
    if isinstance(value, tf.__internal__.distribute.ShardedVariable):
        return list(value.variables)
    return [value]


def _step_fn(model):
    """What one replica runs per step: ``model.train_step``, unless a weight is partitioned.

    Keras 3's ``train_step`` cannot train a variable split by a partitioner: the gradient tape
    asks the Keras variable for one ``handle``, which a ``ShardedVariable`` does not have. The
    partitioned step takes gradients with respect to the shards, joins each variable's shards
    into one gradient, and lets the optimizer (see
    :func:`tfdistributed.training.compat.update_shards_directly`) split the update again.
    """
    import keras
    import tensorflow as tf
    from keras import tree
    from keras.src.losses import loss as loss_module

    if all(len(_shards(v)) == 1 for v in model.trainable_variables):
        return model.train_step
    compat.update_shards_directly(model.optimizer)

    def partitioned_train_step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                       training=True)
            model._loss_tracker.update_state(
                loss_module.unscale_loss_for_distribution(loss),
                sample_weight=tf.shape(tree.flatten(x)[0])[0])
            loss = model.optimizer.scale_loss(loss)
        variables = model.trainable_variables
        shards = [_shards(v) for v in variables]
        flat = tape.gradient(loss, [s for group in shards for s in group])
        gradients, start = [], 0
        for group in shards:
            parts = [tf.convert_to_tensor(g) for g in flat[start:start + len(group)]]
            start += len(group)
            gradients.append(parts[0] if len(parts) == 1 else tf.concat(parts, axis=0))
        model.optimizer.apply_gradients(zip(gradients, variables))
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    return partitioned_train_step


def _logs(model) -> dict:
    return {k: float(v) for k, v in model.get_metrics_result().items()}


def _inline_evaluator(model):
    """``run(dataset, steps=None) -> logs``: loss and metrics over ``dataset``, computed on the
    chief, in order. One traced step per evaluator, reused by every epoch's validation."""
    import tensorflow as tf

    test_step = tf.function(model.test_step, reduce_retracing=True)

    def run(dataset, steps=None):
        model.reset_metrics()
        if steps is not None:
            dataset = dataset.take(steps)
        for batch in dataset:
            test_step(batch)
        logs = _logs(model)
        model.reset_metrics()
        return logs

    return run


def _quiet_save(manager, number):
    import tensorflow as tf

    # With variables on several tasks TensorFlow traces a new save function on every save and
    # warns about "retracing" from the fifth epoch on; the warning is not actionable.
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        manager.save(checkpoint_number=number)
    finally:
        logger.setLevel(level)


def _validate_now(epoch: int, freq) -> bool:
    """Keras' ``validation_freq``: every ``freq`` epochs, or the listed (1-based) epochs."""
    if isinstance(freq, (list, tuple, set, range)):
        return epoch + 1 in freq
    return (epoch + 1) % as_int(freq, "validation_freq", minimum=1) == 0


def fit(model, x=None, y=None, *, strategy, epochs=1, batch_size=None, validation_data=None,
        callbacks=None, steps_per_epoch=None, shuffle=True, seed=None, verbose="auto",
        sample_weight=None, **fit_kwargs):
    """Train ``model`` with a ParameterServerStrategy on the workers of its cluster.

    :func:`tfdistributed.fit` comes here (through :func:`fit_planned`) for parameter-server
    strategies; see the module docstring for how data, steps, metrics and callbacks work.

    Args:
        model: a Keras model built and compiled inside ``strategy.scope()``.
        x, y, sample_weight: arrays (with ``y``), a ``tf.data.Dataset`` of global batches, or
            a function ``input_context -> tf.data.Dataset`` (each worker's own dataset).
        strategy: the ``ParameterServerStrategy``.
        epochs, batch_size, callbacks, shuffle, seed: as in :func:`tfdistributed.fit`.
        validation_data: ``(x_val, y_val[, sample_weight_val])`` arrays or a dataset, evaluated
            on the chief after every epoch (every ``validation_freq`` epochs).
        steps_per_epoch: default: ``len(x) // batch_size`` for arrays, the dataset's length for
            a finite dataset; needed for a dataset function.
        verbose: ``"auto"`` (one line per epoch), 0, 1 or 2.
        **fit_kwargs: ``checkpoint_dir`` (a ``tf.train.Checkpoint`` of model and optimizer each
            epoch; an existing one is restored and training resumes after its epoch),
            ``initial_epoch``, ``validation_freq``, ``validation_steps``.

    Returns:
        The Keras ``History``.

    Raises:
        ArgumentTypeError: an argument this trainer does not take, or that does not fit the
            input (as :func:`tfdistributed.data.plan_input` says).
        TrainingError: ``steps_per_epoch`` is needed, or the data is less than one batch.
        ShardingError: a dataset has fewer batches than there are workers.

    Example:
        >>> strategy = make_strategy("parameter_server")            # doctest: +SKIP
        >>> fit(model, x, y, strategy=strategy, epochs=5, batch_size=64,
        ...     checkpoint_dir="/shared/ckpt")                     # doctest: +SKIP
    """
    _check_extras(fit_kwargs)
    plan = _plan("fit", x, y, strategy=strategy, batch_size=batch_size,
                 sample_weight=sample_weight, validation_data=validation_data, shuffle=shuffle,
                 seed=seed)
    return fit_planned(model, plan, strategy=strategy, epochs=epochs, callbacks=callbacks,
                       steps_per_epoch=steps_per_epoch, verbose=verbose, **fit_kwargs)


def _check_extras(fit_kwargs) -> None:
    unknown = sorted(set(fit_kwargs) - set(_FIT_EXTRAS))
    if unknown:
        raise ArgumentTypeError(
            f"fit() under 'parameter_server' does not take {unknown}; it takes the common fit() "
            f"arguments plus {list(_FIT_EXTRAS)}.")


def fit_planned(model, plan, *, strategy, epochs=1, callbacks=None, steps_per_epoch=None,
                verbose="auto", **fit_kwargs):
    """:func:`fit` for an input already planned by :func:`tfdistributed.data.plan_input`.

    Returns:
        The Keras ``History``.
    """
    import keras
    import tensorflow as tf

    _check_extras(fit_kwargs)
    check_options(model, strategy, "fit")
    initial_epoch = as_int(fit_kwargs.get("initial_epoch", 0), "initial_epoch", minimum=0)
    validation_freq = fit_kwargs.get("validation_freq", 1)
    validation_steps = as_int(fit_kwargs.get("validation_steps"), "validation_steps", minimum=1,
                              allow_none=True)
    dataset_fn, element_spec = _train_source(plan)
    steps = plan.steps_per_epoch(steps_per_epoch)
    validation_data = plan.validation_dataset()
    _build(model, strategy, element_spec)
    evaluate_inline = _inline_evaluator(model)

    manager = None
    if fit_kwargs.get("checkpoint_dir") is not None:
        checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        manager = tf.train.CheckpointManager(checkpoint, fit_kwargs["checkpoint_dir"],
                                             max_to_keep=3)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint)
            # The checkpoint's number is the count of epochs it had completed.
            initial_epoch = max(initial_epoch, int(manager.latest_checkpoint.rsplit("-", 1)[1]))

    iterator = _per_worker_iterator(strategy, dataset_fn, plan.workers)
    run_block = _blocks_of_steps(strategy, _step_fn(model))
    blocks = _block_sizes(steps, model)

    if verbose == "auto":
        verbose = 2  # one line per epoch: async steps have no meaningful per-batch progress
    callbacks = keras.callbacks.CallbackList(
        callbacks, add_history=True, add_progbar=verbose != 0, verbose=verbose, epochs=epochs,
        steps=steps, model=model)
    coordinator = coordinator_of(strategy)
    history = next(c for c in callbacks.callbacks if isinstance(c, keras.callbacks.History))
    model.stop_training = False
    callbacks.on_train_begin()
    # Where BackupAndRestore says to resume, as Keras fit does.
    initial_epoch = getattr(model, "_initial_epoch", None) or initial_epoch
    logs = None
    for epoch in range(initial_epoch, epochs):
        model.reset_metrics()
        callbacks.on_epoch_begin(epoch)
        for size in blocks:
            coordinator.schedule(run_block(size), args=(iterator,))
        coordinator.join()
        logs = _logs(model)
        if validation_data is not None and _validate_now(epoch, validation_freq):
            logs.update({f"val_{k}": v for k, v in
                         evaluate_inline(validation_data, validation_steps).items()})
        if manager is not None:
            _quiet_save(manager, epoch + 1)
        callbacks.on_epoch_end(epoch, logs)
        if model.stop_training:
            break
    if model.optimizer is not None and epochs > 0:
        with strategy.scope():  # as Keras' fit ends: an EMA optimizer's averages become the weights
            model.optimizer.finalize_variable_values(model.trainable_weights)
    callbacks.on_train_end(logs=logs)
    return history


def _blocks_of_steps(strategy, step_fn):
    """``run_block(n)``: a ``tf.function`` that runs ``n`` steps on the worker it is sent to,
    traced once per block size (the model's ``steps_per_execution``, a last shorter block)."""
    import tensorflow as tf

    traced = {}

    def run_block(n: int):
        if n not in traced:
            @tf.function
            def steps(iterator):
                for _ in range(n):
                    strategy.run(step_fn, args=(next(iterator),))

            traced[n] = steps
        return traced[n]

    return run_block


def _block_sizes(steps: int, model) -> list[int]:
    """An epoch's ``steps`` in blocks of the model's ``steps_per_execution``: one closure sent to
    a worker per block, so a worker makes one round trip to the coordinator per block, not per
    step (the steps and their order are the same)."""
    block = max(int(getattr(model, "steps_per_execution", 1) or 1), 1)
    return [block] * (steps // block) + ([steps % block] if steps % block else [])


def evaluate(model, x=None, y=None, *, strategy, batch_size=None, steps=None, verbose="auto",
             sample_weight=None):
    """The loss and metrics of ``model`` over ``x``/``y`` (or a dataset), computed on the chief.

    Runs inline on the chief, over every example exactly once, in order (see the module
    docstring), so the result equals a single-process evaluation of the same weights.

    Args:
        model: a Keras model built and compiled inside ``strategy.scope()``.
        x, y, sample_weight: arrays (with ``y``) or a ``tf.data.Dataset`` of batches.
        strategy: the ``ParameterServerStrategy``.
        batch_size: the batch for arrays (default 32).
        steps: evaluate this many batches only.
        verbose: unused (one synchronous pass: nothing to report along the way).

    Returns:
        ``{"loss": ..., metric: ...}`` as floats.

    Raises:
        ArgumentTypeError: arrays without ``y``, or arguments that do not fit the input.

    Example:
        >>> evaluate(model, x_test, y_test, strategy=strategy, batch_size=64)    # doctest: +SKIP
        {'loss': 0.12, 'accuracy': 0.97}
    """
    del verbose
    plan = _plan("evaluate", x, y, strategy=strategy, batch_size=batch_size,
                 sample_weight=sample_weight)
    return evaluate_planned(model, plan, strategy=strategy, steps=steps)


def evaluate_planned(model, plan, *, strategy, steps=None):
    """:func:`evaluate` for an input already planned by :func:`tfdistributed.data.plan_input`."""
    _need_targets(plan)
    dataset = plan.dataset()
    _build(model, strategy, dataset.element_spec)
    return _inline_evaluator(model)(dataset, steps)


def predict(model, x, batch_size=None):
    """``model``'s outputs for ``x`` as NumPy, computed on the chief.

    The chief calls the model directly: ``model.predict`` fails under ParameterServerStrategy.

    Args:
        model: a Keras model (its variables may live on the ps tasks).
        x: arrays (one array, a dict or a list of arrays), or a ``tf.data.Dataset`` of batches
            (of inputs, or of ``(inputs, targets)``: the inputs are predicted).
        batch_size: the batch for arrays (default 32).

    Returns:
        The outputs, one row per example, in order.

    Raises:
        ArgumentTypeError: no input, or arrays that are not numeric.

    Example:
        >>> predict(model, x_test[:50]).shape    # doctest: +SKIP
        (50, 10)
    """
    strategy = model.distribute_strategy
    return predict_planned(model, _plan("predict", x, strategy=strategy, batch_size=batch_size,
                                        check_shards=False))


def predict_planned(model, plan):
    """:func:`predict` for an input already planned by :func:`tfdistributed.data.plan_input`."""
    import keras
    import numpy as np
    import tensorflow as tf
    from keras import tree

    call = tf.function(lambda inputs: model(inputs, training=False), reduce_retracing=True)
    # Like model.predict, a dataset of (x, y) batches is predicted from its x.
    outputs = [tree.map_structure(np.asarray, call(keras.utils.unpack_x_y_sample_weight(batch)[0]))
               for batch in plan.dataset()]
    return tree.map_structure(lambda *parts: np.concatenate(parts), *outputs)
