"""The restart policy every launcher engine shares (``max_restarts=``).

A machine lost or a task preempted in the middle of a long job should not cost the whole job:
after a failure the engine stops every task, as it always did, and :func:`restarting` starts
the whole group again (TensorFlow's collectives cannot take a new member into a running group),
each task told its attempt in ``TFDISTRIBUTED_ATTEMPT``. Resuming where the job was is the
training's part (``fit(backup_dir=...)``). :class:`Restarts` decides: it announces each restart
in the job's output, and ends the job when no restart is left, or at once when a task fails
the same way twice in a row (a bug, which no restart cures).
"""

from __future__ import annotations

import time

from ._job import PREEMPTED_EXIT_CODE
from ._output import Relay, error_line, how_it_ended
from .errors import LaunchError


def failure_of(name: str, returncode: int, lines, ended: str | None = None) -> dict:
    """What :class:`Restarts` keeps of a failed task: ``{"task", "ended", "error",
    "preempted"}`` (``ended`` default: from the exit status)."""
    return {"task": name, "ended": ended or how_it_ended(returncode),
            "error": error_line(lines), "preempted": returncode == PREEMPTED_EXIT_CODE}


def restarting(run_attempt, restarts: "Restarts"):
    """``run_attempt(attempt)`` (0, 1, ...) until it returns a :class:`LaunchResult`, which is
    given the restarts and attempts; a task's failure (a :class:`LaunchError` with a
    ``failure``) goes to ``restarts``, which restarts or raises; any other error propagates.
    """
    started = time.monotonic()
    while True:
        try:
            result = run_attempt(restarts.attempt)
        except LaunchError as error:
            if error.failure is None:  # not a task's failure: a port in use, the timeout...
                raise
            restarts.failed(error)
            continue
        result.seconds = time.monotonic() - started
        result.restarts, result.attempts = restarts.attempt, restarts.succeeded()
        return result


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
