"""What :func:`~tfdistributed.launch` is asked, as a few objects: the job's shape
(:class:`Scaling`), where it runs (an :class:`Engine`: ``Local``, ``Slurm``, ``Ray``, each in
its own folder), how it heals (:class:`Restarts`), how it is watched (:class:`Watch`); and
:class:`JobPlan`, everything one ``launch()`` call was given, checked, which the attempt loop
(:mod:`tfdistributed.engines.restarts`) runs and every engine's launcher reads.

Why objects: the options used to be ~27 keyword arguments of ``launch()``, typed again by each
engine's launcher and by R's ``launch_cluster()``, defaults included, and the job's shape
(``workers``, ``ps``, ``chief``...) was checked again by each engine. Now each option is a field
of one frozen object, checked where it is made (a mistake is an
:class:`~tfdistributed.errors.ArgumentTypeError` or a
:class:`~tfdistributed.errors.ClusterConfigError` that names the fix, before anything starts),
and each default is written once, here (the stall warning's in
:mod:`tfdistributed.watch.recorder`, which tasks read without a launcher; the join timeout's in
:mod:`tfdistributed.cluster.join`). What each option does is told in the guides ("Jobs that
heal themselves", "Seeing a launched job", "Clusters and networks").
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from .._args import as_int, as_seconds
from ..cluster import join
from ..cluster.local import Cluster, check_launchable
from ..cluster.spec import ROLES
from ..errors import ArgumentTypeError, ClusterConfigError
from ..watch import channel
from ..watch.recorder import DEFAULT_STALL_WARNING, STALL_TIMEOUT_ENV, STALL_WARNING_ENV
from .gpus import check_gpus_per_task

__all__ = ["DEFAULT_TIMEOUT", "Engine", "JobPlan", "Options", "Restarts", "Scaling", "Watch",
           "check_placed", "check_timeout", "flag", "scaling_of", "settle", "text", "words"]

#: Seconds for a whole job, restarts included.
DEFAULT_TIMEOUT = 900.0
#: Seconds between two looks at a SLURM job's files or a Ray job's actors.
POLL_SECONDS = 0.25
PROGRESS_MODES = (True, False, "lines", "live", None)


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


def flag(value, name: str) -> bool:
    """``value`` as a flag: True or False only."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"`{name}` must be TRUE/True or FALSE/False, got {value!r}.")
    return value


def text(value, name: str, example: str):
    """``value``: a non-empty string, or None."""
    if value is not None and not (isinstance(value, str) and value):
        raise ArgumentTypeError(f"`{name}` must be a non-empty string or None, got {value!r}: "
                                f"e.g. {example}.")
    return value


def words(value, name: str) -> tuple:
    """Command-line options: one string (one option, R's ``"--gres=gpu:1"``) or a sequence."""
    found = (value,) if isinstance(value, str) else value
    if not isinstance(found, (list, tuple)) or not all(isinstance(w, str) for w in found):
        raise ArgumentTypeError(f"`{name}` must be a list of command-line options (strings), "
                                f"e.g. ['--gres=gpu:1'], got {value!r}.")
    return tuple(found)


def settle(obj, **values) -> None:
    """Store checked (normalized) field values on a frozen dataclass."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)


class Options:
    """What every option object has: a short repr (the fields given) and :meth:`replace`."""

    def replace(self, **changes):
        """A copy with ``changes``, checked again."""
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        given = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                 if getattr(self, f.name) != f.default]
        return f"{type(self).__name__}({', '.join(given)})"


@dataclass(frozen=True, kw_only=True, repr=False)
class Scaling(Options):
    """The job's shape: its tasks, the fewest workers it goes on with, and each task's GPUs.

    Checked once, here: an engine reads it and never checks it again.

    Args:
        workers: ``worker`` tasks.
        ps: parameter-server tasks (needs ``chief=True``: the target runs as the chief, the
            coordinator; workers and ps tasks serve).
        chief: add a ``chief`` task.
        min_workers: the fewest training tasks the job goes on with when hosts (SLURM or Ray
            nodes, hosts of ``Local(hosts=)``) are gone for good; None: every one is needed
            (:mod:`tfdistributed.engines.elastic`). Multi-worker jobs only.
        gpus_per_task: GPUs each task that trains gets (:mod:`tfdistributed.engines.gpus`): a
            number (0: none), ``"all"`` (on this machine), or None: on this machine the GPUs
            split evenly, on SLURM and Ray none asked for.
        cluster: the addresses of a cluster to run instead of ``workers``/``ps``/``chief``
            (the local engine, on 127.0.0.1 or on ``Local(hosts=)``); its counts are the
            job's.

    Raises:
        ArgumentTypeError: a wrong count, ``min_workers`` above the workers or with ``ps``,
            or ``gpus_per_task`` that is not a number of GPUs.
        ClusterConfigError: ``ps`` without a chief, or an invalid ``cluster``.

    Example:
        >>> Scaling(workers=3, min_workers=2, gpus_per_task=1)
        Scaling(workers=3, min_workers=2, gpus_per_task=1)
    """

    workers: int = 2
    ps: int = 0
    chief: bool = False
    min_workers: int | None = None
    gpus_per_task: int | str | None = None
    cluster: Any = None

    def __post_init__(self):
        if self.cluster is None:
            settle(self, workers=as_int(self.workers, "workers", minimum=1),
                   ps=as_int(self.ps, "ps", minimum=0), chief=flag(self.chief, "chief"))
        else:
            self._counts_of(self.cluster)
        if self.ps and not self.chief:
            raise ClusterConfigError(
                "A parameter-server job needs chief=True: the target runs as the chief (the "
                "coordinator); workers and ps tasks serve.",
                hints={"python": f"E.g. tfd.Scaling(workers={self.workers}, ps={self.ps}, "
                                 f"chief=True).",
                       "r": f"E.g. scaling(workers = {self.workers}, ps = {self.ps}, "
                            f"chief = TRUE)."})
        settle(self, min_workers=self._min_workers(),
               gpus_per_task=check_gpus_per_task(self.gpus_per_task))

    def _counts_of(self, cluster) -> None:
        """The counts of ``cluster`` (validated once, kept as a
        :class:`~tfdistributed.cluster.Cluster`), refusing a count given that differs."""
        value = check_launchable(Cluster.of(cluster))
        counts = {"workers": value.count("worker"), "ps": value.count("ps"),
                  "chief": value.count("chief") > 0}
        for name, count in counts.items():
            given, default = getattr(self, name), _DEFAULTS[name]
            if given != default and given != count:
                raise ArgumentTypeError(
                    f"`{name}={given!r}` and the `cluster`'s {name} ({count!r}) disagree: the "
                    f"cluster gives the job's tasks; leave {name} out.")
        settle(self, cluster=value, **counts)

    def _min_workers(self) -> int | None:
        least = as_int(self.min_workers, "min_workers", minimum=1, allow_none=True)
        if least is not None and self.ps:
            raise ArgumentTypeError(
                "`min_workers` applies to multi-worker jobs: a parameter-server job's "
                "coordinator already goes on without a lost worker within the job, and cannot "
                "go on without its ps tasks. Drop min_workers, or ps.")
        if least is not None and least > self.trainers:
            raise ArgumentTypeError(f"min_workers={least} is more than the job's "
                                    f"{self.trainers} workers: min_workers <= workers.")
        return least

    @property
    def parameter_server(self) -> bool:
        return self.ps > 0

    @property
    def trainers(self) -> int:
        """Tasks that hold training replicas: the chief and the workers (a parameter-server
        job's workers)."""
        return self.workers + (int(self.chief) if not self.ps else 0)

    def tasks(self) -> list:
        """``(role, index)`` of every task, in TensorFlow's role order (``ROLES``)."""
        counts = {"chief": int(self.chief), "worker": self.workers, "ps": self.ps}
        return [(role, i) for role in ROLES for i in range(counts.get(role, 0))]

    def resized(self, trainers: int) -> "Scaling":
        """The same job with ``trainers`` training tasks (an elastic job on fewer or more
        places): its chief, if any, and the workers left."""
        return self.replace(workers=trainers - int(self.chief))


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Scaling)}


def check_placed(scaling: Scaling, engine: str) -> None:
    """Refuse what an engine that places the tasks itself (SLURM, Ray) cannot run: a ``cluster``
    of given addresses, and GPUs other than a number each.

    Raises:
        ArgumentTypeError: naming the fix.
    """
    if scaling.cluster is not None:
        raise ArgumentTypeError(f"`cluster` only applies to local clusters; the {engine} "
                                f"engine places the tasks itself.")
    check_gpus_per_task(scaling.gpus_per_task, engine)


def scaling_of(scaling, workers) -> Scaling:
    """The job's shape from ``launch(target, scaling, workers=)``: ``scaling`` (default
    ``Scaling()``), or ``Scaling(workers=workers)``, the short call's.

    Raises:
        ArgumentTypeError: ``scaling`` is not a :class:`Scaling`, or both were given.
    """
    if scaling is None:
        return Scaling() if workers is None else Scaling(workers=workers)
    if not isinstance(scaling, Scaling):
        raise ArgumentTypeError(f"`scaling` must be a Scaling, got {scaling!r}.",
                                hints={"python": "E.g. tfd.Scaling(workers=2, ps=1, chief=True).",
                                       "r": "E.g. scaling(workers = 2, ps = 1, chief = TRUE)."})
    if workers is not None:
        raise ArgumentTypeError(f"`workers` and `scaling` were both given: give the workers in "
                                f"the Scaling alone, e.g. {scaling.replace(workers=workers)!r}.",
                                hints={"r": "E.g. scaling(workers = ...) alone."})
    return scaling


@dataclass(frozen=True, kw_only=True, repr=False)
class Engine(Options):
    """Where a job's tasks run; the fields every engine has, and what each engine does:
    :meth:`check` a job's shape, make its :meth:`launcher`.

    An engine is one folder of :mod:`tfdistributed.engines` (``local/``, ``slurm/``, ``ray/``):
    its option object, a subclass of this one, and its launcher, which follows
    :class:`~tfdistributed.engines.base.Launcher`.

    Args:
        python: the Python that runs a ``.py`` target and the servers (default: this one).
        rscript: the ``Rscript`` that runs an ``.R`` target (default: ``Rscript`` on the PATH).
    """

    name: ClassVar[str] = ""
    python: str | None = None
    rscript: str | None = None

    def __post_init__(self):
        text(self.python, "python", "'/usr/bin/python3'")
        text(self.rscript, "rscript", "'/usr/lib/R/bin/Rscript'")

    def check(self, scaling: Scaling) -> None:
        """Refuse a shape this engine cannot run: by default, as :func:`check_placed`.

        Raises:
            ArgumentTypeError: what the engine cannot run, and the fix.
        """
        check_placed(scaling, self.name)

    def launcher(self, plan: "JobPlan", relay):
        """The engine's :class:`~tfdistributed.engines.base.Launcher` for ``plan`` (whose
        engine this is), announcing in ``relay``
        (:class:`~tfdistributed.engines.output.Relay`)."""
        raise NotImplementedError(f"{type(self).__name__} makes no launcher")


@dataclass(frozen=True, kw_only=True, repr=False)
class Restarts(Options):
    """How a job heals: restarts after a failure. (Going on without hosts gone for good is
    the job's shape: ``Scaling(min_workers=)``.)

    Args:
        max_restarts: how many times a failed job is started again as a whole.
        join_timeout: seconds a task waits for the others to join, and a lost host to answer.
        grace: seconds between SIGTERM and SIGKILL when tasks are stopped.

    Example:
        >>> Restarts(max_restarts=3)
        Restarts(max_restarts=3)
    """

    max_restarts: int = 0
    join_timeout: float | None = None
    grace: float = 5.0

    def __post_init__(self):
        settle(self, max_restarts=as_int(self.max_restarts, "max_restarts", minimum=0),
               join_timeout=join.as_timeout(self.join_timeout),
               grace=as_seconds(self.grace, "grace", minimum=0))

    @property
    def lost_after(self) -> float:
        """Seconds a place (host, node) may take to answer before it is lost: as long as a task
        of the next attempt would wait for it to join."""
        return self.join_timeout or join.DEFAULT_JOIN_TIMEOUT


@dataclass(frozen=True, kw_only=True, repr=False)
class Watch(Options):
    """What the launcher shows of a running job, and where its lines go.

    Args:
        progress: the job's display: True, ``"lines"``, ``"live"``, or False (each task's own).
        stall_warning: seconds without a step before the stalled task is named (None: never).
        stall_timeout: seconds without a step after which every task ends (None: never).
        tensorboard: a directory for the job's TensorBoard event files.
        show_all: also stream TensorFlow's start-up lines and Keras' own progress lines.
        echo: print each task's lines (``"[worker 0] line"``) to standard output.
        on_output: also called with each such line, from the calling thread.

    Example:
        >>> Watch(stall_warning=120).stall_warning
        120.0
    """

    progress: bool | str | None = True
    stall_warning: float | None = DEFAULT_STALL_WARNING
    stall_timeout: float | None = None
    tensorboard: str | None = None
    show_all: bool = False
    echo: bool = True
    on_output: Callable | None = None

    def __post_init__(self):
        if self.progress not in PROGRESS_MODES or isinstance(self.progress, (int, float)) \
                and not isinstance(self.progress, bool):
            raise ArgumentTypeError(f"`progress` must be True, False, 'lines' or 'live', got "
                                    f"{self.progress!r}.")
        board = self.tensorboard
        if board is not None and not isinstance(board, (str, os.PathLike)):
            raise ArgumentTypeError(f"`tensorboard` must be a directory path, got {board!r}.")
        if self.on_output is not None and not callable(self.on_output):
            raise ArgumentTypeError(f"`on_output` must be a function of a line, got "
                                    f"{self.on_output!r}.")
        settle(self, stall_warning=self._seconds("stall_warning"),
               stall_timeout=self._seconds("stall_timeout"),
               tensorboard=None if board is None else os.fspath(board),
               show_all=flag(self.show_all, "show_all"), echo=flag(self.echo, "echo"))

    def _seconds(self, name: str) -> float | None:
        value = getattr(self, name)
        return None if value is None else as_seconds(value, name, minimum=1)

    def task_env(self) -> dict:
        """What every task is told: send records to the launcher, and the stall limits."""
        warning, timeout = self.stall_warning, self.stall_timeout
        return {channel.ENV: "1",
                STALL_WARNING_ENV: "0" if warning is None else f"{warning:g}",
                STALL_TIMEOUT_ENV: "0" if timeout is None else f"{timeout:g}"}


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    """Everything one :func:`~tfdistributed.launch` call was given, checked: what the attempt
    loop runs (:func:`tfdistributed.engines.restarts.run`) and every engine's launcher reads,
    made by ``plan.engine.launcher(plan, relay)``.

    Args:
        target, env, args, cwd, timeout: launch's.
        scaling: a :class:`Scaling`.
        engine: an :class:`Engine` (``Local``, ``Slurm`` or ``Ray``), which checks the shape.
        restarts: a :class:`Restarts`.
        watch: a :class:`Watch`.
    """

    target: Any
    scaling: Scaling
    engine: Engine
    restarts: Restarts
    watch: Watch
    env: dict | None = None
    args: Any = ()
    cwd: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self):
        for name, kind, what in (("scaling", Scaling, "a Scaling"),
                                 ("engine", Engine, "an engine (Local, Slurm or Ray)"),
                                 ("restarts", Restarts, "a Restarts"),
                                 ("watch", Watch, "a Watch")):
            value = getattr(self, name)
            if not isinstance(value, kind) or type(value) is Engine:
                python, r = _EXAMPLES.get(value if name == "engine" and isinstance(value, str)
                                          else name, _EXAMPLES["engine"])
                raise ArgumentTypeError(f"`{name}` must be {what}, got {value!r}.",
                                        hints={"python": f"E.g. {name}={python}.",
                                               "r": f"E.g. {name} = {r}."})
        self.engine.check(self.scaling)
        settle(self, timeout=check_timeout(self.timeout))

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
             "scaling": ("tfd.Scaling(workers=2)", "scaling(workers = 2)"),
             "restarts": ("tfd.Restarts(max_restarts=2)", "restarts(max_restarts = 2)"),
             "watch": ("tfd.Watch(stall_warning=120)", "watching(stall_warning = 120)")}
