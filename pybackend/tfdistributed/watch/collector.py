"""The launcher side of watching a job: its history, its tasks' figures, its progress and stalls.

Every engine's :class:`~tfdistributed.engines.output.Relay` hands the records its tasks send
(:mod:`~tfdistributed.watch.channel`) to one :class:`JobWatch` per ``launch()``, from any
thread; the engine's supervising loop, on the calling thread (where ``on_output`` may be an R
function), asks it what to say now (:meth:`JobWatch.due`). At the end the result gets:

- ``history``: per epoch, every metric the reporting task (the chief, else worker 0) logged,
  validation included, as Keras' ``History.history`` has them; after restarts, the whole run's,
  each epoch once (an epoch trained again by a later attempt is that attempt's); a script that
  fits again holds the epochs of its last fit, after those of earlier fits that it began past
  (``fit(initial_epoch=5)`` keeps epochs 1-5 of the fit before it, as Keras numbers them);
- ``workers``: one record per task: steps, examples/s, the median step, the time it spent
  waiting for the others in a step and its own work (both estimated from when each task begins
  and ends its steps: the steps end together, so a task that begins them late makes the others
  wait), restarts, and whether it was a straggler (its own work 1.5x the others' median).

It also names a stall (no step from any task for the stall warning time) with
:func:`tfdistributed.watch.stall.diagnose`, and a straggler at the end of the epoch it was seen
in.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

from . import progress, stall
from .recorder import DEFAULT_STALL_WARNING
from .tensorboard import TensorBoardLog, epoch_events, task_events

STRAGGLER_RATIO = 1.5
# Below this much extra work a step (seconds), a "straggler" is noise on a busy machine.
STRAGGLER_FLOOR = 0.005
_LIVE_EVERY = 1.0
_STALL_REPEAT = 30.0


class _Task:
    """What one task of the running attempt said last, and its figures over every attempt."""

    def __init__(self):
        self.beat: dict = {}
        self.begin: dict = {}
        self.epochs: dict = {}   # epoch -> figures of this attempt
        self.steps_before = 0    # steps of earlier attempts
        self.seconds_before = 0.0
        self.ended = False
        self.new_fit = False     # a fit began, and its first epoch has not ended yet
        self.seen: dict = {}     # all attempts: epoch -> figures
        self.attempts: set = set()  # the attempts it took part in
        self.beat_at = time.monotonic()  # when its last beat came

    def steps(self) -> int:
        return int(self.beat.get("steps") or sum(e.get("steps") or 0 for e in self.epochs.values()))


class JobWatch:
    """One launched job watched, across its attempts (see the module's docstring).

    Args:
        display: show the job's progress (``"lines"``: a line per epoch; ``"live"``: one line
            redrawn in a terminal; None: no display).
        stall_warning: seconds without a step before a stall is named (None: never).
    """

    def __init__(self, *, display: str | None = "lines",
                 stall_warning: float | None = DEFAULT_STALL_WARNING, tensorboard=None):
        self.display, self.stall_warning = display, stall_warning
        self.board = None if tensorboard is None else TensorBoardLog(tensorboard)
        self.events: list = []  # for the board, written on the calling thread
        self.lock = threading.Lock()
        self.tasks: dict[str, _Task] = {}
        self.history_by_epoch: dict[int, dict] = {}
        self.backups: list = []      # each backup written or resumed from: its record
        self.attempt = 0
        self.started = time.monotonic()
        self.pending: list[str] = []
        self.stragglers: dict[str, list] = {}
        self._last_live = 0.0
        self._stall_said = None
        self._stall_looked = 0.0
        self.last_stall: str | None = None  # the last stall named, for a timeout's message
        self.sizes: list = []        # each change of an elastic job's size (engines/elastic)

    # -- records, from any thread ---------------------------------------------------------------
    def new_attempt(self, attempt: int) -> None:
        with self.lock:
            self.attempt = attempt
            self.events.append(("job", "restarts", attempt, attempt))
            for task in self.tasks.values():
                task.steps_before += task.steps()
                task.beat, task.begin, task.epochs, task.ended = {}, {}, {}, False
            self._stall_said = self.last_stall = None

    def record(self, name: str, record: dict) -> None:
        kind = record.get("kind")
        with self.lock:
            task = self.tasks.setdefault(name, _Task())
            task.attempts.add(self.attempt)
            if kind == "beat":
                task.beat, task.beat_at = record, time.monotonic()
            elif kind == "begin":
                task.begin, task.new_fit = record, True
            elif kind == "epoch":
                self._epoch(name, task, record)
            elif kind == "end":
                task.ended = True
                task.beat = dict(task.beat, steps=record.get("steps"), phase="ended",
                                 in_step=False)
            elif kind in ("backup", "resume"):
                self.backups.append(dict(record, attempt=self.attempt))
            elif kind == "failed":
                task.beat = dict(record, kind="beat")

    def say(self, line: str) -> None:
        """A line for the job's output, from any thread (printed on the calling thread)."""
        with self.lock:
            self.pending.append(line)

    def size_changed(self, change: dict) -> None:
        """An elastic job runs at a new size from now (``change``: a
        :class:`~tfdistributed.engines.elastic.membership.SizeChange` as a dict); the curve
        ``job/workers`` in TensorBoard, at the step it resumes from."""
        with self.lock:
            self.sizes.append(dict(change))
            step = change.get("position") or 0
            self.events.append(("job", "workers", change["workers"], step))

    def training_shape(self) -> dict:
        """What the reporting task's last ``fit`` said when it began: ``examples_per_step``
        (the global batch) and ``replicas`` (in sync), each None when not known."""
        with self.lock:
            reporter = self._reporter()
            begin = self.tasks[reporter].begin if reporter else {}
            return {"examples_per_step": begin.get("examples_per_step"),
                    "replicas": begin.get("replicas")}

    def backed_up_in_attempt(self) -> bool:
        """Whether a task wrote a backup in the running attempt (a planned stop then costs
        nothing: every task stops at the next one)."""
        with self.lock:
            return any(b.get("kind") == "backup" and b.get("attempt") == self.attempt
                       for b in self.backups)

    def failure_point(self, name: str) -> dict:
        """Where the running attempt was when task ``name`` failed, for the restart policy:
        ``started`` (whether that task began training), ``at`` (the furthest point of training
        any task reported, in steps from the start: exact for an exception, within a few
        seconds for a kill; None if unknown) and ``backup`` (the point the last backup holds,
        written or resumed from in any attempt; None without backups)."""
        with self.lock:
            task = self.tasks.get(name)
            points = [t.beat.get("position") for t in self.tasks.values()
                      if t.beat.get("position") is not None]
            backups = [b["position"] for b in self.backups if b.get("position") is not None]
            return {"started": bool(task and task.begin), "at": max(points, default=None),
                    "backup": backups[-1] if backups else None}

    def _reporter(self) -> str | None:
        names = sorted(self.tasks)
        for wanted in ("chief 0", "worker 0"):
            if wanted in names:
                return wanted
        return names[0] if names else None

    def _epoch(self, name: str, task: _Task, record: dict) -> None:
        epoch = int(record["epoch"])
        task.epochs[epoch] = task.seen[epoch] = record
        task.beat = dict(task.beat, epoch=epoch, batch=record.get("steps"))
        self.events += task_events(name, epoch, record, len(self.tasks))
        if name == self._reporter():
            if task.new_fit:  # a fit (again) from this epoch: what came after it is gone
                for old in [e for e in self.history_by_epoch if e > epoch]:
                    del self.history_by_epoch[old]
            task.new_fit = False
            self.history_by_epoch[epoch] = dict(record.get("logs") or {})
            self.events += epoch_events(epoch, self.history_by_epoch[epoch])
            if self.display == "lines":
                self.pending.append(self._progress_line(name, task, final=True))
        if all(epoch in t.epochs for t in self.tasks.values() if t.begin):
            self._check_stragglers(epoch)

    # -- what to say, on the calling thread -----------------------------------------------------
    def due(self, now: float | None = None) -> list[str]:
        """Lines to print now: progress, a straggler, a stall."""
        now = time.monotonic() if now is None else now
        with self.lock:
            lines, self.pending = self.pending, []
            if self.display == "live" and now - self._last_live >= _LIVE_EVERY:
                reporter = self._reporter()
                if reporter and self.tasks[reporter].beat:
                    self._last_live = now
                    lines.append("\r" + self._progress_line(reporter, self.tasks[reporter]))
            said = self._stall(now)
            events, self.events = self.events, []
        if self.board is not None and events:
            self.board.write(events)
        return lines + ([said] if said else [])

    def _progress_line(self, name: str, task: _Task, final: bool = False) -> str:
        beat = task.beat
        epoch = int(beat.get("epoch") or 0)
        epochs = beat.get("epochs") or task.begin.get("epochs")
        steps = beat.get("steps_per_epoch") or task.begin.get("steps_per_epoch")
        step = beat.get("batch") if not final else (task.epochs.get(epoch) or {}).get("steps")
        logs = self.history_by_epoch.get(epoch, {}) if final else beat.get("logs") or {}
        figures = task.epochs.get(epoch) or {}
        step_seconds = figures.get("step_seconds") or beat.get("step_seconds")
        per_step = figures.get("examples_per_step") or task.begin.get("examples_per_step")
        rate = per_step / step_seconds if per_step and step_seconds else None
        size = self.sizes[-1] if self.sizes else {}
        return "[tfdistributed] " + progress.line(
            epoch=epoch, epochs=epochs, step=step, steps=steps, logs=logs,
            examples_per_second=rate, elapsed=time.monotonic() - self.started,
            remaining=progress.remaining(epoch=epoch, epochs=epochs, step=step, steps=steps,
                                         step_seconds=step_seconds),
            workers=(size.get("workers"), size.get("wanted")))

    def _stall(self, now: float) -> str | None:
        # Beats come every 2 s: once a second is often enough to look (due() runs every 50 ms).
        if self.stall_warning is None or now - self._stall_looked < 1.0:
            return None
        self._stall_looked = now
        # Aged to now: a task whose beats stopped (its Python blocked) is still idle, and silent.
        states = {n: dict(t.beat, idle=t.beat.get("idle", 0.0) + now - t.beat_at,
                          silent=now - t.beat_at) for n, t in self.tasks.items() if t.beat}
        if len(states) < 2 or all(t.ended for t in self.tasks.values()):
            return None
        message = stall.diagnose(states, self.stall_warning)
        if message is None:
            self._stall_said = self.last_stall = None
            return None
        if self._stall_said is not None and now - self._stall_said < _STALL_REPEAT:
            return None
        self._stall_said, self.last_stall = now, message
        return f"[tfdistributed] {message}"

    # -- stragglers -----------------------------------------------------------------------------
    def _check_stragglers(self, epoch: int) -> None:
        figures = {n: t.epochs[epoch] for n, t in self.tasks.items() if epoch in t.epochs}
        for name, why in stragglers(figures).items():
            self.stragglers.setdefault(name, []).append(epoch)
            self.pending.append(f"[tfdistributed] {name} is a straggler in epoch {epoch + 1}: "
                                f"{why}")

    # -- the result -----------------------------------------------------------------------------
    def history(self) -> dict:
        """``{metric: [value per epoch]}`` in epoch order, as ``keras.callbacks.History``."""
        with self.lock:
            epochs = sorted(self.history_by_epoch)
            keys = []
            for e in epochs:
                keys += [k for k in self.history_by_epoch[e] if k not in keys]
            return {k: [self.history_by_epoch[e].get(k) for e in epochs] for k in keys}

    def epochs(self) -> list:
        with self.lock:
            return sorted(self.history_by_epoch)

    def workers(self, restarts: int) -> list:
        """One record per task (see the module's docstring)."""
        with self.lock:
            rows = []
            by_task = {n: list(t.seen.values()) for n, t in self.tasks.items()}
            waits = _waits(by_task)
            for name in _task_order(self.tasks):
                task, seen = self.tasks[name], by_task[name]
                steps = task.steps_before + task.steps()
                per_step = next((e.get("examples_per_step") for e in seen
                                 if e.get("examples_per_step")), None)
                share = per_step / max(1, len(self.tasks)) if per_step else None
                # The pace of its steps, not its epochs' wall time (tracing, validation).
                step_s = _median([e.get("step_seconds") for e in seen])
                rows.append({
                    "task": name, "steps": steps,
                    "examples_per_second": share / step_s if share and step_s else None,
                    "median_step_seconds": step_s, "wait_seconds": waits.get(name),
                    "outside_seconds": _median([e.get("outside") for e in seen]),
                    "restarts": restarts, "attempts": sorted(task.attempts),
                    "straggler": name in self.stragglers,
                    "straggler_epochs": [e + 1 for e in self.stragglers.get(name, [])]})
            return rows


def job_watch(progress, stall_warning, *, echo: bool, on_output, tensorboard=None) -> JobWatch:
    """The :class:`JobWatch` of a launch whose options were checked
    (:class:`tfdistributed.engines.options.Watch`): ``progress=True`` is a line redrawn where
    the output is a terminal nobody else reads, else a line per epoch."""
    if progress is True:
        terminal = echo and on_output is None and sys.stdout.isatty()
        progress = "live" if terminal else "lines"
    return JobWatch(display=progress or None, stall_warning=stall_warning,
                    tensorboard=tensorboard)


def _task_order(tasks) -> list:
    order = {"chief": 0, "worker": 1, "ps": 2, "evaluator": 3}
    return sorted(tasks, key=lambda n: (order.get(n.split()[0], 9), int(n.split()[-1])))


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _waits(by_task: dict) -> dict:
    """Each task's median time a step waiting for the last task to begin it: the steps end
    together, so it is its time inside the step beyond the task that spent the least there."""
    inside = {n: _median([e.get("inside") for e in seen]) for n, seen in by_task.items()}
    known = [v for v in inside.values() if v is not None]
    if len(known) < 2:
        return {}
    least = min(known)
    return {n: v - least for n, v in inside.items() if v is not None}


def stragglers(figures: dict) -> dict:
    """``{task: why}`` for the tasks whose own work a step (the step's time less what they
    waited for the others) is at least :data:`STRAGGLER_RATIO` times the others' median, given
    each task's figures of one epoch (``step_seconds``, ``inside``)."""
    waits = _waits({n: [f] for n, f in figures.items()})
    own = {n: f["step_seconds"] - waits[n] for n, f in figures.items()
           if f.get("step_seconds") and n in waits}
    found = {}
    for name, work in own.items():
        others = [w for n, w in own.items() if n != name]
        if not others:
            continue
        typical = statistics.median(others)
        if work >= STRAGGLER_RATIO * typical and work - typical >= STRAGGLER_FLOOR:
            outside = figures[name].get("outside") or 0.0
            found[name] = (f"its own work takes {work / typical:.1f}x the others' "
                           f"({work * 1000:.0f} ms a step against {typical * 1000:.0f} ms; "
                           f"{outside * 1000:.0f} ms of it outside the step: callbacks, input "
                           f"served from Python or R, code between steps); the others wait for "
                           f"it about {(work - typical) * 1000:.0f} ms a step")
    return found
