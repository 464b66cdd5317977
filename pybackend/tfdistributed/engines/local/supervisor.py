"""The local engine's supervisor: :class:`LocalJob` spawns the tasks a plan lists, streams their
output, polls them, applies the policy for vital and non-vital tasks, and tears every process
down on a failure, the timeout or an interrupt; the diagnosis says which task failed and how,
or which tasks never joined the cluster. :class:`LocalLauncher` is the engine.

A launcher that cannot tear down (killed with SIGKILL, out of memory, its terminal closed)
takes its tasks with it on Linux: each is started with ``PR_SET_PDEATHSIG`` = SIGKILL, so no
worker trains on, or waits forever in a collective, for a job nobody watches.
"""

from __future__ import annotations

import os
import pickle
import queue
import shutil
import signal
import subprocess
import threading
import time


from ...cluster.local import checked_local, local_cluster
from ...cluster.spec import parse_address
from ...errors import LaunchError, LaunchTimeoutError
from ..base import (ATTEMPT_ENV, Deadline, LaunchResult, Launcher, TaskResult,
                    dying_with_this_process)
from ..output import Relay, error_summary, how_it_ended
from ..elastic.probes import probe_hosts
from ..warm import start_task, warm_start_wanted
from .plan import LaunchPlan, TaskPlan, host_of, hosts_of, on_hosts, plan_launch
from ..restarts import failure_of
from ..attribution import End, exit_time, first_cause, kind_of_end
from ...watch.channel import PREEMPTED_EXIT_CODE


class _Process:
    """A started task: its plan, process, output so far, output reader, when its output ended
    (``ended_at``) and when its process exited (``exited_at``, :func:`_stamp_exit`), both
    ``time.monotonic()``."""

    def __init__(self, plan: TaskPlan):
        self.plan = plan
        self.name = plan.name
        self.server = plan.server
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.reader: threading.Thread | None = None
        self.ended_at: float | None = None
        self.exited_at: float | None = None

    def poll(self):
        return self.proc.poll()

    @property
    def end_time(self) -> float | None:
        """When the task ended: the earlier of its exit as the kernel reported it and its
        output's end (each is seen a little after the exit: the earlier is the closer)."""
        seen = [t for t in (self.exited_at, self.ended_at) if t is not None]
        return min(seen) if seen else None

    def end(self, order: int) -> End:
        """Its end, for :func:`~tfdistributed.engines.attribution.first_cause`."""
        return End(self.name, self.end_time, kind_of_end(self.proc.returncode, self.lines), order)


class LocalJob:
    """One attempt on this machine (a :class:`~tfdistributed.engines.base.Job`): starts a
    plan's tasks, streams their output, polls them, and stops them all at the end.

    Policy: the job is done when every task running the target exits 0. A vital task that
    fails (or a server that exits at all) fails the job. In parameter-server training the
    workers are not vital: the coordinator re-runs a lost worker's steps on the others. Whatever
    ends the attempt (success, failure, timeout, interrupt), :meth:`stop` leaves no process.
    """

    def __init__(self, plan: LaunchPlan, relay: Relay, grace: float, warm_start: bool = False):
        self.plan = plan
        self.relay = relay
        self.grace = grace
        self.warm_start = warm_start
        self.tasks = [_Process(t) for t in plan.tasks]
        self.lines: queue.Queue = queue.Queue()
        self._noted: set = set()

    def start(self) -> None:
        for task in self.tasks:
            # A subprocess.Popen, or a process forked by a warm server (engines/warm); either
            # way it gets SIGKILL if this process ends.
            task.proc = start_task(task.plan, self.plan.cwd, self.warm_start, self._note,
                                   dying_with_this_process(task.plan.preexec_fn))
            task.reader = threading.Thread(target=self._read, args=(task,), daemon=True)
            task.reader.start()
            threading.Thread(target=_stamp_exit, args=(task,), daemon=True).start()

    def _note(self, line: str) -> None:
        """A line of the launcher's own, once per attempt."""
        if line not in self._noted:
            self._noted.add(line)
            self.lines.put(line)

    def _read(self, task: _Process) -> None:
        for raw in iter(task.proc.stdout.readline, b""):
            shown = self.relay.keep(task.name, raw.decode(errors="replace").rstrip("\n"),
                                    task.lines)
            if shown is not None:
                self.lines.put(shown)
        task.ended_at = time.monotonic()
        task.proc.stdout.close()

    def drain(self) -> None:
        """Pass on the lines read so far, on the calling thread."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            self.relay.send(line)
        self.relay.tick()

    def wait(self, deadline: Deadline) -> None:
        """Supervise until the job is done, or raise (every task then stopped).

        The deadline counts from the job's first start, so that one timeout covers every
        attempt of a restarted job.
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
                self._let_preempted_peers_leave(failed, vital)
                stopping = time.monotonic()
                self._stop(self.tasks)
                failed += [t for t in _failed_before(vital, stopping) if t not in failed]
                raise _task_failed(_cause(failed, self.tasks), self._task_results())
            if primaries and all(t.poll() == 0 for t in primaries):
                break
            if deadline.passed():
                self._time_out(deadline.timeout)
            time.sleep(0.05)
        self._stop([t for t in self.tasks if t.server])

    def _let_preempted_peers_leave(self, failed, vital) -> None:
        """Before the others are stopped: a preempted task's peers were told too, have backed
        up with it and are leaving with the same status; each gets up to the grace to end on
        its own (stopped at once, a slower one lost its exit: its files, its atexit handlers).
        After any other end, a moment for the lines in flight."""
        if not all(t.poll() == PREEMPTED_EXIT_CODE for t in failed):
            time.sleep(0.2)
            return
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(t.poll() is None for t in vital):
            time.sleep(0.05)

    def _time_out(self, timeout: float):
        running = [t for t in self.tasks if t.poll() is None]
        listening = _listening_ports([t.proc.pid for t in running])
        self._stop(self.tasks)
        message = _timeout_message(self.plan, timeout, listening, [t.name for t in running])
        raise LaunchTimeoutError(message, self._task_results())

    def _stop(self, tasks) -> None:
        """Stop ``tasks`` and pass on everything the tasks printed."""
        _kill_tree([t.proc for t in tasks], self.grace)
        for t in self.tasks:
            if t.reader is not None:
                t.reader.join(timeout=self.grace)
        self.drain()

    def preempt(self) -> None:
        """Tell every task running the target to stop at its next backup (SIGTERM, as a
        preemption notice: ``fit(backup_dir=...)`` backs up there and exits with status 75).
        The servers of a parameter-server job are stopped with the job afterwards."""
        _signal_groups([t.proc for t in self.tasks
                        if not t.server and t.proc is not None and t.poll() is None],
                       signal.SIGTERM)

    def stop(self) -> None:
        """Kill whatever still runs (after an error or an interrupt: nothing is passed on
        then), and remove the attempt's files."""
        _kill_tree([t.proc for t in self.tasks if t.proc is not None and t.poll() is None],
                   self.grace)
        shutil.rmtree(self.plan.workdir, ignore_errors=True)

    def _task_results(self) -> list:
        return [TaskResult(t.plan.task_type, t.plan.task_index,
                           t.proc.returncode if t.proc else None, list(t.lines), None, t.server)
                for t in self.tasks]

    def results(self) -> LaunchResult:
        """Every task's result, a function target's return values read from its files."""
        results = self._task_results()
        for res, task in zip(results, self.plan.tasks):
            if task.result_path and os.path.exists(task.result_path):
                with open(task.result_path, "rb") as f:
                    res.value = pickle.load(f)
        return LaunchResult(cluster=self.plan.cluster.as_dict(), tasks=results,
                            seconds=0.0)


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


def _failure_message(task: _Process) -> str:
    """Which task failed, how, and what it said last."""
    return (f"Task {task.name} {how_it_ended(task.proc.returncode)}; every other task was "
            f"stopped. {error_summary(task.lines)}")


def _stamp_exit(task: _Process) -> None:
    """Set ``task.exited_at`` when its process exits, as the kernel tells it
    (:func:`~tfdistributed.engines.attribution.exit_time`, on the monotonic clock). Where there
    is no pidfd, the task's output's end stands in (``ended_at``)."""
    when = exit_time(task.proc.pid)
    if when is not None:
        task.exited_at = when


def _failed_before(tasks: list[_Process], stopping: float) -> list[_Process]:
    """Those of ``tasks`` that failed on their own before the launcher began to stop the job at
    ``stopping``: they had exited by then, and their exit status (known now that the job is
    stopped) is a failure. A task's status can reach the launcher after another's: a warm
    task's comes from its server (engines/warm), which reaps its children in its own time, so
    the poll that saw a consequence fail may not have seen its cause yet."""
    return [t for t in tasks if t.end_time is not None and t.end_time < stopping
            and t.proc.returncode not in (None, 0)]


def _cause(failed: list[_Process], tasks: list[_Process]) -> _Process:
    """The task whose end caused the others among ``failed``
    (:func:`~tfdistributed.engines.attribution.first_cause`: by the time each exited and the
    kind of its end, a peer's "lost contact" never named while a peer was killed)."""
    ends = {t.name: t for t in failed}
    return ends[first_cause(t.end(tasks.index(t)) for t in failed).task]


def _task_failed(task: _Process, results) -> LaunchError:
    """The error of an attempt in which ``task`` failed (its ``failure`` for the restarts)."""
    return LaunchError(_failure_message(task), results,
                       failure=failure_of(task.name, task.proc.returncode, task.lines))


def _timeout_message(plan: LaunchPlan, timeout: float, listening: set, running: list) -> str:
    """Why the job did not finish: the tasks that never joined the cluster (no server on their
    address: never started here, or started and not listening), and those still running."""
    not_joined = [f"{t.name} ({t.address})" for t in plan.tasks
                  if parse_address(t.address)[1] not in listening]
    never_started = [f"{r} {i} ({plan.cluster.address(r, i)})" for r, i in plan.elsewhere]
    missing = never_started + not_joined
    msg = f"The job did not finish within {timeout:g} s; every task was stopped."
    if missing:
        msg += (f" Tasks that never joined the cluster (no server on their address): "
                f"{', '.join(missing)}. The others wait for every task in TF_CONFIG: "
                f"start the missing task(s), or check their host:port.")
    return msg + f" Still running at the timeout: {', '.join(running) or 'none'}."


class LocalLauncher(Launcher):
    """The local engine (a :class:`~tfdistributed.engines.base.Launcher`), made from a
    :class:`~tfdistributed.engines.options.JobPlan` whose engine is a
    :class:`~tfdistributed.engines.local.engine.Local`, and the job's relay; each attempt
    planned afresh (new ports unless the shape has a ``cluster``) as a :class:`LocalJob`.
    """

    def __init__(self, plan, relay: Relay):
        import psutil  # noqa: F401  (fail here, not half-way through a teardown)

        self.plan, self.relay = plan, relay
        self.warm_start = warm_start_wanted(plan.engine.warm_start)
        # An explicit cluster is checked once, here (its addresses on this machine or the
        # engine's hosts); restarts reuse its addresses.
        self.cluster = (None if plan.scaling.cluster is None
                        else checked_local(plan.scaling.cluster, self.hosts))

    @property
    def hosts(self) -> dict:
        return self.plan.engine.hosts or {}

    def job(self, attempt: int, deadline: Deadline, places=None) -> LocalJob:
        """Attempt ``attempt`` planned: the cluster (new free ports unless one was given; only
        its tasks on ``places``, the hosts an elastic job runs on now), each task's argv,
        environment (with its attempt) and TF_CONFIG."""
        plan, local, scaling = self.plan, self.plan.engine, self.plan.scaling
        cluster = self.cluster or checked_local(local_cluster(scaling.workers, scaling.ps,
                                                              scaling.chief))
        tasks = local.tasks
        if places is not None:
            cluster = on_hosts(cluster, places)
            tasks = None if tasks is None else [t for t in tasks if t in cluster.tasks()]
        env = dict(plan.task_env(), **{ATTEMPT_ENV: str(attempt)})
        planned = plan_launch(plan.target, cluster, tasks, env=env, args=plan.args,
                              python=local.python, rscript=local.rscript, cwd=plan.cwd,
                              prepare_task=local.prepare_task, hosts=self.hosts,
                              gpus_per_task=scaling.gpus_per_task)
        return LocalJob(planned, self.relay, plan.restarts.grace, self.warm_start)

    # -- hosts that come and go (engines/elastic) -------------------------------------------
    def places(self) -> list:
        """The hosts of ``hosts=`` the cluster's tasks run on, chief and worker 0's first
        (none for a cluster on this machine alone: it cannot be lost without the launcher)."""
        return hosts_of(self.plan.scaling.cluster, self.hosts)

    def trainers(self, places) -> int:
        """Tasks holding training replicas on ``places`` (the chief and workers; a
        parameter-server job's workers)."""
        roles = ("worker",) if self.cluster.parameter_server else ("chief", "worker")
        return sum(1 for r, i in self.cluster.tasks()
                   if r in roles and host_of(self.cluster.address(r, i)) in places)

    def probe(self, places, active) -> dict:
        """``{host: None if it answers, else why}``
        (:mod:`tfdistributed.engines.elastic.probes`)."""
        addresses = {host_of(self.cluster.address(r, i)): self.cluster.address(r, i)
                     for r, i in self.cluster.tasks()
                     if host_of(self.cluster.address(r, i)) in set(places) | set(active)}
        return probe_hosts({h: self.hosts[h] for h in places}, addresses,
                           self.plan.engine.python)
