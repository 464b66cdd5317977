"""The SLURM engine's option object, :class:`Slurm`: what ``launch(engine=tfd.engines.Slurm())``
is given, checked where it is made, and the launcher it makes (:mod:`.launcher`'s, imported when
a job runs: a SLURM task reading its environment never loads it)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ..._args import as_seconds
from ...errors import ArgumentTypeError
from ..options import POLL_SECONDS, Engine, Scaling, flag, settle, text, words
from .script import DEFAULT_JOB_NAME

# SLURM's --time: minutes, [minutes:]seconds, hours:minutes:seconds, days-hours[:minutes[:s]].
_SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^(UNLIMITED|INFINITE)$", re.IGNORECASE)


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

    The job's GPUs are its shape's: ``Scaling(gpus_per_task=n)`` is ``sbatch
    --gpus-per-task=n``, SLURM giving each task (ps tasks too: one ``srun`` starts every task)
    that many GPUs of its own.

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
        job_name: ``sbatch --job-name``.
        directory: the job's directory, on storage this machine and the nodes share.
        keep_files: keep the job's directory (default: removed when it is a new one).
        poll: seconds between two looks at the tasks' files.
        python, rscript: the interpreters on the nodes (as
            :class:`~tfdistributed.engines.options.Engine`).

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
        text(self.partition, "partition", "'cpu'")
        text(self.job_name, "job_name", "'train'")
        time = self.time
        if isinstance(time, bool) or not (
                time is None or isinstance(time, str) and _SLURM_TIME.match(time)
                or isinstance(time, (int, float)) and time > 0):
            raise ArgumentTypeError(f"`time` must be SLURM's --time, e.g. '02:00:00' or a number "
                                    f"of minutes, got {time!r}.")
        if self.directory is not None and not isinstance(self.directory, (str, os.PathLike)):
            raise ArgumentTypeError(f"`directory` must be a path, got {self.directory!r}.")
        settle(self, sbatch_args=words(self.sbatch_args, "sbatch_args"),
               srun_args=words(self.srun_args, "srun_args"),
               directory=None if self.directory is None else os.fspath(self.directory),
               keep_files=flag(self.keep_files, "keep_files"),
               poll=as_seconds(self.poll, "poll", minimum=0.01),
               queue_timeout=None if self.queue_timeout is None else
               as_seconds(self.queue_timeout, "queue_timeout", minimum=1))

    def check(self, scaling: Scaling) -> None:
        """As every engine (no ``cluster``, a number of GPUs), and GPUs asked for once."""
        super().check(scaling)
        if scaling.gpus_per_task is not None and any(a.startswith("--gpus-per-task")
                                                     for a in self.sbatch_args):
            raise ArgumentTypeError("`gpus_per_task` and `sbatch_args` both ask for GPUs per "
                                    "task: give gpus_per_task alone.")

    def launcher(self, plan, relay):
        """A :class:`~.launcher.SlurmLauncher`."""
        from .launcher import SlurmLauncher

        return SlurmLauncher(plan, relay)
