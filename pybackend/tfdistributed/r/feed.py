"""Data bigger than memory, from R code: batches produced by an R function, fed to training.

(Sharded files, the other way to train on data bigger than memory, are in
:mod:`tfdistributed.data.shards`.)

**Why R generators need their own path.** ``tf.data.Dataset.from_generator(<R function>)``
given to Keras ``fit`` hangs, even under the default strategy: TensorFlow calls the generator
on one of its own threads, reticulate can run R code only on R's main thread, and that thread
is blocked inside ``fit`` waiting for the batch. No amount of prefetching on TensorFlow's side
fixes that, because every R call still has to wait for a main thread that never comes back.

**The design here (no deadlock by construction).** Training runs on a Python thread
(:class:`TrainingJob`); R's main thread stays free and *serves* the generator: it calls the R
function, hands the batch to :meth:`BatchFeed.put`, and waits for space with
:meth:`BatchFeed.free_slots`, which returns at least every few milliseconds. The feed is a
bounded buffer (``capacity`` batches): R produces the next batches while TensorFlow trains on
the current ones, and R never runs more than ``capacity`` batches ahead. The buffer is a
TensorFlow ``FIFOQueue`` that the dataset dequeues inside its own graph, so no TensorFlow thread
ever needs R, Python or the GIL to get a batch. Because the R loop only makes short Python calls, an
R interrupt (Ctrl-C) is noticed within one wait, and an error in the R function stops training at
once: :meth:`BatchFeed.fail` makes the next read in TensorFlow raise, ``fit`` returns with that
error, and the R side joins the thread before it reports the R error. The alternative - R calling
``fit`` and TensorFlow calling back into R - is the design that hangs.

Under ``multi_worker_mirrored`` every worker process runs its own R loop and its own
generator, which is told the worker's index and the number of workers; each worker's stream
is its own shard, so the feed's dataset has the shard policy ``"off"`` (TensorFlow must not
drop parts of it). TensorFlow still splits each batch over all replicas in sync, so a step
takes ``1/n`` of one batch of each of the ``n`` workers. Epochs end at a NULL only under the
default and ``one_device`` strategies (see :data:`LAZY_INPUT`); elsewhere ``steps_per_epoch``
sets them. Under ``parameter_server`` the per-worker input pipelines run inside the
workers' TensorFlow servers, which have no R (and a ``from_generator`` function cannot be
shipped to another process): :func:`check_strategy` refuses with a message pointing to
sharded files (:mod:`tfdistributed.data.shards`), which every worker reads with TensorFlow's own
readers.

A raw ``from_generator`` dataset over an R function is spotted (and refused on R's main
thread) by :mod:`tfdistributed.data.rcallbacks`, which the dataset checks of every training
call run.
"""

from __future__ import annotations

import threading
import time

from .._args import as_int
from ..errors import GeneratorError


DEFAULT_CAPACITY = 8


SIGNATURE_HELP = ("The generator must return list(x, y) or list(x, y, sample_weight) for each "
                  "batch (NULL to end an epoch), where x is a numeric array (or a list of them "
                  "for several inputs) whose first dimension is the batch, y the targets with "
                  "the same first dimension.")


def _as_batch_array(value, where: str):
    import numpy as np

    array = np.asarray(value)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise GeneratorError(
            f"{where} is not numeric (got {type(value).__name__}). {SIGNATURE_HELP}")
    if array.ndim == 0:
        raise GeneratorError(f"{where} is a single number, not a batch: it needs a first (batch) "
                             f"dimension. {SIGNATURE_HELP}")
    # One copy: R arrays arrive as float64 in column-major order, TensorFlow wants row-major.
    if array.dtype == np.float64 or array.dtype == bool:
        return np.ascontiguousarray(array, dtype=np.float32)
    if array.dtype == np.int64:
        return np.ascontiguousarray(array, dtype=np.int32)
    return np.ascontiguousarray(array)


def _as_structure(batch, number: int):
    """``batch`` as ``(x, y[, sample_weight])`` of arrays, x possibly a list/dict of arrays."""
    if isinstance(batch, dict):
        raise GeneratorError(f"Batch {number} is a named list; {SIGNATURE_HELP}")
    if not isinstance(batch, (list, tuple)) or len(batch) not in (2, 3):
        got = f"a list of length {len(batch)}" if isinstance(batch, (list, tuple)) else \
            type(batch).__name__
        raise GeneratorError(f"Batch {number} is {got}. {SIGNATURE_HELP}")
    x, *rest = batch
    if isinstance(x, dict):
        x = {str(k): _as_batch_array(v, f"Batch {number}: input {k!r}") for k, v in x.items()}
    elif isinstance(x, (list, tuple)):
        x = tuple(_as_batch_array(v, f"Batch {number}: input {i + 1}") for i, v in enumerate(x))
    else:
        x = _as_batch_array(x, f"Batch {number}: x")
    names = ("y", "sample_weight")
    return (x, *[_as_batch_array(v, f"Batch {number}: {names[i]}") for i, v in enumerate(rest)])


def _leaves(structure):
    """The arrays (or specs) of a ``(x, y[, w])`` batch in ``tf.nest.flatten`` order; x may be
    a tuple or a dict of them. By hand: this runs for every batch on R's main thread."""
    x, *rest = structure
    if isinstance(x, dict):
        inputs = [x[k] for k in sorted(x)]
    elif isinstance(x, tuple):
        inputs = list(x)
    else:
        inputs = [x]
    return inputs + rest


def _layout(structure):
    """A cheap, comparable description of a batch's nesting (not its arrays)."""
    x = structure[0]
    inputs = tuple(sorted(x)) if isinstance(x, dict) else len(x) if isinstance(x, tuple) else None
    return len(structure), inputs


def describe_signature(spec) -> str:
    """``x: float32 (None, 8, 8, 1), y: int32 (None,)`` for a batch's element spec."""
    import tensorflow as tf

    names = ["x", "y", "sample_weight"]
    parts = []
    for name, part in zip(names, spec):
        for i, leaf in enumerate(tf.nest.flatten(part)):
            label = name if len(tf.nest.flatten(part)) == 1 else f"{name}[{i + 1}]"
            parts.append(f"{label}: {leaf.dtype.name} {tuple(leaf.shape.as_list())}")
    return ", ".join(parts)


class BatchFeed:
    """A bounded buffer of batches between R's main thread (producer) and TensorFlow (consumer).

    The producer calls :meth:`free_slots` (waits briefly), then :meth:`put` or
    :meth:`end_pass` that many times; :meth:`fail` reports an error in the generator. The
    consumer is :meth:`dataset`, a ``tf.data.Dataset`` whose elements are the batches put here.
    ``passes``: how many NULL-terminated passes to produce (``None``: until training stops).
    ``stream``: the dataset is one endless stream and a NULL only means that the generator
    starts over (for ``steps_per_epoch``); otherwise a NULL ends the dataset's iteration (an
    epoch).

    The buffer is a TensorFlow ``FIFOQueue`` that the dataset dequeues from inside its own graph:
    reading a batch needs neither Python nor the GIL, so TensorFlow's input thread never waits
    for R's main thread or for Python code (a ``from_generator`` callback would cost a Python
    call per batch, which cost a small model half its throughput: ``bench/results.md``, section
    11). Every element
    starts with a flag: a batch, the end of a pass (an epoch), or a stop. A stop (the generator
    failed, or the job was stopped) also flips a variable the dataset checks before every
    batch, so training stops at the next step even with batches still buffered.
    """

    _BATCH, _END_PASS, _STOP = 0, 1, 2

    @staticmethod
    def check_capacity(capacity=DEFAULT_CAPACITY) -> int:
        """``capacity`` (the user's ``prefetch``: batches the feed holds) as an int >= 1;
        left out, the default (R's ``dataset_from_generator()`` reads it here).

        Raises:
            ArgumentTypeError: not a whole number >= 1.

        Example:
            >>> BatchFeed.check_capacity(8)
            8
        """
        return as_int(capacity, "prefetch", minimum=1)

    def __init__(self, capacity=DEFAULT_CAPACITY, passes=None, stream=False):
        self._capacity = self.check_capacity(capacity)
        self._stream = bool(stream)
        self._passes = as_int(passes, "passes", minimum=1, allow_none=True)
        # Guards the queue between R's main thread (put) and the job thread (close at the end).
        self._lock = threading.RLock()
        self._spec = None
        self._layout = None
        self._queue = None
        self._stopped = None
        self._failure: str | None = None
        self._closed = False
        self.batches = 0
        self.passes_done = 0
        self._batches_in_pass = 0

    # --- producer side (R's main thread) -------------------------------------------------------

    @property
    def failure(self):
        return self._failure

    @property
    def stopped(self) -> bool:
        """Whether the producer should stop (training ended, failed, or all passes made)."""
        return self._done()

    def _done(self) -> bool:
        return self._closed or self._failure is not None or (
            self._passes is not None and self.passes_done >= self._passes)

    def free_slots(self, timeout=0.01) -> int:
        """Free places in the buffer, waiting up to ``timeout`` s for one; -1: stop producing.

        Polls: the consumer is TensorFlow's graph, which cannot signal back.
        Only this producer adds elements, so the slots returned stay free until it fills them.
        """
        deadline = time.monotonic() + float(timeout)
        while True:
            if self._done():
                return -1
            free = self._capacity - (0 if self._queue is None else self._size())
            if free > 0 or time.monotonic() >= deadline:
                return max(free, 0)
            # A full buffer holds several steps of work: polling every 5 ms keeps it topped up
            # and leaves the CPU, the GIL and TensorFlow's eager context to training (a shorter
            # poll was slower: bench/results.md, section 11).
            time.sleep(0.005)

    def _start(self, structure):
        import tensorflow as tf

        self._spec = tf.nest.map_structure(
            lambda a: tf.TensorSpec((None,) + a.shape[1:], tf.as_dtype(a.dtype)), structure)
        dtypes = [tf.int32] + [spec.dtype for spec in _leaves(self._spec)]
        # One slot more than the prefetch: room for the stop element even when R is ahead.
        self._queue = tf.queue.FIFOQueue(self._capacity + 1, dtypes, shapes=None)
        self._stopped = tf.Variable(False, trainable=False, name="batch_feed_stopped")
        self._flags = {flag: tf.constant(flag, tf.int32)
                       for flag in (self._BATCH, self._END_PASS, self._STOP)}

    def _enqueue(self, flag, leaves):
        import tensorflow as tf
        from tensorflow.python.ops import gen_data_flow_ops

        # The raw op: FIFOQueue.enqueue's Python wrapper costs many times the op itself
        # (bench/results.md, section 11), and this runs once per batch on R's main thread. Once
        # the job has ended (the queue is closed), what R still made is dropped. Never blocks:
        # R only fills free slots, and a stop element has a slot of its own.
        components = [self._flags[flag], *map(tf.convert_to_tensor, leaves)]
        with self._lock:
            if not self._closed:
                gen_data_flow_ops.queue_enqueue_v2(self._queue.queue_ref, components)

    def _size(self) -> int:
        from tensorflow.python.ops import gen_data_flow_ops

        return int(gen_data_flow_ops.queue_size_v2(self._queue.queue_ref))

    def _marker(self):
        """Empty leaves of the batch signature: the payload of an end-of-pass or stop element."""
        import numpy as np

        return [np.zeros((0,) + tuple(s.shape[1:]), s.dtype.as_numpy_dtype)
                for s in _leaves(self._spec)]

    def put(self, batch) -> None:
        """Add one batch (checked against the first batch's signature)."""
        number = self.batches + 1
        structure = _as_structure(batch, number)
        leaves = _leaves(structure)
        sizes = {int(a.shape[0]) for a in leaves}
        if len(sizes) != 1:
            raise GeneratorError(f"Batch {number}: x and y have different first (batch) "
                                 f"dimensions {sorted(sizes)}; they must match. {SIGNATURE_HELP}")
        if self._spec is None:
            self._start(structure)
        else:
            self._check(structure, number)
        self._enqueue(self._BATCH, leaves)
        self.batches += 1
        self._batches_in_pass += 1

    def _check(self, structure, number):
        import tensorflow as tf

        # Runs for every batch on R's main thread, so the common case compares plain tuples;
        # the messages are built only for a mismatch.
        leaves = _leaves(structure)
        if self._layout is None:
            self._layout = _layout(self._spec), [(s.dtype.as_numpy_dtype, tuple(s.shape[1:]))
                                                 for s in _leaves(self._spec)]
        layout, expected = self._layout
        if _layout(structure) == layout and len(leaves) == len(expected) and all(
                a.dtype == dtype and a.shape[1:] == shape
                for a, (dtype, shape) in zip(leaves, expected)):
            return
        wanted = describe_signature(self._spec)
        try:
            tf.nest.assert_same_structure(self._spec, structure)
        except (ValueError, TypeError):
            raise GeneratorError(
                f"Batch {number} has a different structure than the first batch: every batch "
                f"must have the signature {wanted}. {SIGNATURE_HELP}") from None
        got = describe_signature(tf.nest.map_structure(
            lambda a: tf.TensorSpec((None,) + a.shape[1:], tf.as_dtype(a.dtype)), structure))
        raise GeneratorError(
            f"Batch {number} does not match the first batch: expected {wanted}, got {got}. "
            f"Return the same types and shapes (apart from the batch size) from every call.")

    def end_pass(self) -> None:
        """The generator returned NULL: the current pass (epoch) is complete."""
        if self._batches_in_pass == 0:
            raise GeneratorError(
                f"The generator returned NULL before any batch of pass {self.passes_done + 1}: "
                f"an epoch needs at least one batch. After returning NULL the generator is called "
                f"again for the next epoch, so it must start over (e.g. reset its position).")
        if not self._stream:
            # A stream has no epochs to end: its dataset needs no marker to filter out.
            self._enqueue(self._END_PASS, self._marker())
        self.passes_done += 1
        self._batches_in_pass = 0

    def _stop(self):
        """Make the dataset's next read raise; wake a read waiting on an empty buffer."""
        with self._lock:
            if self._queue is None or bool(self._stopped.numpy()):
                return
            self._stopped.assign(True)
            if self._size() <= self._capacity:
                self._enqueue(self._STOP, self._marker())

    def fail(self, message: str) -> None:
        """The generator raised: TensorFlow's next read raises, training stops."""
        self._failure = str(message)
        self._stop()

    def close(self) -> None:
        """Stop producing (the producer gets -1) and make any further read raise.

        Also closes the queue: every reader still waiting on it (e.g. the input iterator Keras
        creates for an epoch that never comes) returns at once, instead of waiting inside
        TensorFlow until the interpreter shuts down under it.
        """
        with self._lock:
            self._stop()
            self._closed = True
            if self._queue is not None:
                self._queue.close(cancel_pending_enqueues=True)

    # --- consumer side (TensorFlow's graph) ----------------------------------------------------

    def dataset(self):
        """The batches as a ``tf.data.Dataset`` with the shard policy ``"off"``."""
        import tensorflow as tf

        from ..data.sharding import with_shard_policy

        if self._spec is None:
            raise GeneratorError("The feed has no batch yet: put() the first batch before "
                                 "building the dataset (its signature comes from it).")
        queue, stopped, spec = self._queue, self._stopped, self._spec
        shapes = [s.shape for s in _leaves(spec)]

        def dequeue(_):
            flag, *leaves = queue.dequeue()
            ok = tf.logical_and(tf.not_equal(flag, self._STOP),
                                tf.logical_not(stopped.read_value()))
            check = tf.debugging.Assert(ok, ["The R generator failed or training was stopped; "
                                             "the R session reports why."])
            with tf.control_dependencies([check]):
                leaves = [tf.ensure_shape(leaf, shape) for leaf, shape in zip(leaves, shapes)]
            batch = tf.nest.pack_sequence_as(spec, leaves)
            return batch if self._stream else (flag, batch)

        # One function per batch for a stream (each tf.data function call costs time on every
        # step); epochs add the end-of-pass test.
        dataset = tf.data.Dataset.from_tensors(0).repeat().map(dequeue)
        if not self._stream:
            dataset = dataset.take_while(lambda flag, _: tf.not_equal(flag, self._END_PASS))
            dataset = dataset.map(lambda _, batch: batch)
        options = tf.data.Options()
        # The queue is the prefetch buffer. A prefetch that tf.data would inject reads (and checks)
        # batches ahead on a thread of its own, so a stop would take effect only after those,
        # and a reader left waiting on the queue when the process exits crashed the interpreter
        # at shutdown in our tests.
        options.experimental_optimization.inject_prefetch = False
        # Nor may tf.data run the dequeue in parallel: it would take batches ahead the same way.
        options.experimental_optimization.map_parallelization = False
        dataset = dataset.with_options(options)
        # Each worker's generator already produces that worker's data: no auto-sharding.
        return with_shard_policy(dataset, "off")
