"""Run a cluster of TensorFlow tasks as separate processes on this machine (127.0.0.1 only).

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
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from ._args import as_int
from .cluster import ROLES, check_loopback, local_cluster, tf_config
from .errors import (ArgumentTypeError, ClusterConfigError, LaunchError, LaunchTimeoutError,
                     did_you_mean)

DEFAULT_TIMEOUT = 900.0
# TensorFlow's C++ start-up INFO lines, printed before logging is configured (so
# TF_CPP_MIN_LOG_LEVEL cannot silence them), and its complaint that a machine without a GPU has
# no CUDA driver: kept in each task's output, not streamed nor quoted in errors.
_NOISE = re.compile(r"^(I\d{4} [\d:.]+\s+\d+ \S+:\d+\] |WARNING: All log messages "
                    r"before absl::InitializeLog\(\) is called|E\d{4} [\d:.]+\s+\d+ "
                    r"cuda_platform\.cc:\d+\] failed call to cuInit)")
_TAIL = 40
# Terminal control sequences (colours, cursor moves) of progress bars, useless in a log.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LINE_LIMIT = 400
# The line that names a Python exception, or R's error line.
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(:.*)?|Error( in .*)?:.*)$")


def _clean_line(raw: str) -> str:
    """One printed line as a log line: a progress bar redrawn with carriage returns becomes
    its last state, colour codes are dropped, and very long lines (array dumps) are cut."""
    line = _ANSI.sub("", raw)
    if "\r" in line:
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "")
    if len(line) > _LINE_LIMIT:
        line = line[:_LINE_LIMIT] + f" ... [{len(line) - _LINE_LIMIT} more characters]"
    return line


def _error_summary(lines) -> str:
    """The last output of a failed task for an error message: its exception line first (it can
    be followed by pages of other output), then the tail."""
    kept = [ln for ln in lines if not _NOISE.match(ln)]
    errors = [ln for ln in kept if _ERROR_LINE.match(ln.strip())]
    tail = "\n".join(kept[-_TAIL:])
    if errors:
        return f"Its error: {errors[-1].strip()}\nIts last output:\n{tail}"
    return f"Its last output:\n{tail}"


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
    """What :func:`launch` returns when every task succeeded."""

    cluster: dict
    tasks: list
    seconds: float

    @property
    def values(self) -> list:
        """Return values of the tasks that ran the target (function targets), in task order."""
        return [t.value for t in self.tasks if not t.server]

    def task(self, task_type: str, task_index: int = 0) -> TaskResult:
        for t in self.tasks:
            if t.task_type == task_type and t.task_index == task_index:
                return t
        raise KeyError(f"no task {task_type} {task_index}")


class _Task:
    def __init__(self, task_type, task_index, argv, env, server, result_path=None):
        self.task_type = task_type
        self.task_index = task_index
        self.argv = argv
        self.env = env
        self.server = server
        self.result_path = result_path
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.reader: threading.Thread | None = None

    @property
    def name(self):
        return f"{self.task_type} {self.task_index}"


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


def _port_in_use(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host if host != "localhost" else "127.0.0.1", int(port)))
        except OSError:
            return True
    return False


def _listening_ports(pids) -> set[int]:
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
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
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
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
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


def _pin(core):
    return lambda: os.sched_setaffinity(0, {core})


def launch(target, workers=2, ps=0, chief=False, *, timeout=DEFAULT_TIMEOUT, env=None, args=(),
           cluster=None, tasks=None, on_output=None, echo=True, python=None, rscript="Rscript",
           cwd=None, pin_cpus=False, grace=5.0, show_all=False, backend="local", **backend_options):
    """Run ``target`` as a local cluster; returns a :class:`LaunchResult` or raises.

    Args:
        target: ``.py`` script, ``.R`` script, or a Python function (called with ``*args``).
        workers, ps, chief: task counts (ignored when ``cluster`` is given).
        timeout: seconds for the whole job; then every process is stopped and
            :class:`LaunchTimeoutError` names the tasks that never joined or never finished.
        env: extra environment variables for every task.
        args: command-line arguments for a script, positional arguments for a function.
        cluster: an explicit cluster dict (loopback addresses only); default
            ``local_cluster(workers, ps, chief)``.
        tasks: start only these ``(task_type, task_index)`` pairs of the cluster (the others are
            expected to be started elsewhere, e.g. by hand with their TF_CONFIG).
        on_output: called with each ``"[worker 0] line"`` from the calling thread (the R
            package passes an R function here); ``echo`` also prints it to stdout.
        pin_cpus: pin task i to core ``i % ncores`` with one TensorFlow thread each (benchmarks).
        grace: seconds between SIGTERM and SIGKILL when stopping tasks.
        show_all: also stream TensorFlow's C++ start-up INFO lines (always kept in ``output``).
        backend: ``"local"`` (this machine), ``"slurm"`` (a job submitted with sbatch:
            :func:`tfdistributed.slurm.launch_slurm`) or ``"ray"`` (Ray actors:
            :func:`tfdistributed.ray_backend.launch_ray`); ``backend_options`` go to those.

    Raises:
        LaunchError: a task exited non-zero (``.results`` has every task's outcome).
        LaunchTimeoutError: the job did not finish within ``timeout``.
    """
    if backend != "local":
        return _launch_elsewhere(backend, target, workers, ps, chief, backend_options, timeout=timeout,
                                 env=env, args=args, on_output=on_output, echo=echo, python=python,
                                 rscript=rscript, cwd=cwd, show_all=show_all,
                                 local_only=dict(cluster=cluster, tasks=tasks, pin_cpus=pin_cpus))
    if backend_options:
        raise ArgumentTypeError(f"Unknown argument(s) {sorted(backend_options)} for launch() on the "
                                f"local backend; they are options of backend='slurm' or 'ray'.")
    import psutil  # noqa: F401  (fail here, not half-way through a teardown)

    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"`timeout` must be a number of seconds, got {timeout!r}.") from None
    if not timeout > 0:
        raise ArgumentTypeError(f"`timeout` must be a positive number of seconds, got {timeout}.")
    if cluster is None:
        cluster = local_cluster(as_int(workers, "workers", minimum=1), as_int(ps, "ps", minimum=0),
                                bool(chief))
    cluster = check_loopback(cluster)
    ps_mode = bool(cluster.get("ps"))
    wanted = [(role, i) for role in ROLES for i in range(len(cluster.get(role, [])))]
    if tasks is not None:
        tasks = [(str(t), int(i)) for t, i in tasks]
        unknown = [t for t in tasks if t not in wanted]
        if unknown:
            raise ClusterConfigError(f"tasks {unknown} are not in the cluster {cluster}.")
        wanted = [t for t in wanted if t in tasks]
    for role, i in wanted:
        address = cluster[role][i]
        if _port_in_use(address):
            raise LaunchError(f"Port of {role} {i} ({address}) is already in use on this machine. "
                              f"Let launch() pick free ports (don't pass `cluster`), or stop the "
                              f"process holding it.")
    python = python or sys.executable
    workdir = tempfile.mkdtemp(prefix="tfdistributed-launch-")
    argv, is_function = _target_argv(target, args, python, rscript, workdir)
    base_env = dict(os.environ)
    base_env.update({str(k): str(v) for k, v in (env or {}).items()})
    base_env["PYTHONUNBUFFERED"] = "1"
    # fit(verbose="auto") prints one line per epoch instead of a redrawn progress bar.
    base_env["TFDISTRIBUTED_LAUNCHED"] = "1"
    # R targets use reticulate: make it attach to this very Python, with the backend importable.
    base_env.setdefault("RETICULATE_PYTHON", python)
    if is_function:
        # cloudpickle sends functions of importable modules by reference: the child must be able
        # to import them from where this process does.
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        base_env["PYTHONPATH"] = os.pathsep.join(
            paths + [p for p in base_env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if pin_cpus:
        base_env["TF_NUM_INTRAOP_THREADS"] = "1"
        # A parameter-server cluster serves concurrent RPCs with blocking inter-op work: with a
        # single inter-op thread its servers stall and the job hangs. TensorFlow sizes that pool
        # by the cores a process may use, i.e. 1 once pinned, so PS tasks get an explicit 4.
        base_env["TF_NUM_INTEROP_THREADS"] = "4" if ps_mode else "1"
    ncores = os.cpu_count() or 1

    started: list[_Task] = []
    lines: queue.Queue = queue.Queue()
    for role, i in wanted:
        server = ps_mode and role in ("worker", "ps")
        task_env = dict(base_env)
        task_env["TF_CONFIG"] = json.dumps(tf_config(cluster, role, i))
        result_path = None
        if server:
            task_argv = [python, "-m", "tfdistributed", "server"]
        else:
            task_argv = list(argv)
            if is_function:
                result_path = os.path.join(workdir, f"{role}-{i}.result.pkl")
                task_argv.append(result_path)
        started.append(_Task(role, i, task_argv, task_env, server, result_path))

    def reader(task: _Task):
        for raw in iter(task.proc.stdout.readline, b""):
            line = _clean_line(raw.decode(errors="replace").rstrip("\n"))
            task.lines.append(line)
            if show_all or not _NOISE.match(line):
                lines.put(f"[{task.name}] {line}")
        task.proc.stdout.close()

    def drain():
        while True:
            try:
                line = lines.get_nowait()
            except queue.Empty:
                return
            if echo:
                print(line, flush=True)
            if on_output is not None:
                on_output(line)

    def stop(tasks):
        """Stop ``tasks`` and pass on everything they printed."""
        _kill_tree([t.proc for t in tasks], grace)
        for t in started:
            t.reader.join(timeout=grace)
        drain()

    def results():
        out = []
        for t in started:
            code = t.proc.returncode if t.proc else None
            out.append(TaskResult(t.task_type, t.task_index, code, list(t.lines), None, t.server))
        return out

    t0 = time.monotonic()
    try:
        for n, task in enumerate(started):
            task.proc = subprocess.Popen(
                task.argv, env=task.env, cwd=cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_pin(n % ncores) if pin_cpus else None)
            task.reader = threading.Thread(target=reader, args=(task,), daemon=True)
            task.reader.start()
        primaries = [t for t in started if not t.server]
        # In parameter-server training the coordinator re-runs a lost worker's steps on the
        # other workers, so only the chief and the ps tasks are vital.
        vital = [t for t in started if not (ps_mode and t.task_type == "worker")]
        lost: list[_Task] = []
        while True:
            drain()
            for t in started:
                if t not in vital and t.proc.poll() is not None and t not in lost:
                    lost.append(t)
                    lines.put(f"[launch] {t.name} exited ({t.proc.returncode}); the chief "
                              f"continues with the other workers")
            failed = [t for t in vital if t.proc.poll() not in (None, 0)]
            # A server exiting, even with 0, means the cluster lost a task.
            failed += [t for t in vital if t.server and t.proc.poll() == 0]
            if failed:
                task = failed[0]
                time.sleep(0.2)
                stop(started)
                code = task.proc.returncode
                how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
                raise LaunchError(f"Task {task.name} {how}; every other task was stopped. "
                                  f"{_error_summary(task.lines)}", results())
            if primaries and all(t.proc.poll() == 0 for t in primaries):
                break
            elapsed = time.monotonic() - t0
            if elapsed > timeout:
                listening = _listening_ports([t.proc.pid for t in started if t.proc.poll() is None])
                not_joined = [t.name + f" ({cluster[t.task_type][t.task_index]})" for t in started
                              if int(cluster[t.task_type][t.task_index].rsplit(":", 1)[1]) not in listening]
                never_started = [f"{r} {i} ({cluster[r][i]})" for r in cluster
                                 for i in range(len(cluster[r])) if (r, i) not in wanted]
                running = [t.name for t in started if t.proc.poll() is None]
                stop(started)
                missing = never_started + not_joined
                msg = f"The job did not finish within {timeout:g} s; every task was stopped."
                if missing:
                    msg += (f" Tasks that never joined the cluster (no server on their address): "
                            f"{', '.join(missing)}. The others wait for every task in TF_CONFIG: "
                            f"start the missing task(s), or check their host:port.")
                msg += f" Still running at the timeout: {', '.join(running) or 'none'}."
                raise LaunchTimeoutError(msg, results())
            time.sleep(0.05)
        stop([t for t in started if t.server])
        out = results()
        if is_function:
            for res, task in zip(out, started):
                if task.result_path and os.path.exists(task.result_path):
                    with open(task.result_path, "rb") as f:
                        res.value = pickle.load(f)
    except BaseException:
        _kill_tree([t.proc for t in started if t.proc is not None and t.proc.poll() is None], grace)
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return LaunchResult(cluster=cluster, tasks=out, seconds=time.monotonic() - t0)


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
    """Serve this process's task of TF_CONFIG forever (a ``worker``/``ps`` of a PS cluster)."""
    import tensorflow as tf

    from .cluster import read_tf_config

    config = read_tf_config(config)
    if not config:
        raise ClusterConfigError("run_server() needs TF_CONFIG (set_tf_config() or launch()).")
    if "task" not in config:
        raise ClusterConfigError(
            "run_server() serves a worker or ps task, and this TF_CONFIG has no \"task\" (it "
            "describes the coordinator): give the server its task, e.g. "
            "{\"task\": {\"type\": \"worker\", \"index\": 0}}.")
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
