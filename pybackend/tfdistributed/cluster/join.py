"""Joining a multi-worker job, said out loud, and a join timeout of minutes, not an hour.

Inside ``MultiWorkerMirroredStrategy()`` (ours and TensorFlow's own class) a task waits for
every chief/worker task to register with TensorFlow's coordination service, silently and by
default for an hour. Here, while it waits:

- after :data:`FIRST_NOTICE` seconds (a normal join on a busy 2-core machine takes 10+ s, so
  the normal suite prints nothing) and then every :data:`NOTICE_INTERVAL` seconds, or a
  third of a shorter join timeout each (so that the wait is named before it ends), the task
  prints (through a helper process, :class:`Watcher`) one line naming the tasks it may still wait
  for, with their addresses and what the network answers when it connects to each (:func:`probe`):
  connection refused (nothing listens: not started, crashed, a wrong port), no route or timed out (a
  wrong address, a host or link down, a firewall);
- the join timeout is TensorFlow's own: the coordination service's register timeout
  (``cluster_register_timeout_in_ms``) with registration as a barrier
  (``cluster_register_with_barrier``), so the leader and every other task raise
  ``DeadlineExceededError`` when a task is missing, and the process lives on. That error
  becomes :class:`JoinTimeoutError`, naming the missing tasks and their addresses.
- TensorFlow before 2.19 has no such barrier (:func:`has_register_barrier`): there only a task
  that cannot reach the leader times out; the leader, and every task that did reach it, wait for
  a missing task for TensorFlow's hour, holding Python's lock, so no exception can end that
  wait. There the watching process keeps the timeout: :data:`GRACE` seconds after it, if the
  task still waits, it prints the same ``JoinTimeoutError`` text and ends the task (SIGTERM,
  then SIGKILL), and the task's exit says the join failed; its process does not live on.

The timeout is, first to last: ``make_strategy(join_timeout=)`` (:func:`join_timeout`),
``TFDISTRIBUTED_JOIN_TIMEOUT`` (``launch(join_timeout=)`` sets it in every task; a
hand-started task reads it too), :data:`DEFAULT_JOIN_TIMEOUT`. A timeout the user gave
TensorFlow directly (``configure_coordination_service(cluster_register_timeout_in_ms=...)``)
is kept.

:func:`install` (run by ``import tfdistributed``) puts this and the live TF_CONFIG
(:mod:`tfdistributed.cluster.live`) in place as soon as TensorFlow is imported, or at once
if it already is; :func:`status` says what is in place.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import threading
import time

from .spec import parse_address
from .environment import process_getenv
from ..errors import ArgumentTypeError, JoinTimeoutError
from ..versions import after_import
from . import live as tfconfig

DEFAULT_JOIN_TIMEOUT = 300.0  # seconds: a late task may be a slow scheduler, not a typo
FIRST_NOTICE = 25.0
NOTICE_INTERVAL = 15.0
PROBE_TIMEOUT = 3.0
GRACE = 5.0  # seconds past the join timeout before the watcher ends a task TensorFlow cannot
#              end (TensorFlow < 2.19), so that TensorFlow's own error comes first where it can
ENV = "TFDISTRIBUTED_JOIN_TIMEOUT"

_state = threading.local()  # the join_timeout of the make_strategy() running on this thread
_installed: dict[str, bool] = {}


def as_timeout(value, name: str = "join_timeout") -> float | None:
    """``value`` as a number of seconds > 0 (None stays None); whole R doubles are numbers."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if isinstance(value, bool) or not seconds > 0 or seconds == float("inf"):
        raise ArgumentTypeError(f"`{name}` must be a number of seconds > 0, got {value!r}.",
                                hints={"python": f"E.g. {name}=120.", "r": f"E.g. {name} = 120."})
    return seconds


def join_timeout() -> float:
    """The join timeout in effect on this thread, in seconds (see the module docstring)."""
    explicit = getattr(_state, "timeout", None)
    if explicit is not None:
        return explicit
    # The process's value: a hand-started R job may Sys.setenv() it after Python started.
    value = (process_getenv(ENV) or "").strip()
    return as_timeout(value, ENV) if value else DEFAULT_JOIN_TIMEOUT


@contextlib.contextmanager
def timeout(seconds):
    """Use ``seconds`` (None: the default) as the join timeout of strategies built inside."""
    previous = getattr(_state, "timeout", None)
    _state.timeout = as_timeout(seconds) if seconds is not None else previous
    try:
        yield
    finally:
        _state.timeout = previous


def peers(cluster_spec: dict, task_type: str, task_id: int) -> list[tuple[str, str]]:
    """``(name, address)`` of every other chief/worker task: those a task waits for to join."""
    found = []
    for job in tfconfig.TRAINING_JOBS:
        addresses = cluster_spec.get(job) or []
        items = addresses.items() if isinstance(addresses, dict) else enumerate(addresses)
        found += [(f"{job} {int(i)}", address) for i, address in items
                  if (job, int(i)) != (task_type, int(task_id))]
    return found


def probe(address: str, seconds: float = PROBE_TIMEOUT) -> str | None:
    """What the network answers a TCP connection to ``address``: None if something listens,
    else the answer in words, with what it usually means."""
    try:
        host, port = parse_address(address)
        with socket.create_connection((host, port), timeout=seconds):
            return None
    except ConnectionRefusedError:
        return ("connection refused: nothing listens there (not started yet, crashed, or a "
                "wrong port)")
    except socket.gaierror as e:
        return f"the host name does not resolve ({e.strerror})"
    except (socket.timeout, TimeoutError):
        return f"timed out after {seconds:g} s (a wrong address, a host down, or a firewall)"
    except OSError as e:
        if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
            return (f"no route to host ({e.strerror}: a wrong address, a host or link down, "
                    f"or a firewall)")
        return f"{e.strerror or e}"
    except ValueError as e:  # an address parse_address refuses
        return str(e)


def missing(tasks: list[tuple[str, str]]) -> list[str]:
    """``"worker 1 at host:port: answer"`` for each task that does not answer."""
    answers = [(name, address, probe(address)) for name, address in tasks]
    return [f"{name} at {address}: {answer}" for name, address, answer in answers if answer]


def notice(me: str, tasks, waited: float, left: float) -> str:
    """The line a task waiting to join prints (see the module docstring)."""
    absent = missing(tasks)
    who = ("; ".join(absent) if absent else
           f"every other task ({len(tasks)}) answers on its port: waiting for them to create "
           "their strategy")
    return (f"[tfdistributed] {me} has waited {waited:.0f} s for the job's tasks to join: {who}. "
            f"Join timeout in {left:.0f} s ({ENV}, join_timeout=).")


# The watching process sleeps until the first notice before it imports anything: a normal join
# ends sooner and kills it, so it costs the task no more than an interpreter's start.
_BOOTSTRAP = ("import json, os, sys, time; spec = json.loads(sys.argv[-1]); "
              "time.sleep(spec['waited']); "
              "os.getppid() == spec['parent'] or sys.exit(0); "
              "from tfdistributed.cluster.join import watch_main; watch_main()")


def watch_main(argv=None) -> None:
    """The watching process, after its first sleep: prints :func:`notice` at its steady
    interval while its parent (the task) lives, until the join timeout (argv: one JSON object,
    see :class:`Watcher`)."""
    spec = json.loads((argv or sys.argv)[-1])
    started, parent = time.monotonic(), spec["parent"]
    while os.getppid() == parent:
        waited = spec["waited"] + time.monotonic() - started
        if waited >= spec["seconds"]:
            if spec.get("end_task"):
                end_task(spec, parent)
            return
        line = notice(spec["me"], [tuple(t) for t in spec["tasks"]], waited,
                      spec["seconds"] - waited)
        if os.getppid() != parent:
            return
        print(line, file=sys.stderr, flush=True)
        time.sleep(spec["interval"])


def gave_up(me: str, tasks, seconds: float) -> str:
    """What :class:`JoinTimeoutError` says when ``me`` gave up waiting for ``tasks``."""
    absent = missing(tasks) or [f"{name} at {address}: it answers on its port, but never "
                                "joined" for name, address in tasks]
    return (f"{me} gave up joining the job after {seconds:g} s (the join timeout); "
            f"missing: {'; '.join(absent)}. Start every task of TF_CONFIG's cluster, each "
            "with its own task index, at the address the cluster gives it (check the address "
            "and port, and that the network lets them through), or give a longer join "
            f"timeout ({ENV}, join_timeout=).")


def end_task(spec: dict, parent: int) -> None:
    """At the join timeout of a TensorFlow that cannot end the join itself (< 2.19): after
    :data:`GRACE` seconds, if ``parent`` still waits, print the error and end it."""
    import signal

    time.sleep(spec.get("grace", GRACE))
    if os.getppid() != parent:
        return
    print(f"tfdistributed.errors.JoinTimeoutError: "
          f"{gave_up(spec['me'], [tuple(t) for t in spec['tasks']], spec['seconds'])} "
          "(This TensorFlow cannot end a join the task waits in: TensorFlow 2.19 and later "
          "raise this error in the task; here the task is ended.)", file=sys.stderr, flush=True)
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(parent, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and os.getppid() == parent:
            time.sleep(0.1)
        if os.getppid() != parent:
            return


class Watcher:
    """While ``me`` waits to join, a process telling which of ``tasks`` it may still wait for.

    A process, not a thread: TensorFlow holds Python's lock (the GIL) for the whole wait
    (``context.ensure_initialized()``), so no thread of the task could speak meanwhile. It
    writes to the task's standard error (inherited), and ends when the join ends, when the task
    is gone, or at the join timeout; with ``end_task`` (a TensorFlow without the register
    barrier), it ends the task :data:`GRACE` seconds after the join timeout if it still waits.
    """

    def __init__(self, me: str, tasks: list[tuple[str, str]], seconds: float, *,
                 first=FIRST_NOTICE, interval=NOTICE_INTERVAL, end_task=False):
        self.me, self.tasks, self.seconds, self.end_task = me, tasks, seconds, end_task
        # Seconds to the first notice, and between two: a short join timeout (a user's 20 s)
        # still gets its notices, a third of the way in and at two thirds.
        self.first, self.interval = min(first, seconds / 3), min(interval, seconds / 3)
        self._process = None

    def __enter__(self):
        if not self.tasks:
            return self
        import subprocess

        spec = dict(me=self.me, tasks=self.tasks, seconds=self.seconds, first=self.first,
                    interval=self.interval, parent=os.getpid(), waited=self.first,
                    end_task=self.end_task, grace=GRACE)
        package_dir = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [package_dir, *filter(None, [os.environ.get("PYTHONPATH")])])}
        try:
            self._process = subprocess.Popen(
                [_python(), "-c", _BOOTSTRAP, json.dumps(spec)], stdin=subprocess.DEVNULL,
                env=env)
        except OSError as e:  # no interpreter to run it: the join still times out, silently
            print(f"[tfdistributed] cannot watch the join ({e})", file=sys.stderr, flush=True)
        return self

    def __exit__(self, *exc):
        if self._process is not None:
            self._process.kill()
            self._process.wait()

    def error(self) -> JoinTimeoutError:
        return JoinTimeoutError(gave_up(self.me, self.tasks, self.seconds))


def _python() -> str:
    """This Python's interpreter (under R, ``sys.executable`` may name R itself)."""
    candidates = [sys.executable, os.path.join(sys.exec_prefix, "bin", "python3"),
                  os.path.join(sys.exec_prefix, "bin", "python")]
    for path in candidates:
        if path and os.path.basename(path).startswith("python") and os.path.exists(path):
            return path
    return "python3"


def has_register_barrier() -> bool:
    """Whether this TensorFlow's coordination service can make registration a barrier
    (``CoordinationServiceConfig.cluster_register_with_barrier``, new in TensorFlow 2.19)."""
    from tensorflow.python.eager import context

    config = context.coordination_config_pb2.CoordinationServiceConfig
    return "cluster_register_with_barrier" in config.DESCRIPTOR.fields_by_name


def with_join_timeout(original):
    """``Context.configure_coordination_service`` with our join timeout when a multi-worker
    strategy's join (:func:`watched_join`) calls it without one (0: TensorFlow's hour),
    registration made a barrier so every task times out. Other callers (parameter-server
    strategies, ``connect_to_cluster``) are left as they are."""
    if getattr(original, "__tfdistributed_original__", None) is not None:
        return original

    def configure_coordination_service(self, service_type, *args, **kwargs):
        ours = (getattr(_state, "joining", False) and not args[2:3]
                and not kwargs.get("cluster_register_timeout_in_ms"))
        if ours:
            kwargs["cluster_register_timeout_in_ms"] = int(join_timeout() * 1000)
        result = original(self, service_type, *args, **kwargs)
        config = self._coordination_service_config
        if ours and config is not None and has_register_barrier():
            # Without the barrier only a task that cannot reach the leader times out; the
            # leader itself would wait for a missing task past any timeout.
            config.cluster_register_with_barrier = True
        return result

    configure_coordination_service.__tfdistributed_original__ = original
    configure_coordination_service.__wrapped__ = original
    return configure_coordination_service


def watched_join(original):
    """``CollectiveAllReduceExtended._initialize_multi_worker`` with a :class:`Watcher` while it
    waits, and TensorFlow's register timeout turned into :class:`JoinTimeoutError`."""
    if getattr(original, "__tfdistributed_original__", None) is not None:
        return original

    def _initialize_multi_worker(self, cluster_resolver):
        from tensorflow.python.eager import context
        from tensorflow.python.framework import errors

        task_type, task_id = cluster_resolver.task_type, cluster_resolver.task_id
        if task_type is None or task_id is None:
            return original(self, cluster_resolver)  # TensorFlow's own error says what is missing
        tasks = peers(cluster_resolver.cluster_spec().as_dict(), task_type, task_id)
        with Watcher(f"{task_type} {task_id}", tasks, join_timeout(),
                     end_task=not has_register_barrier()) as watcher:
            _state.joining = True
            try:
                return original(self, cluster_resolver)
            except errors.DeadlineExceededError:
                config = context.context().coordination_service
                if config is not None and config.cluster_register_timeout_in_ms:
                    watcher.seconds = config.cluster_register_timeout_in_ms / 1000
                raise watcher.error() from None
            finally:
                _state.joining = False

    _initialize_multi_worker.__tfdistributed_original__ = original
    _initialize_multi_worker.__wrapped__ = original
    return _initialize_multi_worker


def patch() -> dict[str, bool]:
    """Put the live TF_CONFIG and the join watch into the loaded TensorFlow (idempotent)."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as mwms
    from tensorflow.python.eager import context

    extended = mwms.CollectiveAllReduceExtended
    extended._initialize_multi_worker = watched_join(extended._initialize_multi_worker)
    context.Context.configure_coordination_service = with_join_timeout(
        context.Context.configure_coordination_service)
    _installed["live_tf_config"] = tfconfig.patch() or _installed.get("live_tf_config", False)
    _installed["join_watch"] = True
    return dict(_installed)


def status() -> dict[str, bool]:
    """What is in place: ``live_tf_config`` (TensorFlow reads the process's TF_CONFIG) and
    ``join_watch``; empty until TensorFlow is imported."""
    return dict(_installed)


def install() -> None:
    """Patch TensorFlow now if it is loaded, else as soon as it is imported
    (:func:`tfdistributed.versions.after_import`), so ``import tfdistributed`` stays cheap and
    works before or after TensorFlow."""
    after_import("tensorflow", patch, ready="distribute")
