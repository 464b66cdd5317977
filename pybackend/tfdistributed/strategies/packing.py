"""Gradient packs: the gradient all-reduce split so that it overlaps the backward pass.

A multi-worker train step sends its gradients in packs, the last layers' first, each as soon as
the backward pass has computed it, while the earlier layers' gradients are still being
computed, as PyTorch DDP's buckets (``bucket_cap_mb``) and Horovod's fusion buffer do:

- by default (``bytes_per_pack=None``, "auto"), a gradient of :data:`AUTO_MIN_BYTES` or more
  goes in about :data:`AUTO_PACKS` packs of at least :data:`AUTO_MIN_PACK` bytes each; a
  smaller one stays one all-reduce, so small models are unchanged (their step is bound by
  compute and each collective's latency, not by the bytes);
- ``make_strategy("multi_worker_mirrored", bytes_per_pack=4_000_000)`` (R:
  ``distribute_strategy(bytes_per_pack = 4e6)``) fixes the pack size; ``0`` is one all-reduce
  per step, whatever the size. :func:`set_bytes_per_pack` does the same for TensorFlow's own
  class, whose ``communication_options`` (``bytes_per_pack``) are used as given.

TensorFlow has the mechanism (``CommunicationOptions(bytes_per_pack=)``: a replica's all-reduce
in packs, each its own collective, in reverse order) but two things kept it from Keras'
gradients, and this module fixes both:

1. TensorFlow packs a replica-context all-reduce by the options of that *call*, not the
   strategy's, so a strategy's ``bytes_per_pack`` never reached Keras' gradients (TensorFlow
   2.21). :func:`gradient_options` gives the gradient all-reduce (the ``uneven_batches``
   repair's) its options, for our strategies and TensorFlow's own class alike.
2. TensorFlow's executor needs a second inter-op thread to start a ready collective while it
   still runs the backward pass: with one (what TensorFlow picks by itself in a process that
   may use one core, e.g. ``srun --cpus-per-task=1``) it computes every gradient first and the
   packs only add collectives (bench group 12: no overlap with one thread, 1.04-1.16x the
   examples/s of one all-reduce with two). :func:`threads_for_overlap` (run by
   ``make_strategy``) raises TensorFlow's own choice of 1 to 2; a 1 the user set
   (``TF_NUM_INTEROP_THREADS=1``) is kept, with a warning if packs were asked for.

Packs change in how many collectives the sums travel, not what is summed (with 2 workers each
element is the sum of the same two values either way). With ``gradient_compression`` the
16-bit all-reduce is packed only at a size given explicitly: it cannot overlap, as its fp16
scale is taken from every gradient first (:mod:`tfdistributed.strategies.compression`).
"""

from __future__ import annotations

import copy
import math
import os
import warnings

from .._args import as_int
from .gradients import gradient_values
from ..errors import ArgumentTypeError

THREADS_ENV = "TF_NUM_INTEROP_THREADS"
# Measured in bench group 12 (2026-11-25): gradients of 10.6 and 13 MB in 2 packs gave
# 1.04-1.16x the examples/s of one all-reduce when compute and communication took times of the
# same order (bench/results.md section 12; an earlier run with 2.5 MB packs: 1.01-1.25x). Below
# 8 MB a step is rarely bound by the bytes; at most ~4 packs keep the collectives' own latency
# (paid once per pack, in sequence) small, as DDP's 25 MB buckets do for a ResNet-50's 102 MB.
AUTO_MIN_BYTES = 8_000_000
AUTO_MIN_PACK = 4_000_000
AUTO_PACKS = 4
_ATTRIBUTE = "tfdistributed_bytes_per_pack"


def as_bytes_per_pack(value) -> int | None:
    """``value`` as a whole number of bytes >= 0 (0: one all-reduce), or None ("auto")."""
    return as_int(value, "bytes_per_pack", minimum=0, allow_none=True)


def set_bytes_per_pack(strategy, bytes_per_pack):
    """Fix the pack size of ``strategy``'s gradient all-reduce (a ``MultiWorkerMirroredStrategy``,
    e.g. TensorFlow's own): a number of bytes, 0 for one all-reduce, or None for "auto".
    Returns the strategy. Takes effect for models compiled after it."""
    setattr(strategy, _ATTRIBUTE, as_bytes_per_pack(bytes_per_pack))
    return strategy


def auto_pack_bytes(total_bytes: int) -> int:
    """The "auto" pack size for a gradient of ``total_bytes``: 0 (one all-reduce) below
    :data:`AUTO_MIN_BYTES`, else about :data:`AUTO_PACKS` packs of at least
    :data:`AUTO_MIN_PACK` bytes."""
    if total_bytes < AUTO_MIN_BYTES:
        return 0
    return max(AUTO_MIN_PACK, math.ceil(total_bytes / AUTO_PACKS))


def fixed_pack_bytes(strategy) -> int | None:
    """The pack size set for ``strategy`` (:func:`set_bytes_per_pack`,
    ``make_strategy(bytes_per_pack=)``, or a ``bytes_per_pack`` in TensorFlow's
    ``communication_options``; 0: one all-reduce), or None: "auto"."""
    fixed = getattr(strategy, _ATTRIBUTE, None)
    options = getattr(strategy.extended, "_communication_options", None)
    if fixed is None and options is not None and options.bytes_per_pack:
        fixed = int(options.bytes_per_pack)
    return fixed


def pack_bytes(strategy, grads=(), *, auto: bool = True) -> int:
    """The pack size for ``strategy``'s all-reduce of ``grads``: the one set
    (:func:`fixed_pack_bytes`), else "auto" by the gradients' bytes (0 when not ``auto``)."""
    fixed = fixed_pack_bytes(strategy)
    if fixed is not None:
        return fixed
    if not auto:
        return 0
    values = [gradient_values(g) for g in grads]
    total = sum((v.shape.num_elements() or 0) * v.dtype.size for v in values)
    return auto_pack_bytes(total)


def gradient_options(strategy, grads=(), *, auto: bool = True):
    """The ``CommunicationOptions`` for ``strategy``'s all-reduce of ``grads`` (point 1 of the
    module docstring): the strategy's own options with :func:`pack_bytes` in them, or None for a
    strategy that is not a ``MultiWorkerMirroredStrategy`` (``MirroredStrategy`` keeps options
    of its own choosing, which its reductions do not need)."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    options = getattr(strategy.extended, "_communication_options", None)
    size = pack_bytes(strategy, grads, auto=auto)
    if options is None:
        return tf.distribute.experimental.CommunicationOptions(bytes_per_pack=size)
    # A copy with the size set (Options.merge would keep the strategy's size over a 0).
    options = copy.copy(options)
    options.bytes_per_pack = size
    return options


def communication_options(bytes_per_pack, options=None):
    """``options`` (a ``CommunicationOptions`` or None) with ``bytes_per_pack`` in it; both at
    once is an error unless they agree."""
    import tensorflow as tf

    if bytes_per_pack is None:
        return options
    if options is None:
        return tf.distribute.experimental.CommunicationOptions(bytes_per_pack=bytes_per_pack)
    if options.bytes_per_pack not in (0, bytes_per_pack):
        raise ArgumentTypeError(
            f"`bytes_per_pack={bytes_per_pack}` and `communication_options` (bytes_per_pack="
            f"{options.bytes_per_pack}) disagree: give the pack size once.")
    return options.merge(tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=bytes_per_pack))


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_for_overlap(bytes_per_pack: int | None) -> str | None:
    """Makes sure packs can overlap the backward pass (point 2 of the module docstring), for a
    multi-worker strategy about to be made with ``bytes_per_pack`` (None: "auto"):
    ``"raised"`` (TensorFlow's own choice of 1 inter-op thread raised to 2), ``"kept"`` (the
    user set 1; a warning when ``bytes_per_pack`` asked for packs), or None (TensorFlow has 2
    or more, or there are no packs). Call before TensorFlow initializes."""
    import tensorflow as tf

    if bytes_per_pack == 0:
        return None
    configured = tf.config.threading.get_inter_op_parallelism_threads()
    from_env = os.environ.get(THREADS_ENV, "").strip()
    if configured > 1 or (not configured and from_env not in ("", "0", "1")):
        return None
    if not configured and from_env in ("", "0") and _usable_cpus() > 1:
        return None  # TensorFlow's own choice: a thread per usable core
    if configured == 1 or from_env == "1":
        if bytes_per_pack:
            where = ("tf.config.threading.set_inter_op_parallelism_threads(1)" if configured
                     else f"{THREADS_ENV}=1")
            _warn_no_overlap(f"this process runs TensorFlow with one inter-op thread ({where})")
        return "kept"
    try:
        tf.config.threading.set_inter_op_parallelism_threads(2)
    except RuntimeError:  # TensorFlow already runs: its thread pools are made
        if bytes_per_pack:
            _warn_no_overlap("this process may use one core, and TensorFlow had already "
                             "started with one inter-op thread")
        return "kept"
    return "raised"


def _warn_no_overlap(why: str) -> None:
    warnings.warn(
        f"`bytes_per_pack`: {why}, so TensorFlow computes every gradient before it sends the "
        f"first pack and the packs cannot overlap the backward pass. Give TensorFlow 2 "
        f"inter-op threads ({THREADS_ENV}=2, or tf.config.threading."
        f"set_inter_op_parallelism_threads(2) before anything else runs), or drop "
        f"`bytes_per_pack`.", stacklevel=3)
