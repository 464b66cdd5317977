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
the normal end of every multi-worker fit (tfdistributed's ``fit()``,
:mod:`tfdistributed.training.trainer`; Keras' own ``model.fit``, which keras3's R ``fit()``
calls too, :mod:`tfdistributed.training.routing`), waits at a barrier of the coordination
service until every chief/worker task is there too, or ``TFDISTRIBUTED_LEAVE_TIMEOUT`` seconds
(default :data:`DEFAULT_LEAVE_TIMEOUT`; ``0``: no barrier), and says in one line how it left.
A failed peer fails the barrier (TensorFlow reports it once its heartbeats stop), and the
worker goes on: the barrier never turns a finished job into a failed one.

The barrier is named after what every worker of a lock-step job agrees on when its training
ends: the optimizer's step and the bytes of the trained weights (:func:`end_of_training`),
which the collectives keep equal on every worker. A count of the process's own fits would not
do: a worker whose script called ``fit()`` once more (a call that failed before training, a
model of its own) would wait at another barrier than its peers until the timeout.
"""

from __future__ import annotations

import hashlib
import time

from .environment import process_getenv
from ..errors import ArgumentTypeError

LEAVE_ENV = "TFDISTRIBUTED_LEAVE_TIMEOUT"
#: Seconds a worker that has finished waits for its peers to finish too.
DEFAULT_LEAVE_TIMEOUT = 120.0
# Bytes of each trained weight that name the barrier: enough to tell two trainings apart, a
# read of a few KiB whatever the model's size.
_WEIGHT_BYTES = 4096


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


def end_of_training(model) -> str:
    """What every worker of a lock-step job agrees on once ``model``'s training has ended: its
    optimizer's step and a digest of the first bytes of each trainable weight (equal bit for
    bit on every worker; two trainings that end at the same step end with other weights)."""
    import tensorflow as tf

    digest = hashlib.sha256()
    for weight in model.trainable_weights:
        flat = tf.reshape(tf.convert_to_tensor(weight), [-1])
        digest.update(flat[:_WEIGHT_BYTES // max(flat.dtype.size, 1)].numpy().tobytes())
    optimizer = getattr(model, "optimizer", None)
    step = None if optimizer is None else int(optimizer.iterations.numpy())
    return f"step {step}, weights {digest.hexdigest()[:16]}"


def leave_together(what: str, agreed: str) -> float | None:
    """Wait until every chief/worker task of this process's multi-worker job has reached the
    end of ``what`` too, at the barrier named ``agreed`` (what every worker agrees on, e.g.
    :func:`end_of_training`), and say how this worker left; the seconds waited, or None when
    there was nothing to wait for (no coordination service: not a multi-worker job; or the
    barrier is off)."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    seconds = leave_timeout()
    ctx = context.context()
    if not seconds or ctx.coordination_service is None:
        return None
    started = time.monotonic()
    try:
        ctx.wait_at_barrier(f"tfdistributed: the end of training, {agreed}", int(seconds * 1000))
    except tf.errors.OpError as e:
        # A peer failed or is gone: its own end says why; this worker's work is done.
        print(f"tfdistributed: {what} ended, but not every worker reached the end-of-training "
              f"barrier within {seconds:g} s ({type(e).__name__}); this worker leaves anyway.",
              flush=True)
        return time.monotonic() - started
    waited = time.monotonic() - started
    print(f"tfdistributed: {what} ended; every worker reached the end-of-training barrier "
          f"(waited {waited:.2f} s), leaving together.", flush=True)
    return waited
