"""``fit(..., max_replica_batch=M)``: the global batch keeps its size on fewer replicas by
accumulating gradients, not by growing each replica's batch.

``fit()``'s ``batch_size`` is the global batch, split over the replicas. An elastic job that
lost workers (``launch(..., Scaling(min_workers=...))``) resumes with the same global
batch over fewer replicas, so each replica's batch grows: the update is the same, but a replica
computes (and holds in memory) the larger batch in one step. With ``max_replica_batch``, a
replica's batch is at most M examples: where the global batch would give it more, each update
is made of N steps of ``batch_size / N`` examples whose gradients are accumulated (the
optimizer's ``gradient_accumulation_steps``, right across replicas by the
``gradient_accumulation`` repair), N the fewest that keeps each replica's share within M and
divides it evenly. N steps of ``batch_size / N`` update as one step of ``batch_size`` (up to
float rounding), so the job trains alike at every size, and each replica needs the memory of
the full-size job's, not more.

The optimizer is built with its accumulators at every size, so that a backup taken at one
size restores at another (the same variables); at full size (N = 1) they are not used and a
step costs what it costs without the option. The backup records N
(:mod:`~tfdistributed.training.checkpoints`), and a job that resumes with another N keeps its
count of updates, which learning-rate schedules and Adam read (a window of steps cut by the
change is dropped: its gradients had other shares).
``bench/run.py`` group 13 measures what it costs against growing each replica's batch.
"""

from __future__ import annotations

from .._args import as_int
from ..errors import ArgumentTypeError, TrainingError

_OURS = "_tfd_accumulation_of_fit"  # set on an optimizer whose accumulation fit() decides


def accumulation_steps(global_batch: int, replicas: int, max_replica_batch: int) -> int:
    """The fewest steps N over which each of ``replicas`` replicas takes its share of
    ``global_batch`` in batches of at most ``max_replica_batch`` examples, N dividing the share.

    Example:
        >>> [accumulation_steps(256, n, 64) for n in (4, 2, 1)], accumulation_steps(96, 1, 64)
        ([1, 2, 4], 2)
    """
    share = global_batch // replicas
    return next(n for n in range(1, share + 1)
                if share % n == 0 and share // n <= max_replica_batch)


def plan_accumulation(model, batch_size, replicas: int, max_replica_batch) -> int:
    """N for this ``fit()`` (1 without ``max_replica_batch``), with the optimizer set to
    accumulate over N steps.

    Raises:
        ArgumentTypeError: ``max_replica_batch`` without ``batch_size`` (arrays), or not a
            whole number >= 1.
        TrainingError: an optimizer that cannot take it (built without accumulators, or made
            with ``gradient_accumulation_steps`` of its own).
    """
    if max_replica_batch is None:
        return 1
    limit = as_int(max_replica_batch, "max_replica_batch", minimum=1)
    if batch_size is None:
        raise ArgumentTypeError(
            "`max_replica_batch` bounds each replica's share of `batch_size` (arrays); give "
            "batch_size too, or leave max_replica_batch out for a dataset of global batches.")
    steps = accumulation_steps(int(batch_size), replicas, limit)
    _accumulate(model, steps, limit)
    return steps


def _inner(optimizer):
    """The optimizer that applies the gradients (a loss-scaling optimizer's inner one)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def _accumulate(model, steps: int, limit: int) -> None:
    """Build the optimizer with accumulators (once), then accumulate over ``steps`` (none: 1)."""
    optimizer = _inner(model.optimizer)
    if optimizer.gradient_accumulation_steps and not getattr(optimizer, _OURS, False):
        raise TrainingError(
            f"fit(max_replica_batch={limit}) decides how many steps to accumulate, and the "
            f"optimizer was made with gradient_accumulation_steps="
            f"{optimizer.gradient_accumulation_steps}: use one or the other.")
    if not optimizer.built:
        optimizer.gradient_accumulation_steps = 2  # Keras makes the accumulators at its build
        with model.distribute_strategy.scope():
            model.optimizer.build(model.trainable_variables)
    elif not getattr(optimizer, "_accumulated_gradients", None):
        raise TrainingError(
            f"fit(max_replica_batch={limit}) needs an optimizer that can accumulate gradients, "
            f"and this one was built (it trained, or was restored) without: compile the model "
            f"with a new optimizer before the first fit() with max_replica_batch.")
    # Keras checks >= 2 only when the optimizer is made; None: the accumulators unused.
    optimizer.gradient_accumulation_steps = steps if steps > 1 else None
    setattr(optimizer, _OURS, True)


def resuming_callback(model, backup_dir):
    """A callback that, once a backup is restored (after ``BackupAndRestore``'s
    ``on_train_begin``), carries the optimizer's count of updates over to this fit's N."""
    import keras

    from .checkpoints import backup_accumulation, steps_per_update

    optimizer = _inner(model.optimizer)

    class ResumeAccumulation(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            before = backup_accumulation(backup_dir)
            now = steps_per_update(optimizer)
            if before is not None and before != now:
                _carry_over(optimizer, before, now)

    return ResumeAccumulation()


def _carry_over(optimizer, before: int, now: int) -> None:
    import tensorflow as tf

    steps = int(optimizer._iterations.numpy())
    updates, in_window = divmod(steps, before)
    with optimizer._distribution_strategy.scope():
        optimizer._iterations.assign(updates * now)
        if in_window:
            for accumulator in optimizer._accumulated_gradients:
                accumulator.assign(tf.zeros(accumulator.shape, accumulator.dtype))
    if in_window:
        print(f"tfdistributed: resumed with updates of {now} steps where the backup had {before}: "
              f"the {in_window} step(s) of its last, unfinished update are dropped.", flush=True)
