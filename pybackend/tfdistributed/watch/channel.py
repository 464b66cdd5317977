"""The task-to-launcher channel: one JSON record per line on the task's standard output.

Why standard output: every engine already carries each task's lines to the launcher (the local
engine's pipes, the SLURM job's output files on shared storage, the Ray actors' streams), and
every line passes through one place there (:class:`~tfdistributed.engines.output.Relay`), so
a record needs no transport of its own, no port and no shared file system. A record is a line
``@tfdistributed {...}``; the relay takes it out of the task's output before anyone reads it
(:func:`parse` finds it even after a partial line another thread printed first).

The launcher switches the channel on in every task (:data:`ENV`); a task started by hand prints
no records (its watchdog speaks for itself, :mod:`tfdistributed.watch.recorder`).
"""

from __future__ import annotations

import json
import os
import sys
import threading

ENV = "TFDISTRIBUTED_TELEMETRY"
MARK = "@tfdistributed "

# What a task's exit status tells its launcher, besides success and failure.
# A task that stopped because it was told to (SIGTERM: a spot VM reclaimed, a SLURM or
# Kubernetes eviction), not because it failed: "try again later" (BSD's EX_TEMPFAIL).
# launch(restarts=Restarts(max_restarts=...)) restarts such a job without taking it for a bug.
PREEMPTED_EXIT_CODE = 75
_lock = threading.Lock()


def enabled() -> bool:
    """Whether this task's launcher reads the channel."""
    return os.environ.get(ENV) == "1"


def send(kind: str, **fields) -> None:
    """Write one record (``{"kind": kind, **fields}``) as one line, in one write, flushed."""
    line = MARK + json.dumps({"kind": kind, **fields}, separators=(",", ":"), default=float)
    with _lock:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (ValueError, OSError):  # stdout closed at interpreter exit: nothing to tell
            pass


def parse(line: str) -> tuple[str | None, dict | None]:
    """Split a task's output line: the text printed before a record (None if none), and the
    record (None if the line holds none). A line that only looks like one is text."""
    at = line.find(MARK)
    if at < 0:
        return line, None
    try:
        record = json.loads(line[at + len(MARK):])
    except ValueError:
        return line, None
    if not isinstance(record, dict) or "kind" not in record:
        return line, None
    before = line[:at]
    return (before if before.strip() else None), record
