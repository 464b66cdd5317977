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
from .data import check_sharding, make_dataset, with_shard_policy
from .errors import ArgumentTypeError, TrainingError
from .strategies import strategy_info, strategy_kind

DEFAULT_BATCH_SIZE = 32


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


def _as_dataset(x, y, sample_weight, *, strategy, batch_size, shard_policy, shuffle, seed,
                check_shards, what):
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        if y is not None or sample_weight is not None:
            raise ArgumentTypeError(f"{what}(): a tf.data.Dataset already holds the targets; pass "
                                    f"`y`/`sample_weight` only with arrays.")
        if batch_size is not None:
            raise ArgumentTypeError(
                f"{what}(): `batch_size` applies to arrays only; batch the dataset itself with the "
                f"global batch size (dataset.batch(global_batch_size(per_replica, strategy))).")
        dataset = x if shard_policy is None else with_shard_policy(x, shard_policy)
    else:
        if x is None:
            raise ArgumentTypeError(f"{what}() needs data: arrays `x` (and `y`), or a tf.data.Dataset.")
        dataset = make_dataset(x, y, sample_weight=sample_weight,
                               batch_size=batch_size or DEFAULT_BATCH_SIZE, shuffle=shuffle,
                               seed=seed, policy=shard_policy or "data")
    workers = _num_input_workers(strategy)
    if check_shards and workers > 1:
        check_sharding(dataset, workers)
    return dataset


def _verbose(verbose):
    if verbose == "auto" and not is_chief():
        return 0
    return verbose


def fit(model, x=None, y=None, *, strategy=None, epochs=1, batch_size=None, validation_data=None,
        callbacks=None, shard_policy=None, steps_per_epoch=None, shuffle=True, seed=None,
        sample_weight=None, verbose="auto", check_shards=True, backup_dir=None, **fit_kwargs):
    """Train ``model`` under ``strategy`` (default: the strategy it was built under).

    ``x``/``y`` are arrays or ``x`` is a ``tf.data.Dataset`` yielding ``(inputs, targets)``
    batches of the *global* batch size. ``batch_size`` (arrays only) is global too and must divide
    over the replicas. ``shard_policy`` sets how a multi-worker job splits the data ("data" for
    arrays). Multi-worker datasets are checked with :func:`check_sharding` first (turn off with
    ``check_shards=False``). Non-chief workers print nothing when ``verbose="auto"``.

    File-writing callbacks (``ModelCheckpoint``, ``BackupAndRestore``, ``TensorBoard``,
    ``CSVLogger``) are made multi-worker safe (:func:`tfdistributed.checkpoints.safe_callbacks`):
    only the chief writes to their paths. ``backup_dir`` adds a
    :class:`~tfdistributed.checkpoints.BackupAndRestore`: when a job is restarted after a
    failure, training resumes from the last completed epoch. Returns the Keras ``History``.
    Extra keyword arguments go to ``model.fit``.
    """
    compat.apply()
    strategy = _check_model(model, strategy, "fit")
    epochs = as_int(epochs, "epochs", minimum=1)
    steps_per_epoch = as_int(steps_per_epoch, "steps_per_epoch", minimum=1, allow_none=True)
    batch_size = _check_batch(batch_size, strategy)
    callbacks = list(callbacks or [])
    if backup_dir is not None:
        callbacks.insert(0, checkpoints.BackupAndRestore(os.fspath(backup_dir)))
    callbacks = checkpoints.safe_callbacks(callbacks)
    if strategy_kind(strategy) == "parameter_server":
        from . import ps

        return ps.fit(model, x, y, strategy=strategy, epochs=epochs, batch_size=batch_size,
                      validation_data=validation_data, callbacks=callbacks,
                      steps_per_epoch=steps_per_epoch, shuffle=shuffle, seed=seed,
                      sample_weight=sample_weight, verbose=_verbose(verbose), **fit_kwargs)
    kwargs = dict(strategy=strategy, batch_size=batch_size, shard_policy=shard_policy, seed=seed,
                  check_shards=check_shards, what="fit")
    dataset = _as_dataset(x, y, sample_weight, shuffle=shuffle, **kwargs)
    if validation_data is not None:
        if isinstance(validation_data, (tuple, list)):
            validation_data = _as_dataset(validation_data[0], validation_data[1], None,
                                          shuffle=False, **kwargs)
        else:
            validation_data = _as_dataset(validation_data, None, None, shuffle=False,
                                          **{**kwargs, "batch_size": None})
    with strategy.scope():
        return model.fit(dataset, epochs=epochs, validation_data=validation_data, shuffle=False,
                         callbacks=callbacks, steps_per_epoch=steps_per_epoch,
                         verbose=_verbose(verbose), **fit_kwargs)


def evaluate(model, x=None, y=None, *, strategy=None, batch_size=None, shard_policy=None,
             sample_weight=None, steps=None, verbose="auto", check_shards=True, **eval_kwargs):
    """Evaluate ``model`` under ``strategy``; returns ``{"loss": ..., metric: ...}`` as floats."""
    compat.apply()
    strategy = _check_model(model, strategy, "evaluate")
    batch_size = _check_batch(batch_size, strategy)
    steps = as_int(steps, "steps", minimum=1, allow_none=True)
    if strategy_kind(strategy) == "parameter_server":
        from . import ps

        return ps.evaluate(model, x, y, strategy=strategy, batch_size=batch_size, steps=steps,
                           sample_weight=sample_weight, verbose=_verbose(verbose))
    dataset = _as_dataset(x, y, sample_weight, strategy=strategy, batch_size=batch_size,
                          shard_policy=shard_policy, shuffle=False, seed=None,
                          check_shards=check_shards, what="evaluate")
    with strategy.scope():
        result = model.evaluate(dataset, steps=steps, verbose=_verbose(verbose),
                                return_dict=True, **eval_kwargs)
    return {k: float(v) for k, v in result.items()}


def predict(model, x, *, strategy=None, batch_size=None, verbose=0):
    """The model's outputs for ``x`` (arrays or a dataset of batches) as NumPy, under any strategy.

    Under parameter-server strategies ``model.predict`` fails, so the chief calls the model
    directly (:func:`tfdistributed.ps.predict`).
    """
    import tensorflow as tf

    strategy = _check_model(model, strategy, "predict")
    batch_size = as_int(batch_size, "batch_size", minimum=1, allow_none=True)
    if strategy_kind(strategy) == "parameter_server":
        from . import ps

        return ps.predict(model, x, batch_size=batch_size)
    if not isinstance(x, tf.data.Dataset):
        x = make_dataset(x, batch_size=batch_size or DEFAULT_BATCH_SIZE)
    with strategy.scope():
        return model.predict(x, verbose=verbose)
