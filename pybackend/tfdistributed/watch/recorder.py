"""The task side of watching a job: what this task has done, told to whoever watches.

A Keras callback (:func:`recorder_for`) counts the steps of every ``fit`` (ours, plain
``model.fit`` and the parameter-server trainer; validation steps count as progress too), keeps
the epochs' logs and how long each step took, inside the step and outside it (callbacks, the
Python or R between two steps). A heartbeat thread (:class:`Heartbeat`) then tells it:

- in a launched job, as records on the channel (:mod:`~tfdistributed.watch.channel`): ``begin``,
  ``epoch`` (the logs and the epoch's figures), ``beat`` (every :data:`BEAT_SECONDS`: where the
  task is, and its stack once it has made no step for the stall time), ``backup``/``resume``
  (from :mod:`tfdistributed.training.checkpoints`) and ``end``; the launcher does the rest
  (:mod:`~tfdistributed.watch.collector`);
- in a multi-worker job started by hand (no launcher), in TensorFlow's coordination service
  key-value store, which every task of the job reaches: each task publishes its state there and
  reads the others', and when the job has made no step for the stall time, says which task the
  others wait for (:func:`tfdistributed.watch.stall.diagnose`) itself.

The cost on the step: two clock reads and a few list appends per step, on the training thread;
the rest runs on the heartbeat thread (measured in ``bench/``). ``TFDISTRIBUTED_WATCH=0``
switches it all off. A task that has made no step for ``TFDISTRIBUTED_STALL_TIMEOUT`` seconds
(off by default) ends with :data:`STALLED_EXIT_CODE` after saying why, so that a launcher's
``max_restarts`` (or a scheduler) can start the job again.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time

from . import channel, stall

BEAT_SECONDS = 2.0
# Published to the coordination service less often: each beat is an RPC to the leader.
KV_BEAT_SECONDS = 5.0
STALL_WARNING_ENV = "TFDISTRIBUTED_STALL_WARNING"
STALL_TIMEOUT_ENV = "TFDISTRIBUTED_STALL_TIMEOUT"
DEFAULT_STALL_WARNING = 60.0
# A task that ends itself after a stall: "the job is stuck", which restarts may cure.
STALLED_EXIT_CODE = 76
_KV_PREFIX = "tfdistributed/watch/"


def _seconds(env: str, default: float | None) -> float | None:
    value = os.environ.get(env, "")
    try:
        seconds = float(value) if value.strip() else default
    except ValueError:
        return default
    return seconds if seconds is None or seconds > 0 else None


def watching() -> bool:
    return os.environ.get("TFDISTRIBUTED_WATCH", "1") != "0"


class TaskState:
    """What this task is doing, written by the callback (training thread), read by the heartbeat."""

    def __init__(self):
        self.lock = threading.Lock()
        self.phase = "idle"      # train, test, predict, ended
        self.epoch = self.batch = self.steps = 0
        self.epochs = self.steps_per_epoch = self.examples_per_step = None
        self.in_step = False
        self.first_done = False  # a step of this phase has completed: tracing is behind us
        self.last_progress = time.monotonic()
        self.begun = self.ended = None
        self.cycles, self.outside, self.inside = [], [], []
        self.logs = {}
        self.epoch_started = time.monotonic()
        # (epoch, step) a resumed fit skips to: the steps before it do nothing and are no pace.
        self.skip = (0, 0)

    def skipped(self, batch) -> bool:
        """Whether ``batch`` of the running epoch is a step a resumed fit skips."""
        return (self.epoch, batch) < self.skip

    def snapshot(self) -> dict:
        """A JSON-able picture of the task now."""
        now = time.monotonic()
        with self.lock:
            return {"phase": self.phase, "epoch": self.epoch, "batch": self.batch,
                    "position": position(self.epoch, self.batch, self.steps_per_epoch),
                    "steps": self.steps, "epochs": self.epochs,
                    "steps_per_epoch": self.steps_per_epoch, "in_step": self.in_step,
                    "idle": round(now - self.last_progress, 3), "started": self.first_done,
                    "logs": dict(self.logs), "step_seconds": _median(self.cycles[-50:]),
                    "examples_per_step": self.examples_per_step}


STATE = TaskState()


def position(epoch, step, steps_per_epoch) -> int | None:
    """A point of training as one number: the steps before it (None if an epoch's length is
    unknown)."""
    if not steps_per_epoch:
        return None
    return int(epoch) * int(steps_per_epoch) + int(step)


def _median(values):
    return round(statistics.median(values), 6) if values else None


def _floats(logs) -> dict:
    out = {}
    for key, value in (logs or {}).items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


_CLASS = None


def recorder_class():
    """The Keras callback class (built on first use: Keras is imported lazily)."""
    global _CLASS
    if _CLASS is None:
        import keras

        class Recorder(keras.callbacks.Callback):
            """Counts steps and keeps logs for the watchers (:mod:`tfdistributed.watch`)."""

            def __init__(self, examples_per_step=None):
                super().__init__()
                self.examples_per_step = examples_per_step

            on_train_begin = _train_begin
            on_epoch_begin = _epoch_begin
            on_epoch_end = _epoch_end
            on_train_end = _train_end
            on_train_batch_begin = _step_begin
            on_train_batch_end = _step_end
            on_test_begin = _phase_begin("test")
            on_test_end = _phase_end
            on_test_batch_begin = _step_begin
            on_test_batch_end = _eval_step_end
            on_predict_batch_begin = _step_begin
            on_predict_batch_end = _eval_step_end

        _CLASS = Recorder
    return _CLASS


def _train_begin(self, logs=None):
    params = self.params or {}
    with STATE.lock:
        STATE.phase, STATE.first_done = "train", False
        STATE.epochs, STATE.steps_per_epoch = params.get("epochs"), params.get("steps")
        STATE.examples_per_step = self.examples_per_step
        STATE.last_progress = time.monotonic()
        STATE.skip = (0, 0)  # a resumed fit says where it resumes, after this
    Heartbeat.ensure(getattr(self.model, "distribute_strategy", None))
    if channel.enabled():
        strategy = getattr(self.model, "distribute_strategy", None)
        channel.send("begin", epochs=STATE.epochs, steps_per_epoch=STATE.steps_per_epoch,
                     examples_per_step=self.examples_per_step,
                     replicas=getattr(strategy, "num_replicas_in_sync", None))


def _epoch_begin(self, epoch, logs=None):
    now = time.monotonic()
    with STATE.lock:
        STATE.epoch, STATE.batch, STATE.epoch_started = epoch, 0, now
        STATE.cycles, STATE.outside, STATE.inside = [], [], []
        STATE.begun = STATE.ended = None


def _step_begin(self, batch, logs=None):
    now = time.monotonic()
    with STATE.lock:
        if STATE.phase == "train" and STATE.skipped(batch):
            STATE.begun = STATE.ended = None
        elif STATE.phase == "train":
            if STATE.ended is not None:
                STATE.outside.append(now - STATE.ended)
            if STATE.begun is not None:
                STATE.cycles.append(now - STATE.begun)
            STATE.begun = now
        STATE.in_step = True


def _step_end(self, batch, logs=None):
    now = time.monotonic()
    with STATE.lock:
        STATE.in_step, STATE.first_done = False, True
        STATE.steps += 1
        STATE.batch = batch + 1
        STATE.last_progress = STATE.ended = now
        if STATE.begun is not None and not STATE.skipped(batch):
            STATE.inside.append(now - STATE.begun)
        STATE.logs = logs or {}


def _eval_step_end(self, batch, logs=None):
    with STATE.lock:
        STATE.in_step, STATE.first_done = False, True
        STATE.last_progress = time.monotonic()


def _phase_begin(phase):
    def begin(self, logs=None):
        with STATE.lock:
            self._watch_previous = STATE.phase
            STATE.phase, STATE.first_done = phase, False
            STATE.last_progress = time.monotonic()
    return begin


def _phase_end(self, logs=None):
    with STATE.lock:
        STATE.phase = getattr(self, "_watch_previous", "idle")
        STATE.first_done = STATE.phase == "train"
        STATE.last_progress = time.monotonic()
        STATE.ended = None  # validation is not time outside the step


def _epoch_end(self, epoch, logs=None):
    with STATE.lock:
        # The parameter-server trainer reports no steps one by one: its epoch has params' steps.
        steps = STATE.batch or (self.params or {}).get("steps") or 0
        figures = {"steps": steps, "seconds": round(time.monotonic() - STATE.epoch_started, 3),
                   "step_seconds": _median(STATE.cycles), "inside": _median(STATE.inside),
                   "outside": _median(STATE.outside),
                   "examples_per_step": STATE.examples_per_step}
    if channel.enabled():
        channel.send("epoch", epoch=epoch, logs=_floats(logs), **figures)


def _train_end(self, logs=None):
    with STATE.lock:
        STATE.phase, STATE.in_step = "ended", False
    if channel.enabled():
        channel.send("end", steps=STATE.steps)


def note(kind: str, epoch: int, step: int, steps_per_epoch=None) -> None:
    """Tell the launcher that a backup of training at ``(epoch, step)`` was written
    (``kind="backup"``) or that training resumed from one (``"resume"``), if one listens."""
    if kind == "resume":
        with STATE.lock:
            STATE.skip = (int(epoch), int(step))
    if channel.enabled():
        channel.send(kind, epoch=epoch, step=step,
                     position=position(epoch, step, steps_per_epoch or STATE.steps_per_epoch))


@contextlib.contextmanager
def telling_failure():
    """Around a ``fit``: if it raises, tell the launcher where training was (the exact step,
    which the restart policy compares between attempts)."""
    try:
        yield
    except BaseException:
        if channel.enabled() and STATE.phase != "idle":
            channel.send("failed", **STATE.snapshot())
        raise


def recorder_for(model, callbacks, examples_per_step=None) -> list:
    """``callbacks`` with a recorder first, where someone watches this task: a launcher (the
    channel is on) or the other workers of a multi-worker job; else ``callbacks`` unchanged."""
    callbacks = list(callbacks or [])
    if not watching() or any(isinstance(c, recorder_class()) for c in callbacks):
        return callbacks
    if channel.enabled() or _multi_worker(getattr(model, "distribute_strategy", None)):
        callbacks.insert(0, recorder_class()(examples_per_step))
    return callbacks


def examples_per_step(x, batch_size=None) -> int | None:
    """The global batch of a ``fit(x, batch_size=...)``: given, Keras' default for arrays (32),
    or a dataset's static batch size (None when it cannot be told)."""
    if batch_size is not None:
        return int(batch_size)
    import tensorflow as tf

    dataset = x
    while isinstance(dataset, tf.data.Dataset):
        size = getattr(dataset, "_batch_size", None)
        if size is not None:
            value = tf.get_static_value(size)
            return int(value) if value is not None and value > 0 else None
        dataset = getattr(dataset, "_input_dataset", None)
    return 32 if hasattr(x, "__len__") and not isinstance(x, (dict, str)) else None


def _collective(strategy) -> bool:
    """Whether ``strategy`` trains several workers in lock-step (multi-worker mirrored)."""
    if strategy is None or not _multi_worker(strategy):
        return False
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def _multi_worker(strategy) -> bool:
    in_multi_worker = getattr(getattr(strategy, "extended", None), "_in_multi_worker_mode", None)
    try:
        return bool(in_multi_worker and in_multi_worker())
    except Exception:  # noqa: BLE001 - a strategy of another kind: not multi-worker
        return False


class Heartbeat:
    """One daemon thread per process: tells the task's state every few seconds, names stalls."""

    _thread = None
    _lock = threading.Lock()

    def __init__(self, strategy):
        self.launched = channel.enabled()
        # Only synchronous training stalls: a parameter-server coordinator's workers never wait
        # for each other, and its steps are not seen one by one.
        self.synchronous = _collective(strategy)
        self.peers = stall.Peers.of(strategy) if self.synchronous and not self.launched else None
        self.warning = _seconds(STALL_WARNING_ENV, DEFAULT_STALL_WARNING)
        self.timeout = _seconds(STALL_TIMEOUT_ENV, None)
        self.warned_at = None
        self.told_end = False
        self.main = threading.main_thread().ident

    @classmethod
    def ensure(cls, strategy) -> None:
        with cls._lock:
            if cls._thread is None or not cls._thread.is_alive():
                beat = cls(strategy)
                cls._thread = threading.Thread(target=beat.run, name="tfdistributed-watch",
                                               daemon=True)
                cls._thread.start()

    def run(self) -> None:
        every = BEAT_SECONDS if self.launched else KV_BEAT_SECONDS
        while True:
            time.sleep(every)
            try:
                self.beat()
            except Exception as e:  # noqa: BLE001 - watching must never end training
                print(f"[tfdistributed] watch: {type(e).__name__}: {e}", file=sys.stderr)
                return

    def beat(self) -> None:
        state = STATE.snapshot()
        stuck = self.synchronous and self.warning is not None and state["started"] \
            and state["idle"] > self.warning and state["phase"] in ("train", "test", "predict")
        # Where it is goes out from half the stall time on: the launcher, which ages a beat by
        # the time since it came, may name the stall a beat before this task would.
        if self.synchronous and self.warning is not None and state["started"] \
                and state["idle"] > self.warning / 2:
            state["where"] = stall.where(self.main)
        if self.launched:
            channel.send("beat", **state)
        elif self.peers is not None:
            self._share(state, stuck)
        if stuck and self.timeout is not None and state["idle"] > self.timeout:
            self._end(state)

    def _share(self, state: dict, stuck: bool) -> None:
        """Publish this task's state to the others (while it trains, and once when it has
        ended: the others may be waiting for it) and, when stuck, name the stall."""
        over = state["phase"] in ("ended", "idle")
        if over and self.told_end:
            return
        try:
            self.peers.publish(state)
            if stuck:
                self._say(self.peers.states(state))
        except Exception:  # noqa: BLE001 - the service is gone: the job is ending
            self.peers = None
            return
        self.told_end = over

    def _say(self, states: dict) -> None:
        message = stall.diagnose(states, self.warning)
        if message and (self.warned_at is None or time.monotonic() - self.warned_at > 30):
            self.warned_at = time.monotonic()
            print(f"[tfdistributed] {message}", file=sys.stderr, flush=True)

    def _end(self, state) -> None:
        print(f"StallError: no step for {state['idle']:.0f} s (the stall "
              f"timeout is {self.timeout:g} s, {STALL_TIMEOUT_ENV}); this task ends so that the "
              f"job can be restarted.", file=sys.stderr, flush=True)
        os._exit(STALLED_EXIT_CODE)
