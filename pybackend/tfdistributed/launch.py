"""Run a cluster of TensorFlow tasks as separate processes on this machine (127.0.0.1 only,
unless the caller names hosts of its own with ``hosts=``, e.g. network namespaces).

``launch("train.py", workers=2)`` starts one OS process per task, each with its own TF_CONFIG on
free loopback ports, streams every line it prints prefixed with its role and index
(``[worker 1] ...``), and returns each task's exit code, output and (for a function target)
return value. On the first failure, or at the timeout, it stops every process it started (each
task runs in its own process group; descendants are found with psutil), so nothing is left behind
and nothing hangs.

Targets: a Python script (``.py``), an R script (``.R``, run with ``Rscript``), or a Python
function (pickled with cloudpickle and run in a fresh interpreter: spawned, never forked).

With ``ps > 0`` (parameter-server training), ``worker`` and ``ps`` tasks run
``tensorflow.distribute.Server`` (:func:`run_server`) and the target runs as the ``chief``
(the coordinator); the job is done when the chief exits, and the servers are then stopped.

How it is built: :func:`launch` is a pipeline of three parts.

- the *plan* (:func:`_plan_launch`): arguments checked, the cluster, its ports checked, and each
  task's argv, environment and TF_CONFIG built once, as a :class:`TaskPlan`;
- the *supervisor* (:class:`_Supervisor`): spawns the tasks, streams their output, polls them,
  applies the policy for vital and non-vital tasks, and tears every process down on a failure,
  the timeout or an interrupt;
- the *diagnosis* (:func:`_failure_message`, :func:`_timeout_message`): which task failed and
  how, or which tasks never joined the cluster.

Around them, the restart policy of :mod:`tfdistributed._restarts` (``max_restarts=``): after a
failure, the whole group again, with new ports and TF_CONFIG.

The SLURM and Ray engines (``backend=``) reuse the target handling, results and output relay.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable

import portpicker

from . import _runtime
from ._args import as_int
from ._job import ATTEMPT_ENV, PREEMPTED_EXIT_CODE, LaunchResult, TaskResult, _target_argv
from ._output import Relay, error_summary, how_it_ended
from ._restarts import Restarts, failure_of, restarting
from .cluster import ROLES, check_loopback, local_cluster, parse_address, tf_config
from .errors import (ArgumentTypeError, ClusterConfigError, LaunchError, LaunchTimeoutError,
                     did_you_mean)

DEFAULT_TIMEOUT = 900.0


# --- the plan ------------------------------------------------------------------------------------

@dataclass
class TaskPlan:
    """One task of a local cluster as it will be started; what ``prepare_task`` receives.

    Attributes:
        task_type, task_index: the task's role and index in the cluster.
        address: its ``"host:port"`` in the cluster.
        position: its place among the started tasks (0, 1, ...), in start order.
        argv: the command it runs.
        env: its whole environment, ``TF_CONFIG`` included.
        server: True for the ``worker``/``ps`` servers of a parameter-server cluster.
        parameter_server: True when the cluster has ``ps`` tasks.
        result_path: where a function target's return value comes back (else None).
        preexec_fn: called in the child process just before it runs ``argv`` (e.g. to pin it to
            a CPU), as :class:`subprocess.Popen`'s ``preexec_fn``.
    """

    task_type: str
    task_index: int
    address: str
    position: int
    argv: list
    env: dict
    server: bool = False
    parameter_server: bool = False
    result_path: str | None = None
    preexec_fn: Callable | None = None

    @property
    def name(self) -> str:
        return f"{self.task_type} {self.task_index}"


@dataclass
class LaunchPlan:
    """Everything :func:`launch` starts: the cluster, the tasks started here, and the others."""

    cluster: dict
    tasks: list
    elsewhere: list
    workdir: str
    cwd: str | None = None

    @property
    def parameter_server(self) -> bool:
        return bool(self.cluster.get("ps"))


def _check_timeout(timeout) -> float:
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"`timeout` must be a number of seconds, got {timeout!r}.") from None
    if not timeout > 0:
        raise ArgumentTypeError(f"`timeout` must be a positive number of seconds, got {timeout}.")
    return timeout


def _chosen_tasks(cluster: dict, tasks) -> list:
    """``(role, index)`` of the tasks to start here: all of the cluster's, or ``tasks``."""
    wanted = [(role, i) for role in ROLES for i in range(len(cluster.get(role, [])))]
    if tasks is None:
        return wanted
    tasks = [(str(t), int(i)) for t, i in tasks]
    unknown = [t for t in tasks if t not in wanted]
    if unknown:
        raise ClusterConfigError(f"tasks {unknown} are not in the cluster {cluster}.")
    return [t for t in wanted if t in tasks]


def _check_ports(cluster: dict, wanted: list) -> None:
    for role, i in wanted:
        address = cluster[role][i]
        if not portpicker.is_port_free(parse_address(address)[1]):
            raise LaunchError(f"Port of {role} {i} ({address}) is already in use on this machine. "
                              f"Let launch() pick free ports (don't pass `cluster`), or stop the "
                              f"process holding it.")


def _base_env(env, python: str, is_function: bool) -> dict:
    """The environment every task shares (TF_CONFIG aside)."""
    base = dict(os.environ)
    base.update({str(k): str(v) for k, v in (env or {}).items()})
    # TensorFlow's pooling CPU allocator in every task, unless `env` or ours says otherwise: a
    # script target may import TensorFlow before tfdistributed, or not import us at all.
    _runtime.prefer_pooled_cpu_allocator(base)
    base["PYTHONUNBUFFERED"] = "1"
    # fit(verbose="auto") prints one line per epoch instead of a redrawn progress bar.
    base["TFDISTRIBUTED_LAUNCHED"] = "1"
    # R targets use reticulate: make it attach to this very Python, with the backend importable.
    base.setdefault("RETICULATE_PYTHON", python)
    if is_function:
        # cloudpickle sends functions of importable modules by reference: the child must be able
        # to import them from where this process does.
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        base["PYTHONPATH"] = os.pathsep.join(
            paths + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p])
    return base


def _check_hosts(hosts) -> dict:
    """``launch(hosts=)`` as ``{host: [command prefix]}``."""
    if hosts is None:
        return {}
    if not isinstance(hosts, dict) or not all(
            isinstance(h, str) and isinstance(p, (list, tuple)) and all(isinstance(a, str) for a in p)
            for h, p in hosts.items()):
        raise ArgumentTypeError(
            f"`hosts` must map each host of the cluster to the command prefix that starts a "
            f"process there, e.g. {{'10.77.0.2': ['ip', 'netns', 'exec', 'ns0']}}; got {hosts!r}.")
    return {h: list(p) for h, p in hosts.items()}


def _plan_launch(target, cluster, tasks=None, *, env=None, args=(), python=None,
                rscript="Rscript", cwd=None, prepare_task=None, hosts=None) -> LaunchPlan:
    """Each task's argv, environment and TF_CONFIG, for :func:`launch` to start.

    ``cluster`` is checked (loopback addresses or ``hosts`` only, the ports of the tasks to
    start here free); a task on one of ``hosts`` runs behind that host's command prefix. The
    plan's ``workdir`` holds a function target's call and results and is the caller's to remove.
    """
    hosts = _check_hosts(hosts)
    cluster = check_loopback(cluster, hosts)
    wanted = _chosen_tasks(cluster, tasks)
    # Ports on the caller's hosts are theirs to check: they are not this machine's.
    _check_ports(cluster, [(r, i) for r, i in wanted
                           if parse_address(cluster[r][i])[0] not in hosts])
    python = python or sys.executable
    workdir = tempfile.mkdtemp(prefix="tfdistributed-launch-")
    try:
        argv, is_function = _target_argv(target, args, python, rscript, workdir)
        base = _base_env(env, python, is_function)
        planned = [_plan_task(cluster, role, i, n, argv, base, python, workdir, is_function)
                   for n, (role, i) in enumerate(wanted)]
        for task in planned:
            task.argv[:0] = hosts.get(parse_address(task.address)[0], [])
        for task in planned if prepare_task is not None else ():
            prepare_task(task)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    elsewhere = [(r, i) for r in cluster for i in range(len(cluster[r])) if (r, i) not in wanted]
    return LaunchPlan(cluster, planned, elsewhere, workdir, cwd)


def _plan_task(cluster, role, i, position, argv, base, python, workdir, is_function) -> TaskPlan:
    """One task: the target (or, in a parameter-server cluster, a server) with its TF_CONFIG."""
    ps_mode = bool(cluster.get("ps"))
    server = ps_mode and role in ("worker", "ps")
    task = TaskPlan(role, i, cluster[role][i], position,
                    [python, "-m", "tfdistributed", "server"] if server else list(argv),
                    dict(base, TF_CONFIG=json.dumps(tf_config(cluster, role, i))), server, ps_mode)
    if is_function and not server:
        task.result_path = os.path.join(workdir, f"{role}-{i}.result.pkl")
        task.argv.append(task.result_path)
    return task


# --- the supervisor ------------------------------------------------------------------------------

class _Process:
    """A started task: its plan, process, output so far and output reader."""

    def __init__(self, plan: TaskPlan):
        self.plan = plan
        self.name = plan.name
        self.server = plan.server
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.reader: threading.Thread | None = None

    def poll(self):
        return self.proc.poll()


class _Supervisor:
    """Starts a plan's tasks, streams their output, polls them, and stops them all at the end.

    Policy: the job is done when every task running the target exits 0. A vital task that
    fails (or a server that exits at all) fails the job. In parameter-server training the
    workers are not vital: the coordinator re-runs a lost worker's steps on the others. On any
    exception (failure, timeout, interrupt) every process is stopped.
    """

    def __init__(self, plan: LaunchPlan, relay: Relay, grace: float):
        self.plan = plan
        self.relay = relay
        self.grace = grace
        self.tasks = [_Process(t) for t in plan.tasks]
        self.lines: queue.Queue = queue.Queue()

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if kind is not None:
            _kill_tree([t.proc for t in self.tasks if t.proc is not None and t.poll() is None],
                       self.grace)
        return False

    def start(self) -> None:
        for task in self.tasks:
            task.proc = subprocess.Popen(
                task.plan.argv, env=task.plan.env, cwd=self.plan.cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=task.plan.preexec_fn)
            task.reader = threading.Thread(target=self._read, args=(task,), daemon=True)
            task.reader.start()

    def _read(self, task: _Process) -> None:
        for raw in iter(task.proc.stdout.readline, b""):
            shown = self.relay.keep(task.name, raw.decode(errors="replace").rstrip("\n"), task.lines)
            if shown is not None:
                self.lines.put(shown)
        task.proc.stdout.close()

    def drain(self) -> None:
        """Pass on the lines read so far, on the calling thread."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return
            self.relay.send(line)

    def wait(self, timeout: float, started: float) -> list:
        """Supervise until the job is done; its results, or raise (every task then stopped).

        ``timeout`` counts from ``started`` (a ``time.monotonic()`` of the job's first start),
        so that one timeout covers every attempt of a restarted job.
        """
        primaries = [t for t in self.tasks if not t.server]
        vital = [t for t in self.tasks if not (self.plan.parameter_server
                                               and t.plan.task_type == "worker")]
        lost: list[_Process] = []
        while True:
            self.drain()
            for t in self.tasks:
                if t not in vital and t.poll() is not None and t not in lost:
                    lost.append(t)
                    self.lines.put(f"[launch] {t.name} exited ({t.proc.returncode}); the chief "
                                   f"continues with the other workers")
            failed = [t for t in vital if t.poll() not in (None, 0)]
            # A server exiting, even with 0, means the cluster lost a task.
            failed += [t for t in vital if t.server and t.poll() == 0]
            if failed:
                time.sleep(0.2)
                self.stop(self.tasks)
                raise _task_failed(failed[0], self.results())
            if primaries and all(t.poll() == 0 for t in primaries):
                break
            if time.monotonic() - started > timeout:
                self._time_out(timeout)
            time.sleep(0.05)
        self.stop([t for t in self.tasks if t.server])
        return self.results()

    def _time_out(self, timeout: float):
        running = [t for t in self.tasks if t.poll() is None]
        listening = _listening_ports([t.proc.pid for t in running])
        self.stop(self.tasks)
        message = _timeout_message(self.plan, timeout, listening, [t.name for t in running])
        raise LaunchTimeoutError(message, self.results())

    def stop(self, tasks) -> None:
        """Stop ``tasks`` and pass on everything the tasks printed."""
        _kill_tree([t.proc for t in tasks], self.grace)
        for t in self.tasks:
            if t.reader is not None:
                t.reader.join(timeout=self.grace)
        self.drain()

    def results(self) -> list:
        return [TaskResult(t.plan.task_type, t.plan.task_index,
                           t.proc.returncode if t.proc else None, list(t.lines), None, t.server)
                for t in self.tasks]


def _listening_ports(pids) -> set[int]:
    """TCP ports on which the processes ``pids`` or their descendants listen."""
    import psutil

    ports = set()
    for pid in pids:
        try:
            procs = [psutil.Process(pid)]
            procs += procs[0].children(recursive=True)
        except psutil.Error:
            continue
        for p in procs:
            try:
                for c in p.net_connections(kind="tcp"):
                    if c.status == psutil.CONN_LISTEN:
                        ports.add(c.laddr.port)
            except psutil.Error:
                continue
    return ports


def _signal_groups(procs, sig) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_tree(procs, grace: float) -> None:
    """SIGTERM every task's process group and descendants, then SIGKILL what is left.

    Our direct children are reaped through Popen only: if psutil reaped them, Popen would lose
    their exit status (and report 0).
    """
    import psutil

    procs = [p for p in procs if p is not None]
    descendants = []
    for proc in procs:
        try:
            descendants += psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            pass
    _signal_groups(procs, signal.SIGTERM)
    for d in descendants:
        try:
            d.terminate()
        except psutil.Error:
            pass
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    _, alive = psutil.wait_procs(descendants, timeout=max(0.0, deadline - time.monotonic()))
    left = [proc for proc in procs if proc.poll() is None]
    _signal_groups(left, signal.SIGKILL)
    for proc in left:
        proc.kill()
    for d in alive:
        try:
            d.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    for proc in procs:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


# --- the diagnosis -------------------------------------------------------------------------------

def _failure_message(task: _Process) -> str:
    """Which task failed, how, and what it said last."""
    return (f"Task {task.name} {how_it_ended(task.proc.returncode)}; every other task was "
            f"stopped. {error_summary(task.lines)}")


def _task_failed(task: _Process, results) -> LaunchError:
    """The error of an attempt in which ``task`` failed (its ``failure`` for the restarts)."""
    return LaunchError(_failure_message(task), results,
                       failure=failure_of(task.name, task.proc.returncode, task.lines))


def _timeout_message(plan: LaunchPlan, timeout: float, listening: set, running: list) -> str:
    """Why the job did not finish: the tasks that never joined the cluster (no server on their
    address: never started here, or started and not listening), and those still running."""
    not_joined = [f"{t.name} ({t.address})" for t in plan.tasks
                  if parse_address(t.address)[1] not in listening]
    never_started = [f"{r} {i} ({plan.cluster[r][i]})" for r, i in plan.elsewhere]
    missing = never_started + not_joined
    msg = f"The job did not finish within {timeout:g} s; every task was stopped."
    if missing:
        msg += (f" Tasks that never joined the cluster (no server on their address): "
                f"{', '.join(missing)}. The others wait for every task in TF_CONFIG: "
                f"start the missing task(s), or check their host:port.")
    return msg + f" Still running at the timeout: {', '.join(running) or 'none'}."


def _read_values(plan: LaunchPlan, results: list) -> None:
    """A function target's return values, from the files its tasks wrote."""
    for res, task in zip(results, plan.tasks):
        if task.result_path and os.path.exists(task.result_path):
            with open(task.result_path, "rb") as f:
                res.value = pickle.load(f)


# --- launch() ------------------------------------------------------------------------------------

def launch(target, workers=2, ps=0, chief=False, *, timeout=DEFAULT_TIMEOUT, max_restarts=0,
           env=None, args=(), cluster=None, tasks=None, on_output=None, echo=True, python=None,
           rscript="Rscript", cwd=None, prepare_task=None, hosts=None, grace=5.0, show_all=False,
           backend="local", **backend_options):
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
        show_all: also stream TensorFlow's C++ start-up lines (always kept in ``output``).
        backend: ``"local"`` (this machine), ``"slurm"`` (a job submitted with sbatch:
            :func:`tfdistributed.slurm.launch_slurm`) or ``"ray"`` (Ray actors:
            :func:`tfdistributed.ray_backend.launch_ray`).
        **backend_options: options of the ``"slurm"`` or ``"ray"`` backend.

    Returns:
        A :class:`LaunchResult`: ``tasks`` holds each task's :class:`TaskResult` (exit code,
        output lines, return value), ``values`` the return values of a function target,
        ``cluster`` the cluster that ran and ``seconds`` the wall time (of every attempt);
        ``restarts`` and ``attempts`` say how often and why the job was restarted.

    Raises:
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
    if backend != "local":
        return _launch_elsewhere(backend, target, workers, ps, chief, backend_options, timeout=timeout,
                                 max_restarts=max_restarts, env=env, args=args,
                                 on_output=on_output, echo=echo, python=python, rscript=rscript,
                                 cwd=cwd, show_all=show_all,
                                 local_only=dict(cluster=cluster, tasks=tasks,
                                                 prepare_task=prepare_task, hosts=hosts))
    if backend_options:
        raise ArgumentTypeError(f"Unknown argument(s) {sorted(backend_options)} for launch() on the "
                                f"local backend; they are options of backend='slurm' or 'ray'.")
    import psutil  # noqa: F401  (fail here, not half-way through a teardown)

    timeout = _check_timeout(timeout)
    if cluster is None and hosts is not None:
        raise ArgumentTypeError("`hosts` names where the tasks of an explicit `cluster` run: "
                                "pass the `cluster` whose addresses are on those hosts too.")
    counts = None
    if cluster is None:
        counts = (as_int(workers, "workers", minimum=1), as_int(ps, "ps", minimum=0), bool(chief))
    restarts = Restarts(max_restarts, Relay(echo=echo, on_output=on_output, show_all=show_all))
    options = dict(tasks=tasks, env=env, args=args, python=python, rscript=rscript, cwd=cwd,
                   prepare_task=prepare_task, hosts=hosts)
    started = time.monotonic()
    return restarting(lambda attempt: _run_attempt(
        target, cluster or local_cluster(*counts), options, attempt, restarts.relay, grace,
        timeout, started), restarts)


def _run_attempt(target, cluster, options, attempt: int, relay: Relay, grace, timeout, started):
    """One attempt of the job: planned afresh, started, supervised until ``started + timeout``,
    and cleaned up; its :class:`LaunchResult`, or the error raised with every task stopped."""
    env = dict(options["env"] or {}, **{ATTEMPT_ENV: str(attempt)})
    plan = _plan_launch(target, cluster, **dict(options, env=env))
    try:
        with _Supervisor(plan, relay, grace) as supervisor:
            supervisor.start()
            results = supervisor.wait(timeout, started)
            _read_values(plan, results)
    finally:
        shutil.rmtree(plan.workdir, ignore_errors=True)
    return LaunchResult(cluster=plan.cluster, tasks=results, seconds=time.monotonic() - started)


def _launch_elsewhere(backend, target, workers, ps, chief, options, local_only, **common):
    """launch() on a SLURM or Ray cluster: the same target, tasks and results, another engine."""
    if backend not in ("slurm", "ray"):
        raise ArgumentTypeError(f"`backend` must be 'local', 'slurm' or 'ray', got {backend!r}."
                                f"{did_you_mean(str(backend), ('local', 'slurm', 'ray'))}")
    given = [k for k, v in local_only.items() if v not in (None, False)]
    if given:
        raise ArgumentTypeError(f"{', '.join(given)} only apply to local clusters; the {backend} "
                                f"backend places the tasks itself.")
    if backend == "slurm":
        from .slurm import launch_slurm as run
    else:
        from .ray_backend import launch_ray as run
    return run(target, workers, ps, chief, **common, **options)


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

    from .cluster import check_own_address, read_tf_config

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


def _call(call_path: str, result_path: str) -> None:
    """Child side of a function target: unpickle, call, pickle the return value."""
    import cloudpickle

    with open(call_path, "rb") as f:
        fn, args = cloudpickle.load(f)
    value = fn(*args)
    with open(result_path + ".tmp", "wb") as f:
        pickle.dump(value, f)
    os.replace(result_path + ".tmp", result_path)
