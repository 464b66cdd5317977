"""The local engine's option object, :class:`Local`: what ``launch(engine=tfd.engines.Local())``
is given, checked where it is made, and the launcher it makes (:mod:`.supervisor`'s, imported
when a job runs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

from ..._args import as_int
from ...errors import ArgumentTypeError
from ..options import Engine, Scaling, flag, settle
from .plan import hosts_of


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


@dataclass(frozen=True, kw_only=True, repr=False)
class Local(Engine):
    """Tasks as processes on this machine (127.0.0.1), or on hosts you set up yourself.

    Args:
        hosts: ``{address: command prefix}`` of hosts of your own the ``Scaling(cluster=)``
            names.
        warm_start: fork each task from a warm process (None: ``TFDISTRIBUTED_WARM_START``).
        tasks: start only these ``(task_type, task_index)`` of the cluster.
        prepare_task: called with each task's :class:`~.plan.TaskPlan` before it starts.
        python, rscript: as :class:`~tfdistributed.engines.options.Engine`.

    The job's GPUs are its shape's (``Scaling(gpus_per_task=)``): each task's share of this
    machine's, in its ``CUDA_VISIBLE_DEVICES`` (:mod:`~tfdistributed.engines.gpus`).

    Example:
        >>> Local(warm_start=True)
        Local(warm_start=True)
    """

    name: ClassVar[str] = "local"
    hosts: dict | None = None
    warm_start: bool | None = None
    tasks: tuple | None = None
    prepare_task: Callable | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.warm_start is not None:
            flag(self.warm_start, "warm_start")
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
        settle(self, hosts=None if self.hosts is None else check_hosts(self.hosts), tasks=tasks)

    def check(self, scaling: Scaling) -> None:
        """A ``cluster`` is this engine's to run, ``hosts`` name where its tasks run, and
        ``min_workers`` needs hosts that can be lost.

        Raises:
            ArgumentTypeError: ``hosts`` without a ``cluster``, or ``min_workers`` for tasks
                on this machine alone.
        """
        if scaling.cluster is None and self.hosts is not None:
            raise ArgumentTypeError("`hosts` names where the tasks of an explicit `cluster` run: "
                                    "pass the `cluster` whose addresses are on those hosts too.")
        if scaling.min_workers is not None and not hosts_of(scaling.cluster, self.hosts):
            raise ArgumentTypeError(
                "`min_workers` lets a job go on without hosts that are gone; a local job runs on "
                "this machine only, which cannot be lost without the launcher. Give the job "
                "hosts of its own (Scaling(cluster=) and engine=Local(hosts=)), or run it on "
                "SLURM or Ray (engine=Slurm() / Ray()).",
                hints={"r": "E.g. scaling(cluster = ...) with engine = local_hosts(hosts = ...), "
                            "or engine = slurm()."})

    def launcher(self, plan, relay):
        """A :class:`~.supervisor.LocalLauncher`."""
        from .supervisor import LocalLauncher

        return LocalLauncher(plan, relay)
