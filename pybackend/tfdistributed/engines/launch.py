"""Run a cluster of TensorFlow tasks, one process per task: :func:`launch`, the one entry point
of every engine, and :func:`run_server`, what a parameter-server cluster's servers run.

``launch("train.py", workers=2)`` runs the tasks as processes on this machine; ``backend=
"slurm"`` submits them as a SLURM job, ``backend="ray"`` runs them as Ray actors. The engines
live in :mod:`tfdistributed.engines` (the protocol they share and the one attempt loop that
restarts any of them, :mod:`tfdistributed.engines.restarts`); this module checks what is
common to every backend, picks the engine by name, and runs it.

Targets: a Python script (``.py``), an R script (``.R``, run with ``Rscript``), or a Python
function (pickled with cloudpickle and run in a fresh interpreter: spawned, never forked).

The names this module has always offered stay importable here: :class:`LaunchResult`,
:class:`TaskResult`, :data:`PREEMPTED_EXIT_CODE`, :class:`TaskPlan` (what ``prepare_task``
receives) and :data:`DEFAULT_TIMEOUT`.
"""

from __future__ import annotations

from .._args import as_int
from ..errors import ArgumentTypeError, ClusterConfigError
from . import engine
from .base import LaunchResult, TaskResult
from ..watch.channel import PREEMPTED_EXIT_CODE
from .local.plan import LaunchPlan, TaskPlan
from .restarts import run
from ..cluster import join
from ..watch.collector import DEFAULT_STALL_WARNING, job_watch, task_env

__all__ = ["DEFAULT_TIMEOUT", "PREEMPTED_EXIT_CODE", "LaunchPlan", "LaunchResult", "TaskPlan",
           "TaskResult", "launch", "run_server"]

DEFAULT_TIMEOUT = 900.0


def launch(target, workers=2, ps=0, chief=False, *, timeout=DEFAULT_TIMEOUT, max_restarts=0,
           env=None, args=(), cluster=None, tasks=None, on_output=None, echo=True, python=None,
           rscript="Rscript", cwd=None, prepare_task=None, hosts=None, grace=5.0, show_all=False,
           backend="local", progress=True, stall_warning=DEFAULT_STALL_WARNING,
           stall_timeout=None, tensorboard=None, join_timeout=None, min_workers=None,
           warm_start=None, **backend_options):
    """Run ``target`` as a cluster of processes, one per task; wait for it and return the outcome.

    Each task gets its own TF_CONFIG (local clusters: free ports on 127.0.0.1), so a script that
    calls ``make_strategy("auto")`` trains as one multi-worker (or parameter-server) job. Every
    line a task prints is streamed as ``[worker 1] ...``. On the first failed task, at the
    timeout, or on an interrupt, every process is stopped (nothing is left running).

    With ``max_restarts=N``, a failed job is then started again as a whole, up to N times: new
    ports and TF_CONFIG, and ``TFDISTRIBUTED_ATTEMPT`` (0, 1, ...) in every task's environment.
    Each restart is announced in the output (``[tfdistributed] worker 1 was killed by signal 9
    on attempt 1 of 3 (...); restarting the job``). A task that exits with
    ``PREEMPTED_EXIT_CODE`` (75) was preempted, not failed: ``fit(backup_dir=...)`` resumes
    from its backup. A task failing the same way (same end, same error line) on two attempts
    in a row ends the job at once: restarting a bug only repeats it.

    Args:
        target: a ``.py`` script (run with ``python``), an ``.R`` script (run with ``rscript``),
            or a Python function (called with ``*args`` in a fresh interpreter per task).
        workers: number of ``worker`` tasks (ignored when ``cluster`` is given).
        ps: number of parameter-server tasks; needs ``chief=True``. The workers and ps tasks
            then run TensorFlow servers and the target runs as the chief (the coordinator).
        chief: add a ``chief`` task.
        timeout: seconds for the whole job, restarts included; then every process is stopped.
        max_restarts: how many times a failed job is restarted (default 0; on every backend).
            Each restart runs every task again: the script should resume from a backup
            (``fit(backup_dir=...)``), or it starts over.
        env: extra environment variables for every task. Tasks get TensorFlow's pooling CPU
            allocator (``TF_CPU_ALLOCATOR_USE_BFC=true``, see ``_runtime``) unless ``env`` or
            this process's environment sets that variable.
        args: command-line arguments for a script, positional arguments for a function.
        cluster: an explicit cluster dict (loopback addresses, or those of ``hosts``; restarts
            reuse its addresses); default ``local_cluster(workers, ps, chief)``, new at each
            restart.
        tasks: start only these ``(task_type, task_index)`` pairs of the cluster (the others are
            expected to be started elsewhere, e.g. by hand with their TF_CONFIG).
        on_output: called with each ``"[worker 0] line"`` from the calling thread (the R
            package passes an R function here).
        echo: also print each such line to stdout.
        python, rscript: the interpreters that run the tasks (default: this Python, ``Rscript``).
        cwd: the tasks' working directory (default: this process's).
        prepare_task: called with each task's :class:`TaskPlan` before any task starts, in start
            order (again at each restart); it may change the plan's ``env`` and ``argv`` and
            set its ``preexec_fn`` (e.g. to pin each task to a CPU, as ``bench/pinning.py``
            does).
        hosts: hosts you set up yourself, each with the command prefix that starts a process
            on it, e.g. ``{"10.77.0.2": ["ip", "netns", "exec", "ns0"]}`` (a network
            namespace; ``["ssh", "node1"]`` has the same shape). The ``cluster`` may then name
            them; a task at ``host:port`` runs as ``prefix + argv``, with its ``env``
            (``ip netns exec`` keeps it; a remote shell does not). Other non-loopback addresses
            stay refused. Each task checks that its address is its host's
            (:func:`tfdistributed.cluster.check_own_address`). At the timeout, the list of
            tasks that never joined cannot see sockets on other hosts: it names them all.
        grace: seconds between SIGTERM and SIGKILL when stopping tasks.
        join_timeout: seconds each multi-worker task waits for the others to join its strategy
            (``TFDISTRIBUTED_JOIN_TIMEOUT`` in every task; default 300): meanwhile a waiting
            task names, every 15 s (a third of a shorter timeout), the tasks it still waits
            for and what the network answers, then fails with ``JoinTimeoutError`` naming
            them (every backend).
        min_workers: let the job go on with fewer workers when hosts it runs on are gone for
            good (hosts of ``hosts=``, SLURM nodes, Ray nodes;
            :mod:`tfdistributed.engines.elastic`): ``workers`` is the size the job wants,
            ``min_workers`` the fewest it trains with. After a failure, a host that does not answer
            within the join timeout is lost: the job restarts on the others from its backup, with
            the same global batch (each replica's share grows) and learning rate, at the most
            workers over which the global batch splits evenly; a lost host is probed in the
            background and, when it answers, the job grows back at its next backup. The job may also
            start with fewer hosts than it wants and grow. These restarts do not spend
            ``max_restarts``. Without ``min_workers`` a job needs all of its hosts: a lost one ends
            it with :class:`~tfdistributed.errors.HostLostError` naming it. ``result.sizes`` lists
            each change of size.
        warm_start: fork each task from a process that has loaded TensorFlow, Keras and
            tfdistributed already (started once per launching process, kept for later jobs),
            instead of each task loading them: for a Python target a Python (~3 s of CPU less
            per task), for an ``.R`` script an ``Rscript`` with R, reticulate and Python too
            (~5 s less) (:mod:`tfdistributed.engines.warm`, which says what differs from a
            fresh interpreter: a script cannot change ``KERAS_BACKEND`` and other variables
            read at import once it runs). Targets on this machine only; ``hosts=`` tasks and
            ``prepare_task`` tasks with a ``preexec_fn`` start the usual way.
            Default ``None``: on when ``TFDISTRIBUTED_WARM_START=1``, else off. Local backend
            only.
        show_all: also stream TensorFlow's C++ start-up lines and each task's Keras progress
            lines (always kept in ``output``).
        progress: one progress display for the whole job instead of each task's Keras progress
            output: ``True`` (a line redrawn where the output is a terminal, else a line per
            epoch), ``"lines"``, ``"live"`` or ``False``. Stragglers and stalls are named
            either way.
        stall_warning: seconds without a step from any task (after the first step, validation
            steps counting) before the job's output names the task the others wait for, where
            it is (its stack) and why (:mod:`tfdistributed.watch.stall`); ``None``: never.
        stall_timeout: seconds without a step after which every task ends with exit status 76
            (``tfdistributed.watch.recorder.STALLED_EXIT_CODE``), so that ``max_restarts``
            restarts the job; default ``None``: a stall is named, not ended.
        tensorboard: a directory for the job's TensorBoard event files, written by the
            launcher alone as the job runs: the history's scalars (``train/``,
            ``validation/``), each task's examples/s and the restarts (``job/``).
        backend: ``"local"`` (this machine), ``"slurm"`` (a job submitted with sbatch:
            :func:`tfdistributed.engines.slurm.launcher.launch_slurm`) or ``"ray"`` (Ray actors:
            :func:`tfdistributed.engines.ray.launcher.launch_ray`).
        **backend_options: options of the ``"slurm"`` or ``"ray"`` backend.

    Returns:
        A :class:`LaunchResult`: ``tasks`` holds each task's :class:`TaskResult` (exit code,
        output lines, return value), ``values`` the return values of a function target,
        ``cluster`` the cluster that ran and ``seconds`` the wall time (of every attempt);
        ``restarts`` and ``attempts`` say how often and why the job was restarted;
        ``history`` the job's training history (as ``keras.callbacks.History.history``: the
        chief's, else worker 0's epochs, each once across restarts), ``workers`` one record per
        task (steps, examples/s, median step, waiting, restarts, straggler) and
        ``stragglers`` the tasks named as such (:mod:`tfdistributed.watch.collector`);
        ``sizes`` each size an elastic job ran at, when and why (hosts lost or back).

    Raises:
        HostLostError: hosts of the job are gone for good and too few workers are left
            (``min_workers``), or the job needs every one of them.
        LaunchError: a task exited non-zero (on every attempt, or the same way twice in a row,
            when restarts are allowed: ``.attempts`` lists each failure), or the target or a
            port cannot be used; ``.results`` has every task's outcome (of the last attempt).
        LaunchTimeoutError: the job did not finish within ``timeout``; the message names the
            tasks that never joined the cluster and those still running.
        ClusterConfigError: ``cluster`` or ``tasks`` is invalid, or not on 127.0.0.1 or
            ``hosts``.
        ArgumentTypeError: a wrong argument, or an option of another backend.

    Example:
        >>> def rank():
        ...     import json, os
        ...     return json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        >>> launch(rank, workers=2, echo=False).values   # doctest: +SKIP
        [0, 1]
        >>> launch("train.py", workers=2, max_restarts=3).restarts   # doctest: +SKIP
        1
    """
    max_restarts = as_int(max_restarts, "max_restarts", minimum=0)
    min_workers = as_int(min_workers, "min_workers", minimum=1, allow_none=True)
    join_timeout = join.as_timeout(join_timeout)
    if join_timeout is not None:
        env = {**dict(env or {}), join.ENV: f"{join_timeout:g}"}
    # A host that does not answer for as long as a task of the next attempt would wait for it
    # to join is lost.
    places = dict(min_workers=min_workers,
                  grace_for_places=join_timeout or join.DEFAULT_JOIN_TIMEOUT)
    watch = job_watch(progress, stall_warning, echo=echo, on_output=on_output,
                      tensorboard=tensorboard)
    env = {**task_env(watch.stall_warning, stall_timeout), **(env or {})}
    common = dict(timeout=timeout, max_restarts=max_restarts, env=env, args=args,
                  on_output=on_output, echo=echo, python=python, rscript=rscript, cwd=cwd,
                  show_all=show_all, watch=watch, **places)
    local_only = dict(cluster=cluster, tasks=tasks, prepare_task=prepare_task, hosts=hosts,
                      warm_start=warm_start)
    if backend == "local":
        if backend_options:
            raise ArgumentTypeError(f"Unknown argument(s) {sorted(backend_options)} for launch() "
                                    f"on the local backend; they are options of backend='slurm' "
                                    f"or 'ray'.")
        launcher = engine("local")(target, workers, ps, chief, **common, **local_only,
                                   grace=grace)
    else:
        launcher_class = engine(backend)
        given = [k for k, v in local_only.items() if v not in (None, False)]
        if given:
            raise ArgumentTypeError(f"{', '.join(given)} only apply to local clusters; the "
                                    f"{backend} backend places the tasks itself.")
        launcher = launcher_class(target, workers, ps, chief, **common, **backend_options)
    return run(launcher)


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
