"""The launcher's side of warm starts: :func:`start_task` starts a task from a warm server
when it can (else as :class:`subprocess.Popen`), and :class:`WarmProcess` is the started task,
with the part of Popen's interface the local engine's supervisor uses."""

from __future__ import annotations

import atexit
import json
import os
import pickle
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import NamedTuple

from ...cluster.environment import process_getenv
from ...errors import ArgumentTypeError

#: ``TFDISTRIBUTED_WARM_START=1``: ``launch()``'s default for ``warm_start``.
WARM_START_ENV = "TFDISTRIBUTED_WARM_START"
#: Servers of each kind (Python, R) kept running at once (one per distinct task environment;
#: the least recently used goes).
MAX_SERVERS = 3
#: Seconds a server may take to import TensorFlow and be ready.
START_TIMEOUT = 120.0
# What a forked task inherits from its server and cannot change: what the server's modules
# (numpy, TensorFlow, Keras, tfdistributed and theirs: absl, gRPC, OpenBLAS...) and the
# interpreter itself read from the environment when they start. Tasks whose values of these
# differ are forked from different servers; every other variable (the task's own: TF_CONFIG,
# the attempt, a user's MY_VAR...) is set in the child and read at run time.
IMPORT_TIME_PREFIXES = ("TF_", "KERAS_", "CUDA_", "XLA_", "TPU_", "HIP_", "ROCM_", "NVIDIA_",
                        "PYTHON", "LD_", "OMP_", "MKL_", "OPENBLAS_", "GOTO", "NPY_", "NUMPY_",
                        "MALLOC_", "JEMALLOC", "ABSL_", "GRPC_", "TFDS_", "LC_")
IMPORT_TIME_NAMES = ("HOME", "PATH", "TMPDIR", "TEMP", "TMP", "LANG", "LANGUAGE", "TERM",
                     "COLUMNS", "NO_COLOR")
# Our own variables are read when a task runs, except these (read as the package is imported).
_OURS_AT_IMPORT = ("TFDISTRIBUTED_DISABLE_COMPAT",)
# TF_CONFIG is read when the strategy is made.
_RUN_TIME = ("TF_CONFIG",)
# What R, its start-up shell script and reticulate read as they start, besides the above: an R
# task's server starts with the task's values of these (others are read at run time, or
# checked: _Server.conflicts).
R_START_PREFIXES = ("R_", "RETICULATE_")
R_START_NAMES = ("PWD", "SHLVL")
# Set by R or reticulate for each process as it starts (engines/warm/rtask.py sets them in each
# forked R task), never the server's.
_PER_TASK = ("R_SESSION_TMPDIR", "R_SESSION_INITIALIZED")
# Rscript options that print or run something at start-up, which a forked task would not.
_R_COLD_OPTIONS = ("--verbose", "--help", "--version")

def warm_start_wanted(warm_start) -> bool:
    """``Local(warm_start=)`` at launch: ``None`` reads ``TFDISTRIBUTED_WARM_START`` (``"1"``: on)
    from the process environment as it is now (R's ``Sys.setenv()`` included)."""
    if warm_start is None:
        value = (process_getenv(WARM_START_ENV) or "").strip()
        if value not in ("", "0", "1"):
            raise ArgumentTypeError(f"{WARM_START_ENV} must be 1 (warm starts) or 0, got "
                                    f"{value!r}.")
        return value == "1"
    if not isinstance(warm_start, bool):
        raise ArgumentTypeError(f"`warm_start` must be TRUE/True or FALSE/False, got "
                                f"{warm_start!r}.")
    return warm_start


class WarmProcess:
    """A task forked by a warm server: ``pid``, ``stdout`` (its output), ``returncode``,
    :meth:`poll`, :meth:`wait`, :meth:`send_signal`, :meth:`terminate`, :meth:`kill`, as
    :class:`subprocess.Popen`. The server is the process' parent and reaps it; its exit status
    comes back on :attr:`conn`."""

    def __init__(self, pid: int, stdout, conn: socket.socket, name: str = "", note=None,
                 server=None):
        self.pid, self.stdout, self.conn, self.server = pid, stdout, conn, server
        self.name, self.note = name, note
        self.returncode: int | None = None
        self.args = None
        self._orphaned = False

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"warm task {self.pid}", timeout)
            self._read(0.5 if left is None else min(left, 0.5))
        return self.returncode

    def _read(self, timeout: float) -> None:
        if self._orphaned:
            # The server died first: the task (now init's child) is watched by its pid.
            if _alive(self.pid):
                time.sleep(min(timeout, 0.1))
            else:
                self.returncode = LOST_STATUS
            return
        if not select.select([self.conn], [], [], timeout)[0]:
            return
        try:
            data = self.conn.recv(4096)
        except OSError:
            data = b""
        self.conn.close()
        if data:
            reply = pickle.loads(data)
            self.returncode = reply["returncode"]
            if self.server is not None:
                with _cpu_lock:  # tasks' reader threads end at once
                    self.server.tasks_cpu += reply.get("cpu", 0.0)
            return
        self._orphaned = True
        if self.note is not None:
            self.note(f"[launch] the warm server that started {self.name or self.pid} died; its "
                      f"exit status is lost (reported as {LOST_STATUS})")
        self._read(0.0)

    def send_signal(self, sig) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)


def tasks_cpu_seconds() -> float:
    """CPU seconds (user and system) used by the ended warm tasks of this process' live warm
    servers. A forked task is its server's child, so this process' ``RUSAGE_CHILDREN`` counts it
    only once the server ends (with the server's own seconds); until then this does, task by task
    as each ends (with its own children once it has waited for them). Together the two count
    every warm task once."""
    # Not under _lock, which a launch holds while a server starts (up to START_TIMEOUT).
    return sum(s.tasks_cpu for s in list(_servers))


#: The exit status reported for a task whose warm server died first (its real status is lost).
LOST_STATUS = 255


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _Server:
    """One warm server process, serving tasks of ``target``'s kind and interpreter whose
    environment matches ``env`` (and, for R, whose working directory is ``cwd``)."""

    def __init__(self, target: _Target, env: dict, cwd: str | None = None):
        self.kind, self.program, self.options = target.kind, target.program, target.options
        self.env, self.cwd = env, cwd
        self.tasks_cpu = 0.0  # CPU seconds of its tasks that have ended (tasks_cpu_seconds)
        self.startup_env: dict = {}  # what the server's start-up set in its environment
        self.dir = tempfile.mkdtemp(prefix="tfdistributed-warm-")
        self.path = os.path.join(self.dir, "socket")
        self.log = os.path.join(self.dir, "server.log")
        ready_r, ready_w = os.pipe()
        try:
            argv, workdir = self._command(ready_w)
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(
                    argv, env=env, pass_fds=(ready_w,), stdin=subprocess.PIPE, stdout=log,
                    stderr=log, start_new_session=True, cwd=workdir)
        except BaseException:
            os.close(ready_r)
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        finally:
            os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            self._ready(ready)

    def _command(self, ready: int) -> tuple:
        """The server's argv and working directory."""
        if self.kind == "python":
            # -X faulthandler: a native crash while importing leaves its stack in the log.
            return ([self.program, "-X", "faulthandler", "-m", "tfdistributed.engines.warm.server",
                     self.path, str(ready)], self.dir)
        # Rscript, with the task's options, in the task's directory (R reads .Rprofile and
        # .Renviron there as it starts), on a one-line script (engines/warm/rtask.py).
        serve = os.path.join(self.dir, "serve.R")
        with open(serve, "w") as f:
            f.write(f"tfdistributed:::warm_task_server({json.dumps(self.path)}, {ready}L, "
                    f"{json.dumps(serve)})\n")
        return [self.program, *self.options, serve], self.cwd

    def _ready(self, ready) -> None:
        # The server writes "ready" and its environment once it listens; the pipe ends empty if
        # it dies first.
        deadline = time.monotonic() + START_TIMEOUT
        line, timed_out = b"", True
        while time.monotonic() < deadline:
            if select.select([ready], [], [], 0.5)[0]:
                line, timed_out = ready.readline(), False
                break
        word, _, environment = line.strip().partition(b" ")
        if word != b"ready":
            why = self._why(f"did not start within {START_TIMEOUT:g} s" if timed_out else
                            "failed to start")
            self.close()  # removes the log: read it first
            raise RuntimeError(why)
        if environment:
            self.startup_env = {k: v for k, v in json.loads(environment).items()
                                if self.env.get(k) != v and k not in _PER_TASK}

    @property
    def key(self) -> tuple:
        """What a task's server must match (:func:`_key`)."""
        return _key(self.kind, self.program, self.options, self.env, self.cwd)

    def conflicts(self, env: dict) -> dict:
        """The variables of a task's environment ``env`` that this server's start-up set to
        another value (an R server's: R, its ``.Renviron`` and packages) without having started
        with the task's value: a fresh ``Rscript`` of the task could have kept the task's value
        (``EDITOR=${EDITOR-vi}``) or not (a ``.Renviron``'s plain line), so a server started
        with it must serve the task."""
        if self.kind == "python":
            return {}
        return {k: env[k] for k, v in self.startup_env.items()
                if k in env and env[k] != v and self.env.get(k) != env[k]}

    def task_env(self, env: dict) -> dict:
        """The environment of a task forked from this server: the task's, with what an R task's
        start-up would have set in it (R and its packages, from the same environment, did the
        same in the server: ``R_HOME``, ``R_LIBS_USER``, a ``.Renviron``'s variables...)."""
        return env if self.kind == "python" else {**env, **self.startup_env}

    def _why(self, what: str) -> str:
        try:
            with open(self.log, errors="replace") as f:
                tail = [ln.strip() for ln in f.readlines()[-12:] if ln.strip()]
        except OSError:
            tail = []
        # R's error is "Error in call :" and the message on the lines after it, then "Execution
        # halted"; Python's, the last line of its traceback.
        errors = [i for i, ln in enumerate(tail) if ln.startswith(("Error", "Fatal error"))]
        if errors:
            shown = " ".join(ln for ln in tail[errors[-1]:] if ln != "Execution halted")
        else:
            shown = tail[-1] if tail else ""
        kind = "" if self.kind == "python" else "R "
        return (f"the {kind}warm-start server {what}" + (f" ({shown[:400]})" if shown else "")
                + "; tasks start the usual way")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, argv: list, env: dict, cwd: str | None, name: str = "",
              note=None) -> WarmProcess:
        read, write = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.settimeout(30.0)
            conn.connect(self.path)
            request = {"argv": argv, "env": self.task_env(env), "cwd": cwd}
            socket.send_fds(conn, [pickle.dumps(request)], [write])
            reply = conn.recv(4096)
            if not reply:
                raise RuntimeError(self._why("closed the connection"))
            pid = pickle.loads(reply)["pid"]
        except BaseException:
            conn.close()
            os.close(read)
            raise
        finally:
            os.close(write)
        conn.settimeout(None)
        return WarmProcess(pid, os.fdopen(read, "rb"), conn, name, note, self)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_lock = threading.Lock()
_cpu_lock = threading.Lock()
_servers: list[_Server] = []   # most recently used last
_failed: dict = {}             # a server's key (_key) -> why it could not start


def _key(kind: str, program: str, options: tuple, env: dict, cwd: str | None) -> tuple:
    """A server's identity: the tasks it can serve have this kind, interpreter, options,
    server environment (:func:`_server_env`) and, for R, working directory."""
    return kind, program, tuple(options), tuple(sorted(env.items())), cwd


class _Target(NamedTuple):
    """A task a warm server can start: its kind (``"python"`` or ``"r"``), its interpreter
    (``python``, ``Rscript``), the interpreter's options (Rscript's: R starts by them) and what
    the forked child runs (Python's argv after the interpreter; R's script and arguments)."""
    kind: str
    program: str
    options: tuple
    argv: list


def _server_env(env: dict, kind: str = "python") -> dict:
    """The part of a task's environment its server must have had: what is read at import (by
    Python and the modules the server imports); for R also what R, its shell script and
    reticulate read as they start (:data:`R_START_PREFIXES`, :data:`R_START_NAMES`). What else
    an R start-up sets (a ``.Renviron``...) is checked per task (:meth:`_Server.conflicts`)."""
    wanted = {k: v for k, v in env.items() if k not in _RUN_TIME and (
        k.startswith(IMPORT_TIME_PREFIXES) or k in IMPORT_TIME_NAMES or k in _OURS_AT_IMPORT)}
    if kind == "r":
        wanted.update({k: v for k, v in env.items() if k not in _PER_TASK and (
            k.startswith(R_START_PREFIXES) or k in R_START_NAMES)})
    return wanted


def _warm_argv(argv: list, python: str) -> _Target | None:
    """What a warm server runs for ``argv``: ``python -m module ...`` or ``python script.py
    ...`` with this ``python``, or ``Rscript [--options] script.R ...``; else None (started the
    usual way)."""
    if len(argv) < 2:
        return None
    if argv[0] == python:
        if argv[1] == "-m" and len(argv) > 2:
            return _Target("python", python, (), list(argv[1:]))
        if not argv[1].startswith("-") and argv[1].endswith(".py"):
            return _Target("python", python, (), list(argv[1:]))
        return None
    if "Rscript" in os.path.basename(argv[0]):
        options = []
        for i, arg in enumerate(argv[1:], 1):
            if arg.startswith("--") and arg not in _R_COLD_OPTIONS:
                options.append(arg)
            elif arg.lower().endswith(".r") and not arg.startswith("-"):
                return _Target("r", argv[0], tuple(options), list(argv[i:]))
            else:
                return None  # -e EXPR, --verbose, ...
    return None


def _server_for(target: _Target, env: dict, cwd: str) -> _Server:
    wanted = _server_env(env, target.kind)
    cwd = cwd if target.kind == "r" else None
    server = _find_or_start(target, wanted, cwd)
    extra = server.conflicts(env)
    if extra:
        # What R's start-up set (a .Renviron's line, R's ${EDITOR-vi}) over variables this task
        # has values of its own for: which wins in a fresh Rscript depends on how each is set.
        # A server started with the task's values sets them as the task's own start would.
        server = _find_or_start(target, {**wanted, **extra}, cwd)
        if server.conflicts(env):
            raise RuntimeError(f"no warm server starts as this task would (its values of "
                               f"{', '.join(sorted(extra))})")
    return server


def _find_or_start(target: _Target, wanted: dict, cwd: str | None) -> _Server:
    key = _key(target.kind, target.program, target.options, wanted, cwd)
    if key in _failed:
        raise RuntimeError(_failed[key])  # tried once in this process: not again per task
    for server in list(_servers):
        if not server.alive():
            _servers.remove(server)
            server.close()
        elif server.key == key:
            _servers.remove(server)
            _servers.append(server)
            return server
    try:
        server = _Server(target, wanted, cwd)
    except (OSError, RuntimeError) as e:
        _failed[key] = str(e)
        raise
    _servers.append(server)
    same_kind = [s for s in _servers if s.kind == server.kind]
    for old in same_kind[:-MAX_SERVERS]:
        _servers.remove(old)
        old.close()
    return server


def start_task(plan, cwd, warm: bool, note=None, preexec_fn=None):
    """Start the task ``plan`` (a :class:`~tfdistributed.engines.local.plan.TaskPlan`): forked
    from a warm server when ``warm`` and the task allows it, else with
    :class:`subprocess.Popen`. Either way the result has ``pid``, ``stdout`` (the task's stdout
    and stderr) and Popen's ``poll``/``wait``/``send_signal``/``kill``. ``note(line)`` is told
    when a warm start was asked for but could not be made, and why. ``preexec_fn`` is what a
    task started with Popen runs before it becomes the task (the plan's own ``preexec_fn``
    wrapped by the launcher); a forked task's server does the same for it (it dies with its
    server, which ends when the launching process does). A task whose GPUs ``gpus_per_task``
    chose (``plan.gpus``) starts the usual way: each such task has a ``CUDA_VISIBLE_DEVICES`` of
    its own, so it would need a server of its own (a job of more tasks than
    :data:`MAX_SERVERS` would close the server of a running one, and so kill it), and CUDA
    does not work in a child forked after its parent started CUDA, which no GPU run has yet
    shown a server never does."""
    target = _warm_argv(plan.argv, sys.executable) \
        if warm and plan.preexec_fn is None and getattr(plan, "gpus", None) is None else None
    if target is not None:
        # Popen's cwd=None is the launcher's own directory; the server's is not.
        workdir = os.getcwd() if cwd is None else cwd
        try:
            with _lock:
                return _server_for(target, plan.env, workdir).spawn(
                    target.argv, plan.env, workdir, plan.name, note)
        except (OSError, RuntimeError) as e:
            if note is not None:
                note(f"[launch] {e}")
    return subprocess.Popen(plan.argv, env=plan.env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=preexec_fn)


def server_pids() -> list:
    """The pids of this process' live warm servers (e.g. to tell them from a job's leftovers:
    a forked task's command line is its server's)."""
    with _lock:
        return [s.proc.pid for s in _servers if s.alive()]


@atexit.register
def shutdown() -> None:
    """Stop every warm server of this process (at exit, or to free their memory)."""
    with _lock:
        while _servers:
            _servers.pop().close()
