"""Saving that is safe with many workers: only the chief writes where you asked.

In multi-worker training every worker must take part in a save (reading a distributed variable
may need the other workers), but if they all write to one path they race and corrupt it.
TensorFlow's answer, used here for Keras 3 too: the chief writes to the real path, every other
worker writes the same thing to a temporary path of its own (``<dir>/.workertemp_<type>_<index>/``)
that is deleted afterwards.

- :func:`write_path` gives this process's path for a save; :func:`remove_worker_temp` cleans up.
- :func:`save_model` / :func:`load_model` / :func:`export_saved_model` wrap Keras saving with it.
- :class:`BackupAndRestore`: Keras' fault-tolerance callback, made multi-worker safe: every
  worker *restores* from the chief's backup (``backup_dir`` must be on storage all workers
  share), only the chief writes it. Its files are written aside and renamed into place (a task
  stopped mid-save leaves the previous backup whole), and with ``save_freq=N`` steps,
  :func:`tfdistributed.fit` resumes in the middle of an epoch (:func:`resume_point`), where
  Keras would redo the whole epoch (keras-team/keras#19179). While :func:`tfdistributed.fit`
  trains, a SIGTERM (a preemption notice) makes every worker stop at the next backup, once it
  is written, with :data:`~tfdistributed.PREEMPTED_EXIT_CODE` (:func:`watching_preemption`);
  at a backup of an epoch's last step, once the epoch has ended (its logs are the history's).
- :func:`safe_callbacks`: what :func:`tfdistributed.fit` and Keras' ``fit`` under tfdistributed
  apply to the callbacks they are given, so ``ModelCheckpoint``, ``BackupAndRestore``,
  ``TensorBoard`` and ``CSVLogger`` of non-chief workers write to temporary paths that are
  removed when training ends, and Keras' own ``BackupAndRestore`` (keras3's
  ``callback_backup_and_restore()``) writes aside and renames, as the class above does.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import threading

from ..cluster.environment import is_checkpoint_writer, read_tf_config
from ..watch import recorder
from ..watch.channel import PREEMPTED_EXIT_CODE
from ..errors import TrainingError


def _task_suffix(config) -> str:
    task = config["task"]
    return f".workertemp_{task['type']}_{task['index']}"


def write_path(path, config=None) -> str:
    """Where this process should write a save meant for ``path`` (``path`` itself on the chief).

    Only :func:`~tfdistributed.cluster.is_checkpoint_writer` tasks get ``path``: the chief (or
    worker 0 without one, or a parameter-server coordinator). Every other task, the evaluator
    included although TensorFlow calls it a chief, gets its own temporary path.

    Args:
        path: where the save is meant to go.
        config: a TF_CONFIG (dict or JSON); default: this process's.

    Returns:
        ``path`` on the writer, else ``<dir>/.workertemp_<type>_<index>/<name>``.

    Raises:
        ClusterConfigError: a malformed TF_CONFIG.

    Example:
        >>> write_path("/ckpt/model.keras")    # on worker 1 of a job with a chief  # doctest: +SKIP
        '/ckpt/.workertemp_worker_1/model.keras'
    """
    path = os.fspath(path)
    config = read_tf_config(config)
    if is_checkpoint_writer(config):
        return path
    parent, name = os.path.split(os.path.normpath(path))
    return os.path.join(parent, _task_suffix(config), name)


def remove_worker_temp(path, config=None) -> None:
    """Delete this task's temporary copy of a save meant for ``path`` (no-op on the writer).

    Args:
        path: where the save was meant to go (as given to :func:`write_path`).
        config: a TF_CONFIG (dict or JSON); default: this process's.

    Example:
        >>> model.save(write_path(path)); remove_worker_temp(path)    # doctest: +SKIP
    """
    config = read_tf_config(config)
    if is_checkpoint_writer(config):
        return
    temp = os.path.dirname(write_path(path, config))
    shutil.rmtree(temp, ignore_errors=True)


def save_model(model, path, *, overwrite=True) -> str:
    """Save ``model`` (``.keras`` or ``.weights.h5``) from every worker, chief to ``path``.

    Call it on every worker: reading distributed variables may need all of them.

    Args:
        model: the Keras model.
        path: a ``.keras`` file (the whole model) or a ``.weights.h5`` file (the weights).
        overwrite: replace an existing file.

    Returns:
        The path this process wrote (off the chief, a temporary one, already removed).

    Example:
        >>> save_model(model, "/shared/digits.keras")    # on every worker  # doctest: +SKIP
        '/shared/digits.keras'
    """
    path = os.fspath(path)
    target = write_path(path)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    if path.endswith(".weights.h5"):
        model.save_weights(target, overwrite=overwrite)
    else:
        model.save(target, overwrite=overwrite)
    remove_worker_temp(path)
    return target


def export_saved_model(model, path) -> str:
    """Export a TensorFlow SavedModel for serving (``model.export``), chief to ``path``.

    Args:
        model: the Keras model (call it on every worker).
        path: the SavedModel directory.

    Returns:
        The directory this process wrote (off the chief, a temporary one, already removed).

    Example:
        >>> served = tf.saved_model.load(export_saved_model(model, "serving"))  # doctest: +SKIP
        >>> served.serve(x[:8])                                                 # doctest: +SKIP
    """
    path = os.fspath(path)
    target = write_path(path)
    model.export(target, format="tf_saved_model", verbose=False)
    remove_worker_temp(path)
    return target


def load_model(path, strategy=None, *, compile=True):
    """Load a ``.keras`` model, under ``strategy``'s scope when given (to train it further).

    Args:
        path: a ``.keras`` file, e.g. written by :func:`save_model`.
        strategy: the strategy to build the model under; None: no strategy (to predict or
            evaluate in a plain process).
        compile: restore the optimizer, loss and metrics.

    Returns:
        The Keras model.

    Raises:
        TrainingError: there is no file at ``path``.

    Example:
        >>> model = load_model("digits.keras", make_strategy("mirrored"))    # doctest: +SKIP
        >>> fit(model, x, y, epochs=2)                                       # doctest: +SKIP
    """
    import keras

    path = os.fspath(path)
    if not os.path.exists(path):
        raise TrainingError(
            f"Model file {path!r} does not exist; save one first.",
            hints={"python": "E.g. tfdistributed.training.checkpoints.save_model(model, path).",
                   "r": "E.g. save_model_distributed(model, path)."})
    if strategy is None:
        return keras.models.load_model(path, compile=compile)
    with strategy.scope():
        return keras.models.load_model(path, compile=compile)


@functools.lru_cache(maxsize=None)
def _backup_and_restore_class():
    import keras

    class BackupAndRestore(keras.callbacks.BackupAndRestore):
        """``keras.callbacks.BackupAndRestore`` that is safe with many workers.

        Every worker restores from ``backup_dir`` (shared storage in a real cluster) so they all
        resume at the same epoch with the same weights; only the chief writes there, the others
        write to a temporary directory that is removed when training ends.

        With ``save_freq=N`` steps it backs up every N steps. Given to plain ``model.fit`` it
        resumes, as Keras does, at the start of the epoch it was in; :func:`tfdistributed.fit`
        (``backup_dir=..., save_freq=N``) resumes at the very step, as it skips the batches
        already trained.

        Args:
            backup_dir: the backup directory (storage every worker shares).
            **kwargs: Keras' ``BackupAndRestore`` options (``save_freq``...).

        Example:
            >>> fit(model, x, y, epochs=10,
            ...     callbacks=[BackupAndRestore("/shared/backup")])    # doctest: +SKIP
        """

        def __init__(self, backup_dir, **kwargs):
            super().__init__(backup_dir, **kwargs)
            # (epoch, step) to resume at, set by tfdistributed.fit once it has skipped the data
            # already trained; None: resume at an epoch's start, as Keras does.
            self.resume_at = None
            # Set by a SIGTERM while tfdistributed.fit trains (watching_preemption).
            self.preempted = False
            self._skip_until = 0
            # "Preempted: ..." when the backup of an epoch's last step found a notice: the job
            # stops once that epoch has ended (_stop_after_epoch).
            self._stop_after_epoch = None
            # Steps of the current epoch a backup holds (Keras' "batch" cannot say: it is 0 both
            # after an epoch and after its first step).
            self._steps_done = 0
            _localize_backup(self)

        def on_train_begin(self, logs=None):
            super().on_train_begin(logs)
            if self.resume_at is not None:
                self.model._initial_epoch, self._skip_until = self.resume_at
                _skip_trained_steps(self.model, self._skip_until)
            resumed = getattr(self.model, "_initial_epoch", None) or 0
            if resumed or self._skip_until:
                recorder.note("resume", resumed, self._skip_until, (self.params or {}).get("steps"))

        def on_epoch_begin(self, epoch, logs=None):
            if self._stop_after_epoch:
                _exit_preempted(self.model, self._stop_after_epoch)
            # Keras counts the epoch it writes in its metadata from 0 in every fit() and moves it
            # on at each epoch's end only: a resumed job's step backups would say epoch 0.
            self._current_epoch = epoch

        def on_epoch_end(self, epoch, logs=None):
            self._skip_until = self._steps_done = 0
            super().on_epoch_end(epoch, logs)
            if self.save_freq == "epoch":
                self._stop_if_preempted()

        def on_train_batch_end(self, batch, logs=None):
            if batch < self._skip_until:  # a step trained before the restart: nothing to save
                self._last_batch_seen = batch
                return
            if self._should_save_on_batch(batch):
                self._steps_done = batch + 1
                self._save_model()
                if self._steps_done == (self.params or {}).get("steps"):
                    # The epoch's last step: its validation and its logs (the History, a
                    # CSVLogger, the launcher's record of the job's history) come at its end. A
                    # stop here would lose them all: the restart resumes at the next epoch. Stop
                    # once every callback has ended the epoch (when training ends there, it
                    # simply ends).
                    self._stop_after_epoch = _preempted(self)
                else:
                    self._stop_if_preempted()

        def _stop_if_preempted(self):
            _stop_if_preempted(self)

        def _save_model(self):
            _write_backup(self)

    return BackupAndRestore


def _write_backup(callback) -> None:
    """A :class:`BackupAndRestore`'s save: the weights (optimizer included), then the metadata,
    each written aside and renamed into place (:func:`_write_aside`)."""

    def write(weights, metadata):
        callback.model.save_weights(weights, overwrite=True)
        with open(metadata, "w") as f:
            # How many steps made one update (fit(max_replica_batch=) may resume with another).
            json.dump({"epoch": callback._current_epoch, "batch": callback._last_batch_seen,
                       "steps_done": callback._steps_done,
                       "accumulation": steps_per_update(getattr(callback.model, "optimizer",
                                                                None))},
                      f)

    _write_aside(callback, write)
    # Counted from the epoch's start; an epoch-end backup is the next epoch's step 0.
    recorder.note("backup", callback._current_epoch, callback._steps_done,
                  (callback.params or {}).get("steps"))


def _write_aside(callback, write) -> None:
    """Save a ``BackupAndRestore``'s backup: ``write(weights_path, metadata_path)`` writes the
    two files beside the real ones, which are then renamed into place.

    Keras writes both in place: a task stopped meanwhile (launch() stops every task when one
    fails) would leave a torn file (Keras' restore then fails on it for good: it falls back to
    the previous weights on an ``OSError`` only, never on a torn metadata file), or new weights
    beside old metadata, and the job would resume at the wrong step; a worker reading the
    chief's backup meanwhile would read half of it. Only the instant between the two renames
    is unsafe. Keras' ``double_checkpoint`` copies are made first, as Keras makes them.
    """
    os.makedirs(callback.backup_dir, exist_ok=True)
    for path, previous in ((callback._weights_path, callback._prev_weights_path),
                           (callback._training_metadata_path,
                            callback._prev_training_metadata_path)):
        if callback.double_checkpoint and os.path.exists(path):
            shutil.copyfile(path, previous)
    weights = os.path.join(callback.backup_dir, "saving.weights.h5")
    metadata = callback._training_metadata_path + ".saving"
    write(weights, metadata)
    os.replace(weights, callback._weights_path)
    os.replace(metadata, callback._training_metadata_path)


def _keras_save_aside(callback) -> None:
    """Make Keras' own ``BackupAndRestore`` ``callback`` (keras3's
    ``callback_backup_and_restore()``) save as :func:`_write_aside` does: Keras' own save,
    whatever it writes, runs with its two paths pointed aside. A callback whose class saves in
    its own way (ours, a user's subclass) and a backup on remote storage (``gs://...``, which
    Keras writes through TensorFlow's file system) are left as they are."""
    import keras

    if (type(callback)._save_model is not keras.callbacks.BackupAndRestore._save_model
            or "://" in os.fspath(callback.backup_dir)
            or getattr(callback, "_tfd_saves_aside", False)):
        return
    callback._tfd_saves_aside = True
    keras_save = callback._save_model

    def write(weights, metadata):
        kept = (callback._weights_path, callback._training_metadata_path,
                callback.double_checkpoint)
        # Keras' double_checkpoint copies are _write_aside's, made from the real paths.
        (callback._weights_path, callback._training_metadata_path,
         callback.double_checkpoint) = weights, metadata, False
        try:
            keras_save()
        finally:
            (callback._weights_path, callback._training_metadata_path,
             callback.double_checkpoint) = kept

    callback._save_model = lambda: _write_aside(callback, write)


def _stop_if_preempted(callback) -> None:
    """At a backup, just written: exit with ``PREEMPTED_EXIT_CODE`` if any worker was told to.

    Every worker learns whether any was (one scalar all-reduce per backup, none per step), so
    all stop at the same step. TensorFlow's PreemptionCheckpointHandler agrees on a step too,
    but then saves a tf.train.Checkpoint of its own (its manager, its run counter, restored
    when it is built) from inside its run() wrapper: a second backup, beside the Keras one
    fit() resumes from, that could disagree with it.
    """
    said = _preempted(callback)
    if said:
        _exit_preempted(callback.model, said)


def _preempted(callback) -> str | None:
    """At a backup, just written: what to say if any worker was told to stop, else None (the
    workers agree: see :func:`_stop_if_preempted`)."""
    if not _anyone(callback.model, callback.preempted):
        return None
    done, epoch = callback._steps_done, callback._current_epoch
    where = f"after step {done} of epoch {epoch + 1}" if done else f"at the end of epoch {epoch}"
    return (f"Preempted: backed up {where}; exiting with status {PREEMPTED_EXIT_CODE} to be "
            f"restarted")


def _exit_preempted(model, said: str) -> None:
    print(said, flush=True)
    _leave_together(model, said)
    raise SystemExit(PREEMPTED_EXIT_CODE)


# How long a preempted worker waits for the others to have decided too before it exits anyway.
LEAVE_TIMEOUT = 60.0


def _leave_together(model, barrier: str) -> None:
    """Wait until every worker of ``model``'s multi-worker job has reached this point too.

    A collective ends on each worker when that worker has received what it needs, not when
    every worker has: a worker that exited on its result at once could leave before a slower
    peer had read its half of the decision, and the peer then failed on the lost connection
    ("Lost contact with another worker", seen on a loaded machine) instead of saying it was
    preempted and exiting to be restarted. TensorFlow's coordination service (which
    MultiWorkerMirroredStrategy starts) holds a barrier of the name ``barrier`` until every
    task is at it; if it cannot (a task already gone, ``LEAVE_TIMEOUT``), the worker exits all
    the same: it has backed up and knows it is to stop.
    """
    import tensorflow as tf
    from tensorflow.python.eager import context

    if _multi_worker(model) is None:
        return
    try:
        context.context().wait_at_barrier(f"tfdistributed: {barrier}", int(LEAVE_TIMEOUT * 1000))
    except tf.errors.OpError:
        pass


def _anyone(model, flag: bool) -> bool:
    """Whether ``flag`` is set on any worker of the multi-worker job ``model`` trains in (on a
    single worker: ``flag``)."""
    import tensorflow as tf

    strategy = _multi_worker(model)
    if strategy is None:
        return flag
    return int(_flag_sum(strategy)(tf.constant(int(flag)))) > 0


def _multi_worker(model):
    """The MultiWorkerMirroredStrategy ``model`` trains under, or None (another strategy)."""
    import tensorflow as tf

    strategy = model.distribute_strategy
    return strategy if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) else None


@functools.lru_cache(maxsize=None)
def _flag_sum(strategy):
    """A traced all-reduce of one int over ``strategy``'s workers (eager collectives are slow
    and TensorFlow warns at each)."""
    import tensorflow as tf

    @tf.function
    def flag_sum(flag):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: flag), axis=None)

    return flag_sum


@contextlib.contextmanager
def watching_preemption(backup):
    """While in the block, a SIGTERM (what SLURM, Kubernetes and spot VMs send before they stop
    a task) sets ``backup.preempted`` instead of ending the process: training goes on to the
    next backup, writes it, and every worker exits with ``PREEMPTED_EXIT_CODE`` (75), which
    ``launch(restarts=Restarts(max_restarts=...))`` restarts. Keep a backup's interval
    (``save_freq``) shorter than the grace period before the SIGKILL.

    Only the main thread can take signals: elsewhere the block changes nothing.

    Args:
        backup: this package's :class:`BackupAndRestore`, or None (nothing to back up).

    Example:
        >>> with watching_preemption(backup):    # doctest: +SKIP
        ...     model.fit(x, y, callbacks=[backup])
    """
    if backup is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def notice(signum, frame):
        backup.preempted = True

    previous = signal.signal(signal.SIGTERM, notice)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _skip_trained_steps(model, steps: int) -> None:
    """Make the next ``steps`` train steps of ``model`` do nothing (its data was skipped).

    Keras runs every epoch from its first step; only the train function can be told to pass.
    """
    calls = steps // int(getattr(model, "steps_per_execution", 1) or 1)
    if not calls:
        return
    train = model.train_function

    def already_trained(iterator):
        nonlocal calls
        calls -= 1
        if calls == 0:
            model.train_function = train
        return {}

    model.train_function = already_trained


def resume_point(backup_dir, steps_per_epoch: int) -> tuple:
    """``(epoch, step)`` at which a backed-up job resumes: the epoch (0-based) and the steps of
    it already trained (0 at an epoch's start; ``(0, 0)`` without a backup).

    Args:
        backup_dir: the chief's backup directory (a :class:`BackupAndRestore`'s).
        steps_per_epoch: the steps in one epoch.

    Returns:
        ``(epoch, step)``.

    Example:
        >>> resume_point("/shared/backup", 22)  # backup after step 5 of epoch 2  # doctest: +SKIP
        (1, 5)
    """
    path = os.path.join(os.fspath(backup_dir), "training_metadata.json")
    if not os.path.exists(path):
        return 0, 0
    with open(path) as f:
        metadata = json.load(f)
    epoch, step = int(metadata["epoch"]), int(metadata.get("steps_done", 0))
    if step >= steps_per_epoch:
        return epoch + 1, 0
    return epoch, step


def steps_per_update(optimizer) -> int:
    """How many steps make one update of ``optimizer`` (a loss-scaling optimizer's: its inner
    one's), what a backup records as its ``accumulation`` (no optimizer: 1)."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    return getattr(optimizer, "gradient_accumulation_steps", None) or 1


def backup_accumulation(backup_dir) -> int | None:
    """How many steps made one optimizer update when the backup in ``backup_dir`` was written
    (None: no backup, or one written before this was recorded)."""
    path = os.path.join(os.fspath(backup_dir), "training_metadata.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        value = json.load(f).get("accumulation")
    return None if value is None else int(value)


def _paths(callback) -> dict:
    return {k: getattr(callback, k) for k in ("backup_dir", "_weights_path",
                                              "_training_metadata_path", "_prev_weights_path",
                                              "_prev_training_metadata_path")}


def _localize_backup(callback) -> None:
    """Make a Keras BackupAndRestore read the chief's backup and write its own temporary one."""
    config = read_tf_config()
    if not config or is_checkpoint_writer(config) or getattr(callback, "_tfd_read_paths", None):
        return
    callback._tfd_read_paths = _paths(callback)
    original = callback.backup_dir
    temp = write_path(original, config)
    for key, value in callback._tfd_read_paths.items():
        setattr(callback, key, temp + value[len(original):])
    callback._tfd_temp = os.path.dirname(temp)
    on_train_begin, on_train_end = callback.on_train_begin, callback.on_train_end

    def restore_from_chief(logs=None):
        written = _paths(callback)
        for key, value in callback._tfd_read_paths.items():
            setattr(callback, key, value)
        try:
            on_train_begin(logs)
        finally:
            for key, value in written.items():
                setattr(callback, key, value)

    def clean_up(logs=None):
        on_train_end(logs)
        shutil.rmtree(callback._tfd_temp, ignore_errors=True)

    callback.on_train_begin = restore_from_chief
    callback.on_train_end = clean_up


def _remove_worker_temp_callback(directories):
    """A callback that deletes this worker's temporary save directories when training ends."""
    import keras

    class RemoveWorkerTemp(keras.callbacks.Callback):
        def on_train_end(self, logs=None):
            for directory in directories:
                shutil.rmtree(directory, ignore_errors=True)

    return RemoveWorkerTemp()


def safe_callbacks(callbacks):
    """``callbacks`` with every file-writing Keras callback made multi-worker safe (in place).

    Outside multi-worker jobs (no ``TF_CONFIG``) nothing changes. In one, Keras' own
    ``BackupAndRestore`` writes its files aside and renames them into place on every task
    (:func:`_keras_save_aside`: a task stopped mid-save leaves the previous backup whole, and
    no worker reads the chief's half-written); on the chief nothing else changes. On other
    workers, ``ModelCheckpoint``, ``TensorBoard`` and ``CSVLogger`` write to this worker's
    temporary directory, removed at the end of training; ``BackupAndRestore`` restores from the
    chief's backup and writes its own temporary one.

    Args:
        callbacks: Keras callbacks (or None).

    Returns:
        The callbacks as a list, plus one that removes this worker's temporary directories
        when training ends (only off the chief, when some callback was moved).

    Example:
        >>> model.fit(ds, callbacks=safe_callbacks(
        ...     [keras.callbacks.CSVLogger("log.csv")]))  # doctest: +SKIP
    """
    import keras

    callbacks = list(callbacks or [])
    config = read_tf_config()
    if not config:
        return callbacks
    for cb in callbacks:
        if isinstance(cb, keras.callbacks.BackupAndRestore):
            _keras_save_aside(cb)
    if is_checkpoint_writer(config):
        return callbacks
    temps = []

    def relocate(path):
        target = write_path(path, config)
        temps.append(os.path.dirname(target))
        # CSVLogger opens its file without creating the directory; the others create theirs.
        os.makedirs(os.path.dirname(target), exist_ok=True)
        return target

    for cb in callbacks:
        # A callback object given to several fit() calls is relocated once.
        if getattr(cb, "_tfd_relocated", False):
            continue
        cb._tfd_relocated = not isinstance(cb, keras.callbacks.BackupAndRestore)
        if isinstance(cb, keras.callbacks.BackupAndRestore):
            _localize_backup(cb)
        elif isinstance(cb, keras.callbacks.ModelCheckpoint):
            cb.filepath = relocate(cb.filepath)
        elif isinstance(cb, keras.callbacks.TensorBoard):
            cb.log_dir = relocate(cb.log_dir)
        elif isinstance(cb, keras.callbacks.CSVLogger):
            cb.filename = relocate(cb.filename)
    if temps:
        callbacks.append(_remove_worker_temp_callback(sorted(set(temps))))
    return callbacks


def __getattr__(name):
    # The callback class subclasses Keras, which is imported only when the class is asked for.
    if name == "BackupAndRestore":
        return _backup_and_restore_class()
    raise AttributeError(name)
