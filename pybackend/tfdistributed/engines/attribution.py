"""Which task's end caused a failed attempt: one pure decision that every engine uses.

When one task of a multi-worker job dies, the others end soon after: their collectives fail
("Lost contact with another worker", TensorFlow's "Collective ops is aborted", a peer's socket
closed). The launcher hears of these ends in whatever order its polls, pipes, warm servers,
SLURM's files or Ray's actors deliver them, and on a loaded machine a consequence can arrive
first. Naming it misleads the person reading the job's output, and it feeds the restart policy,
which judges "the same task, the same end" (:mod:`tfdistributed.engines.restarts`).

So each engine records, for every task that ended, an :class:`End`: the task, *when it ended*
(the time of its exit as the operating system or the engine saw it, not when the status
reached the launcher) and *the kind of end* (:func:`kind_of_end`). :func:`first_cause` then
names the cause:

1. An end that is a consequence of a peer's (:data:`PEER_LOST`) is never the cause while
   another task was killed, lost or failed before it or within :data:`CONSEQUENCE_WINDOW`
   seconds after it (the consequence can be stamped first: its process may have been reaped
   first, or the cause's end stamped late on a busy machine).
2. Of the rest, the end that came first by its time; ends whose time is unknown come after
   every timed one.
3. Ends at the same time: a kill or a loss first, then an error, a preemption, a consequence;
   then the engine's task order.

If every end is a consequence (the cause left no end the engine saw, e.g. a link cut), the
first of them is named: it is what the job's output can show.
"""

from __future__ import annotations

import os
import re
import select
import time
from dataclasses import dataclass

from ..watch.channel import PREEMPTED_EXIT_CODE

#: Kinds of end, the cause first when two ends have the same time.
KILLED = "killed"        # ended by a signal from outside (SIGKILL, SIGTERM...)
LOST = "lost"            # gone without an exit status of its own (its actor, node or server)
FAILED = "failed"        # ended with an error of its own (an exception, a crash)
PREEMPTED = "preempted"  # backed up and left to be restarted (exit status 75)
PEER_LOST = "peer lost"  # failed because a peer vanished: a consequence
_RANK = {KILLED: 0, LOST: 0, FAILED: 1, PREEMPTED: 2, PEER_LOST: 3}

#: Seconds after a consequence within which another task's end is taken for its cause (a
#: killed peer's end can be stamped after the end it caused on a busy machine, by up to the
#: launcher's poll and the scheduler's delays; an unrelated later failure would be stopped by
#: the launcher before it came).
CONSEQUENCE_WINDOW = 2.0

# What a task prints when its peer vanished: our own message (training/trainer.py), and
# TensorFlow's where no fit() of ours named it (a custom loop, an R script of its own).
_PEER_LOST = re.compile(
    r"Lost contact with another worker|Collective ops is aborted|"
    r"tasks are unhealthy \(stopped sending heartbeats\)|"
    r"Failed to send RPC to coordination service|"
    r"(UnavailableError|CancelledError|AbortedError).*(Socket closed|Connection reset|"
    r"failed to connect to all addresses|Connection refused|peer|heartbeat)")
_TAIL = 30
_SIGKILL, _SIGTERM = -9, -15


@dataclass(frozen=True)
class End:
    """One task's end: ``task`` (its name, e.g. ``"worker 1"``), ``at`` (when it ended, in
    seconds on a clock shared by the ends compared; None if unknown), ``kind`` (one of the
    kinds above) and ``order`` (the engine's task order, for ties)."""

    task: str
    at: float | None
    kind: str
    order: int = 0


def kind_of_end(returncode: int | None, lines=(), lost: bool = False) -> str:
    """The kind of a task's end, from its exit status (negative: the signal, as
    :class:`subprocess.Popen` reports it) and its last output lines; ``lost`` when the engine
    lost the task (its actor died, it never reported a status).

    A SIGKILL or SIGTERM from outside is a kill whatever the task printed before it. A task
    that says its peer vanished is a consequence, whatever status it ended with (TensorFlow
    may abort the process, SIGABRT, when the coordination service loses a peer)."""
    if lost or returncode is None:
        return LOST
    if returncode in (_SIGKILL, _SIGTERM):
        return KILLED
    if any(_PEER_LOST.search(line) for line in list(lines)[-_TAIL:]):
        return PEER_LOST
    if returncode == PREEMPTED_EXIT_CODE:
        return PREEMPTED
    if returncode < 0:
        return KILLED
    if returncode == 0:  # a server that exits at all: the cluster lost a task
        return LOST
    return FAILED


def first_cause(ends) -> End:
    """The end that caused the others (see the module docstring). ``ends``: at least one."""
    ends = list(ends)
    if not ends:
        raise ValueError("first_cause() needs the end of at least one task")
    causes = [e for e in ends if e.kind != PEER_LOST]
    candidates = [e for e in ends if e.kind != PEER_LOST or not _caused(e, causes)]
    return min(candidates, key=lambda e: (e.at is None, e.at or 0.0, _RANK.get(e.kind, 1),
                                          e.order))


def _caused(consequence: End, causes) -> bool:
    """Whether one of ``causes`` explains ``consequence``: it ended before it, within
    :data:`CONSEQUENCE_WINDOW` after it, or at a time not known."""
    if consequence.at is None:
        return bool(causes)
    return any(c.at is None or c.at <= consequence.at + CONSEQUENCE_WINDOW for c in causes)


def exit_time(pid: int, clock=time.monotonic) -> float | None:
    """Wait for the process ``pid`` to exit and return ``clock()`` at its exit, as the kernel
    tells it: a pidfd (``pidfd_open``, Linux 5.3+) turns readable then, before anyone reaps the
    process, whoever its parent is (a warm server's forked tasks included). That is the time of
    the exit, not of when its status reached the launcher. A process already gone gives the time
    now; None where there is no pidfd (the engine's own record then stands in). Blocks: run it
    in a thread of its own."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # gone already: it exited before anyone looked
        return clock()
    except (AttributeError, OSError):
        return None
    try:
        select.select([fd], [], [])
        return clock()
    finally:
        os.close(fd)

