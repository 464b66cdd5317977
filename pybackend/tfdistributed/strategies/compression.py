"""Gradient compression: the gradients cross the network between workers in 16 bits, or
low-rank (PowerSGD, :mod:`tfdistributed.strategies.lowrank`).

``make_strategy("multi_worker_mirrored", gradient_compression="fp16")`` (or ``"bf16"``) marks
the strategy; the one gradient all-reduce of every train step (the ``uneven_batches`` repair's,
through our ``fit()`` and plain ``model.fit()`` alike) reads the mark here
(:func:`gradient_compression`) and then sends each gradient in 16 bits, summing it over the
workers in 16 bits, and casts the sum back to the gradient's own dtype before the optimizer
applies it: the weights, the optimizer's state and the update stay in the model's precision.
A strategy made by TensorFlow's own class is marked with :func:`set_gradient_compression`.

How it travels, as PyTorch's fp16/bf16 communication hooks and Horovod's
``Compression.fp16`` do, with an overflow guard of our own:

1. a small 32-bit all-reduce first: each replica's example count, a bound on its gradients'
   magnitude, and the step's loss and metrics (which stay exact, in 32 bits);
2. each replica scales its gradients by its share of the global batch (so the sum *is* the
   global mean: divided by the world size before the sum, never summed up to R times a
   gradient), and for fp16 by a power of two that brings the largest sum that can occur
   near 2**14 (fp16 ends at 65504): no partial sum of the ring can overflow, and small
   gradients keep as many of fp16's 11 significant bits as the step's largest one allows;
3. the 16-bit all-reduce of the gradients, cast back and unscaled (a power of two: exact).

What it costs: two all-reduces per step instead of one (a round trip of latency, which pays
only where the gradient's bytes dominate, i.e. big models on slow links), and precision:
every gradient element is rounded to 11 significant bits (fp16; values below 2**-24 of the
step's largest gradient flush to zero) or 8 (bf16, float32's range, no scaling needed), and
the sum over the workers is rounded at every hop. The stated tolerances of the tests and the
measured loss are in README's "Performance".

Gradients that are already 16-bit, gradient accumulation (``gradient_accumulation_steps``)
and a single replica are all-reduced as without compression.

``gradient_compression="powersgd"`` (or a :func:`~tfdistributed.strategies.lowrank.powersgd`
options object) marks the strategy the same way; its options are kept beside the mark
(:func:`powersgd_options`) and read when the optimizer is built.
"""

from __future__ import annotations

import warnings

from ..errors import StrategyError
from .gradients import gradient_values, map_values
from .lowrank import PowerSGD, powersgd

COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "off": "none",
            "power_sgd": "powersgd", "power-sgd": "powersgd"}
_ATTRIBUTE = "tfdistributed_gradient_compression"
_OPTIONS = "tfdistributed_powersgd"
# The largest sum an fp16 all-reduce may reach, a power of two below fp16's 65504 with room for
# the rounding of the ring's partial sums.
_FP16_CEILING = 2.0 ** 14


def canonical_compression(compression) -> str | None:
    """``"fp16"``, ``"bf16"``, ``"powersgd"`` (the name, or a :class:`PowerSGD`) or None (no
    compression) for ``compression``; a :class:`StrategyError` naming the argument and the
    valid values otherwise."""
    if compression is None or compression is False:
        return None
    if isinstance(compression, PowerSGD):
        return "powersgd"
    key = compression.lower().strip() if isinstance(compression, str) else None
    key = _ALIASES.get(key, key)
    if key not in COMPRESSIONS:
        raise StrategyError(
            f"`gradient_compression` must be one of {', '.join(map(repr, COMPRESSIONS))} (or "
            f"None), got {compression!r}: gradients travel in 16-bit floats, fp16 (IEEE half, "
            f"11 significant bits) or bf16 (bfloat16, 8 bits, float32's range), or low-rank "
            f"(powersgd, or its options: powersgd(rank=4, ...)).",
            hints={"python": "E.g. make_strategy('multi_worker_mirrored', "
                             "gradient_compression='fp16').",
                   "r": 'E.g. distribute_strategy("multi_worker_mirrored", '
                        'gradient_compression = "fp16").'})
    return None if key == "none" else key


def set_gradient_compression(strategy, compression):
    """Mark ``strategy`` (a ``MultiWorkerMirroredStrategy``, e.g. TensorFlow's own) so that its
    train steps all-reduce the gradients in 16 bits (``"fp16"``, ``"bf16"``), low-rank
    (``"powersgd"`` or a :func:`~tfdistributed.strategies.lowrank.powersgd` options object)
    or as they are (None). Returns the strategy. Takes effect for models compiled after it
    (PowerSGD's state is made with the optimizer's)."""
    kind = canonical_compression(compression)
    if kind is not None:
        check_compressible(strategy)
    setattr(strategy, _ATTRIBUTE, kind)
    options = None
    if kind == "powersgd":
        options = compression if isinstance(compression, PowerSGD) else powersgd()
    setattr(strategy, _OPTIONS, options)
    return strategy


def gradient_compression(strategy) -> str | None:
    """The gradient compression ``strategy`` was marked with: ``"fp16"``, ``"bf16"``,
    ``"powersgd"`` or None."""
    return getattr(strategy, _ATTRIBUTE, None)


def powersgd_options(strategy) -> PowerSGD | None:
    """The PowerSGD options ``strategy`` was marked with, or None (not marked for PowerSGD)."""
    return getattr(strategy, _OPTIONS, None)


def check_compressible(strategy) -> None:
    """A :class:`StrategyError` unless ``strategy`` all-reduces gradients across workers."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        raise not_compressible(type(strategy).__name__)


def not_compressible(what: str) -> StrategyError:
    """The error of asking ``gradient_compression`` of ``what``, a strategy (kind) that has no
    all-reduce across workers."""
    return StrategyError(
        f"`gradient_compression` applies to 'multi_worker_mirrored', whose gradients cross the "
        f"network between workers in an all-reduce; {what} has no such all-reduce (within one "
        f"process compression would save no network and only lose precision). Drop "
        f"`gradient_compression`, or use 'auto' (which ignores it, with a warning, when it "
        f"picks a local strategy).")


def ignored_for_local(kind: str, compression) -> None:
    """The warning of ``auto`` picking ``kind`` (a strategy without a cross-worker all-reduce)
    while ``gradient_compression`` was asked for: ignored, as Horovod's is on one rank."""
    warnings.warn(
        f"`gradient_compression={compression!r}` is ignored: 'auto' chose {kind!r}, which has "
        f"no all-reduce across workers (compression applies to 'multi_worker_mirrored').",
        stacklevel=3)


def compressed_all_reduce(context, grads, local, riders, kind, options=None):
    """``(means, rider_sums)``: the global means of ``grads`` (this replica's gradients of its
    loss scaled by Keras' 1/R, each weighted here by ``local``, its example count, a float32
    scalar) all-reduced in ``kind`` (``"fp16"``/``"bf16"``), and the sums over the replicas of
    ``riders`` (float32 scalars), which travel exact in the first, 32-bit, all-reduce;
    ``options`` (``CommunicationOptions``) for the gradients' all-reduce."""
    import tensorflow as tf

    replicas = float(context.num_replicas_in_sync)
    weighted = [map_values(g, lambda v: v * tf.cast(local * replicas, v.dtype)) for g in grads]
    peak = tf.reduce_max(tf.stack([tf.cast(tf.reduce_max(tf.abs(gradient_values(g))), tf.float32)
                                   for g in weighted]))
    head = context.all_reduce(tf.distribute.ReduceOp.SUM, [local, peak] + list(riders))
    total = head[0]
    # |sum of the ring's addends g * n_r * R / N| <= sum_r peak_r / N at every partial sum.
    scale = _fp16_scale(head[1] / total) if kind == "fp16" else tf.constant(1.0)
    wire_dtype = tf.float16 if kind == "fp16" else tf.bfloat16
    factor = scale / total
    wire = [map_values(g, lambda v: tf.cast(v * tf.cast(factor, v.dtype), wire_dtype))
            for g in weighted]
    summed = context.all_reduce(tf.distribute.ReduceOp.SUM, wire, options=options)
    means = [map_values(s, lambda v, d=g.dtype: tf.cast(v, d) / tf.cast(scale, d))
             for s, g in zip(summed, grads)]
    return means, head[2:]


def _fp16_scale(bound):
    """The power of two that brings ``bound`` (a float32 scalar, the largest magnitude the sum
    can reach) near ``_FP16_CEILING``; 1 where there is nothing to scale (all zero, or a
    non-finite gradient, which then stays non-finite as in 32 bits)."""
    import tensorflow as tf

    usable = tf.logical_and(bound > 0.0, tf.math.is_finite(bound))
    safe = tf.where(usable, bound, 1.0)
    exponent = tf.clip_by_value(tf.floor(tf.math.log(_FP16_CEILING / safe) / tf.math.log(2.0)),
                                -100.0, 100.0)
    return tf.where(usable, tf.pow(2.0, exponent), 1.0)
