"""fit / evaluate a Keras 3 model under any strategy, with one call.

``fit(model, x, y, strategy=...)`` does what users otherwise assemble by hand: checks that the
model was built and compiled under the strategy's scope, turns arrays into a ``tf.data``
pipeline with the global batch size and the ``"data"`` shard policy, checks that a dataset can be
sharded over the workers *before* training, applies the Keras 3 multi-worker repairs
(:mod:`tfdistributed.compat`), and runs Keras ``fit`` inside the scope. Parameter-server
strategies go to the coordinator-based trainer in :mod:`tfdistributed.ps`, so user code is the
same for every strategy.
"""

from __future__ import annotations

import os

from . import checkpoints, compat
from ._args import as_int
from .cluster import is_chief
from .data import (DEFAULT_BATCH_SIZE, as_arrays, check_sharding,
                   class_weight_to_sample_weight, make_dataset, split_validation,
                   with_shard_policy)
from .errors import ArgumentTypeError, ShardingError, TrainingError
from .strategies import strategy_info, strategy_kind


def model_strategy(model):
    """The strategy ``model`` was created under (TensorFlow's default strategy when none)."""
    import tensorflow as tf

    return getattr(model, "_distribute_strategy", None) or tf.distribute.get_strategy()


def _check_model(model, strategy, what: str):
    import keras
    import tensorflow as tf

    if not isinstance(model, keras.Model):
        raise ArgumentTypeError(f"{what}() needs a Keras model, got {type(model).__name__}.")
    built_under = getattr(model, "_distribute_strategy", None)
    if strategy is None:
        strategy = built_under or tf.distribute.get_strategy()
    kind = strategy_kind(strategy)
    if kind != "default" and built_under is not strategy:
        where = "outside any strategy scope" if built_under is None else \
            f"under another strategy ({strategy_kind(built_under)})"
        raise TrainingError(
            f"The model was built {where}, but {what}() was asked to use the {kind!r} strategy. "
            f"Build and compile the model inside the strategy's scope: Python `with "
            f"strategy.scope(): model = ...; model.compile(...)`, R `with(strategy$scope(), "
            f"{{ model <- ...; model$compile(...) }})`.")
    for variable in model.weights[:1]:
        value = getattr(variable, "value", variable)
        if kind != "default" and not strategy.extended.variable_created_in_scope(value):
            raise TrainingError(
                f"The model's weights were created outside the {kind!r} strategy's scope (the model "
                f"was built before entering it). Create *and build* the model inside "
                f"`strategy.scope()`.")
    if not getattr(model, "compiled", False):
        raise TrainingError(f"The model is not compiled: call model.compile(optimizer=..., loss=...) "
                            f"inside the strategy's scope before {what}().")
    return strategy


def _check_batch(batch_size, strategy):
    if batch_size is None:
        return None
    batch_size = as_int(batch_size, "batch_size", minimum=1)
    replicas = int(strategy.num_replicas_in_sync)
    if batch_size % replicas:
        per = max(1, batch_size // replicas)
        raise TrainingError(
            f"batch_size={batch_size} is the global batch and must divide evenly over the "
            f"{replicas} replicas in sync; use {per * replicas} (= global_batch_size({per}, "
            f"strategy)) or {(per + 1) * replicas}.")
    return batch_size


def _num_input_workers(strategy) -> int:
    return int(strategy_info(strategy)["num_workers"]) if strategy_kind(strategy) == \
        "multi_worker_mirrored" else 1


def _check_dataset_args(x, y, sample_weight, batch_size, what):
    """Arguments that only make sense with arrays, refused for a dataset before anything else."""
    import tensorflow as tf

    if not isinstance(x, tf.data.Dataset):
        return
    if y is not None or sample_weight is not None:
        raise ArgumentTypeError(f"{what}(): a tf.data.Dataset already holds the targets; pass "
                                f"`y`/`sample_weight` only with arrays.")
    if batch_size is not None:
        raise ArgumentTypeError(
            f"{what}(): `batch_size` applies to arrays only; batch the dataset itself with the "
            f"global batch size (dataset.batch(global_batch_size(per_replica, strategy))).")


def _shared_seed(seed, shuffle, strategy):
    """The shuffle seed; in a multi-worker job one every worker agrees on.

    Each worker shuffles its own copy of the arrays and keeps its share of every global batch:
    with different orders, workers would see some examples twice and others never. Without a
    seed from the user, every worker derives the same one from the cluster it belongs to.
    """
    if seed is not None or not shuffle or _num_input_workers(strategy) < 2:
        return seed
    import json
    import zlib

    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return zlib.crc32(json.dumps(cluster, sort_keys=True).encode()) & 0x7FFFFFFF


def _as_dataset(x, y, sample_weight, *, strategy, batch_size, shard_policy, shuffle, seed,
                check_shards, what, label="the training data"):
    import tensorflow as tf

    _check_dataset_args(x, y, sample_weight, batch_size, what)
    if isinstance(x, tf.data.Dataset):
        from .generators import refuse_r_generator_on_main_thread

        refuse_r_generator_on_main_thread(x, what)  # it would hang, not fail
        dataset = x if shard_policy is None else with_shard_policy(x, shard_policy)
    else:
        if x is None:
            raise ArgumentTypeError(f"{what}() needs data: arrays `x` (and `y`), or a tf.data.Dataset.")
        dataset = make_dataset(x, y, sample_weight=sample_weight,
                               batch_size=batch_size or DEFAULT_BATCH_SIZE, shuffle=shuffle,
                               seed=seed, policy=shard_policy or "data")
    workers = _num_input_workers(strategy)
    if check_shards and workers > 1:
        try:
            check_sharding(dataset, workers)
        except ShardingError as e:
            raise ShardingError(f"{what}(), {label}: {e}") from None
    return dataset


def _validation_parts(validation_data):
    """``(x, y, sample_weight)`` of array validation data, or ``None`` for a dataset."""
    import tensorflow as tf

    if validation_data is None or isinstance(validation_data, tf.data.Dataset):
        return None
    if isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3):
        x_val, y_val, *rest = validation_data
        return x_val, y_val, (rest or [None])[0]
    raise ArgumentTypeError(
        "fit(): validation_data must be (x_val, y_val) or (x_val, y_val, sample_weight_val) "
        f"arrays, or a tf.data.Dataset of batches; got {type(validation_data).__name__}"
        + (f" of length {len(validation_data)}" if isinstance(validation_data, (tuple, list)) else "")
        + ".")


def _split_off_validation(x, y, sample_weight, validation_split, validation_data):
    """Keras' ``validation_split`` for arrays: ``(x, y, sample_weight, validation_data)``."""
    import tensorflow as tf

    if not validation_split:
        return x, y, sample_weight, validation_data
    if isinstance(x, tf.data.Dataset) or callable(x):
        raise ArgumentTypeError(
            "fit(): validation_split works with arrays only, since a dataset cannot be split "
            "without reading it. Pass validation_data= (a separate dataset), or give arrays.")
    if validation_data is not None:
        return x, y, sample_weight, validation_data  # Keras: validation_data wins
    arrays, _ = as_arrays(x, y, sample_weight)
    train, held_out = split_validation(arrays, validation_split)
    x, y, sample_weight = (list(train) + [None, None])[:3]
    return x, y, sample_weight, tuple(held_out)


def _verbose(verbose):
    if verbose == "auto":
        if not is_chief():
            return 0
        # A progress bar redrawn with carriage returns is one endless line to a launcher that
        # streams output line by line: one line per epoch there.
        if os.environ.get("TFDISTRIBUTED_LAUNCHED"):
            return 2
    return verbose


def fit(model, x=None, y=None, *, strategy=None, epochs=1, batch_size=None, validation_data=None,
        validation_split=None, callbacks=None, shard_policy=None, steps_per_epoch=None,
        shuffle=True, seed=None, sample_weight=None, class_weight=None, verbose="auto",
        check_shards=True, backup_dir=None, **fit_kwargs):
    """Train ``model`` under ``strategy`` (default: the strategy it was built under).

    Args:
        model: a Keras model built and compiled inside ``strategy.scope()``.
        x, y: arrays (NumPy, pandas; ``x`` may be a dict of arrays for named inputs or a list of
            arrays), or ``x`` a ``tf.data.Dataset`` of ``(inputs, targets)`` batches of the
            *global* batch size.
        strategy: default: the strategy the model was built under.
        epochs, steps_per_epoch, initial_epoch, validation_steps, validation_freq: as in Keras.
        batch_size: the global batch (arrays only); must divide over the replicas in sync.
        validation_data: ``(x_val, y_val[, sample_weight_val])`` arrays or a dataset.
        validation_split: arrays only: hold out the last fraction of the rows, as Keras does
            (before shuffling, batching and sharding).
        sample_weight, class_weight: as in Keras; with arrays both may be given (the weights
            multiply), and ``class_weight`` is applied as per-example weights on every strategy.
        shuffle, seed: shuffle arrays every epoch. In a multi-worker job every worker must
            shuffle alike; without a ``seed`` they share one derived from the cluster.
        shard_policy: how a multi-worker job splits a dataset ("data" for arrays); datasets are
            checked with :func:`check_sharding` first (``check_shards=False`` skips it).
        callbacks: Keras callbacks. Those that write files (``ModelCheckpoint``,
            ``BackupAndRestore``, ``TensorBoard``, ``CSVLogger``) are made multi-worker safe:
            only the chief writes to their paths.
        verbose: ``"auto"``: non-chief workers print nothing, and tasks of a launched job print
            one line per epoch.
        backup_dir: add a multi-worker-safe ``BackupAndRestore``: a restarted job resumes from
            the last completed epoch.
        **fit_kwargs: passed to ``model.fit``.

    Returns:
        The Keras ``History``.

    Raises:
        TrainingError: the model was not built/compiled under the strategy, or the batch size
            does not divide over the replicas.
        ArgumentTypeError: an argument of the wrong type, or one that does not apply to the
            input (``batch_size``/``validation_split`` with a dataset).
        ShardingError: a dataset cannot be split over the workers.

    Example:
        >>> strategy = make_strategy("mirrored", num_cpu_devices=2)    # doctest: +SKIP
        >>> fit(model, x, y, epochs=10, batch_size=128, validation_split=0.2)  # doctest: +SKIP
    """
    compat.apply()
    strategy = _check_model(model, strategy, "fit")
    epochs = as_int(epochs, "epochs", minimum=1)
    steps_per_epoch = as_int(steps_per_epoch, "steps_per_epoch", minimum=1, allow_none=True)
    _check_dataset_args(x, y, sample_weight, batch_size, "fit")
    batch_size = _check_batch(batch_size, strategy)
    x, y, sample_weight, validation_data = _split_off_validation(
        x, y, sample_weight, validation_split, validation_data)
    if class_weight is not None and y is not None:
        # Arrays: per-example weights, the same under every strategy (Keras' own class_weight
        # cannot be combined with sample_weight, and the parameter-server trainer has none).
        sample_weight = class_weight_to_sample_weight(y, class_weight, sample_weight)
        class_weight = None
    seed = _shared_seed(seed, shuffle, strategy)
    callbacks = list(callbacks or [])
    if backup_dir is not None:
        callbacks.insert(0, checkpoints.BackupAndRestore(os.fspath(backup_dir)))
    callbacks = checkpoints.safe_callbacks(callbacks)
    if strategy_kind(strategy) == "parameter_server":
        from . import ps

        if class_weight is not None:
            raise ArgumentTypeError("fit(): under 'parameter_server', class_weight works with "
                                    "arrays; weight a dataset's examples in the dataset itself.")
        return ps.fit(model, x, y, strategy=strategy, epochs=epochs, batch_size=batch_size,
                      validation_data=validation_data, callbacks=callbacks,
                      steps_per_epoch=steps_per_epoch, shuffle=shuffle, seed=seed,
                      sample_weight=sample_weight, verbose=_verbose(verbose), **fit_kwargs)
    kwargs = dict(strategy=strategy, batch_size=batch_size, shard_policy=shard_policy, seed=seed,
                  check_shards=check_shards, what="fit")
    dataset = _as_dataset(x, y, sample_weight, shuffle=shuffle, **kwargs)
    parts = _validation_parts(validation_data)
    if parts is not None:
        validation_data = _as_dataset(*parts, shuffle=False, label="the validation data", **kwargs)
    elif validation_data is not None:
        validation_data = _as_dataset(validation_data, None, None, shuffle=False,
                                      label="the validation data", **{**kwargs, "batch_size": None})
    with strategy.scope():
        return compat.keras_method(model, "fit")(
            dataset, epochs=epochs, validation_data=validation_data, shuffle=False,
            callbacks=callbacks, steps_per_epoch=steps_per_epoch, class_weight=class_weight,
            verbose=_verbose(verbose), **fit_kwargs)


def evaluate(model, x=None, y=None, *, strategy=None, batch_size=None, shard_policy=None,
             sample_weight=None, steps=None, verbose="auto", check_shards=True, **eval_kwargs):
    """Evaluate ``model`` under ``strategy`` over every example once.

    Args: as :func:`fit` (arrays or a dataset of global batches; ``steps`` limits a dataset).

    Returns:
        ``{"loss": ..., metric: ...}`` as floats: the global values over all replicas/workers.

    Example:
        >>> evaluate(model, x_test, y_test, batch_size=128)    # doctest: +SKIP
        {'loss': 0.12, 'accuracy': 0.97}
    """
    compat.apply()
    strategy = _check_model(model, strategy, "evaluate")
    _check_dataset_args(x, y, sample_weight, batch_size, "evaluate")
    batch_size = _check_batch(batch_size, strategy)
    steps = as_int(steps, "steps", minimum=1, allow_none=True)
    if strategy_kind(strategy) == "parameter_server":
        from . import ps

        return ps.evaluate(model, x, y, strategy=strategy, batch_size=batch_size, steps=steps,
                           sample_weight=sample_weight, verbose=_verbose(verbose))
    dataset = _as_dataset(x, y, sample_weight, strategy=strategy, batch_size=batch_size,
                          shard_policy=shard_policy, shuffle=False, seed=None,
                          check_shards=check_shards, what="evaluate", label="the data")
    eval_kwargs.pop("return_dict", None)
    with strategy.scope():
        result = compat.keras_method(model, "evaluate")(
            dataset, steps=steps, verbose=_verbose(verbose), return_dict=True, **eval_kwargs)
    return {k: float(v) for k, v in result.items()}


def predict(model, x, *, strategy=None, batch_size=None, verbose=0):
    """The model's outputs for ``x`` (arrays or a dataset of batches) as NumPy, under any strategy.

    Under parameter-server strategies ``model.predict`` fails, so the chief calls the model
    directly (:func:`tfdistributed.ps.predict`).

    Example:
        >>> predict(model, x_test, batch_size=128).shape    # doctest: +SKIP
        (450, 10)
    """
    import tensorflow as tf

    compat.apply()
    strategy = _check_model(model, strategy, "predict")
    batch_size = as_int(batch_size, "batch_size", minimum=1, allow_none=True)
    if strategy_kind(strategy) == "parameter_server":
        from . import ps

        return ps.predict(model, x, batch_size=batch_size)
    if not isinstance(x, tf.data.Dataset):
        x = make_dataset(x, batch_size=batch_size or DEFAULT_BATCH_SIZE)
    with strategy.scope():
        return compat.keras_method(model, "predict")(x, verbose=verbose)


def _keras_call(method, model, args, kwargs):
    """``args``/``kwargs`` of a Keras ``Model.<method>`` call as keyword arguments."""
    import inspect

    signature = inspect.signature(compat.keras_method(model, method))
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise ArgumentTypeError(f"model.{method}(): {e}.") from None
    return dict(bound.arguments)


def fit_from_keras(model, *args, **kwargs):
    """``model.fit(...)`` with Keras' own arguments, run by :func:`fit` (routed here by the
    ``strategy_aware_fit`` repair for strategies Keras cannot train under)."""
    call = _keras_call("fit", model, args, kwargs)
    call.pop("validation_batch_size", None)
    if not call.get("validation_split"):
        call.pop("validation_split", None)
    if call.get("initial_epoch") in (None, 0):
        call.pop("initial_epoch", None)
    if call.get("validation_freq") == 1:
        call.pop("validation_freq", None)
    call.setdefault("verbose", "auto")
    x, y = call.pop("x", None), call.pop("y", None)
    return fit(model, x, y, **call)


def evaluate_from_keras(model, *args, **kwargs):
    """``model.evaluate(...)`` with Keras' own arguments, run by :func:`evaluate`."""
    call = _keras_call("evaluate", model, args, kwargs)
    return_dict = call.pop("return_dict", False)
    for key in ("callbacks", "kwargs"):
        call.pop(key, None)
    x, y = call.pop("x", None), call.pop("y", None)
    result = evaluate(model, x, y, **call)
    if return_dict:
        return result
    values = list(result.values())
    return values[0] if len(values) == 1 else values


def predict_from_keras(model, *args, **kwargs):
    """``model.predict(...)`` with Keras' own arguments, run by :func:`predict`."""
    call = _keras_call("predict", model, args, kwargs)
    return predict(model, call.get("x"), batch_size=call.get("batch_size"),
                   verbose=call.get("verbose", 0))
