"""What every launcher engine shares (local, SLURM, Ray): the protocol they follow, how a
target is run, and results.

Why a protocol: :func:`tfdistributed.launch` runs the same job on three engines, and restarts
it after a failure on each of them. With each engine driving its own attempt loop, the three
loops drifted apart (which errors restart, when tasks are stopped, how the timeout counts); and
with each launcher copying the plan's fields into itself, the launchers drifted too. Now one
loop (:func:`tfdistributed.engines.restarts.run`) reads the plan (the timeout, the restarts, the
shape) and drives any engine through two small types, which only start, probe and stop:

- a :class:`Launcher` is an engine set up for one ``launch()`` call, made from the checked plan;
  ``with launcher:`` holds what every attempt shares (Ray connects there),
  ``launcher.job(attempt, deadline, places)`` plans one attempt, and ``places()``,
  ``trainers()`` and ``probe()`` tell the elastic policy where the job can run;
- a :class:`Job` is that attempt: ``start()`` its tasks, ``wait(deadline)`` until the tasks
  running the target are done (or raise), ``results()`` (a :class:`LaunchResult`),
  ``preempt()`` (stop at the next backup), and ``stop()`` every task still running and free
  what the attempt holds, always, success or not.

Adding an engine (Kubernetes, say) is one folder: an option object (a subclass of
:class:`~tfdistributed.engines.options.Engine`) whose ``launcher()`` makes a :class:`Launcher`.

Kept below the engines (:mod:`.local`, :mod:`.slurm`, :mod:`.ray`) so that none of them imports
another to get these.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..errors import ArgumentTypeError, LaunchError

if TYPE_CHECKING:
    from .options import JobPlan

# Each task's attempt of a restarted job, 0-based (0: the first start).
ATTEMPT_ENV = "TFDISTRIBUTED_ATTEMPT"
# What runs an .R target unless the engine names an Rscript: the one on the PATH.
RSCRIPT = "Rscript"


@dataclass
class TaskResult:
    """One task's outcome: role, index, exit code, everything it printed, its return value."""

    task_type: str
    task_index: int
    returncode: int | None
    output: list = field(default_factory=list)
    value: object = None
    server: bool = False

    @property
    def name(self) -> str:
        return f"{self.task_type} {self.task_index}"


@dataclass
class LaunchResult:
    """What :func:`launch` returns when every task succeeded.

    ``tasks`` are the tasks of the attempt that succeeded; ``restarts`` counts the restarts
    before it; ``attempts`` has one dict per attempt, ``{"attempt": n, "task": "worker 1",
    "ended": "was killed by signal 9", "error": <its error line>, "preempted": False}``, the
    last one (the successful one) with ``task``, ``ended`` and ``error`` None.

    What the tasks told the launcher while they trained (:mod:`tfdistributed.watch`):
    ``history`` is the job's training history, ``{metric: [value per epoch]}`` as
    ``keras.callbacks.History.history`` has it (the chief's, else worker 0's; after restarts
    the whole run's, each epoch once), ``epochs`` the epochs it covers (0-based); ``workers``
    one dict per task (``task``, ``steps``, ``examples_per_second``, ``median_step_seconds``,
    ``wait_seconds``, ``outside_seconds``, ``restarts``, ``straggler``, ``straggler_epochs``);
    ``stragglers`` the tasks named stragglers.

    An elastic job (``Scaling(min_workers=)``): ``sizes`` lists each size it ran at, a dict per
    change (``attempt``, ``workers``, ``wanted``, ``why``: ``"start"``, ``"lost"`` or
    ``"back"``, ``places``: the hosts or nodes that left or came, ``position``: the step it
    resumed from, ``seconds``: since the start); empty for a job whose places cannot change.
    """

    cluster: dict
    tasks: list
    seconds: float
    restarts: int = 0
    attempts: list = field(default_factory=list)
    history: dict = field(default_factory=dict)
    epochs: list = field(default_factory=list)
    workers: list = field(default_factory=list)
    stragglers: list = field(default_factory=list)
    sizes: list = field(default_factory=list)

    @property
    def values(self) -> list:
        """Return values of the tasks that ran the target (function targets), in task order."""
        return [t.value for t in self.tasks if not t.server]

    def task(self, task_type: str, task_index: int = 0) -> TaskResult:
        for t in self.tasks:
            if t.task_type == task_type and t.task_index == task_index:
                return t
        raise KeyError(f"no task {task_type} {task_index}")



@dataclass(frozen=True)
class Deadline:
    """A job's timeout, counted from its first start: one timeout covers every attempt. (The
    SLURM engine takes its jobs' waits in SLURM's queue off it: there the timeout counts running
    time, engines/slurm/launcher.py's ``QueueWaits``.)"""

    timeout: float
    started: float

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        """Seconds left (negative once passed)."""
        return self.timeout - self.elapsed()

    def passed(self) -> bool:
        return self.elapsed() > self.timeout


class Job(Protocol):
    """One attempt of a job on one engine (made by :meth:`Launcher.job`)."""

    def start(self) -> None:
        """Start every task (spawn the processes, submit the batch job, start the actors)."""

    def wait(self, deadline: Deadline) -> None:
        """Return when every task running the target has succeeded. Raise
        :class:`~tfdistributed.errors.LaunchError` with a ``failure``
        (:func:`~tfdistributed.engines.restarts.failure_of`) when a task failed, which the
        restart policy may restart; any other error (the timeout: ``LaunchTimeoutError``)
        ends the job."""

    def results(self) -> "LaunchResult":
        """The attempt's outcome, after :meth:`wait` returned."""

    def preempt(self) -> None:
        """Tell every task running the target to stop at its next backup, as a preemption
        notice does (SIGTERM): an elastic job stops so to grow (:mod:`.elastic`)."""

    def stop(self) -> None:
        """Stop every task still running and free what the attempt holds (files, a SLURM job,
        Ray actors). Called after every attempt, whatever happened; calling it twice is fine."""


class Launcher(Protocol):
    """An engine set up for one job: made by the plan's engine,
    ``plan.engine.launcher(plan, relay)``
    (:meth:`~tfdistributed.engines.options.Engine.launcher`), from the checked
    :class:`~tfdistributed.engines.options.JobPlan`, which it reads and never copies; the
    attempt loop (:func:`~tfdistributed.engines.restarts.run`) and the elastic policy
    (:mod:`.elastic`) call nothing else.

    An engine's launcher subclasses this protocol, and so has the defaults below: a job of one
    attempt shares nothing (``__enter__``/``__exit__``), its tasks run on places that cannot be
    lost (:meth:`places` empty), and a place holds one training task (:meth:`trainers`).
    """

    plan: "JobPlan"
    relay: object  # tfdistributed.engines.output.Relay: the job's lines and announcements
    place_word: ClassVar[str] = "host"  # what a place of an elastic job is: host, node

    def __enter__(self) -> "Launcher":
        """Set up what every attempt shares (e.g. connect to Ray)."""
        return self

    def __exit__(self, kind, error, tb) -> bool:
        """Undo :meth:`__enter__`; never swallows an error."""
        return False

    def job(self, attempt: int, deadline: Deadline, places: list | None) -> Job:
        """Plan attempt ``attempt`` (0, 1, ...), its tasks told their attempt in
        :data:`ATTEMPT_ENV`, on ``places`` (an elastic job's, from :meth:`places`; None: where
        the engine puts them); nothing is started yet."""

    def places(self) -> list:
        """The places (hosts, nodes) the job may run on, when they can be lost and the elastic
        policy is to watch them; empty (the default) when they cannot."""
        return []

    def trainers(self, places: list) -> int:
        """Training tasks the job runs on ``places``: one a place, at most the job's (more
        places are spares, taken when a place is lost)."""
        return min(len(places), self.plan.scaling.trainers)

    def probe(self, places: list, active: list) -> dict:
        """``{place: None if it answers, else why not}`` for each of ``places`` (``active``:
        the places the job runs on now, which a place must reach)."""
        return {place: None for place in places}


def call_function(call_path: str, result_path: str) -> None:
    """Child side of a function target (``python -m tfdistributed _call``): unpickle the call,
    make it, pickle the return value where the launcher reads it."""
    import cloudpickle

    with open(call_path, "rb") as f:
        fn, args = cloudpickle.load(f)
    value = fn(*args)
    with open(result_path + ".tmp", "wb") as f:
        pickle.dump(value, f)
    os.replace(result_path + ".tmp", result_path)


def target_argv(target, args, python, rscript, workdir):
    """argv for a target, and whether it is a function (whose call is pickled in ``workdir``,
    its value coming back in the path the launcher appends to the argv); ``rscript`` None is
    :data:`RSCRIPT`."""
    if callable(target):
        import cloudpickle

        fd, call_path = tempfile.mkstemp(suffix=".call.pkl", dir=workdir)
        with os.fdopen(fd, "wb") as f:
            cloudpickle.dump((target, tuple(args)), f)
        return [python, "-m", "tfdistributed", "_call", call_path], True
    if not isinstance(target, (str, os.PathLike)):
        raise ArgumentTypeError(f"launch() target must be a script path or a Python function, got "
                                f"{type(target).__name__}.")
    path = os.fspath(target)
    if not os.path.isfile(path):
        raise LaunchError(f"Script {path!r} does not exist (working directory {os.getcwd()!r}). "
                          f"Pass an existing .py or .R file, or a Python function.")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".py":
        return [python, path, *map(str, args)], False
    if ext == ".r":
        return [rscript or RSCRIPT, "--no-save", "--no-restore", path, *map(str, args)], False
    raise LaunchError(f"Don't know how to run {path!r}: launch() runs .py scripts with Python, .R "
                      f"scripts with Rscript, or a Python function.")


def dying_with_this_process(preexec_fn=None):
    """A ``preexec_fn`` that makes the child get SIGKILL when this process ends (Linux's
    ``PR_SET_PDEATHSIG``; strictly, when the thread that starts it ends: ``launch()`` starts and
    waits for its tasks in one thread), then runs ``preexec_fn``. Elsewhere ``preexec_fn``."""
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return preexec_fn
    import ctypes

    # Looked up here, not in the child: loading a library between fork and exec can deadlock.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def run():
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # this process ended before the child asked
            os._exit(1)
        if preexec_fn is not None:
            preexec_fn()

    return run
