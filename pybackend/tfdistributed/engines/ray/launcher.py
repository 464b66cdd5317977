"""Run a job on Ray: one Ray actor per task, each running the target as its own process.

``launch(target, workers=N, engine=Ray())`` runs the same ``.py`` / ``.R`` script or Python
function as the local launcher, on the Ray cluster this process is connected to
(``ray.init(address=...)``, ``RAY_ADDRESS``, or ``Ray(address=...)``), else on a local Ray
started for the job and shut down after it. Each task's output comes back prefixed with its
role, its exit code and (functions) return value in a :class:`~tfdistributed.LaunchResult`.

Why plain actors and not Ray Train's ``TensorflowTrainer`` (read in ray 2.60,
``ray/train/tensorflow/config.py``): its backend writes a TF_CONFIG with ``worker`` tasks only
(no chief, no ps: no parameter-server jobs) and sets ``TF_USE_LEGACY_KERAS=1`` in every worker,
i.e. it trains with legacy Keras, which is exactly what tfdistributed exists to avoid; its
training loop is a function run inside Ray's worker process, so ``.R`` scripts, per-task exit
codes and output, a timeout and cancelling one stuck task are not available; and its
reporting/checkpoint API (``ray.train.report``) would put Ray code in the training script, which
must not change between engines. What it adds, restarting the whole worker group after a
failure, is ``Restarts(max_restarts=)`` here, as on every engine
(:mod:`tfdistributed.engines.restarts`), and every Ray option of the actors (``num_cpus``,
``num_gpus``, ``resources``, ``runtime_env``, ``scheduling_strategy``...) passes through
``Ray(ray_options=)``. ``Scaling(gpus_per_task=N)`` asks ``num_gpus=N`` for the actors of the tasks
that train only (:mod:`tfdistributed.engines.gpus`); Ray sets each actor's
``CUDA_VISIBLE_DEVICES`` to its GPUs, and the task's process inherits it.

A task's process dies with its actor (``PR_SET_PDEATHSIG``), so ``ray.kill`` and a lost node
leave nothing behind; a dead actor fails the job with the task's name.

:class:`RayLauncher` is the engine (``with launcher:`` connects to Ray, or starts a local Ray
that it shuts down after the job); each attempt is a :class:`RayJob` of fresh actors, driven by
:mod:`tfdistributed.engines.restarts` as every engine is.
"""

from __future__ import annotations

import os
import pickle
import sys
import time

from ...cluster.spec import format_address
from ...cluster.addresses import local_addresses
from ...cluster.local import Cluster
from ...errors import ArgumentTypeError, LaunchError, LaunchTimeoutError
from ..base import ATTEMPT_ENV, Deadline, LaunchResult, Launcher, TaskResult, target_argv
from ..gpus import ray_actor_options
from ..output import Relay, error_summary, how_it_ended
from ..restarts import failure_of
from ..attribution import End, exit_time, first_cause, kind_of_end

_RAY_MISSING = ("launch(..., engine=Ray()) needs Ray: pip install 'tfdistributed[ray]' (or "
                "\"ray==2.60.0\").")


def _die_with_parent() -> None:
    import ctypes
    import signal

    # PR_SET_PDEATHSIG: the task's process is killed when its actor's process goes away.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    os.setsid()


class _TaskActor:
    """One task: picks its port, runs the target as a child process, hands back its output."""

    def __init__(self):
        self.proc = None
        self.lines: list = []
        self.sent = 0
        self.workdir = None
        self.ended_at = None  # wall clock when the task's output ended (it exited)
        self.exited_at = None  # wall clock when its process exited, as the kernel said

    def address(self):
        import portpicker
        import ray

        return (ray.util.get_node_ip_address(), portpicker.pick_unused_port(),
                ray.get_runtime_context().get_node_id())

    def start(self, argv, env, call_bytes, cwd):
        import subprocess
        import tempfile
        import threading

        self.workdir = tempfile.mkdtemp(prefix="tfdistributed-ray-")
        if call_bytes is not None:
            call_path = os.path.join(self.workdir, "call.pkl")
            with open(call_path, "wb") as f:
                f.write(call_bytes)
            argv = [sys.executable, "-m", "tfdistributed", "_call", call_path,
                    os.path.join(self.workdir, "result.pkl")]
        full_env = dict(os.environ)
        # Ray Train's TensorFlow backend sets it in Ray's workers; inherited, `import keras`
        # would give legacy Keras. Only the job's own `env` may ask for it.
        full_env.pop("TF_USE_LEGACY_KERAS", None)
        full_env.update(env)
        full_env.setdefault("RETICULATE_PYTHON", sys.executable)
        argv = [sys.executable if a == "{python}" else a for a in argv]
        self.proc = subprocess.Popen(argv, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)

        def read():
            for raw in iter(self.proc.stdout.readline, b""):
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
            self.ended_at = time.time()

        def stamp_exit():  # wall-clock time: the driver compares it with other nodes' ends
            self.exited_at = exit_time(self.proc.pid, time.time)

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        threading.Thread(target=stamp_exit, daemon=True).start()
        return os.getpid()

    def signal(self, signum):
        """Send the task's process group ``signum`` (SIGTERM: stop at the next backup)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signum)
            except ProcessLookupError:
                pass
        return True

    def poll(self):
        """New output lines since the last call, the exit code (None while running) and when
        the task exited (the earlier of its process' exit as the kernel said and its output's
        end; None while running)."""
        code = self.proc.poll()
        if code is not None:
            self.reader.join(timeout=5)
        new, self.sent = self.lines[self.sent:], len(self.lines)
        seen = [t for t in (self.exited_at, self.ended_at) if t is not None]
        return new, code, min(seen) if seen else None

    def value(self):
        path = os.path.join(self.workdir, "result.pkl")
        if not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            return f.read()

    def stop(self, grace):
        import shutil
        import signal

        if self.proc is not None and self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait)
                    break
                except Exception:
                    continue
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return True


def start_local_ray(num_cpus: int = 2, **init_options):
    """``ray.init()`` a local Ray with ``num_cpus`` CPUs whose processes can start from R too.

    Inside R (reticulate, rpy2) LD_LIBRARY_PATH starts with the system library directory (R's
    ``ldpaths``); a Python built with its own shared libpython (pyenv, conda) then loads the
    system's libpython in every process Ray starts, and Ray's dashboard and workers die on
    import (``undefined symbol: _PyModule_Add``). Ray's processes get this interpreter's library
    directory first.

    Args:
        num_cpus: CPUs the local Ray offers (one per task of a job).
        **init_options: more ``ray.init`` options (``include_dashboard`` and ``log_to_driver``
            default to False).

    Returns:
        What ``ray.init`` returns.

    Raises:
        LaunchError: Ray is not installed.

    Example:
        >>> start_local_ray(num_cpus=4)                       # doctest: +SKIP
        >>> launch("train.py", workers=4, engine=Ray())       # doctest: +SKIP
    """
    import sysconfig

    ray = _import_ray()
    saved = os.environ.get("LD_LIBRARY_PATH")
    libdir = sysconfig.get_config_var("LIBDIR")
    if saved and sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, saved])
    try:
        init_options.setdefault("include_dashboard", False)
        init_options.setdefault("log_to_driver", False)
        # A new Ray of our own: without an address, ray.init() joins whatever Ray was started
        # last on this machine (/tmp/ray/ray_current_cluster), someone else's included, and
        # then refuses num_cpus ("When connecting to an existing cluster, num_cpus and num_gpus
        # must not be provided").
        init_options.setdefault("address", "local")
        return ray.init(num_cpus=num_cpus, **init_options)
    finally:
        if saved is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = saved


def _raylet_silent(place: str) -> str | None:
    """Why the raylet at ``place`` (``address:port``) does not answer, or None if it does."""
    import socket

    host, _, port = place.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError as e:
        return f"its raylet does not answer at {place} ({e.strerror or e})"
    return None


def _on_node(node_id: str) -> dict:
    """Actor options that place it on the Ray node ``node_id`` and nowhere else."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)}


def _import_ray():
    try:
        import ray
    except ImportError:
        raise LaunchError(_RAY_MISSING) from None
    return ray


def _plan(plan, scaling):
    """The ``(role, index)`` of the tasks of ``scaling`` (the plan's, or an elastic attempt's),
    and what the plan's target runs as: a script's argv, or a function's pickled call (each
    actor writes it into its own directory)."""
    import cloudpickle

    target, engine = plan.target, plan.engine
    if callable(target):
        return scaling.tasks(), None, cloudpickle.dumps((target, tuple(plan.args)))
    if not isinstance(target, (str, os.PathLike)):
        raise ArgumentTypeError(f"launch() target must be a script path or a Python function, "
                                f"got {type(target).__name__}.")
    argv, _ = target_argv(os.path.abspath(os.fspath(target)), plan.args,
                          engine.python or "{python}", engine.rscript, None)
    return scaling.tasks(), argv, None


class RayJob:
    """One attempt on Ray (a :class:`~tfdistributed.engines.base.Job`): one actor per task,
    placed, started, polled for output and exit codes; the first failed or lost task fails the
    job, and every actor is stopped."""

    def __init__(self, ray, roles, ps_mode: bool, options: dict, relay: Relay, grace: float, *,
                 start: dict, poll: float, nodes=None, gpus_per_task=None):
        self.ray = ray
        self.start_with, self.poll = start, poll
        self.roles = roles
        self.names = [f"{r} {i}" for r, i in roles]
        self.ps_mode = ps_mode
        self.options = options
        self.relay = relay
        self.grace = grace
        actor_cls = ray.remote(_TaskActor)
        # An elastic job places one task on each of its nodes; else Ray places them.
        placement = [_on_node(node) for node in nodes] if nodes else [{} for _ in roles]
        self.asked = [self.actor_options(role, where, gpus_per_task)
                      for (role, _), where in zip(roles, placement)]
        self.actors = [actor_cls.options(name=None, **asked).remote() for asked in self.asked]
        self.lines = [[] for _ in roles]
        self.codes: list = [None] * len(roles)
        self.ended: list = [None] * len(roles)
        self.primaries = [n for n, (r, _) in enumerate(roles) if not ps_mode or r == "chief"]
        self.launched = self.stopped = False
        self.cluster: Cluster | None = None

    def actor_options(self, role: str, where: dict, gpus_per_task=None) -> dict:
        """The Ray options of the actor of a task of ``role``: the engine's, its GPUs
        (``gpus_per_task``, for a task that trains) and, for an elastic job, its node."""
        return {**self.options, **ray_actor_options(gpus_per_task, role, self.ps_mode), **where}

    def _results(self) -> list:
        return [TaskResult(r, i, c, list(out), None, self.ps_mode and r != "chief")
                for (r, i), c, out in zip(self.roles, self.codes, self.lines)]

    def stop(self) -> None:
        """Stop every task's process and kill every actor (once)."""
        if self.stopped:
            return
        self.stopped = True
        refs = []
        # Actors that never started a process (still waiting for resources) just go.
        for a in self.actors if self.launched else ():
            try:
                refs.append(a.stop.remote(self.grace))
            except Exception:
                pass
        try:
            self.ray.get(refs, timeout=2 * self.grace + 5)
        except Exception:
            pass
        for a in self.actors:
            self.ray.kill(a)

    def preempt(self) -> None:
        """Tell every task running the target to stop at its next backup (SIGTERM, as a
        preemption notice)."""
        import signal

        for n in self.primaries:
            try:
                self.actors[n].signal.remote(signal.SIGTERM)
            except Exception:  # noqa: BLE001  (an actor that is gone has nothing to stop)
                pass

    def place(self, timeout: float) -> dict:
        """Wait for every actor to be placed; the cluster of the ports they picked."""
        ray = self.ray
        try:
            placed = ray.get([a.address.remote() for a in self.actors], timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise LaunchTimeoutError(
                f"Ray could not start the job's {len(self.roles)} task actors within {timeout:g} s "
                f"(they ask for {' and '.join(sorted(set(map(str, self.asked))))}); the cluster "
                f"has {ray.cluster_resources()}. Ask "
                f"for fewer tasks or resources, or add nodes.", self._results()) from None
        # All on this machine (one Ray node, or several Ray nodes of this machine): loopback only
        # (TensorFlow's gRPC servers have no authentication).
        addresses = {n["NodeID"]: n.get("NodeManagerAddress") for n in ray.nodes()}
        mine = local_addresses() | {"127.0.0.1", "localhost"}
        local = all(addresses.get(node) in mine for _, _, node in placed)
        cluster: dict = {}
        for (role, _), (ip, port, _) in zip(self.roles, placed):
            cluster.setdefault(role, []).append(format_address("127.0.0.1" if local else ip, port))
        # Validated once; each task's TF_CONFIG comes from the value.
        return Cluster.of(cluster)

    def start(self) -> None:
        """Place the actors, then each starts its task: the target, or a server in a
        parameter-server job."""
        self.cluster = self.place(max(1.0, self.start_with["deadline"].left()))
        self._start_tasks(self.cluster, **self.start_with)

    def _start_tasks(self, cluster: Cluster, argv, call_bytes, *, env, python, cwd,
                     deadline: Deadline) -> None:
        import json

        base = {str(k): str(v) for k, v in (env or {}).items()}
        base.update(PYTHONUNBUFFERED="1", TFDISTRIBUTED_LAUNCHED="1")
        if call_bytes is not None:
            base["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        starts = []
        self.launched = True
        for a, (role, i) in zip(self.actors, self.roles):
            task_env = dict(base, TF_CONFIG=json.dumps(cluster.tf_config(role, i)))
            server = self.ps_mode and role != "chief"
            task_argv = [python or "{python}", "-m", "tfdistributed", "server"] if server else argv
            starts.append(a.start.remote(task_argv, task_env, None if server else call_bytes, cwd))
        self.ray.get(starts, timeout=max(1.0, deadline.left()))

    def wait(self, deadline: Deadline) -> None:
        """Until every task running the target exits 0, or raise (every task then stopped)."""
        while True:
            self._poll_all()
            if self._failed():
                n = self._first_to_end()
                self.stop()
                raise LaunchError(f"Task {self.names[n]} {how_it_ended(self.codes[n])}; every "
                                  f"other task was stopped. {error_summary(self.lines[n])}",
                                  self._results(), failure=failure_of(
                                      self.names[n], self.codes[n], self.lines[n]))
            if all(self.codes[n] == 0 for n in self.primaries):
                return
            if deadline.passed():
                timeout = deadline.timeout
                running = [self.names[n] for n, c in enumerate(self.codes) if c is None]
                self.stop()
                raise LaunchTimeoutError(f"The Ray job did not finish within {timeout:g} s; every "
                                         f"task was stopped. Still running at the timeout: "
                                         f"{', '.join(running)}.", self._results())
            time.sleep(self.poll)

    def _failed(self) -> list:
        failed = [n for n, c in enumerate(self.codes) if c not in (None, 0)]
        # A server exiting, even with 0, means the cluster lost a task.
        return failed + [n for n, c in enumerate(self.codes)
                         if c == 0 and n not in self.primaries]

    def _first_to_end(self) -> int:
        """The failed task whose end caused the others' (a peer gone fails their collectives
        with status 1, and on a loaded machine both ends can pass before the next poll).
        Every task is polled once more (one seen running earlier in this pass may have ended
        first), then :func:`~tfdistributed.engines.attribution.first_cause` decides, by when
        each task's process exited (its actor's clock) and the kind of its end."""
        try:
            self._poll_all()
        except LaunchError:  # an actor lost since: a task seen ended before it stays the cause
            pass
        failed = self._failed()
        cause = first_cause(End(self.names[n], self.ended[n],
                                kind_of_end(self.codes[n], self.lines[n]), n) for n in failed)
        return self.names.index(cause.task)

    def _poll_all(self) -> None:
        """New output and exit codes of the running tasks; a dead actor fails the job."""
        ray = self.ray
        for n, a in enumerate(self.actors):
            if self.codes[n] is not None:
                continue
            try:
                new, self.codes[n], self.ended[n] = ray.get(a.poll.remote(), timeout=30)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
                self.codes[n] = -9
                self.stop()
                raise LaunchError(
                    f"Task {self.names[n]} was lost: its Ray actor died ({type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else 'no reason given'}); every other "
                    f"task was stopped. {error_summary(self.lines[n])}", self._results(),
                    failure=failure_of(self.names[n], -9, self.lines[n],
                                       ended="was lost (its Ray actor died)")) from None
            self.relay.emit(self.names[n], new, self.lines[n])

    def results(self) -> LaunchResult:
        """The cluster, and every task's result with a function target's return values."""
        out = self._results()
        if self.start_with["call_bytes"] is not None:
            for n in self.primaries:
                raw = self.ray.get(self.actors[n].value.remote(), timeout=60)
                out[n].value = pickle.loads(raw) if raw is not None else None
        return LaunchResult(cluster=self.cluster.as_dict(), tasks=out, seconds=0.0)


class RayLauncher(Launcher):
    """The Ray engine (a :class:`~tfdistributed.engines.base.Launcher`), made from a
    :class:`~tfdistributed.engines.options.JobPlan` whose engine is a
    :class:`~tfdistributed.engines.ray.engine.Ray`, and the job's relay; ``with`` it, this
    process is connected to Ray (a local Ray started for the job is shut down at the end); each
    attempt is a :class:`RayJob` of fresh actors."""

    place_word = "node"

    def __init__(self, plan, relay: Relay):
        self.plan, self.relay = plan, relay
        self.ray = _import_ray()
        self.started_here = False
        self._node_ids: dict = {}

    def __enter__(self) -> "RayLauncher":
        ray, address = self.ray, self.plan.engine.address
        self.started_here = not ray.is_initialized()
        if self.started_here:
            if address or os.environ.get("RAY_ADDRESS"):
                ray.init(address=address or os.environ["RAY_ADDRESS"], log_to_driver=False)
            else:
                start_local_ray(num_cpus=max(len(self.plan.scaling.tasks()), 2))
        return self

    def __exit__(self, kind, error, tb) -> bool:
        if self.started_here:
            self.ray.shutdown()
        return False

    def job(self, attempt: int, deadline: Deadline, places=None) -> RayJob:
        """Attempt ``attempt``: its tasks planned and one actor asked for per task (with
        ``places``, an elastic job's nodes, one on each of the first of them)."""
        plan, engine, scaling = self.plan, self.plan.engine, self.plan.scaling
        nodes = None
        if places is not None:
            nodes = [self._node_ids[p] for p in places[:self.trainers(places)]]
            scaling = scaling.resized(len(nodes))
        roles, argv, call_bytes = _plan(plan, scaling)
        env = dict(plan.task_env(), **{ATTEMPT_ENV: str(attempt)})
        return RayJob(self.ray, roles, scaling.parameter_server,
                      {"num_cpus": 1, **(engine.ray_options or {})}, self.relay,
                      plan.restarts.grace,
                      start=dict(argv=argv, call_bytes=call_bytes, env=env, python=engine.python,
                                 cwd=plan.cwd, deadline=deadline), poll=engine.poll, nodes=nodes,
                      gpus_per_task=scaling.gpus_per_task)

    # -- nodes that come and go (engines/elastic) -------------------------------------------
    def places(self) -> list:
        """The alive Ray nodes with a CPU, this process's first, as ``address:port`` of their
        raylet, when the job is elastic (``Scaling(min_workers=)``); else none: Ray places the
        tasks. One worker a node (:meth:`~tfdistributed.engines.base.Launcher.trainers`)."""
        if self.plan.scaling.min_workers is None:
            return []
        here = self.ray.get_runtime_context().get_node_id()
        nodes = [n for n in self.ray.nodes()
                 if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
        nodes.sort(key=lambda n: n["NodeID"] != here)
        named = {f"{n['NodeManagerAddress']}:{n['NodeManagerPort']}": n["NodeID"] for n in nodes}
        self._node_ids.update(named)
        return list(named)

    def probe(self, places, active) -> dict:
        """``{node: None if it answers, else why not}``: Ray lists it alive and its raylet
        accepts a connection (Ray's own health check takes seconds to see a node gone)."""
        alive = {n["NodeID"]: n.get("Alive") for n in self.ray.nodes()}
        found = {}
        for place in places:
            node = self._node_ids.get(place)
            if node not in alive:
                found[place] = "Ray no longer lists it"
            elif not alive[node]:
                found[place] = "Ray says it is dead"
            else:
                found[place] = _raylet_silent(place)
        return found
