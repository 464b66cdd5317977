"""The one attempt loop of every launcher engine, and its restart policy
(``Restarts(max_restarts=)``).

:func:`run` reads the plan (timeout, restarts, the job's shape) and drives any engine through
the :class:`~tfdistributed.engines.base.Launcher` / :class:`~tfdistributed.engines.base.Job`
protocol: plan an attempt, start it, wait for it, collect its results, stop it (always); after
a task's failure, decide whether to start again.

A machine lost or a task preempted in the middle of a long job should not cost the whole job:
after a failure the engine stops every task, as it always did, and :func:`run` starts
the whole group again (TensorFlow's collectives cannot take a new member into a running group),
each task told its attempt in ``TFDISTRIBUTED_ATTEMPT``. Resuming where the job was is the
training's part (``fit(backup_dir=...)``). :class:`RestartPolicy` decides: it announces each restart
in the job's output, and ends the job when no restart is left, or at once when a task fails
the same way twice in a row (a bug, which no restart cures).

An engine whose tasks run on places that can be lost (hosts of ``Local(hosts=)``, SLURM or
Ray nodes) is asked first which places answer (:mod:`tfdistributed.engines.elastic`): a job
that lost a host for good shrinks (``Scaling(min_workers=)``) or ends naming the host, and one
whose lost host answers again grows at its next backup. Those restarts change the job's
membership and do not spend ``max_restarts``.
"""

from __future__ import annotations

import time

import contextlib

from ..errors import LaunchError, LaunchTimeoutError
from .base import Deadline, Job, LaunchResult
from ..watch.channel import PREEMPTED_EXIT_CODE
from .elastic.policy import Elastic
from .output import Relay, error_line, how_it_ended, job_relay


def failure_of(name: str, returncode: int, lines, ended: str | None = None) -> dict:
    """What :class:`RestartPolicy` keeps of a failed task: ``{"task", "ended", "error",
    "preempted"}`` (``ended`` default: from the exit status)."""
    return {"task": name, "ended": ended or how_it_ended(returncode),
            "error": error_line(lines), "preempted": returncode == PREEMPTED_EXIT_CODE}


def run(plan) -> LaunchResult:
    """Run the job of ``plan`` (a checked :class:`~tfdistributed.engines.options.JobPlan`) on
    its engine's launcher (:class:`~tfdistributed.engines.base.Launcher`): attempt 0, 1, ...
    until one returns its :class:`LaunchResult`, which is given the job's wall time, restarts,
    attempts and (elastic jobs) sizes. A task's failure (a :class:`LaunchError` with a
    ``failure``) goes to the membership policy (:func:`elastic_of`) and then to the restart
    policy (:class:`RestartPolicy`), which restarts or raises; any other error (a port in use,
    the timeout, an interrupt) propagates. The timeout counts from the first start.
    """
    relay = job_relay(plan.watch)
    launcher = plan.engine.launcher(plan, relay)
    restarts = RestartPolicy(plan.restarts.max_restarts, relay)
    watch = relay.watch
    with launcher:
        deadline = Deadline(plan.timeout, time.monotonic())
        elastic = elastic_of(launcher)
        places = elastic.first() if elastic else None
        while True:
            if watch is not None and restarts.attempt:
                watch.new_attempt(restarts.attempt)
            job = launcher.job(restarts.attempt, deadline, places)
            try:
                with elastic.watching(job) if elastic else contextlib.nullcontext():
                    result = attempt(job, deadline)
            except LaunchTimeoutError as error:
                stalled = watch.last_stall if watch is not None else None
                if not stalled:
                    raise
                raise LaunchTimeoutError(f"{error} The job had stalled: {stalled}",
                                         error.results, attempts=error.attempts) from None
            except LaunchError as error:
                if error.failure is None:  # not a task's failure: a port in use...
                    raise
                places = _next_places(elastic, restarts, error)
                continue
            return _finished(result, deadline, restarts, relay, elastic)


def elastic_of(launcher):
    """The membership policy of a launcher whose tasks run on places that can be lost
    (``launcher.places()``), else None: ``min_workers`` (None: every place is needed) from
    the plan's :class:`~tfdistributed.engines.options.Scaling`, the seconds a place may take
    to answer from its :class:`~tfdistributed.engines.options.Restarts`."""
    if not launcher.places():
        return None
    plan = launcher.plan
    return Elastic(launcher, plan.scaling.min_workers, plan.restarts.lost_after, launcher.relay)


def _next_places(elastic, restarts, error: LaunchError):
    """After a failed attempt: the places of the next one (None: not elastic), the failure
    recorded as a membership change or as a restart (which may raise)."""
    if elastic is None:
        restarts.failed(error)
        return None
    if elastic.planned(error.failure):
        restarts.resized(error, elastic.after_planned_stop(restarts.attempt))
        return elastic.placed()
    if restarts.left() or elastic.elastic:
        try:
            said = elastic.after_failure(restarts.attempt)
        except LaunchError as lost:
            restarts.ended(error, lost)
        if said:
            restarts.resized(error, said)
            return elastic.placed()
    restarts.failed(error)
    return elastic.placed()


def _finished(result, deadline, restarts, relay, elastic) -> LaunchResult:
    result.seconds = deadline.elapsed()
    result.restarts, result.attempts = restarts.attempt, restarts.succeeded()
    result.sizes = [c.as_dict() for c in elastic.members.changes] if elastic else []
    watch = relay.watch
    if watch is not None:
        relay.tick()
        result.history, result.epochs = watch.history(), watch.epochs()
        result.workers = watch.workers(result.restarts)
        result.stragglers = sorted(watch.stragglers)
    return result


def attempt(job: Job, deadline: Deadline) -> LaunchResult:
    """One attempt: started, waited for, its results collected, and stopped whatever happens."""
    try:
        job.start()
        job.wait(deadline)
        return job.results()
    finally:
        job.stop()


class RestartPolicy:
    """Up to ``max_restarts`` restarts of the whole job, each announced in the job's output.

    Every failure is kept (``attempts``). The job ends with a :class:`LaunchError` naming them
    all once no restart is left, or at once when a task fails the same way (same task, same end,
    same error line) on two attempts in a row: that is a bug, and restarting would only repeat
    it. A preemption is never taken for a bug.
    """

    def __init__(self, max_restarts: int, relay: Relay):
        self.max_restarts = max_restarts
        self.relay = relay
        self.attempts: list[dict] = []
        self.counted = 0   # restarts that spent max_restarts (membership changes do not)

    @property
    def attempt(self) -> int:
        """The 0-based number of the attempt about to start (or running)."""
        return len(self.attempts)

    def left(self) -> bool:
        """Whether a counted restart is left."""
        return self.counted < self.max_restarts

    def _record(self, error: LaunchError, **extra) -> dict:
        watch = self.relay.watch
        point = watch.failure_point(error.failure["task"]) if watch is not None else {}
        failure = dict(attempt=self.attempt, **error.failure, **point, **extra)
        self.attempts.append(failure)
        return failure

    def resized(self, error: LaunchError, said: str) -> None:
        """The running attempt ended because the job's membership changes (a place lost, or
        back): announced, restarted without spending ``max_restarts``."""
        failure = self._record(error, resized=True)
        how = ("stopped at its backup" if failure["preempted"] else
               f"{failure['task']} {failure['ended']} ({failure['error'] or 'no output'})")
        self.relay.send(f"[tfdistributed] attempt {self.attempt}: {how}; {said}; restarting the "
                        f"job (a change of hosts: not counted in max_restarts)")

    def ended(self, error: LaunchError, lost: LaunchError) -> None:
        """The job cannot go on: its places are lost (``lost`` says which and why)."""
        self._record(error)
        self.relay.send(f"[tfdistributed] {error.failure['task']} {error.failure['ended']}; "
                        f"{lost}")
        raise type(lost)(f"{lost} The failure that ended the last attempt: {error}",
                         error.results, failure=error.failure, attempts=self.attempts)

    def failed(self, error: LaunchError) -> None:
        """Record the running attempt's failure, then announce the restart or raise."""
        failure = self._record(error)
        self.counted += 1
        if self.max_restarts == 0:
            error.attempts = self.attempts
            raise error
        resizes = sum(1 for a in self.attempts if a.get("resized"))
        of = f"attempt {self.attempt} of {self.max_restarts + 1 + resizes}"
        said = f"{failure['task']} {failure['ended']} on {of}"
        bug = self._bug()
        if bug:
            self.relay.send(f"[tfdistributed] {said}, the same way as on the attempt before, "
                            f"{bug}: a bug, not bad luck; the job is not restarted again")
            raise LaunchError(_repeated_message(self.attempts, error, bug), error.results,
                              failure=error.failure,
                              attempts=self.attempts)
        if self.counted > self.max_restarts:
            raise LaunchError(_every_attempt_message(self.attempts, error), error.results,
                              failure=error.failure,
                              attempts=self.attempts)
        self.relay.send(f"[tfdistributed] {said} ({failure['error'] or 'no output'}); "
                        f"{_progress(self.attempts)}restarting the job")

    def _bug(self) -> str | None:
        """Why the last two failures are one bug (None if they may be bad luck): the same task
        failed the same way (same end, same error line) and the job made no progress between
        them (:func:`_no_progress`). A job that advanced is restarted, whatever its failures
        look like: a flaky node or an OOM-prone host fails the same way every time."""
        if len(self.attempts) < 2 or self.attempts[-1]["preempted"]:
            return None
        last, before = self.attempts[-1], self.attempts[-2]
        if before.get("resized"):  # another membership: another job
            return None
        if any(last[k] != before[k] for k in ("task", "ended", "error")):
            return None
        return _no_progress(before, last)

    def succeeded(self) -> list:
        """Every attempt, the running one (which succeeded) last."""
        self.attempts.append({"attempt": self.attempt, "task": None, "ended": None,
                              "error": None, "preempted": False})
        return self.attempts


def _no_progress(before: dict, last: dict) -> str | None:
    """How two failures show that nothing moved between them, or None if something did (or
    it cannot be told: a job whose tasks report no training is only counted, as torchrun
    counts restarts).

    - The failing task died before it began training, both times: it cannot start.
    - With backups (``fit(backup_dir=...)``): the backup did not advance between them.
    - Without: training failed at the same step both times (each attempt starts over).
    """
    if "started" not in before or "started" not in last:  # the engine watched no training
        return "(whether the job progressed in between was not watched)"
    if not last["started"] and not before["started"]:
        return "before training began both times (it cannot start)"
    if last["backup"] is not None or before["backup"] is not None:
        if last["backup"] == before["backup"]:
            where = (f"at step {before['at']} and at step {last['at']}, "
                     if last["at"] is not None and before["at"] is not None else "")
            return (f"{where}with no progress in between (the backup stayed at step "
                    f"{last['backup']})")
        return None
    if last["at"] is not None and last["at"] == before["at"]:
        return f"at the same step both times (step {last['at']}), with no backup in between"
    return None


def _progress(attempts: list) -> str:
    """What the job achieved since the failure before (for a restart's announcement)."""
    last = attempts[-1]
    if len(attempts) < 2 or "started" not in last:
        return ""
    before = attempts[-2]
    if last["backup"] is not None:
        since = last["backup"] - (before.get("backup") or 0)
        return (f"the backup advanced {since} steps since the last failure (to step "
                f"{last['backup']}); ")
    if last["at"] is not None and before["at"] is not None:
        return f"it reached step {last['at']} (step {before['at']} at the last failure); "
    return ""


def _attempts_list(attempts: list) -> str:
    return "; ".join(f"attempt {a['attempt'] + 1}: {a['task']} {a['ended']} "
                     f"({a['error'] or 'no output'})" for a in attempts)


def _every_attempt_message(attempts: list, last: LaunchError) -> str:
    counted = sum(1 for a in attempts if not a.get("resized"))
    return (f"The job failed on each of its {len(attempts)} attempts (max_restarts="
            f"{counted - 1}): {_attempts_list(attempts)}. Fix what the errors say; if the "
            f"failures are bad luck (machines lost, tasks preempted), allow more restarts with "
            f"a larger max_restarts. The last failure: {last}")


def _repeated_message(attempts: list, last: LaunchError, why: str) -> str:
    failure = attempts[-1]
    return (f"Task {failure['task']} failed the same way on attempts {len(attempts) - 1} and "
            f"{len(attempts)} ({failure['ended']}: {failure['error'] or 'no output'}), {why}: "
            f"that is a bug in the job, not bad luck, so it was not restarted again. Fix the "
            f"error; restarts only help against lost machines and preemptions. Attempts: "
            f"{_attempts_list(attempts)}. The last failure: {last}")
