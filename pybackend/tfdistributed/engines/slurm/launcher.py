"""The SLURM engine: ``launch(target, workers=N, engine=Slurm(...))``, a job submitted with
``sbatch``.

:class:`SlurmLauncher` writes a batch script (:func:`~.slurm_script.slurm_script`, also for
printing and keeping) into a job directory, submits it with ``sbatch``, says while the job
waits in SLURM's queue, streams each task's output file with its role (``[worker 1] ...``),
waits up to the timeout, which counts the job's running time (:class:`QueueWaits`), and
returns a :class:`~tfdistributed.engines.base.LaunchResult`; on a failed task, the timeout,
the ``queue_timeout`` or an interrupt it cancels the job with ``scancel``. The job's
directory (script, per-task output, exit codes and function results) must be on storage the
submitting machine and the nodes share: the tasks (:mod:`tfdistributed.engines.slurm.task`)
report through it only.

Each attempt is one submitted job (:class:`SlurmJob`, the protocol's
:class:`~tfdistributed.engines.base.Job`); the attempt loop and restarts are
:mod:`tfdistributed.engines.restarts`'s, as on every engine. How a task finds its cluster
inside the job is :mod:`tfdistributed.cluster.from_slurm`, which does not import this module.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time

from ...errors import LaunchError, LaunchTimeoutError
from ...cluster.from_slurm import layout
from ..base import ATTEMPT_ENV, Deadline, LaunchResult, Launcher, TaskResult, target_argv
from ..output import Relay, error_summary, how_it_ended
from ..restarts import failure_of
from ..attribution import End, first_cause, kind_of_end
from .script import slurm_script

# SLURM's states of a job that has not started: queued, or its nodes being readied (booted).
WAITING = ("PENDING", "CONFIGURING")
# A job still waiting after this many seconds is said to wait even if SLURM gave no reason yet.
QUIET_SECONDS = 10.0
# Seconds between two lines about a job that still waits (a new reason is said at once).
QUEUE_REPORT_SECONDS = 60.0
# At most this many seconds between two looks at a waiting job's state (squeue asks slurmctld,
# which a site does not want asked every second for hours; the job's files are looked at
# every poll).
QUEUE_CHECK_SECONDS = 10.0


class _Tail:
    """New complete lines of a file that another machine (a SLURM task) is writing."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self, final=False) -> list:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        return [line.decode(errors="replace") for line in lines]


def _slurm(argv, timeout=30.0) -> subprocess.CompletedProcess:
    tool = shutil.which(argv[0])
    if tool is None:
        raise LaunchError(f"{argv[0]} is not on PATH: launch(..., engine=Slurm()) submits with "
                          f"SLURM's client tools (Debian: slurm-client); run it on a machine that "
                          f"can submit jobs.")
    return subprocess.run([tool, *argv[1:]], capture_output=True, text=True, timeout=timeout)


def _job_state(job_id: str) -> tuple:
    """(state, reason) of a job SLURM still knows, else ("", "")."""
    done = _slurm(["squeue", "-h", "-j", job_id, "-o", "%T|%r"])
    if done.returncode != 0 or not done.stdout.strip():
        return "", ""
    state, _, reason = done.stdout.strip().partition("|")
    return state, reason


def _cancel(job_id: str, wait: float = 30.0) -> None:
    """scancel the job and wait until SLURM has let go of it (so its CPUs are free again)."""
    _slurm(["scancel", job_id])
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _job_state(job_id)[0]:
        time.sleep(0.3)


def _write_job(plan, scaling, slurm, *, jobdir: str, env: dict) -> tuple:
    """The plan's batch script, written into ``jobdir`` for the shape ``scaling`` (the plan's,
    or an elastic attempt's) on the engine ``slurm`` (the plan's, or an elastic attempt's); its
    path, and whether the target is a function (whose call and results go through ``jobdir``
    too). SLURM's ``--time`` is the engine's ``time``; without one, none (the partition's
    default limit)."""
    python, rscript = slurm.python or sys.executable, slurm.rscript
    argv, is_function = target_argv(plan.target, plan.args, python, rscript, jobdir)
    task_env = dict(env)
    if is_function:
        argv = [*argv, os.path.join(jobdir, "result-{task}.pkl")]
        # The function may live in a module importable only from this process's sys.path.
        task_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    script = slurm_script(plan.target, scaling, env=task_env, directory=jobdir,
                          job_name=slurm.job_name, partition=slurm.partition, requeue=False,
                          preemption_notice=None, time_limit=slurm.time,
                          sbatch_args=[f"--chdir={_base(plan)}", *slurm.sbatch_args],
                          srun_args=slurm.srun_args, python=python, rscript=rscript, argv=argv)
    script_path = os.path.join(jobdir, "job.sh")
    with open(script_path, "w") as f:
        f.write(script)
    return script_path, is_function


def _base(plan) -> str:
    """The directory the job is submitted from (``--chdir``), and under which its own directory
    is made: the plan's ``cwd``, else this process's."""
    return os.path.abspath(plan.cwd or os.getcwd())


def _duration(seconds: float) -> str:
    """``"37 s"``, ``"2 min 5 s"``, ``"3 h 4 min"``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds // 3600} h" + (f" {seconds % 3600 // 60} min" if seconds % 3600 >= 60 else "")


class QueueWaits:
    """How long each attempt of a SLURM job waited in SLURM's queue, so that the job's
    ``timeout`` counts its running time, summed over its attempts, as SLURM users mean it.

    The attempt loop's :class:`~tfdistributed.engines.base.Deadline` (one for every attempt,
    shared by every engine) counts from the first submission; a SLURM job takes its attempts'
    waits in the queue off it. One per :class:`SlurmLauncher`, shared by its attempts."""

    def __init__(self):
        self.seconds: list = []

    def add(self, seconds: float) -> None:
        self.seconds.append(seconds)

    def total(self) -> float:
        return sum(self.seconds)

    def running(self, deadline: Deadline) -> float:
        """Seconds the job has run: the deadline's elapsed time less every wait in the queue."""
        return deadline.elapsed() - self.total()


class SlurmJob:
    """One attempt, a submitted job (a :class:`~tfdistributed.engines.base.Job`): says while
    it waits in SLURM's queue, follows each task's output file and exit code (the only
    channels from the nodes), fails on the first failed task, and cancels the job.

    ``jobdir`` holds the written script (``script_path``); it is removed by :meth:`stop` when
    ``remove`` says so, once the job was submitted (a script sbatch refused stays, for the
    error names it).
    """

    def __init__(self, jobdir: str, roles: list, ps_mode: bool, relay: Relay, *,
                 script_path: str, is_function: bool, poll: float, remove: bool,
                 waits: QueueWaits, queue_timeout: float | None):
        self.jobdir = jobdir
        self.roles = roles
        self.ps_mode = ps_mode
        self.relay = relay
        self.script_path, self.is_function = script_path, is_function
        self.poll, self.remove = poll, remove
        self.waits, self.queue_timeout = waits, queue_timeout
        self.submitted = None     # time.monotonic() at sbatch
        self.queued = None        # seconds it waited in the queue, once it left it
        self.shown = None         # (time, reason) of the last line about the wait
        self.names = [f"{r} {i}" for r, i in roles]
        self.tails = [_Tail(os.path.join(jobdir, f"task-{i}.out")) for i in range(len(roles))]
        self.lines = [[] for _ in roles]
        self.job_id = None
        self.state, self.reason = "PENDING", ""
        self.finished = False

    def start(self) -> None:
        """Submit the job with sbatch."""
        done = _slurm(["sbatch", "--parsable", self.script_path])
        if done.returncode != 0:
            raise LaunchError(
                f"sbatch refused the job: {done.stderr.strip() or done.stdout.strip()}. "
                f"The script is {self.script_path}.")
        self.submitted = time.monotonic()
        self.job_id = done.stdout.strip().split(";")[0]
        self.relay.send(f"[launch] submitted SLURM job {self.job_id} ({len(self.roles)} tasks)")

    def preempt(self) -> None:
        """Tell every task to stop at its next backup: SIGTERM to the job's steps, as SLURM's
        own preemption notice (``fit(backup_dir=...)`` backs up there and exits with 75)."""
        if self.job_id is not None:
            _slurm(["scancel", "--signal=TERM", self.job_id])

    def stop(self) -> None:
        """Cancel the job unless it finished; remove its directory (unless kept)."""
        if self.job_id is None:
            return
        if self.queued is None:  # it never left the queue: none of its time was running time
            self.queued = time.monotonic() - self.submitted
            self.waits.add(self.queued)
        if not self.finished:
            _cancel(self.job_id)
        if self.remove:
            shutil.rmtree(self.jobdir, ignore_errors=True)

    def emit(self, final=False) -> None:
        for i, name in enumerate(self.names):
            self.relay.emit(name, self.tails[i].read(final), self.lines[i])

    def codes(self) -> list:
        out = []
        for i in range(len(self.roles)):
            try:
                with open(os.path.join(self.jobdir, f"task-{i}.rc")) as f:
                    out.append(int(f.read().strip()))
            except (FileNotFoundError, ValueError):
                out.append(None)
        return out

    def _results(self, rcs) -> list:
        self.emit(final=True)
        return [TaskResult(r, i, rc, list(out), None, self.ps_mode and r != "chief")
                for (r, i), rc, out in zip(self.roles, rcs, self.lines)]

    def wait(self, deadline: Deadline) -> None:
        """Until the tasks that run the target are done (and the step has ended), or raise.
        While the job waits in SLURM's queue (:meth:`_in_queue`) the deadline is not looked
        at: it counts running time only (:class:`QueueWaits`)."""
        poll = self.poll
        last_state_check = 0.0
        while True:
            self.emit()
            rcs = self.codes()
            if self.queued is None:
                self._in_queue(ran=any(rc is not None for rc in rcs))
            if any(rc not in (None, 0) for rc in rcs):
                self._fail()
            primaries = [rc for (r, _), rc in zip(self.roles, rcs)
                         if not self.ps_mode or r == "chief"]
            if all(rc == 0 for rc in primaries):
                if all(rc is not None for rc in rcs) or not _job_state(self.job_id)[0]:
                    break
            if time.monotonic() - last_state_check > self._check_every():
                last_state_check = time.monotonic()
                self.state, self.reason = _job_state(self.job_id)
                if not self.state and self._ended():
                    break
            if self.queued is not None and self.waits.running(deadline) > deadline.timeout:
                self._time_out(deadline.timeout)
            time.sleep(poll)
        # The step ends once every task has; wait for it so the CPUs are free for the next job.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _job_state(self.job_id)[0]:
            time.sleep(poll)
        self.finished = True

    def _fail(self):
        # SLURM kills the other tasks at once (--kill-on-bad-exit), a peer's collectives fail
        # when one is gone, and their exit codes can land first: name the task whose end
        # caused the others (engines/attribution), by when each task's process exited (each
        # task writes it, slurm/task.py) and the kind of its end.
        time.sleep(0.5)
        rcs = self.codes()
        self.emit(final=True)
        bad = [i for i, rc in enumerate(rcs) if rc not in (None, 0)]
        i = self.names.index(first_cause(
            End(self.names[i], _ended_at(self.jobdir, i), kind_of_end(rcs[i], self.lines[i]), i)
            for i in bad).task)
        _cancel(self.job_id)
        rcs = self.codes()
        raise LaunchError(f"Task {self.names[i]} {how_it_ended(rcs[i])} (SLURM job {self.job_id}, "
                          f"task {i}); the job was cancelled. {error_summary(self.lines[i])}",
                          self._results(rcs),
                          failure=failure_of(self.names[i], rcs[i], self.lines[i]))

    def _ended(self) -> bool:
        """SLURM no longer knows the job: True if every task succeeded, else raise."""
        self.emit(final=True)
        rcs = self.codes()
        if all(rc == 0 for rc in rcs):
            return True
        missing = [self.names[i] for i, rc in enumerate(rcs) if rc is None]
        said = _job_end(self.job_id, self.jobdir)
        # A task that never ran (a node SLURM could not reach, its step killed) is a task's
        # failure too: the restart policy (and an elastic job's probes) decide what follows.
        raise LaunchError(f"SLURM job {self.job_id} ended before task(s) {', '.join(missing)} "
                          f"reported an exit code. {said}", self._results(rcs),
                          failure=failure_of(missing[0], 1, said.splitlines(),
                                             ended="never reported an exit code"))

    def _check_every(self) -> float:
        """Seconds between two looks at the job's state: 1, and up to
        :data:`QUEUE_CHECK_SECONDS` as a wait in the queue grows (the batch script's output
        file, looked at every poll, says sooner that the job started)."""
        if self.queued is not None:
            return 1.0
        return min(QUEUE_CHECK_SECONDS, max(1.0, (time.monotonic() - self.submitted) / 10))

    def _in_queue(self, ran: bool) -> None:
        """While the attempt has not started: leave the queue when SLURM says it runs, or its
        batch script's output file appears, or a task ``ran`` (a short job may end between two
        looks at its state); else say that it waits, and why, or end it at the
        ``queue_timeout``."""
        now = time.monotonic()
        waited = now - self.submitted
        if ran or self.state not in WAITING or os.path.exists(os.path.join(self.jobdir,
                                                                            "job.out")):
            self.queued = waited
            self.waits.add(waited)
            if self.shown is not None:
                self.relay.send(f"[launch] SLURM job {self.job_id} started after "
                                f"{_duration(waited)} in the queue")
            return
        if self.queue_timeout is not None and waited > self.queue_timeout:
            _cancel(self.job_id)
            raise LaunchTimeoutError(
                f"SLURM job {self.job_id} waited {_duration(waited)} in the queue without "
                f"starting ({self._why()}) and was cancelled at its queue_timeout "
                f"({self.queue_timeout:g} s). Free the partition or ask for less (tasks, nodes, "
                f"a shorter time), or allow a longer queue_timeout (None: as long as SLURM "
                f"keeps the job queued).", self._results(self.codes()))
        said = self.reason not in ("", "None") or self.state != "PENDING"
        if self.shown is None:
            if not said and waited < QUIET_SECONDS:
                return  # SLURM has not looked at it yet: it may start at once
            line = "is waiting in the queue"
        elif said and self.reason != self.shown[1] or now - self.shown[0] >= QUEUE_REPORT_SECONDS:
            line = f"is still waiting in the queue after {_duration(waited)}"
        else:
            return
        self.shown = (now, self.reason)
        self.relay.send(f"[launch] SLURM job {self.job_id} {line} ({self._why()})")

    def _why(self) -> str:
        """SLURM's reason for the wait, and what lets the job start when it is the user's."""
        if self.state == "CONFIGURING":
            return "CONFIGURING: its nodes are being readied"
        if self.reason in ("", "None"):
            return "SLURM has not scheduled it yet"
        if self.reason.startswith("JobHeld"):
            return f"{self.reason}: it is held; `scontrol release {self.job_id}` lets it start"
        if self.reason == "PartitionTimeLimit":
            return (f"{self.reason}: its time limit is above the partition's; give the engine a "
                    f"shorter `time`")
        return self.reason

    def _time_out(self, timeout: float):
        rcs = self.codes()
        running = [self.names[i] for i, rc in enumerate(rcs) if rc is None]
        _cancel(self.job_id)
        queued = self.waits.total()
        also = (f" The timeout counts the job's running time; it also waited "
                f"{_duration(queued)} in SLURM's queue." if queued >= 1 else "")
        raise LaunchTimeoutError(f"SLURM job {self.job_id} did not finish within {timeout:g} s "
                                 f"and was cancelled. Still running at the timeout: "
                                 f"{', '.join(running) or 'none'}.{also}",
                                 self._results(self.codes()))

    def results(self) -> LaunchResult:
        """The cluster the tasks ran as, every task's result (a function's return value), the
        SLURM job id (``job_id``) and the seconds the job waited in SLURM's queue, every
        attempt's summed (``queue_seconds``; ``seconds``, the job's wall time, includes
        them)."""
        out = self._results(self.codes())
        try:
            with open(os.path.join(self.jobdir, "cluster.json")) as f:
                cluster = json.load(f)
        except (OSError, ValueError):
            cluster = {}
        if self.is_function:
            for n, res in enumerate(out):
                path = os.path.join(self.jobdir, f"result-{n}.pkl")
                if not res.server and os.path.exists(path):
                    with open(path, "rb") as f:
                        res.value = pickle.load(f)
        result = LaunchResult(cluster=cluster, tasks=out, seconds=0.0)
        result.job_id = self.job_id
        result.queue_seconds = self.waits.total()
        return result


class SlurmLauncher(Launcher):
    """The SLURM engine (a :class:`~tfdistributed.engines.base.Launcher`), made from a
    :class:`~tfdistributed.engines.options.JobPlan` whose engine is a
    :class:`~tfdistributed.engines.slurm.engine.Slurm`, and the job's relay; each attempt a
    job written to a directory of its own, as a :class:`SlurmJob`."""

    place_word = "node"

    def __init__(self, plan, relay: Relay):
        self.plan, self.relay = plan, relay
        self.waits = QueueWaits()

    def _jobdir(self, attempt: int) -> str:
        """A new directory under the base, or the caller's (``attempt-<n>`` in it for a
        restart's)."""
        directory = self.plan.engine.directory
        if directory is None:
            return tempfile.mkdtemp(prefix="tfdistributed-slurm-", dir=_base(self.plan))
        return os.path.join(directory, f"attempt-{attempt}") if attempt else directory

    def job(self, attempt: int, deadline: Deadline, places=None) -> SlurmJob:
        """Attempt ``attempt``: its batch script written (SLURM's ``--time`` the engine's
        ``time``, if any); with ``places`` (an elastic job), one worker on each of the first
        nodes of it. Its wait in the queue goes to the launcher's :class:`QueueWaits`."""
        slurm, scaling = self.plan.engine, self.plan.scaling
        own_dir = slurm.directory is None
        jobdir = self._jobdir(attempt)
        os.makedirs(jobdir, exist_ok=True)
        if places is not None:
            nodes = places[:self.trainers(places)]
            scaling = scaling.resized(len(nodes))
            slurm = slurm.replace(sbatch_args=[*slurm.sbatch_args, f"--nodes={len(nodes)}",
                                               "--ntasks-per-node=1",
                                               f"--nodelist={','.join(nodes)}"])
        env = dict(self.plan.task_env(), **{ATTEMPT_ENV: str(attempt)})
        try:
            script_path, is_function = _write_job(self.plan, scaling, slurm, jobdir=jobdir,
                                                  env=env)
        except BaseException:
            if own_dir:
                shutil.rmtree(jobdir, ignore_errors=True)
            raise
        roles = layout(scaling.workers, scaling.ps, scaling.chief)
        return SlurmJob(jobdir, roles, scaling.parameter_server, self.relay,
                        script_path=script_path, is_function=is_function, poll=slurm.poll,
                        remove=own_dir and not slurm.keep_files, waits=self.waits,
                        queue_timeout=slurm.queue_timeout)

    # -- nodes that come and go (engines/elastic) -------------------------------------------
    def places(self) -> list:
        """The nodes of the job's partition (as ``sinfo`` lists them), when the job is elastic
        (``Scaling(min_workers=)``); else none: SLURM itself picks the nodes of each attempt.
        One worker a node (:meth:`~tfdistributed.engines.base.Launcher.trainers`); more nodes
        are spares, taken when a node is lost."""
        if self.plan.scaling.min_workers is None:
            return []
        return list(_node_states(self.plan.engine.partition))

    def probe(self, places, active) -> dict:
        """``{node: None if SLURM can give it to the job now (idle, or mixed with CPUs free),
        else what SLURM says of it}``."""
        states = _node_states(self.plan.engine.partition)
        return {node: _unusable(states.get(node)) for node in places}


def _node_states(partition) -> dict:
    """``{node: state}`` as ``sinfo`` says (``idle``, ``down*``, ``drained``...), in its order."""
    argv = ["sinfo", "-h", "-N", "-o", "%N|%T", *(["-p", partition] if partition else [])]
    done = _slurm(argv)
    if done.returncode != 0:
        raise LaunchError(f"sinfo failed: {done.stderr.strip()}", [])
    states = {}
    for line in done.stdout.split():
        node, _, state = line.partition("|")
        states.setdefault(node, state)
    return states


def _unusable(state) -> str | None:
    """Why a node in ``state`` cannot take a task now (None: it can). A trailing ``*`` is
    SLURM's "not responding"; allocated or completing nodes may be freed within the grace."""
    if state is None:
        return "SLURM does not list it in the partition"
    if state.endswith("*"):
        return f"SLURM says it is {state.rstrip('*')} and not responding"
    if state in ("idle", "mixed"):
        return None
    return f"SLURM says it is {state}"


def _ended_at(jobdir: str, task: int) -> float | None:
    """When task ``task``'s process exited (wall clock of its node, written by
    :mod:`~tfdistributed.engines.slurm.task` in ``task-N.end``), else when its exit code was
    written; None if neither is there."""
    try:
        with open(os.path.join(jobdir, f"task-{task}.end")) as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        pass
    try:
        return os.path.getmtime(os.path.join(jobdir, f"task-{task}.rc"))
    except OSError:
        return None


def _job_end(job_id: str, jobdir: str) -> str:
    done = _slurm(["scontrol", "show", "job", job_id])
    found = dict(re.findall(r"(JobState|Reason|ExitCode)=(\S+)", done.stdout))
    try:
        with open(os.path.join(jobdir, "job.out"), errors="replace") as f:
            said = f.read().strip()[-1500:]
    except OSError:
        said = ""
    state = ", ".join(f"{k}={v}" for k, v in found.items()) or "unknown (SLURM forgot it)"
    return f"SLURM says: {state}." + (f" The batch script printed:\n{said}" if said else "")

