"""What :func:`~tfdistributed.launch` is asked, as a few objects: where the job runs (an engine:
:class:`Local`, :class:`Slurm`, :class:`Ray`), how it heals (:class:`Restarts`), how it is
watched (:class:`Watch`); and :class:`JobPlan`, everything one ``launch()`` call was given,
checked, which is what every engine's launcher is made from.

Why objects: the options used to be ~27 keyword arguments of ``launch()``, typed again by each
engine's launcher and by R's ``launch_cluster()``, defaults included, and an option of one
engine passed through the others' signatures. Now each option is a field of one frozen object,
checked where it is made (a mistake is an :class:`~tfdistributed.errors.ArgumentTypeError` that
names the fix, before anything starts), and each default is written once, here (the stall
warning's in :mod:`tfdistributed.watch.recorder`, which tasks read without a launcher; the join
timeout's in :mod:`tfdistributed.cluster.join`). What each option does is told in the guides
("Jobs that heal themselves", "Seeing a launched job", "Clusters and networks").
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from .._args import as_int, as_seconds
from ..cluster import join
from ..errors import ArgumentTypeError
from ..watch import channel
from ..watch.recorder import DEFAULT_STALL_WARNING, STALL_TIMEOUT_ENV, STALL_WARNING_ENV
from .gpus import check_gpus_per_task

__all__ = ["DEFAULT_TIMEOUT", "ENGINE_OPTIONS", "Engine", "JobPlan", "Local", "Ray", "Restarts",
           "Slurm", "Watch", "check_hosts", "check_timeout"]

#: Seconds for a whole job, restarts included.
DEFAULT_TIMEOUT = 900.0
#: The SLURM job's name (``sbatch --job-name``).
DEFAULT_JOB_NAME = "tfdistributed"
#: Seconds between two looks at a SLURM job's files or a Ray job's actors.
POLL_SECONDS = 0.25
PROGRESS_MODES = (True, False, "lines", "live", None)
# SLURM's --time: minutes, [minutes:]seconds, hours:minutes:seconds, days-hours[:minutes[:s]].
_SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^(UNLIMITED|INFINITE)$", re.IGNORECASE)


def check_timeout(timeout) -> float:
    """``timeout`` as a positive number of seconds."""
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise ArgumentTypeError(
            f"`timeout` must be a number of seconds, got {timeout!r}.") from None
    if isinstance(timeout, bool) or not seconds > 0:
        raise ArgumentTypeError(f"`timeout` must be a positive number of seconds, got {timeout}.")
    return seconds


def check_hosts(hosts) -> dict:
    """``Local(hosts=)`` as ``{host: [command prefix]}``."""
    if hosts is None:
        return {}
    if not isinstance(hosts, dict) or not all(
            isinstance(h, str) and isinstance(p, (list, tuple))
            and all(isinstance(a, str) for a in p) for h, p in hosts.items()):
        raise ArgumentTypeError(
            f"`hosts` must map each host of the cluster to the command prefix that starts a "
            f"process there, e.g. {{'10.77.0.2': ['ip', 'netns', 'exec', 'ns0']}}; got {hosts!r}.")
    return {h: list(p) for h, p in hosts.items()}


def _flag(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"`{name}` must be TRUE/True or FALSE/False, got {value!r}.")
    return value


def _text(value, name: str, example: str):
    if value is not None and not (isinstance(value, str) and value):
        raise ArgumentTypeError(f"`{name}` must be a non-empty string or None, got {value!r}: "
                                f"e.g. {example}.")
    return value


def _words(value, name: str) -> tuple:
    """Command-line options: one string (one option, R's ``"--gres=gpu:1"``) or a sequence."""
    words = (value,) if isinstance(value, str) else value
    if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        raise ArgumentTypeError(f"`{name}` must be a list of command-line options (strings), "
                                f"e.g. ['--gres=gpu:1'], got {value!r}.")
    return tuple(words)


def _settle(obj, **values) -> None:
    """Store checked (normalized) field values on a frozen dataclass."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)


def _shown(obj) -> str:
    """``Slurm(partition='cpu')``: the fields that differ from their defaults."""
    given = [f"{f.name}={getattr(obj, f.name)!r}" for f in dataclasses.fields(obj)
             if getattr(obj, f.name) != f.default]
    return f"{type(obj).__name__}({', '.join(given)})"


class _Options:
    """What every option object has: a short repr (the fields given) and :meth:`replace`."""

    def replace(self, **changes):
        """A copy with ``changes``, checked again."""
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        return _shown(self)


@dataclass(frozen=True, kw_only=True, repr=False)
class Engine(_Options):
    """Where a job's tasks run; the fields every engine has.

    Args:
        python: the Python that runs a ``.py`` target and the servers (default: this one).
        rscript: the ``Rscript`` that runs an ``.R`` target (default: ``Rscript`` on the PATH).
        gpus_per_task: GPUs each task that trains gets (:mod:`~tfdistributed.engines.gpus`): a
            number (0: none), ``"all"`` (local only), or None: on this machine the GPUs split
            evenly, on SLURM and Ray none asked for.
    """

    name: ClassVar[str] = ""
    python: str | None = None
    rscript: str | None = None
    gpus_per_task: int | str | None = None

    def __post_init__(self):
        _text(self.python, "python", "'/usr/bin/python3'")
        _text(self.rscript, "rscript", "'/usr/lib/R/bin/Rscript'")
        check_gpus_per_task(self.gpus_per_task, self.name or "local")


@dataclass(frozen=True, kw_only=True, repr=False)
class Local(Engine):
    """Tasks as processes on this machine (127.0.0.1), or on hosts you set up yourself.

    Args:
        hosts: ``{address: command prefix}`` of hosts of your own the ``cluster`` names.
        warm_start: fork each task from a warm process (None: ``TFDISTRIBUTED_WARM_START``).
        tasks: start only these ``(task_type, task_index)`` of the cluster.
        prepare_task: called with each task's :class:`~.local.TaskPlan` before it starts.
        gpus_per_task: each task's share of this machine's GPUs, in its
            ``CUDA_VISIBLE_DEVICES``: None (the default), the GPUs split evenly among the tasks
            that train; a number each; ``"all"``; ps tasks get none
            (:mod:`~tfdistributed.engines.gpus`).
        python, rscript: as :class:`Engine`.

    Example:
        >>> Local(warm_start=True, gpus_per_task=1)
        Local(gpus_per_task=1, warm_start=True)
    """

    name: ClassVar[str] = "local"
    hosts: dict | None = None
    warm_start: bool | None = None
    tasks: tuple | None = None
    prepare_task: Callable | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.warm_start is not None:
            _flag(self.warm_start, "warm_start")
        if self.prepare_task is not None and not callable(self.prepare_task):
            raise ArgumentTypeError(f"`prepare_task` must be a function of a TaskPlan, got "
                                    f"{self.prepare_task!r}.")
        tasks = self.tasks
        if tasks is not None:
            try:
                tasks = tuple((str(role), as_int(index, "task index", minimum=0))
                              for role, index in tasks)
            except (TypeError, ValueError):
                raise ArgumentTypeError(f"`tasks` must list (task_type, task_index) pairs, e.g. "
                                        f"[('worker', 1)], got {self.tasks!r}.") from None
        _settle(self, hosts=None if self.hosts is None else check_hosts(self.hosts), tasks=tasks)


@dataclass(frozen=True, kw_only=True, repr=False)
class Slurm(Engine):
    """A SLURM job submitted with ``sbatch``, followed, and cancelled with ``scancel``.

    Two clocks, as SLURM users mean them: ``time`` is SLURM's own limit on the job, counted by
    SLURM from the job's start; ``launch(timeout=)`` is the launcher's, and counts the job's
    running time, summed over its attempts (each restart waits in the queue again): what it
    waits in SLURM's queue is not taken from it. While the job waits, the launcher says so
    with SLURM's reason (``[launch] SLURM job 42 is waiting in the queue (Resources)``), again
    every minute, and when it starts (``SLURM job 42 started after 37 s in the queue``); the
    result's ``queue_seconds`` is the wait, every attempt's summed. The launcher cancels its
    job (``scancel``) at the timeout, on a failure and on an interrupt.

    Args:
        partition: ``sbatch --partition``.
        time: ``sbatch --time`` (``"02:00:00"``, or minutes). Default: no ``--time`` of ours,
            so the partition's default limit applies. It is not derived from ``timeout``: a
            limit above the partition's maximum is refused, or leaves the job pending
            (``PartitionTimeLimit``). Give one to bound a job whose launcher was lost (its
            machine down, its process killed), which cannot cancel it.
        queue_timeout: seconds each attempt may wait in SLURM's queue before it is cancelled
            (a ``LaunchTimeoutError`` with SLURM's reason); None: as long as SLURM keeps it
            queued.
        sbatch_args: more ``sbatch`` options, e.g. ``["--constraint=a100"]``.
        srun_args: more ``srun`` options.
        gpus_per_task: ``sbatch --gpus-per-task``: SLURM gives each task that many GPUs of its
            own (ps tasks too: one ``srun`` starts every task).
        job_name: ``sbatch --job-name``.
        directory: the job's directory, on storage this machine and the nodes share.
        keep_files: keep the job's directory (default: removed when it is a new one).
        poll: seconds between two looks at the tasks' files.
        python, rscript: the interpreters on the nodes (as :class:`Engine`).

    Example:
        >>> Slurm(partition="cpu", time="02:00:00")
        Slurm(partition='cpu', time='02:00:00')
    """

    name: ClassVar[str] = "slurm"
    partition: str | None = None
    time: Any = None
    queue_timeout: float | None = None
    sbatch_args: tuple = ()
    srun_args: tuple = ()
    job_name: str = DEFAULT_JOB_NAME
    directory: str | None = None
    keep_files: bool = False
    poll: float = POLL_SECONDS

    def __post_init__(self):
        super().__post_init__()
        _text(self.partition, "partition", "'cpu'")
        _text(self.job_name, "job_name", "'train'")
        time = self.time
        if isinstance(time, bool) or not (
                time is None or isinstance(time, str) and _SLURM_TIME.match(time)
                or isinstance(time, (int, float)) and time > 0):
            raise ArgumentTypeError(f"`time` must be SLURM's --time, e.g. '02:00:00' or a number "
                                    f"of minutes, got {time!r}.")
        if self.directory is not None and not isinstance(self.directory, (str, os.PathLike)):
            raise ArgumentTypeError(f"`directory` must be a path, got {self.directory!r}.")
        sbatch_args = _words(self.sbatch_args, "sbatch_args")
        if self.gpus_per_task is not None and any(a.startswith("--gpus-per-task")
                                                  for a in sbatch_args):
            raise ArgumentTypeError("`gpus_per_task` and `sbatch_args` both ask for GPUs per "
                                    "task: give gpus_per_task alone.")
        _settle(self, sbatch_args=sbatch_args,
                srun_args=_words(self.srun_args, "srun_args"),
                directory=None if self.directory is None else os.fspath(self.directory),
                keep_files=_flag(self.keep_files, "keep_files"),
                poll=as_seconds(self.poll, "poll", minimum=0.01),
                queue_timeout=None if self.queue_timeout is None else
                as_seconds(self.queue_timeout, "queue_timeout", minimum=1))


@dataclass(frozen=True, kw_only=True, repr=False)
class Ray(Engine):
    """One Ray actor per task, on the Ray cluster this process is connected to, or a new one.

    Args:
        address: the Ray cluster to connect to (default: ``RAY_ADDRESS``, else a local Ray).
        ray_options: options of every task's actor (``num_cpus``, ``resources``...).
        gpus_per_task: ``num_gpus`` of each task that trains (ps tasks and a parameter-server
            job's coordinator get none).
        poll: seconds between two looks at the actors.
        python, rscript: the interpreters on the nodes (as :class:`Engine`).

    Example:
        >>> Ray(address="ray://head:10001")
        Ray(address='ray://head:10001')
    """

    name: ClassVar[str] = "ray"
    address: str | None = None
    ray_options: dict | None = None
    poll: float = POLL_SECONDS

    def __post_init__(self):
        super().__post_init__()
        _text(self.address, "address", "'ray://head:10001'")
        if self.ray_options is not None and not isinstance(self.ray_options, dict):
            raise ArgumentTypeError(f"`ray_options` must be a dict of actor options, e.g. "
                                    f"{{'num_cpus': 2}}, got {self.ray_options!r}.",
                                    hints={"r": "E.g. ray_options = list(num_cpus = 2)."})
        if self.gpus_per_task is not None and "num_gpus" in (self.ray_options or {}):
            raise ArgumentTypeError("`gpus_per_task` and `ray_options` both give the actors "
                                    "GPUs (num_gpus): give gpus_per_task alone (only the tasks "
                                    "that train get them), or num_gpus in ray_options alone "
                                    "(every task's actor gets them).")
        _settle(self, poll=as_seconds(self.poll, "poll", minimum=0.01))


#: Each engine's options by the engine's name.
ENGINE_OPTIONS = {cls.name: cls for cls in (Local, Slurm, Ray)}


@dataclass(frozen=True, kw_only=True, repr=False)
class Restarts(_Options):
    """How a job heals: restarts after a failure, and hosts that come and go.

    Args:
        max_restarts: how many times a failed job is started again as a whole.
        min_workers: the fewest workers the job goes on with when hosts are gone for good.
        join_timeout: seconds a task waits for the others to join, and a lost host to answer.
        grace: seconds between SIGTERM and SIGKILL when tasks are stopped.

    Example:
        >>> Restarts(max_restarts=3, min_workers=2)
        Restarts(max_restarts=3, min_workers=2)
    """

    max_restarts: int = 0
    min_workers: int | None = None
    join_timeout: float | None = None
    grace: float = 5.0

    def __post_init__(self):
        _settle(self, max_restarts=as_int(self.max_restarts, "max_restarts", minimum=0),
                min_workers=as_int(self.min_workers, "min_workers", minimum=1, allow_none=True),
                join_timeout=join.as_timeout(self.join_timeout),
                grace=as_seconds(self.grace, "grace", minimum=0))

    @property
    def lost_after(self) -> float:
        """Seconds a place (host, node) may take to answer before it is lost: as long as a task
        of the next attempt would wait for it to join."""
        return self.join_timeout or join.DEFAULT_JOIN_TIMEOUT


@dataclass(frozen=True, kw_only=True, repr=False)
class Watch(_Options):
    """What the launcher shows of a running job.

    Args:
        progress: the job's display: True, ``"lines"``, ``"live"``, or False (each task's own).
        stall_warning: seconds without a step before the stalled task is named (None: never).
        stall_timeout: seconds without a step after which every task ends (None: never).
        tensorboard: a directory for the job's TensorBoard event files.
        show_all: also stream TensorFlow's start-up lines and Keras' own progress lines.

    Example:
        >>> Watch(stall_warning=120).stall_warning
        120.0
    """

    progress: bool | str | None = True
    stall_warning: float | None = DEFAULT_STALL_WARNING
    stall_timeout: float | None = None
    tensorboard: str | None = None
    show_all: bool = False

    def __post_init__(self):
        if self.progress not in PROGRESS_MODES or isinstance(self.progress, (int, float)) \
                and not isinstance(self.progress, bool):
            raise ArgumentTypeError(f"`progress` must be True, False, 'lines' or 'live', got "
                                    f"{self.progress!r}.")
        board = self.tensorboard
        if board is not None and not isinstance(board, (str, os.PathLike)):
            raise ArgumentTypeError(f"`tensorboard` must be a directory path, got {board!r}.")
        _settle(self, stall_warning=self._seconds("stall_warning"),
                stall_timeout=self._seconds("stall_timeout"),
                tensorboard=None if board is None else os.fspath(board),
                show_all=_flag(self.show_all, "show_all"))

    def _seconds(self, name: str) -> float | None:
        value = getattr(self, name)
        return None if value is None else as_seconds(value, name, minimum=1)

    def task_env(self) -> dict:
        """What every task is told: send records to the launcher, and the stall limits."""
        warning, timeout = self.stall_warning, self.stall_timeout
        return {channel.ENV: "1",
                STALL_WARNING_ENV: "0" if warning is None else f"{warning:g}",
                STALL_TIMEOUT_ENV: "0" if timeout is None else f"{timeout:g}"}


@dataclass(frozen=True)
class JobPlan:
    """Everything one :func:`~tfdistributed.launch` call was given, checked: what each
    engine's launcher is made from (``engine(plan.engine.name)(plan, watch)``).

    Args:
        target, workers, ps, chief, cluster, timeout, env, args, cwd, on_output, echo: launch's.
        engine: a :class:`Local`, :class:`Slurm` or :class:`Ray`.
        restarts: a :class:`Restarts`.
        watch: a :class:`Watch`.
    """

    target: Any
    workers: int
    ps: int
    chief: bool
    cluster: Any
    timeout: float
    env: dict | None
    args: Any
    cwd: str | None
    on_output: Callable | None
    echo: bool
    engine: Engine
    restarts: Restarts
    watch: Watch

    def __post_init__(self):
        for name, kind, what in (("engine", Engine, "an engine (Local, Slurm or Ray)"),
                                 ("restarts", Restarts, "a Restarts"),
                                 ("watch", Watch, "a Watch")):
            value = getattr(self, name)
            if not isinstance(value, kind) or type(value) is Engine:
                python, r = _EXAMPLES[value if name == "engine" and isinstance(value, str)
                                      and value in ENGINE_OPTIONS
                                      else name]
                raise ArgumentTypeError(f"`{name}` must be {what}, got {value!r}.",
                                        hints={"python": f"E.g. {name}={python}.",
                                               "r": f"E.g. {name} = {r}."})
        if self.cluster is not None and not isinstance(self.engine, Local):
            raise ArgumentTypeError(f"`cluster` only applies to local clusters; the "
                                    f"{self.engine.name} engine places the tasks itself.")
        _settle(self, timeout=check_timeout(self.timeout))

    def task_env(self) -> dict:
        """Every task's extra environment: what the watch tells the tasks, the caller's
        ``env``, and the join timeout."""
        waits = self.restarts.join_timeout
        return {**self.watch.task_env(), **{str(k): v for k, v in (self.env or {}).items()},
                **({} if waits is None else {join.ENV: f"{waits:g}"})}


# A wrong option object's fix, in Python and in R.
_EXAMPLES = {"engine": ("tfd.engines.Slurm(partition='cpu')", 'slurm(partition = "cpu")'),
             "local": ("tfd.engines.Local()", "local_hosts()"),
             "slurm": ("tfd.engines.Slurm()", "slurm()"), "ray": ("tfd.engines.Ray()", "ray()"),
             "restarts": ("tfd.Restarts(max_restarts=2)", "restarts(max_restarts = 2)"),
             "watch": ("tfd.Watch(stall_warning=120)", "watching(stall_warning = 120)")}
