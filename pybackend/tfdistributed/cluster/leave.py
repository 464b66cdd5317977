"""The workers of a multi-worker job leave together: none ends while a peer still reads from it.

A collective ends on each worker when that worker has what it needs, not when every worker has.
A worker that finished the job's last collective and exited at once could leave while a slower
peer still read from it: the rest of that collective's transfer, or anything it asks the
coordination service, which the job's leader (worker 0, or the chief) serves in its own
process. The peer then fails on a lost connection at the very end of a job that trained
through ("Lost contact with another worker"; when the leader is gone, TensorFlow also aborts
the peer's collectives: "Failed to send RPC to coordination service").

TensorFlow's coordination service has a barrier for this
(``CoordinationServiceConfig.shutdown_barrier_timeout_in_ms``, off by default), but it holds
only when the service's agent is shut down, and in TensorFlow 2.21 a Python process that exits
never shuts it down (checked 2026-11-27: a 2-worker job with the setting on, worker 0 still
left 10 s before worker 1, which lost the service). So ours: :func:`leave_together`, called at
the normal end of a multi-worker ``fit()`` (:mod:`tfdistributed.training.trainer`), waits at a
barrier of the coordination service until every chief/worker task is there too, or
``TFDISTRIBUTED_LEAVE_TIMEOUT`` seconds (default :data:`DEFAULT_LEAVE_TIMEOUT`; ``0``: no
barrier). A failed peer fails the barrier (TensorFlow reports it once its heartbeats stop), and
the worker goes on: the barrier never turns a finished job into a failed one.
"""

from __future__ import annotations

import itertools
import time

from .environment import process_getenv
from ..errors import ArgumentTypeError

LEAVE_ENV = "TFDISTRIBUTED_LEAVE_TIMEOUT"
#: Seconds a worker that has finished waits for its peers to finish too.
DEFAULT_LEAVE_TIMEOUT = 120.0
_barriers = itertools.count()  # each fit() of a process its own barrier, the same on every task


def leave_timeout() -> float:
    """``TFDISTRIBUTED_LEAVE_TIMEOUT`` in seconds (0: off), else :data:`DEFAULT_LEAVE_TIMEOUT`."""
    value = (process_getenv(LEAVE_ENV) or "").strip()
    if not value:
        return DEFAULT_LEAVE_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < float("inf"):
        raise ArgumentTypeError(f"{LEAVE_ENV} must be a number of seconds >= 0 (0: workers do "
                                f"not wait for each other at the end of training), got "
                                f"{value!r}.")
    return seconds


def leave_together(what: str) -> float | None:
    """Wait until every chief/worker task of this process's multi-worker job has reached the
    end of ``what`` too; the seconds waited, or None when there was nothing to wait for (no
    coordination service: not a multi-worker job; or the barrier is off)."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    seconds = leave_timeout()
    ctx = context.context()
    if not seconds or ctx.coordination_service is None:
        return None
    started = time.monotonic()
    try:
        ctx.wait_at_barrier(f"tfdistributed: the end of {what} {next(_barriers)}",
                            int(seconds * 1000))
    except tf.errors.OpError:
        pass  # a peer failed or is gone: its own end says why; this worker's work is done
    return time.monotonic() - started
