"""fit / evaluate / predict a Keras 3 model under any strategy, with one call.

``fit(model, x, y, strategy=...)`` does what users otherwise assemble by hand: checks that the
model was built and compiled under the strategy's scope, decides what the input is with the
input plan of :mod:`tfdistributed.data` (arrays become a ``tf.data`` pipeline with the global
batch size and the ``"data"`` shard policy; a dataset is checked to shard over the workers
*before* training), applies the Keras 3 repairs (:mod:`tfdistributed.training.compat`), and runs
Keras ``fit`` inside the scope. Parameter-server strategies go, with the same plan, to the
coordinator-based trainer in :mod:`tfdistributed.training.ps`, so user code is the same for every
strategy. What the strategy is (kind, replicas, input workers) is worked out once per call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

from . import checkpoints, compat, ps, replica_batch, routing, seeds
from .options import check_options
from .._args import as_int, as_verbose
from ..cluster.environment import is_chief
from ..data.plan import plan_input
from ..errors import ArgumentTypeError, TrainingError
from ..strategies.make import input_workers, strategy_kind
from ..watch.recorder import examples_per_step, recorder_for, telling_failure
from ..cluster.live import check_not_alone
from ..cluster.leave import end_of_training, leave_together


def model_strategy(model):
    """The strategy ``model`` trains under: the one its weights were made under (wherever the
    model object was made), else the current one (TensorFlow's default outside every scope).

    Example:
        >>> model_strategy(model).num_replicas_in_sync    # doctest: +SKIP
        2
    """
    return model.distribute_strategy


def _placement(strategy) -> dict:
    """What the input plan needs to know of ``strategy``: its kind, replicas in sync, and input
    workers (the workers of a multi-worker or parameter-server job, else 1)."""
    return {"kind": strategy_kind(strategy), "replicas": int(strategy.num_replicas_in_sync),
            "workers": input_workers(strategy)}


def _check_model(model, strategy, what: str):
    """``(strategy, placement)`` once ``model`` is known to be a compiled Keras model built
    under ``strategy`` (default: the strategy it was built under)."""
    import keras
    import tensorflow as tf

    if not isinstance(model, keras.Model):
        raise ArgumentTypeError(f"{what}() needs a Keras model, got {type(model).__name__}.")
    model_strategy(model)  # Keras then keeps the strategy the weights were made under
    built_under = getattr(model, "_distribute_strategy", None)
    if strategy is None:
        strategy = built_under or tf.distribute.get_strategy()
    placement = _placement(strategy)
    kind = placement["kind"]
    if kind != "default" and built_under is not strategy:
        where = "outside any strategy scope" if built_under is None else \
            f"under another strategy ({strategy_kind(built_under)})"
        raise TrainingError(
            f"The model was built {where}, but {what}() was asked to use the {kind!r} strategy. "
            f"Build the model (its layers) inside the strategy's scope; compile() may be called "
            f"inside or outside it.",
            hints={"python": "E.g. with strategy.scope(): model = keras.Sequential([...])",
                   "r": "E.g. with(strategy$scope(), { model <- keras_model_sequential() %>% "
                        "layer_dense(10) })"})
    for variable in model.weights[:1]:
        value = getattr(variable, "value", variable)
        if kind != "default" and not strategy.extended.variable_created_in_scope(value):
            raise TrainingError(
                f"The model's weights were created outside the {kind!r} strategy's scope (the "
                f"model was built before entering it). Create *and build* the model inside "
                f"`strategy.scope()`.")
    if not getattr(model, "compiled", False):
        raise TrainingError(f"The model is not compiled: call model.compile(optimizer=..., "
                            f"loss=...) before {what}().")
    return strategy, placement


def _verbose(verbose):
    verbose = as_verbose(verbose)
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
        check_shards=True, backup_dir=None, save_freq="epoch", max_replica_batch=None,
        **fit_kwargs):
    """Train ``model`` under ``strategy`` (default: the strategy it was built under).

    Args:
        model: a Keras model built and compiled inside ``strategy.scope()``.
        x, y: arrays (NumPy, pandas; ``x`` may be a dict of arrays for named inputs or a list of
            arrays), or ``x`` a ``tf.data.Dataset`` of ``(inputs, targets)`` batches of the
            *global* batch size; under ``parameter_server`` also a function
            ``input_context -> tf.data.Dataset`` (see :mod:`tfdistributed.training.ps`).
        strategy: default: the strategy the model was built under.
        epochs, steps_per_epoch, initial_epoch, validation_steps, validation_freq: as in Keras.
        batch_size: the global batch (arrays only); must divide over the replicas in sync.
        validation_data: ``(x_val, y_val[, sample_weight_val])`` arrays (the weights, when
            given, weight the validation loss and metrics, as in Keras) or a dataset.
        validation_split: arrays only: hold out the last fraction of the rows, as Keras does
            (before shuffling, batching and sharding).
        sample_weight, class_weight: as in Keras; with arrays both may be given (the weights
            multiply), and ``class_weight`` is applied as per-example weights on every strategy.
        shuffle, seed: shuffle arrays every epoch. In a multi-worker job every worker must
            shuffle alike. Without a ``seed``, a program that set a global seed
            (``keras.utils.set_random_seed``) shuffles as it would on one device, so every run
            of it trains on the same batches; without either, the workers share a seed derived
            from the cluster (a new order in each job). Workers seeded differently are an
            error, not a silent mix of orders. (The order is tf.data's shuffle of the whole
            arrays, not the one Keras' own ``model.fit(x, y, shuffle=True)`` draws: the same
            seed gives other batches than plain ``model.fit``.)
        shard_policy: how a multi-worker job splits a dataset ("data" for arrays); datasets go
            through the shard pre-flight first
            (:func:`~tfdistributed.data.sharding.shard_for_workers`: under "auto", fewer files than
            workers means sharding by data, announced once; a policy that cannot work is a
            ShardingError), ``check_shards=False`` skips it.
        callbacks: Keras callbacks. Those that write files (``ModelCheckpoint``,
            ``BackupAndRestore``, ``TensorBoard``, ``CSVLogger``) are made multi-worker safe:
            only the chief writes to their paths.
        verbose: ``"auto"``: non-chief workers print nothing, and tasks of a launched job print
            one line per epoch.
        backup_dir: add a multi-worker-safe ``BackupAndRestore``: a restarted job resumes from
            its last backup (e.g. under ``launch(..., restarts=Restarts(max_restarts=N))``);
            the backup is deleted
            when training ends.
        save_freq: when to back up: ``"epoch"`` (at each epoch's end; a restarted job redoes
            the epoch it was in) or a number of steps N (arrays only, not under
            ``parameter_server``): a restarted job resumes at the step of its last backup,
            skipping the batches already trained, so it redoes at most N steps and, with
            ``shuffle=False`` or a ``seed``, ends with the weights of an uninterrupted run.
            The history then holds the epochs trained after the restart, the first one's
            loss and metrics over its steps after the restart only. With a ``backup_dir``, a
            SIGTERM (a preemption notice) makes every worker stop at the next backup, once
            written, with exit status ``PREEMPTED_EXIT_CODE`` (75), for
            ``launch(restarts=Restarts(max_restarts=...))`` to restart.
        max_replica_batch: at most this many examples per replica in a step (arrays): where
            ``batch_size`` would give a replica more (an elastic job that shrank), each update
            is made of the fewest steps of ``batch_size / N`` whose gradients, accumulated,
            keep each replica within it; the update is that of one step of ``batch_size``
            (:mod:`tfdistributed.training.replica_batch`). Default: each replica's batch is
            ``batch_size`` / replicas, however large.
        **fit_kwargs: passed to ``model.fit`` (under ``parameter_server``: ``initial_epoch``,
            ``validation_freq``, ``validation_steps`` and ``checkpoint_dir``).

    Returns:
        The Keras ``History`` (``history.history``: the loss and metrics per epoch, ``val_``
        ones too with validation data).

    Raises:
        TrainingError: the model was not built/compiled under the strategy, the workers of a
            multi-worker job would shuffle the arrays in different orders (seeded differently),
            the batch size does not divide over the replicas, (on several workers) the model's
            ``steps_per_execution`` is more than the batches of one pass over the data, or
            ``save_freq`` in steps cannot resume this input.
        ArgumentTypeError: an argument of the wrong type, or one that does not apply to the
            input (``batch_size``/``validation_split`` with a dataset, ``save_freq`` without
            ``backup_dir``).
        ShardingError: a dataset cannot be split over the workers.

    Example:
        >>> strategy = make_strategy("mirrored", num_cpu_devices=2)    # doctest: +SKIP
        >>> fit(model, x, y, epochs=10, batch_size=128, validation_split=0.2)  # doctest: +SKIP
        >>> fit(model, x, y, epochs=10, batch_size=128, shuffle=False,
        ...     backup_dir="/shared/backup", save_freq=20)    # doctest: +SKIP
    """
    compat.apply()
    strategy, placement = _check_model(model, strategy, "fit")
    check_not_alone(strategy, "fit")
    accumulated = replica_batch.plan_accumulation(model, batch_size, placement["replicas"],
                                                  max_replica_batch)
    batch_size = batch_size if accumulated == 1 else as_int(batch_size, "batch_size") // accumulated
    check_options(model, strategy, "fit")
    epochs = as_int(epochs, "epochs", minimum=1)
    save_freq = _check_save_freq(save_freq, backup_dir)
    if max_replica_batch is not None:
        _refuse_step_backups(save_freq, "max_replica_batch (a job that resumes at another size "
                                        "takes its steps in other batches)")
    steps_per_epoch = as_int(steps_per_epoch, "steps_per_epoch", minimum=1, allow_none=True)
    seed = as_int(seed, "seed", allow_none=True)
    plan = plan_input("fit", x, y, **placement, batch_size=batch_size,
                      sample_weight=sample_weight, class_weight=class_weight,
                      validation_data=validation_data, validation_split=validation_split,
                      shuffle=shuffle, seed=seed, shard_policy=shard_policy,
                      check_shards=check_shards)
    if plan.source == "arrays" and plan.shuffle:
        with _peer_lost(placement), telling_failure():
            plan = dataclasses.replace(plan, seed=seeds.shared_seed(seed, strategy, placement))
    _check_steps_per_execution(model, plan, train=steps_per_epoch is None,
                               validation=plan.validation is not None
                               and fit_kwargs.get("validation_steps") is None)
    callbacks = list(callbacks or [])
    backup = None
    if backup_dir is not None:
        backup = checkpoints.BackupAndRestore(os.fspath(backup_dir), save_freq=save_freq)
        callbacks.insert(0, backup)
        if max_replica_batch is not None:  # right after the backup is restored
            callbacks.insert(1, replica_batch.resuming_callback(model, backup_dir))
    callbacks = recorder_for(model, checkpoints.safe_callbacks(callbacks),
                             examples_per_step(x, plan.batch_size))
    if plan.kind == "parameter_server":
        _refuse_step_backups(save_freq, "parameter-server training (its coordinator runs the "
                                        "steps)")
        return ps.fit_planned(model, plan, strategy=strategy, epochs=epochs, callbacks=callbacks,
                              steps_per_epoch=steps_per_epoch, verbose=_verbose(verbose),
                              **fit_kwargs)
    dataset, validation = plan.dataset(), plan.validation_dataset()
    one_iterator = plan.source == "arrays" and steps_per_epoch is None
    dataset, steps_per_epoch = plan.epochs_from_one_iterator(dataset, steps_per_epoch,
                                                             _steps_per_execution(model))
    if save_freq != "epoch":
        _refuse_step_backups(save_freq, None if one_iterator and steps_per_epoch else
                             "this input: resuming skips the batches already trained, which "
                             "needs arrays (x, y), no steps_per_epoch, and a steps_per_execution "
                             "that divides the batches of an epoch")
        dataset = _resume_mid_epoch(dataset, backup, backup_dir, steps_per_epoch)
    with strategy.scope(), checkpoints.watching_preemption(backup), _peer_lost(placement), \
            telling_failure():
        history = compat.keras_method(model, "fit")(
            dataset, epochs=epochs, validation_data=validation, shuffle=False,
            callbacks=callbacks, steps_per_epoch=steps_per_epoch, class_weight=plan.class_weight,
            verbose=_verbose(verbose), **fit_kwargs)
    if plan.kind == "multi_worker_mirrored":  # no worker leaves while a peer still reads from it
        leave_together("fit()", end_of_training(model))
    return history


@contextlib.contextmanager
def _peer_lost(placement):
    """On several workers, a collective that fails because another worker went away (killed,
    out of memory, its node lost) is named as that, in one line, instead of TensorFlow's page of
    graph-node traceback: the survivor's error is a consequence, the lost worker's the cause."""
    import tensorflow as tf

    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.InternalError) as e:
        first = str(e.message).strip().splitlines()
        lost = "Collective ops is aborted" in str(e.message) or isinstance(
            e, tf.errors.UnavailableError)
        if placement["workers"] < 2 or not lost:
            raise
        detail = next((line for line in first if "Connection" in line or "aborted" in line),
                      first[0] if first else type(e).__name__)
        raise TrainingError(
            f"Lost contact with another worker of the job during training ({detail.strip()}): "
            f"that worker failed or was stopped; its own error says why. Run the job again to "
            f"resume from the backup, or let the launcher restart it.",
            hints={"python": "E.g. launch(..., restarts=tfd.Restarts(max_restarts=2)) with "
                             "fit(..., backup_dir=...).",
                   "r": "E.g. launch_cluster(..., restarts = restarts(max_restarts = 2)) with "
                        "fit_distributed(..., backup_dir = ...)."}) from None


def _check_save_freq(save_freq, backup_dir):
    """``"epoch"`` or a number of steps >= 1, or an error that says which."""
    if isinstance(save_freq, str) and save_freq == "epoch":
        return save_freq
    if isinstance(save_freq, str) or save_freq is None:
        raise ArgumentTypeError(f'`save_freq` must be "epoch" or a number of steps, got '
                                f'{save_freq!r}.', hints={"python": "E.g. save_freq=20.",
                                                          "r": "E.g. save_freq = 20."})
    save_freq = as_int(save_freq, "save_freq", minimum=1)
    if backup_dir is None:
        raise ArgumentTypeError(f"`save_freq` ({save_freq}) says how often to back up to "
                                f"`backup_dir`, which is not given: pass backup_dir too.")
    return save_freq


def _refuse_step_backups(save_freq, why) -> None:
    if save_freq != "epoch" and why:
        raise TrainingError(f"save_freq={save_freq} (a backup every {save_freq} steps, resumed "
                            f"at that step) does not apply to {why}. Use save_freq=\"epoch\".")


def _resume_mid_epoch(dataset, backup, backup_dir, steps_per_epoch: int):
    """``dataset`` without the batches trained before the backup's step, which ``backup`` is
    told to resume at (every worker reads the chief's backup, so all skip alike)."""
    epoch, step = checkpoints.resume_point(backup_dir, steps_per_epoch)
    backup.resume_at = (epoch, step)
    return dataset.skip(epoch * steps_per_epoch + step) if epoch or step else dataset


def _steps_per_execution(model) -> int:
    return int(getattr(model, "steps_per_execution", 1) or 1)


def _check_steps_per_execution(model, plan, *, train=True, validation=False) -> None:
    # On several workers a block of steps ends early only where the data ends (compat's
    # collective_steps_per_execution), and Keras has no result when that is inside the first
    # block of a pass over the data. Said before any work starts, where the length is known.
    block = _steps_per_execution(model)
    if plan.kind != "multi_worker_mirrored" or block == 1:
        return
    for checked, of_validation, label in ((train, False, "the data"),
                                          (validation, True, "the validation data")):
        batches = plan.batches(validation=of_validation) if checked else None
        if batches is not None and batches < block:
            raise TrainingError(
                f"{plan.what}(): steps_per_execution={block} is more than the {batches} "
                f"batches of one pass over {label}; on several workers a block of steps cannot "
                f"be longer than that. Compile the model with steps_per_execution={batches} or "
                f"less, or use a smaller batch size.",
                hints={"r": f"E.g. model$compile(..., steps_per_execution = {max(batches, 1)}L) "
                            f"inside with(strategy$scope(), {{ ... }})."})


def evaluate(model, x=None, y=None, *, strategy=None, batch_size=None, shard_policy=None,
             sample_weight=None, steps=None, verbose="auto", check_shards=True, **eval_kwargs):
    """Evaluate ``model`` under ``strategy`` over every example once.

    Args:
        model: a Keras model built and compiled inside ``strategy.scope()``.
        x, y, sample_weight: arrays (``y`` the targets, ``sample_weight`` one weight per
            example), or ``x`` a ``tf.data.Dataset`` of ``(inputs, targets[, weights])``
            batches of the global batch size.
        strategy: default: the strategy the model was built under.
        batch_size: the global batch (arrays only); must divide over the replicas in sync.
        shard_policy, check_shards: as in :func:`fit`.
        steps: evaluate this many batches only.
        verbose: as in :func:`fit`.
        **eval_kwargs: passed to ``model.evaluate`` (not under ``parameter_server``, where the
            chief evaluates by itself).

    Returns:
        ``{"loss": ..., metric: ...}`` as floats: the global values over all replicas/workers.

    Raises:
        TrainingError, ArgumentTypeError, ShardingError: as :func:`fit`.

    Example:
        >>> evaluate(model, x_test, y_test, batch_size=128)    # doctest: +SKIP
        {'loss': 0.12, 'accuracy': 0.97}
    """
    compat.apply()
    strategy, placement = _check_model(model, strategy, "evaluate")
    check_options(model, strategy, "evaluate")
    steps = as_int(steps, "steps", minimum=1, allow_none=True)
    plan = plan_input("evaluate", x, y, **placement, batch_size=batch_size,
                      sample_weight=sample_weight, shard_policy=shard_policy,
                      check_shards=check_shards)
    _check_steps_per_execution(model, plan, train=steps is None)
    if plan.kind == "parameter_server":
        return ps.evaluate_planned(model, plan, strategy=strategy, steps=steps)
    dataset = plan.dataset()
    eval_kwargs.pop("return_dict", None)
    with strategy.scope():
        result = compat.keras_method(model, "evaluate")(
            dataset, steps=steps, verbose=_verbose(verbose), return_dict=True, **eval_kwargs)
    return {k: float(v) for k, v in result.items()}


def predict(model, x, *, strategy=None, batch_size=None, verbose=0):
    """The model's outputs for ``x`` as NumPy, under any strategy.

    Under parameter-server strategies ``model.predict`` fails, so the chief calls the model
    directly (:func:`tfdistributed.training.ps.predict`).

    Args:
        model: a Keras model built and compiled inside ``strategy.scope()``.
        x: arrays (one array, a dict or a list of arrays), or a ``tf.data.Dataset`` of batches
            (of inputs, or of ``(inputs, targets)``: the inputs are predicted).
        strategy: default: the strategy the model was built under.
        batch_size: the batch for arrays (default 32); ignored for a dataset.
        verbose: Keras' progress output (silent by default).

    Returns:
        The outputs, one row per example, in order (a structure of arrays for several outputs).

    Raises:
        TrainingError: the model was not built/compiled under the strategy.
        ArgumentTypeError: no input, or arrays that are not numeric.

    Example:
        >>> predict(model, x_test, batch_size=128).shape    # doctest: +SKIP
        (450, 10)
    """
    compat.apply()
    strategy, placement = _check_model(model, strategy, "predict")
    check_options(model, strategy, "predict")
    plan = plan_input("predict", x, **placement, batch_size=batch_size)
    if plan.kind == "parameter_server":
        return ps.predict_planned(model, plan)
    with strategy.scope():
        return compat.keras_method(model, "predict")(plan.dataset(), verbose=verbose)


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
    """``model.fit(...)`` with Keras' own arguments, run by :func:`fit` (routed here by
    :mod:`tfdistributed.training.routing`, ``strategy_aware_fit``, for strategies Keras cannot train
    under).

    Returns:
        The Keras ``History``.

    Raises:
        ArgumentTypeError: arguments ``model.fit`` would not take.
    """
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


# Plain model.fit/evaluate/predict under a parameter-server strategy come to the three above
# (routing.py); `import tfdistributed` installs this record with compat's repairs.
STRATEGY_AWARE_FIT = routing.strategy_aware_fit(fit_from_keras, evaluate_from_keras,
                                                predict_from_keras)
