"""The one attempt loop of every launcher engine, and its restart policy (``max_restarts=``).

:func:`run` drives any engine through the :class:`~tfdistributed.launchers.base.Launcher` /
:class:`~tfdistributed.launchers.base.Job` protocol: plan an attempt, start it, wait for it,
collect its results, stop it (always); after a task's failure, decide whether to start again.

A machine lost or a task preempted in the middle of a long job should not cost the whole job:
after a failure the engine stops every task, as it always did, and :func:`run` starts
the whole group again (TensorFlow's collectives cannot take a new member into a running group),
each task told its attempt in ``TFDISTRIBUTED_ATTEMPT``. Resuming where the job was is the
training's part (``fit(backup_dir=...)``). :class:`Restarts` decides: it announces each restart
in the job's output, and ends the job when no restart is left, or at once when a task fails
the same way twice in a row (a bug, which no restart cures).
"""

from __future__ import annotations

import time

from ..errors import LaunchError
from .base import PREEMPTED_EXIT_CODE, Deadline, Job, LaunchResult
from .output import Relay, error_line, how_it_ended


def failure_of(name: str, returncode: int, lines, ended: str | None = None) -> dict:
    """What :class:`Restarts` keeps of a failed task: ``{"task", "ended", "error",
    "preempted"}`` (``ended`` default: from the exit status)."""
    return {"task": name, "ended": ended or how_it_ended(returncode),
            "error": error_line(lines), "preempted": returncode == PREEMPTED_EXIT_CODE}


def run(launcher) -> LaunchResult:
    """Run a job on ``launcher`` (a :class:`~tfdistributed.launchers.base.Launcher`): attempt
    0, 1, ... until one returns its :class:`LaunchResult`, which is given the job's wall time,
    restarts and attempts. A task's failure (a :class:`LaunchError` with a ``failure``) goes to
    the restart policy (:class:`Restarts`), which restarts or raises; any other error (a port
    in use, the timeout, an interrupt) propagates. The timeout counts from the first start.
    """
    restarts = Restarts(launcher.max_restarts, launcher.relay)
    watch = launcher.relay.watch
    with launcher:
        deadline = Deadline(launcher.timeout, time.monotonic())
        while True:
            if watch is not None and restarts.attempt:
                watch.new_attempt(restarts.attempt)
            try:
                result = attempt(launcher.job(restarts.attempt, deadline), deadline)
            except LaunchError as error:
                if error.failure is None:  # not a task's failure: a port in use, the timeout...
                    raise
                restarts.failed(error)
                continue
            result.seconds = deadline.elapsed()
            result.restarts, result.attempts = restarts.attempt, restarts.succeeded()
            if watch is not None:
                launcher.relay.tick()
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


class Restarts:
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

    @property
    def attempt(self) -> int:
        """The 0-based number of the attempt about to start (or running)."""
        return len(self.attempts)

    def failed(self, error: LaunchError) -> None:
        """Record the running attempt's failure, then announce the restart or raise."""
        failure = dict(attempt=self.attempt, **error.failure)
        self.attempts.append(failure)
        if self.max_restarts == 0:
            error.attempts = self.attempts
            raise error
        of = f"attempt {self.attempt} of {self.max_restarts + 1}"
        said = f"{failure['task']} {failure['ended']} on {of}"
        if self._repeated():
            self.relay.send(f"[tfdistributed] {said} with the same error as on the attempt "
                            f"before: a bug, not bad luck; the job is not restarted again")
            raise LaunchError(_repeated_message(self.attempts, error), error.results,
                              failure=error.failure,
                              attempts=self.attempts)
        if self.attempt > self.max_restarts:
            raise LaunchError(_every_attempt_message(self.attempts, error), error.results,
                              failure=error.failure,
                              attempts=self.attempts)
        self.relay.send(f"[tfdistributed] {said} ({failure['error'] or 'no output'}); "
                        f"restarting the job")

    def _repeated(self) -> bool:
        if len(self.attempts) < 2 or self.attempts[-1]["preempted"]:
            return False
        keys = ("task", "ended", "error")
        return all(self.attempts[-1][k] == self.attempts[-2][k] for k in keys)

    def succeeded(self) -> list:
        """Every attempt, the running one (which succeeded) last."""
        self.attempts.append({"attempt": self.attempt, "task": None, "ended": None,
                              "error": None, "preempted": False})
        return self.attempts


def _attempts_list(attempts: list) -> str:
    return "; ".join(f"attempt {a['attempt'] + 1}: {a['task']} {a['ended']} "
                     f"({a['error'] or 'no output'})" for a in attempts)


def _every_attempt_message(attempts: list, last: LaunchError) -> str:
    return (f"The job failed on each of its {len(attempts)} attempts (max_restarts="
            f"{len(attempts) - 1}): {_attempts_list(attempts)}. Fix what the errors say; if the "
            f"failures are bad luck (machines lost, tasks preempted), allow more restarts with "
            f"a larger max_restarts. The last failure: {last}")


def _repeated_message(attempts: list, last: LaunchError) -> str:
    failure = attempts[-1]
    return (f"Task {failure['task']} failed the same way on attempts {len(attempts) - 1} and "
            f"{len(attempts)} ({failure['ended']}: {failure['error'] or 'no output'}): that is "
            f"a bug in the job, not bad luck, so it was not restarted again. Fix the error; "
            f"restarts only help against lost machines and preemptions. Attempts: "
            f"{_attempts_list(attempts)}. The last failure: {last}")
