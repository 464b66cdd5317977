"""Run a cluster of TensorFlow tasks, one process per task: :func:`launch`, the one entry point
of every engine, and :func:`run_server`, what a parameter-server cluster's servers run.

``launch("train.py", workers=2)`` runs the tasks as processes on this machine;
``engine=tfd.engines.Slurm(...)`` submits them as a SLURM job, ``engine=tfd.engines.Ray(...)``
runs them as Ray actors. The engines live in :mod:`tfdistributed.engines` (the protocol they
share and the one attempt loop that restarts any of them, :mod:`tfdistributed.engines.restarts`);
this module checks what it was given into one :class:`~.options.JobPlan` (the job's shape, a
:class:`~.options.Scaling`, among it) and runs it.

Targets: a Python script (``.py``), an R script (``.R``, run with ``Rscript``), or a Python
function (pickled with cloudpickle and run in a fresh interpreter: spawned, never forked).

The names this module has always offered stay importable here: :class:`LaunchResult`,
:class:`TaskResult`, :data:`PREEMPTED_EXIT_CODE`, :class:`TaskPlan` (what ``prepare_task``
receives) and :data:`DEFAULT_TIMEOUT`.
"""

from __future__ import annotations

from ..errors import ClusterConfigError
from .base import LaunchResult, TaskResult
from ..watch.channel import PREEMPTED_EXIT_CODE
from .local.engine import Local
from .local.plan import LaunchPlan, TaskPlan
from .options import DEFAULT_TIMEOUT, JobPlan, Restarts, Watch, scaling_of
from .restarts import run

__all__ = ["DEFAULT_TIMEOUT", "PREEMPTED_EXIT_CODE", "LaunchPlan", "LaunchResult", "TaskPlan",
           "TaskResult", "launch", "run_server"]


def launch(target, scaling=None, *, workers=None, engine=None, restarts=None, watch=None,
           env=None, args=(), cwd=None, timeout=DEFAULT_TIMEOUT):
    """Run ``target`` as a cluster of processes, one per task; wait for it and return the outcome.

    Each task gets its own TF_CONFIG, so a script that calls ``make_strategy("auto")`` trains
    as one multi-worker (or parameter-server) job; every line a task prints is streamed as
    ``[worker 1] ...``. On the first failed task, at the timeout, or on an interrupt, every
    process is stopped. The guides tell the rest: "Multi-worker training", "Jobs that heal
    themselves", "Seeing a launched job", "Clusters and networks".

    Args:
        target: a ``.py`` script, an ``.R`` script, or a Python function (called with ``*args``).
        scaling: the job's shape, a :class:`~tfdistributed.Scaling` (workers, ps, chief,
            min_workers, gpus_per_task, cluster); default ``Scaling()``, 2 workers.
        workers: the short call's: ``launch(target, workers=3)`` is
            ``launch(target, Scaling(workers=3))``.
        engine: where the tasks run: ``tfd.engines.Local()`` (default), ``Slurm()`` or ``Ray()``.
        restarts: how the job heals: a :class:`~tfdistributed.Restarts` (default: no restart).
        watch: what is shown of the job and where its lines go (``echo``, ``on_output``): a
            :class:`~tfdistributed.Watch`.
        env: extra environment variables for every task.
        args: command-line arguments of a script, positional arguments of a function.
        cwd: the tasks' working directory (default: this process's).
        timeout: seconds for the whole job, restarts included (on SLURM, its running time: not
            its wait in the queue; see :class:`~tfdistributed.engines.Slurm`).

    Returns:
        A :class:`LaunchResult`: each task's :class:`TaskResult` (exit code, output, return
        value), ``values`` (a function's return values), ``cluster``, ``seconds``,
        ``restarts`` and ``attempts``, ``history`` (the job's Keras history), ``workers`` (a
        record per task) and ``stragglers``, ``sizes`` (an elastic job's sizes).

    Raises:
        LaunchError: a task failed (``.results`` has every task's outcome, ``.attempts`` each
            attempt's failure), or the target or a port cannot be used.
        LaunchTimeoutError: the job did not finish within ``timeout``.
        HostLostError: hosts the job runs on are gone for good and too few workers are left.
        ClusterConfigError: the shape or its ``cluster`` is invalid.
        ArgumentTypeError: a wrong argument.

    Example:
        >>> def rank():
        ...     import json, os
        ...     return json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        >>> launch(rank, workers=2, watch=Watch(echo=False)).values   # doctest: +SKIP
        [0, 1]
        >>> launch("train.py", Scaling(workers=3, ps=1, chief=True),
        ...        restarts=Restarts(max_restarts=3))                  # doctest: +SKIP
    """
    return run(JobPlan(target=target, scaling=scaling_of(scaling, workers),
                       engine=Local() if engine is None else engine,
                       restarts=Restarts() if restarts is None else restarts,
                       watch=Watch() if watch is None else watch,
                       env=env, args=args, cwd=cwd, timeout=timeout))


def run_server(config=None) -> None:
    """Serve this process's task of TF_CONFIG forever (a ``worker``/``ps`` of a PS cluster).

    :func:`launch` runs it (``python -m tfdistributed server``) for the servers of a
    parameter-server cluster; run it yourself for servers you start by hand.

    Args:
        config: a TF_CONFIG (dict or JSON string); default the ``TF_CONFIG`` environment
            variable.

    Raises:
        ClusterConfigError: no TF_CONFIG, or one without a ``"task"``.

    Example:
        >>> cluster = local_cluster(workers=1, ps=1, chief=True)
        >>> set_tf_config(cluster=cluster, task_type="ps", task_index=0)   # doctest: +SKIP
        >>> run_server()                  # serves until stopped           # doctest: +SKIP
    """
    import tensorflow as tf

    from ..cluster.addresses import check_own_address
    from ..cluster.environment import read_tf_config

    config = read_tf_config(config)
    if not config:
        raise ClusterConfigError("run_server() needs TF_CONFIG (set_tf_config() or launch()).")
    if "task" not in config:
        raise ClusterConfigError(
            "run_server() serves a worker or ps task, and this TF_CONFIG has no \"task\" (it "
            "describes the coordinator): give the server its task, e.g. "
            "{\"task\": {\"type\": \"worker\", \"index\": 0}}.")
    check_own_address(config)
    task = config["task"]
    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]), job_name=task["type"], task_index=task["index"],
        protocol=config.get("rpc_layer", "grpc"), start=True)
    print(f"{task['type']} {task['index']} serving at {server.target}", flush=True)
    server.join()
