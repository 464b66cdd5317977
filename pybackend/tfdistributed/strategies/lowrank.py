"""Low-rank gradient compression (PowerSGD): each big gradient matrix crosses the network as
two thin matrices, its rank-``r`` approximation, and what that drops is sent in later steps.

``make_strategy("multi_worker_mirrored", gradient_compression="powersgd")`` (or
``gradient_compression=powersgd(rank=4, warmup_steps=100)``) marks the strategy
(:mod:`tfdistributed.strategies.compression` keeps the mark); the gradient all-reduce of every
train step (the ``uneven_batches`` repair's, through our ``fit()`` and plain ``model.fit()``
alike) then calls :func:`powersgd_all_reduce`. As PyTorch DDP's ``powerSGD_hook``
(Vogels, Karimireddy and Jaggi, NeurIPS 2019), for each gradient matrix ``G`` (a Dense kernel;
a convolution kernel ``(kh, kw, in, out)`` reshaped to ``(kh * kw * in, out)``) of a tensor
big enough (:func:`matrix_shape`):

1. ``M = G + E`` on each worker, ``E`` its error buffer (what earlier steps dropped);
2. ``P = sum over workers of M Q`` in one all-reduce, ``Q`` kept from the last step (warm
   start); ``P`` is orthonormalized (``tf.linalg.qr``) to ``P^``;
3. ``Q = sum over workers of M^T P^`` in a second all-reduce; the update is ``P^ Q^T``, the
   same on every worker (both sums are), and each worker keeps ``E = M - P^ Q^T / R``.

Vectors (biases, normalization scales), matrices that would not shrink by
``min_compression_rate`` and the rows of an embedding (``IndexedSlices``) go whole, in the first
all-reduce, with the example counts that weight uneven batches and the step's loss and metrics.
The first ``warmup_steps`` steps (by the optimizer's ``iterations``) are plain 32-bit
all-reduces.

What it costs: two all-reduces per step instead of one (a round trip of latency: a small model
on a fast network gets slower), a few small matrix products and a QR per matrix, memory for an
error buffer as big as each compressed matrix, and accuracy per step (what the approximation
drops arrives in later steps). A step whose sums are not finite (an fp16 loss scale too high:
the loss-scaling optimizer skips it) leaves the state as it was.

Why each worker's ``G`` enters as ``n_w R g_w / N`` (its share of the global mean, ``N`` the
global batch) and ``E`` apart: ``N`` is known only after the first all-reduce, so ``P``
travels as two sums, ``sum(n_w R g_w Q)`` and ``sum(E_w Q)``, joined once ``N`` is known (the
second is the smaller side of the matrix, so it costs little).

State: per compressed matrix ``Q`` (``cols x rank``) and the error buffer, and the number of
replicas the state was built for; Keras variables saved with the optimizer (:func:`build_state`,
:class:`PowerSGDState`), so a backup (``fit(backup_dir=)``, ``model.save``) holds them. Error
buffers are per replica (synchronized on read, mean): a backup holds their mean, and a restart gives
every worker that mean. The update depends on the buffers only through their sum (every step above
is linear in ``M`` but the orthonormalization, which sees the sum), so the restarted job goes on as
the uninterrupted one would, up to float rounding. A job restarted with another number of replicas
(an elastic resize) starts the state afresh (zero errors, new ``Q``), said in a log line:
the errors were kept per replica of the old job.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import sys

from .._args import as_int
from ..errors import ArgumentTypeError
from .gradients import gradient_values, map_values

# Seeds of the initial Q matrices: the same on every worker without any communication.
_SEED = 0x50535344


@dataclasses.dataclass(frozen=True)
class PowerSGD:
    """PowerSGD's options (:func:`powersgd` checks them); DDP's ``PowerSGDState`` names in
    brackets.

    Attributes:
        rank: the rank of each matrix's approximation (DDP: ``matrix_approximation_rank``).
        warmup_steps: plain 32-bit steps before compression starts (``start_powerSGD_iter``).
        min_compression_rate: a matrix goes low-rank only when its elements are at least this
            many times what its approximation sends (``(rows + cols) x rank``); else whole.
        error_feedback: keep what compression drops and add it to the next step's gradient.
        warm_start: start each step's power iteration from the last step's ``Q``.
    """

    rank: int = 4
    warmup_steps: int = 1000
    min_compression_rate: float = 2.0
    error_feedback: bool = True
    warm_start: bool = True

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def powersgd(rank=4, warmup_steps=1000, min_compression_rate=2.0, error_feedback=True,
             warm_start=True) -> PowerSGD:
    """PowerSGD's options for ``gradient_compression`` (``"powersgd"`` alone: these defaults).

    Args:
        rank: rank of each gradient matrix's approximation (an integer >= 1). DDP's default
            is 1; 4 here: the wide MLP and the bench CNN of bench group 9 kept their held-out
            accuracy at 4, and it still sends tens of times fewer bytes for big matrices.
        warmup_steps: steps of plain 32-bit all-reduce first (an integer >= 0; DDP's 1000).
        min_compression_rate: a number >= 1; a matrix is sent whole unless compression
            divides its elements by at least this (DDP's 2).
        error_feedback: add what compression dropped to the next step's gradient (True).
        warm_start: reuse the last step's ``Q`` (True); False draws a new one every step.

    Raises:
        ArgumentTypeError: a value of the wrong type or range, named.

    Example:
        >>> powersgd(rank=2, warmup_steps=100)  # doctest: +NORMALIZE_WHITESPACE
        PowerSGD(rank=2, warmup_steps=100, min_compression_rate=2.0, error_feedback=True,
                 warm_start=True)
    """
    rate = min_compression_rate
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not rate >= 1:
        raise ArgumentTypeError(
            f"`min_compression_rate` must be a number >= 1, got {rate!r}: a matrix is sent "
            f"low-rank only when that divides its bytes by at least this much (DDP's "
            f"default: 2).")
    for name, flag in (("error_feedback", error_feedback), ("warm_start", warm_start)):
        if not isinstance(flag, bool):
            raise ArgumentTypeError(f"`{name}` must be True or False, got {flag!r}.",
                                    hints={"r": f"E.g. {name} = TRUE."})
    return PowerSGD(rank=as_int(rank, "rank", minimum=1),
                    warmup_steps=as_int(warmup_steps, "warmup_steps", minimum=0),
                    min_compression_rate=float(rate), error_feedback=error_feedback,
                    warm_start=warm_start)


def matrix_shape(shape, options: PowerSGD):
    """``(rows, cols, transposed)`` of the matrix a gradient of ``shape`` is sent as, rows the
    smaller side (the side whose sum travels twice); None for a tensor sent whole: a vector or
    scalar, or one that ``options`` would not shrink by ``min_compression_rate``."""
    dims = [int(d) for d in shape]
    if len(dims) < 2:
        return None
    rows = 1
    for d in dims[:-1]:
        rows *= d
    cols = dims[-1]
    if rows * cols < (rows + cols) * options.rank * options.min_compression_rate:
        return None
    return (min(rows, cols), max(rows, cols), rows > cols)


def wire_elements(shapes, options: PowerSGD) -> int:
    """Elements one replica sends into the all-reduces of a compressed step for gradients of
    ``shapes`` (both of PowerSGD's sums, the whole tensors; not the few counts and logs)."""
    total = 0
    for shape in shapes:
        plan = matrix_shape(shape, options)
        if plan is None:
            total += int(_elements(shape))
            continue
        rows, cols, _ = plan
        total += (rows * (2 if options.error_feedback else 1) + cols) * options.rank
    return total


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class Entry:
    """One compressed matrix's state: its ``q`` (cols x rank) and ``error`` (rows x cols)
    Keras variables (``error`` None without error feedback), and how its gradient is shaped."""

    def __init__(self, index, shape, plan, q, error):
        self.index, self.shape, self.q, self.error = index, tuple(shape), q, error
        self.rows, self.cols, self.transposed = plan

    def as_matrix(self, gradient):
        import tensorflow as tf

        if self.transposed:
            return tf.transpose(tf.reshape(gradient, [self.cols, self.rows]))
        return tf.reshape(gradient, [self.rows, self.cols])

    def as_gradient(self, matrix):
        import tensorflow as tf

        return tf.reshape(tf.transpose(matrix) if self.transposed else matrix, self.shape)

    def initial_q(self, rank, salt):
        import tensorflow as tf

        seed = tf.stack([tf.constant(_SEED + self.index, tf.int64), tf.cast(salt, tf.int64)])
        return tf.random.stateless_normal([self.cols, rank], seed=seed, dtype=self.q.dtype)


class PowerSGDState:
    """The state of one optimizer's PowerSGD: options, an :class:`Entry` per compressed
    variable (by key), and ``replicas``, the number of replicas it was built for (0: new).

    Saved and loaded by Keras as a child of the optimizer it is an attribute of (its own group
    of a weights file, beside the optimizer's variables, not among them): a backup made with
    PowerSGD loads into an optimizer without it (a job resumed on one worker, where ``auto``
    picks no multi-worker strategy) and the other way round, the optimizer's own variables
    whole either way, where one list of both would have made Keras skip them all."""

    def __init__(self, options: PowerSGD, entries: dict, replicas):
        self.options, self.entries, self.replicas = options, entries, replicas

    def variables(self) -> list:
        found = [self.replicas]
        for entry in self.entries.values():
            found += [entry.q] + ([entry.error] if entry.error is not None else [])
        return found

    def save_own_variables(self, store) -> None:
        # Read in cross-replica context: the errors' mean over every replica (a collective
        # every worker takes part in, as it does in every save), the first replica's Q.
        for i, variable in enumerate(self.variables()):
            store[str(i)] = variable.numpy()

    def load_own_variables(self, store) -> None:
        saved = [store[str(i)] for i in range(len(store.keys()))]
        mine = self.variables()
        if not saved:
            return  # a backup made without PowerSGD: its state starts afresh
        if [tuple(v.shape) for v in saved] != [tuple(v.shape) for v in mine]:
            print(f"tfdistributed: the backup's PowerSGD state ({len(saved)} variables) does "
                  f"not fit this model and these options ({len(mine)}): it starts afresh.",
                  file=sys.stderr, flush=True)
            return
        for variable, value in zip(mine, saved):
            variable.assign(value)


def build_state(variables, keys, options: PowerSGD, name="powersgd") -> PowerSGDState:
    """A :class:`PowerSGDState` for the trainable ``variables`` (each known by its ``keys``
    entry), its Keras variables created now, in the current strategy's scope, each matrix's in
    its variable's dtype. Errors are per replica (mean on read: what a backup keeps); ``q`` and
    ``replicas`` are the same on every replica (the first replica's on read: no collective)."""
    import keras

    def state_variable(shape, dtype, aggregation, label):
        return keras.Variable(initializer="zeros", shape=shape, dtype=dtype, trainable=False,
                              synchronization="on_read", aggregation=aggregation,
                              name=f"{name}_{label}")

    entries = {}
    for variable, key in zip(variables, keys):
        plan = matrix_shape(variable.shape, options)
        if plan is None:
            continue
        index = len(entries)
        rows, cols, _ = plan
        dtype = variable.dtype
        q = state_variable((cols, options.rank), dtype, "only_first_replica", f"q_{index}")
        error = (state_variable((rows, cols), dtype, "mean", f"error_{index}")
                 if options.error_feedback else None)
        entries[key] = Entry(index, variable.shape, plan, q, error)
    replicas = state_variable((), "float32", "only_first_replica", "replicas")
    return _saveable_state_class()(options, entries, replicas)


@functools.lru_cache(maxsize=None)
def _saveable_state_class():
    """:class:`PowerSGDState` as a Keras saveable (Keras is imported only when one is made)."""
    from keras.src.saving.keras_saveable import KerasSaveable

    class SaveablePowerSGDState(PowerSGDState, KerasSaveable):
        def _obj_type(self):
            return "Layer"  # its attributes hold no other saveable: walked as a layer's

    return SaveablePowerSGDState


def powersgd_all_reduce(context, grads, entries, state, local, riders, step, options=None):
    """``(means, rider_sums)``: the global means of ``grads`` (this replica's gradients of its
    loss scaled by Keras' 1/R, weighted here by ``local``, its example count) and the sums over
    the replicas of ``riders`` (scalars of the gradients' dtype), in the replica ``context``.

    ``entries[i]`` is ``grads[i]``'s :class:`Entry` in ``state``, or None to send it whole;
    ``step`` the optimizer's step count (compression starts at ``warmup_steps``); ``options``
    the ``CommunicationOptions`` of both all-reduces.
    """
    import tensorflow as tf

    dtype = grads[0].dtype
    replicas = context.num_replicas_in_sync
    count = tf.cast(local, dtype)
    weighted = [map_values(g, lambda v: v * count * tf.cast(replicas, dtype)) for g in grads]
    # Rows of an embedding (IndexedSlices) go whole: Keras' optimizers update only the rows a
    # step touched, which a dense low-rank update would change.
    entries = [None if isinstance(g, tf.IndexedSlices) else e for g, e in zip(grads, entries)]
    head = [count] + [tf.cast(r, dtype) for r in riders]
    reset_if_resized(state, replicas)
    warmup = state.options.warmup_steps
    if not any(e is not None for e in entries):
        return _plain_all_reduce(context, head, weighted, options)
    if not warmup:
        return _low_rank_all_reduce(context, head, weighted, entries, state, step, options)
    started = tf.cast(step, tf.int64) >= warmup
    return _after_warmup(context, started, head, weighted, entries, state, step, options)


def _after_warmup(context, started, head, weighted, entries, state, step, options):
    """The compressed step once ``started``, else the plain one. TensorFlow allows all-reduces
    inside a ``tf.cond`` only in cross-replica context (``merge_call``), so the choice is made
    there and each branch runs the replicas' step anew, as Keras' loss-scaling optimizer does;
    every replica takes the same branch (``step`` is the same everywhere)."""
    import tensorflow as tf

    def replica_step(low_rank, head, weighted, step):
        here = tf.distribute.get_replica_context()
        if low_rank:
            return _low_rank_all_reduce(here, head, weighted, entries, state, step, options)
        return _plain_all_reduce(here, head, weighted, options)

    def choose(strategy, started, head, weighted, step):
        def branch(low_rank):
            def run():
                means, sums = strategy.extended.call_for_each_replica(
                    replica_step, args=(low_rank, head, weighted, step))
                return ([strategy.experimental_local_results(m) for m in means],
                        [strategy.experimental_local_results(s) for s in sums])
            return run

        return tf.cond(strategy.experimental_local_results(started)[0], branch(True),
                       branch(False))

    means, sums = context.merge_call(choose, args=(started, head, weighted, step))
    index = _local_index(context)
    return [m[index] for m in means], [s[index] for s in sums]


def _local_index(context) -> int:
    """This replica's place among its worker's devices (what ``experimental_local_results``
    lists), from its place in the whole job: every worker of a multi-worker job has as many."""
    import tensorflow as tf

    replica = context.replica_id_in_sync_group
    if not isinstance(replica, int):
        replica = int(tf.get_static_value(replica))
    return replica % len(context.strategy.extended.worker_devices)


def _plain_all_reduce(context, head, weighted, options):
    """The warm-up's step: every gradient whole, in one 32-bit all-reduce with ``head``."""
    import tensorflow as tf

    reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, head + weighted, options=options)
    total = reduced[0]
    return ([map_values(s, lambda v: v / total) for s in reduced[len(head):]],
            list(reduced[1:len(head)]))


def _low_rank_all_reduce(context, head, weighted, entries, state, step, options):
    """A compressed step (the module docstring's 1 to 3): ``(means, rider_sums)``."""
    import tensorflow as tf

    opts = state.options
    whole = [i for i, e in enumerate(entries) if e is None]
    low = [(i, e) for i, e in enumerate(entries) if e is not None]
    matrices = [e.as_matrix(weighted[i]) for i, e in low]
    qs = [_current_q(e, opts, step) for _, e in low]
    ps = [tf.matmul(m, q) for m, q in zip(matrices, qs)]
    feedback = [tf.matmul(e.error, q) for (_, e), q in zip(low, qs)] if opts.error_feedback else []
    reduced = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                 head + [weighted[i] for i in whole] + ps + feedback,
                                 options=options)
    total = reduced[0]
    sums = iter(reduced[len(head):])
    means = {i: map_values(next(sums), lambda v: v / total) for i in whole}
    p_sums = [next(sums) / total for _ in low]
    if opts.error_feedback:
        p_sums = [p + next(sums) for p in p_sums]
    p_hats = [tf.linalg.qr(p).q for p in p_sums]
    # Each worker's share of the sum the approximation is of: its weighted gradient plus error.
    shares = [m / total + e.error if opts.error_feedback else m / total
              for m, (_, e) in zip(matrices, low)]
    q_parts = [tf.matmul(m, p, transpose_a=True) for m, p in zip(shares, p_hats)]
    q_sums = context.all_reduce(tf.distribute.ReduceOp.SUM, q_parts, options=options)
    approximations = [tf.matmul(p, q, transpose_b=True) for p, q in zip(p_hats, q_sums)]
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(gradient_values(t)))
                            for t in list(q_sums) + list(means.values())])
    _keep_state(low, shares, approximations, q_sums, finite, opts, context.num_replicas_in_sync)
    for (i, e), approximation in zip(low, approximations):
        means[i] = e.as_gradient(approximation)
    return [means[i] for i in range(len(weighted))], list(reduced[1:len(head)])


def _current_q(entry, options, step):
    """This step's ``Q``: the last step's (warm start), else one drawn for this step (the same
    on every worker: a stateless draw seeded by the matrix and the step)."""
    if options.warm_start:
        return entry.q.value
    return entry.initial_q(options.rank, step)


def _keep_state(low, shares, approximations, q_sums, finite, options, replicas):
    """Each worker's new error (its share minus its 1/R of the approximation) and the new
    ``Q``s, unless the step was not finite (an fp16 loss scale too high: that step is skipped,
    and the state must not keep its infinities)."""
    import tensorflow as tf

    def keep():
        for (_, entry), share, approximation, q in zip(low, shares, approximations, q_sums):
            if options.error_feedback:
                entry.error.assign(share - approximation / tf.cast(replicas, share.dtype))
            if options.warm_start:
                entry.q.assign(q)
        return tf.constant(True)

    tf.cond(finite, keep, lambda: tf.constant(False))


def reset_if_resized(state, replicas) -> None:
    """Start the state afresh (zero errors, the initial ``Q``s) when it was built for another
    number of ``replicas`` (0: never used), saying so for a resized job restored from a backup.
    In a train step, in replica context (each replica checks its own copy: no collective)."""
    import tensorflow as tf

    built_for = tf.convert_to_tensor(state.replicas.value)
    dtype = built_for.dtype

    def reset():
        tf.cond(built_for > 0, lambda: _say_resized(built_for, replicas),
                lambda: tf.constant(False))
        for entry in state.entries.values():
            entry.q.assign(entry.initial_q(state.options.rank, 0))
            if entry.error is not None:
                entry.error.assign(tf.zeros_like(entry.error.value))
        state.replicas.assign(tf.constant(replicas, dtype))
        return tf.constant(True)

    tf.cond(tf.not_equal(built_for, tf.constant(replicas, dtype)), reset,
            lambda: tf.constant(False))


def _say_resized(built_for, replicas):
    import tensorflow as tf

    tf.print("tfdistributed: PowerSGD's state (error feedback, Q matrices) was built for",
             tf.cast(built_for, tf.int32), "replicas and this job has", replicas,
             "(a resized job): it starts afresh.", output_stream=sys.stderr)
    return tf.constant(True)
