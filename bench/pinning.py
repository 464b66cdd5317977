"""CPU pinning of the benchmarks' local clusters, through the local engine's ``prepare_task``
hook.

On a machine with few cores, tasks that float over every core measure the scheduler as much as
TensorFlow. ``launch(..., engine=Local(prepare_task=pin_tasks()))`` pins task i (in start order)
to core ``i % ncores`` and gives it one intra-op TensorFlow thread, so each task behaves like one
machine with one core. Inter-op threads: 1 for collective jobs; 4 for every task of a
parameter-server job, whose servers serve concurrent RPCs with blocking inter-op work - with a
single inter-op thread (TensorFlow sizes the pool by the cores a process may use, i.e. 1 once
pinned) they stall and the job hangs.
"""

from __future__ import annotations

import os


def _pin(core: int):
    return lambda: os.sched_setaffinity(0, {core})


def pin_tasks(ncores: int | None = None):
    """A ``prepare_task`` hook for ``tfdistributed.launch`` that pins each task to one core.

    Args:
        ncores: cores to spread the tasks over (default ``os.cpu_count()``).

    Returns:
        A function of a ``tfdistributed.engines.local.TaskPlan`` that sets its threads and CPU.

    Example:
        >>> from tfdistributed import launch                                # doctest: +SKIP
        >>> launch("bench/workloads.py", workers=2, args=["cnn"],
        ...        engine=Local(prepare_task=pin_tasks()))
    """
    ncores = ncores or os.cpu_count() or 1

    def prepare_task(task) -> None:
        task.env["TF_NUM_INTRAOP_THREADS"] = "1"
        task.env["TF_NUM_INTEROP_THREADS"] = "4" if task.parameter_server else "1"
        task.preexec_fn = _pin(task.position % ncores)

    return prepare_task
