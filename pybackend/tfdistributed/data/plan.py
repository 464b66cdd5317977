"""The input plan every training call follows.

**The input plan.** :func:`plan_input` is where ``fit``, ``evaluate`` and ``predict`` decide,
once and for every strategy (the collective strategies of :mod:`tfdistributed.training` and the
parameter-server trainer of :mod:`tfdistributed.training.ps` alike), what the input is: arrays, a
``tf.data.Dataset`` or a dataset function; the global batch (Keras' default of
:data:`DEFAULT_BATCH_SIZE` when arrays come without one) and each replica's share of it;
``validation_split`` and ``validation_data`` (with its optional third part, the validation
sample weights); ``sample_weight`` and ``class_weight``. The returned :class:`InputPlan` builds
the pipelines each path needs. The caller says what the strategy is (kind, replicas in sync,
input workers), computed once per call.

**Sharding.** Shard policies and the pre-flight that checks (and under ``"auto"`` with too
few files, shards by data) a dataset before a multi-worker job reads it live in
:mod:`tfdistributed.data.sharding`; the plan runs that pre-flight on every dataset it builds
(for arrays sharded by data, from their batch count:
:func:`~tfdistributed.data.sharding.check_batches_for_workers`).

The demo data (scikit-learn's digits) lives in :mod:`tfdistributed.data.digits`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._args import as_int
from ..errors import ArgumentTypeError, TrainingError
from .arrays import (DEFAULT_BATCH_SIZE, as_arrays, batched, class_weight_to_sample_weight,
                     num_examples, slices, split_validation)
from .rcallbacks import refuse_r_generator_on_main_thread
from .sharding import check_batches_for_workers, shard_for_workers, with_shard_policy


_log = logging.getLogger(__name__)


def check_dataset(dataset, what: str = "fit") -> None:
    """Refuse a dataset that ``fit``/``evaluate`` cannot read here; :func:`plan_input` runs this
    on every dataset it is given for fit or evaluate (the training and the validation data).

    Today one check: a dataset whose Python callback calls an R function (e.g.
    ``tf$data$Dataset$from_generator(<R function>)``) hangs when trained on R's main thread
    (:func:`tfdistributed.data.rcallbacks.refuse_r_generator_on_main_thread`).

    Args:
        dataset: a ``tf.data.Dataset`` about to be trained or evaluated on.
        what: the call, named in the messages (``"fit"``, ``"model.fit"``...).

    Raises:
        GeneratorError: a dataset over an R generator, on R's main thread (where it would hang).

    Example:
        >>> check_dataset(tf.data.Dataset.range(4), "fit")    # doctest: +SKIP
    """
    refuse_r_generator_on_main_thread(dataset, what)


@dataclass(frozen=True)
class InputPlan:
    """What one ``fit``/``evaluate``/``predict`` call reads, decided once by :func:`plan_input`.

    Attributes:
        what: ``"fit"``, ``"evaluate"`` or ``"predict"`` (named in error messages).
        kind: the strategy's kind (``"mirrored"``, ``"parameter_server"``...).
        replicas: replicas in sync.
        workers: input pipelines: the workers of a multi-worker or parameter-server job, else 1.
        source: ``"arrays"``, ``"dataset"`` (a ``tf.data.Dataset`` of global batches) or
            ``"function"`` (``input_context -> tf.data.Dataset``, parameter-server ``fit`` only).
        x, y, sample_weight: the input. For arrays: the checked arrays (``y`` and
            ``sample_weight`` None when not given; ``class_weight`` already multiplied into
            ``sample_weight``, and ``validation_split``'s rows already taken out). Otherwise
            ``x`` is the dataset or function and the others are None.
        num_examples: rows of the arrays (None for a dataset or function).
        batch_size: the global batch the user gave (checked), or None.
        class_weight: only for a dataset input, for Keras to apply; None otherwise.
        validation: None, a ``tf.data.Dataset``, or ``(x, y, sample_weight)`` checked arrays
            (``sample_weight`` None when not given).
        validation_source: which of those ``validation`` is: None, ``"dataset"`` or ``"arrays"``.
        shuffle, seed: shuffle arrays every epoch with this seed.
        shard_policy: the shard policy asked for (None: ``"data"`` for arrays, the dataset's own).
        check_shards: run the shard pre-flight on datasets of a multi-worker job
            (:func:`~tfdistributed.data.sharding.shard_for_workers`).
    """

    what: str
    kind: str
    replicas: int
    workers: int
    source: str
    x: Any
    y: Any = None
    sample_weight: Any = None
    num_examples: int | None = None
    batch_size: int | None = None
    class_weight: Any = None
    validation: Any = None
    validation_source: str | None = None
    shuffle: bool = False
    seed: int | None = None
    shard_policy: str | None = None
    check_shards: bool = True

    @property
    def global_batch(self) -> int:
        """The global batch: the one given, else Keras' default (:data:`DEFAULT_BATCH_SIZE`)."""
        return self.batch_size or DEFAULT_BATCH_SIZE

    @property
    def per_replica_batch(self) -> int:
        """Each replica's share of the global batch."""
        return self.global_batch // self.replicas

    @property
    def chief_reads_whole_input(self) -> bool:
        """Whether the datasets this plan builds are read whole by the chief alone, not split
        over workers: under parameter-server strategies the chief computes evaluation,
        prediction and validation itself (the training input is built per worker by
        :mod:`tfdistributed.training.ps`). Those datasets get no shard policy and no shard check."""
        return self.kind == "parameter_server"

    @property
    def arrays(self) -> tuple:
        """The array parts that were given, in order ``(x, y?, sample_weight?)``."""
        return tuple(p for p in (self.x, self.y, self.sample_weight) if p is not None)

    def examples(self):
        """Each example once, unbatched (arrays only): ``x``, ``(x, y)`` or ``(x, y, sw)``."""
        return slices(self.arrays)

    def dataset(self):
        """The input as a dataset of global batches: what Keras (or the chief alone) reads.

        Arrays are batched with the global batch, shuffled for ``fit`` when asked, with the
        shard policy (``"data"`` by default); a dataset gets the shard policy asked for. In a
        multi-worker job the result goes through the shard pre-flight first
        (:func:`~tfdistributed.data.sharding.shard_for_workers`: checked, and under ``"auto"`` with
        fewer files than workers, sharded by data; arrays sharded by data are checked from their
        batch count, :func:`~tfdistributed.data.sharding.check_batches_for_workers`).
        """
        if self.source == "function":  # refused by plan_input except for parameter-server fit
            raise ArgumentTypeError(f"{self.what}(): a dataset function has no single dataset.")
        label = "the training data" if self.what == "fit" else "the data"
        if self.source == "arrays":
            return self._distributed(self.arrays, self.num_examples, shuffle=self.shuffle,
                                     label=label)
        return self._distributed(self.x, None, shuffle=False, label=label)

    def validation_dataset(self):
        """``validation`` as a dataset of global batches (never shuffled), or None."""
        if self.validation is None:
            return None
        if self.validation_source == "arrays":
            parts = tuple(p for p in self.validation if p is not None)
            return self._distributed(parts, num_examples(parts[0]), shuffle=False,
                                     label="the validation data")
        return self._distributed(self.validation, None, shuffle=False, label="the validation data")

    def _distributed(self, arrays_or_dataset, n, *, shuffle, label):
        policy = None
        if n is not None:
            policy = "data" if self.chief_reads_whole_input else (self.shard_policy or "data")
            dataset = batched(arrays_or_dataset, n, batch_size=self.global_batch,
                               shuffle=shuffle, seed=self.seed, policy=policy)
        else:
            dataset = arrays_or_dataset
            if self.shard_policy is not None and not self.chief_reads_whole_input:
                dataset = with_shard_policy(dataset, self.shard_policy)
        if self.check_shards and self.workers > 1 and not self.chief_reads_whole_input:
            what = f"{self.what}(), {label}"
            # Arrays sharded by data: their batch count says what the pre-flight would.
            if policy is not None and policy.lower() == "data":
                check_batches_for_workers(self._global_batches(n), self.workers, what)
            else:
                dataset = shard_for_workers(dataset, self.workers, what)
        return dataset

    def batches(self, validation: bool = False) -> int | None:
        """Global batches in one pass over the input (or the validation data), the last maybe
        smaller, when known: for arrays, and for a dataset whose cardinality TensorFlow knows
        (else ``None``)."""
        if validation:
            if self.validation_source == "arrays":
                return self._global_batches(num_examples(self.validation[0]))
            data = self.validation
        elif self.source == "arrays":
            return self._global_batches(self.num_examples)
        else:
            data = self.x if self.source == "dataset" else None
        cardinality = -1 if data is None else int(data.cardinality())
        return cardinality if cardinality >= 0 else None

    def _global_batches(self, n: int) -> int:
        """Global batches that ``n`` examples make, the last maybe smaller."""
        return -(-n // self.global_batch)

    def epochs_from_one_iterator(self, dataset, steps_per_epoch=None, steps_per_execution=1):
        """``(dataset, steps_per_epoch)`` with which Keras reads every epoch from one iterator.

        Keras makes a new input iterator at each epoch of a finite dataset and drops the old
        one, seconds per epoch (``bench/results.md``, section 11), paid in lock-step by every
        worker of a multi-worker job, which for a finite dataset also all-reduce an "is there
        more data?" flag at every step. Arrays are batched here, so their epoch length is known:
        the batches repeat and ``steps_per_epoch`` is that length. Every epoch sees the same
        batches as before (the last, smaller one included), reshuffled each epoch when asked.

        Only when ``steps_per_execution`` divides that length: told ``steps_per_epoch``, Keras
        runs whole blocks of ``steps_per_execution`` steps, so the last block of an epoch would
        read the next epoch's first batches (10 batches in blocks of 4: 12 steps an epoch).
        Otherwise, and for anything but arrays or a ``steps_per_epoch`` the user chose, the
        input is left as it is and Keras ends each epoch where the data ends.
        """
        if self.source != "arrays" or steps_per_epoch is not None:
            return dataset, steps_per_epoch
        batches = self.batches()
        if batches % steps_per_execution:
            return dataset, None
        return dataset.repeat(), batches

    def steps_per_epoch(self, steps=None) -> int:
        """Steps in one epoch where the input repeats forever (parameter-server training).

        ``steps`` when given; for arrays, the whole global batches in the data; for a finite
        dataset, its number of batches.

        Raises:
            TrainingError: fewer examples than one global batch, or an input whose length is
                unknown (a dataset function, an infinite dataset) without ``steps``.
        """
        if steps is not None:
            return steps
        if self.source == "arrays":
            if self.num_examples < self.global_batch:
                raise TrainingError(
                    f"{self.what}(): {self.num_examples} examples are fewer than one global batch "
                    f"of {self.global_batch}; use a smaller batch_size.")
            steps, left = divmod(self.num_examples, self.global_batch)
            if left:
                # Not an error (the examples are all read over the epochs), but the epochs are not
                # one device's, so the history and weights differ: say so where users look.
                _log.warning(
                    "%s() under %r: an epoch is %d whole global batches of %d (%d of the %d "
                    "examples); the input repeats, so the other %d begin the next epoch and epochs "
                    "do not end where one device's do. For one device's epochs, use a batch_size "
                    "that divides %d.", self.what, self.kind, steps, self.global_batch,
                    steps * self.global_batch, self.num_examples, left, self.num_examples)
            return steps
        if self.source == "dataset":
            cardinality = int(self.x.cardinality())
            if cardinality > 0:
                return cardinality
        raise TrainingError(
            f"{self.what}() under {self.kind!r} needs `steps_per_epoch` for this input: workers "
            f"repeat their data forever, so an epoch is a number of steps. Pass steps_per_epoch= "
            f"(e.g. the number of examples // global batch size).")


def _source(x, what: str, kind: str) -> str:
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        return "dataset"
    if x is None:
        if kind == "parameter_server" and what == "fit":
            raise ArgumentTypeError("fit() needs data: arrays `x` and `y`, a tf.data.Dataset, or a "
                                    "function input_context -> tf.data.Dataset.")
        raise ArgumentTypeError(f"{what}() needs data: arrays `x` (and `y`), or a tf.data.Dataset.")
    if callable(x) and not hasattr(x, "shape") and not isinstance(x, Mapping):
        if kind == "parameter_server" and what == "fit":
            return "function"
        raise ArgumentTypeError(
            f"{what}(): `x` is a function; a dataset function (input_context -> "
            f"tf.data.Dataset) is for fit() under 'parameter_server'. Pass arrays or a "
            f"tf.data.Dataset.")
    return "arrays"


def _refuse_array_arguments(source, what, y, sample_weight, batch_size):
    """Arguments that only make sense with arrays, refused for a dataset before anything else."""
    if source == "function":
        if y is not None or sample_weight is not None or batch_size is not None:
            raise ArgumentTypeError(f"{what}(): a dataset function builds its own targets and "
                                    f"batches; pass `y`, `sample_weight` and `batch_size` only "
                                    f"with arrays.")
    elif source == "dataset":
        if y is not None or sample_weight is not None:
            raise ArgumentTypeError(f"{what}(): a tf.data.Dataset already holds the targets; pass "
                                    f"`y`/`sample_weight` only with arrays.")
        if batch_size is not None and what != "predict":
            raise ArgumentTypeError(
                f"{what}(): `batch_size` applies to arrays only; batch the dataset itself with "
                f"the global batch size (dataset.batch(global_batch_size(per_replica, strategy))).")


def _check_batch(batch_size, replicas: int, what: str):
    """The global batch as given (None stays None); for fit and evaluate it must divide evenly
    over the replicas in sync."""
    batch_size = as_int(batch_size, "batch_size", minimum=1, allow_none=True)
    if batch_size is None or what == "predict" or batch_size % replicas == 0:
        return batch_size
    per = max(1, batch_size // replicas)
    raise TrainingError(
        f"batch_size={batch_size} is the global batch and must divide evenly over the "
        f"{replicas} replicas in sync; use {per * replicas} (= global_batch_size({per}, "
        f"strategy)) or {(per + 1) * replicas}.")


def _validation(validation_data, what: str):
    """``(validation_source, validation)``: ``(None, None)``, ``("dataset", the dataset)`` or
    ``("arrays", (x, y, sample_weight or None))`` checked by :func:`as_arrays`."""
    import tensorflow as tf

    if validation_data is None:
        return None, None
    if isinstance(validation_data, tf.data.Dataset):
        return "dataset", validation_data
    if isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3):
        x_val, y_val, *rest = validation_data
        return "arrays", _checked_arrays(x_val, y_val, (rest or [None])[0])[:3]
    raise ArgumentTypeError(
        f"{what}(): validation_data must be (x_val, y_val) or (x_val, y_val, sample_weight_val) "
        f"arrays, or a tf.data.Dataset of batches; got {type(validation_data).__name__}"
        + (f" of length {len(validation_data)}"
           if isinstance(validation_data, (tuple, list)) else "")
        + ".")


def _checked_arrays(x, y, sample_weight):
    """``(x, y, sample_weight, n)`` checked by :func:`as_arrays`, None where not given."""
    parts, n = as_arrays(x, y, sample_weight)
    given = iter(parts)
    return (next(given), *(next(given) if p is not None else None for p in (y, sample_weight)), n)


def _split_off_validation(x, y, sample_weight, fraction):
    """``((x, y, sample_weight), (x_val, y_val, sample_weight_val))``: ``validation_split``'s
    last rows held out, None parts staying None."""
    given = [p for p in (x, y, sample_weight) if p is not None]
    train, held_out = split_validation(given, fraction)
    train, held_out = iter(train), iter(held_out)
    return tuple(tuple(next(parts) if p is not None else None for p in (x, y, sample_weight))
                 for parts in (train, held_out))


def plan_input(what, x=None, y=None, *, kind, replicas=1, workers=1, batch_size=None,
               sample_weight=None, class_weight=None, validation_data=None,
               validation_split=None, shuffle=False, seed=None, shard_policy=None,
               check_shards=True) -> InputPlan:
    """Decide what a ``fit``/``evaluate``/``predict`` call reads; the one place these rules live.

    In order: the kind of input (arrays, a ``tf.data.Dataset``, or for parameter-server ``fit``
    a dataset function); arguments that only apply to arrays, refused for a dataset; the global
    batch, which must divide over the replicas; ``validation_split`` (arrays only; the last rows,
    as Keras takes them; ``validation_data`` wins when both are given); ``validation_data``
    (``(x_val, y_val[, sample_weight_val])`` arrays or a dataset; the third part weights the
    validation loss and metrics); ``class_weight`` (with array targets, per-example weights
    multiplied into ``sample_weight``, so the same on every strategy). Every array is checked
    and converted once here.

    Args:
        what: ``"fit"``, ``"evaluate"`` or ``"predict"``.
        x, y, sample_weight, class_weight, validation_data, validation_split, batch_size,
            shuffle, seed, shard_policy, check_shards: the arguments of :func:`tfdistributed.fit`.
        kind, replicas, workers: the strategy: its kind, replicas in sync, and input workers
            (the workers of a multi-worker or parameter-server job, else 1).

    Returns:
        An :class:`InputPlan`.

    Raises:
        ArgumentTypeError: no data, arguments that do not apply to the input, arrays that are
            not numeric or differ in length, a malformed ``validation_data`` or
            ``validation_split``.
        TrainingError: the batch does not divide over the replicas.

    Example:
        >>> plan = plan_input("fit", x, y, kind="mirrored", replicas=2, batch_size=64,
        ...                   validation_split=0.2)                       # doctest: +SKIP
        >>> plan.per_replica_batch, plan.num_examples                     # doctest: +SKIP
        (32, 1078)
        >>> model.fit(plan.dataset(), validation_data=plan.validation_dataset())  # doctest: +SKIP
    """
    source = _source(x, what, kind)
    _refuse_array_arguments(source, what, y, sample_weight, batch_size)
    batch_size = _check_batch(batch_size, int(replicas), what)
    if validation_split and source != "arrays":
        raise ArgumentTypeError(
            f"{what}(): validation_split works with arrays only, since a dataset cannot be split "
            f"without reading it. Pass validation_data= (a separate dataset), or give arrays.")
    validation_source, validation = _validation(validation_data, what)
    n = None
    if source == "arrays":
        x, y, sample_weight, n = _checked_arrays(x, y, sample_weight)
        if validation_split and validation_source is None:
            (x, y, sample_weight), validation = _split_off_validation(x, y, sample_weight,
                                                                      validation_split)
            validation_source = "arrays"
            n = num_examples(x)
        if class_weight is not None and y is not None:
            # Per-example weights, the same under every strategy (Keras' own class_weight cannot
            # be combined with sample_weight, and the parameter-server trainer has none).
            sample_weight = class_weight_to_sample_weight(y, class_weight, sample_weight)
            class_weight = None
    if class_weight is not None and kind == "parameter_server":
        raise ArgumentTypeError(f"{what}(): under 'parameter_server', class_weight works with "
                                f"arrays; weight a dataset's examples in the dataset itself.")
    if what in ("fit", "evaluate"):
        # The validation data too, whatever the training input is (a dataset function's
        # validation dataset is read by the chief, on this thread).
        for data, data_source in ((x, source), (validation, validation_source)):
            if data_source == "dataset":
                check_dataset(data, what)
    return InputPlan(what=what, kind=kind, replicas=int(replicas), workers=int(workers),
                     source=source, x=x, y=y, sample_weight=sample_weight, num_examples=n,
                     batch_size=batch_size, class_weight=class_weight, validation=validation,
                     validation_source=validation_source, shuffle=bool(shuffle), seed=seed,
                     shard_policy=shard_policy, check_shards=bool(check_shards))
