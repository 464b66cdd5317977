"""What every launcher engine shares (local, SLURM, Ray): how a target is run, and results.

Kept below :mod:`tfdistributed.launch`, :mod:`tfdistributed.slurm` and
:mod:`tfdistributed.ray_backend`, so that none of them imports another to get these.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

from .errors import ArgumentTypeError, LaunchError

# The exit status of a task that stopped because it was told to (SIGTERM: a spot VM reclaimed,
# a SLURM or Kubernetes eviction), not because it failed: "try again later" (BSD's EX_TEMPFAIL).
# launch(max_restarts=...) restarts such a job without taking it for a bug.
PREEMPTED_EXIT_CODE = 75

# Each task's attempt of a restarted job, 0-based (0: the first start).
ATTEMPT_ENV = "TFDISTRIBUTED_ATTEMPT"


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
    """

    cluster: dict
    tasks: list
    seconds: float
    restarts: int = 0
    attempts: list = field(default_factory=list)

    @property
    def values(self) -> list:
        """Return values of the tasks that ran the target (function targets), in task order."""
        return [t.value for t in self.tasks if not t.server]

    def task(self, task_type: str, task_index: int = 0) -> TaskResult:
        for t in self.tasks:
            if t.task_type == task_type and t.task_index == task_index:
                return t
        raise KeyError(f"no task {task_type} {task_index}")



def _target_argv(target, args, python, rscript, workdir):
    """argv for a target, plus the path a function target's value comes back in."""
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
        return [rscript, "--no-save", "--no-restore", path, *map(str, args)], False
    raise LaunchError(f"Don't know how to run {path!r}: launch() runs .py scripts with Python, .R "
                      f"scripts with Rscript, or a Python function.")
