"""Arrays (and dicts of arrays) turned into ``tf.data`` pipelines of global batches: the global
batch size, checked arrays, ``validation_split``, ``class_weight`` as sample weights, and
:func:`make_dataset`.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

from .._args import as_int
from ..errors import ArgumentTypeError
from .sharding import with_shard_policy


#: Keras' default batch size, used when arrays come without one.
DEFAULT_BATCH_SIZE = 32


def global_batch_size(per_replica, strategy=None) -> int:
    """``per_replica`` times the number of replicas in sync (of ``strategy``, or the current one).

    Args:
        per_replica: the batch one replica computes (a whole number >= 1).
        strategy: a ``tf.distribute.Strategy``; default: the current one.

    Returns:
        The global batch size, as ``fit(batch_size=...)`` and ``dataset.batch()`` want it.

    Raises:
        ArgumentTypeError: ``per_replica`` is not a whole number >= 1, or ``strategy`` is not a
            ``tf.distribute.Strategy``.

    Example:
        >>> global_batch_size(32, make_strategy("mirrored", num_cpu_devices=2))    # doctest: +SKIP
        64
    """
    import tensorflow as tf

    per_replica = as_int(per_replica, "per_replica", minimum=1)
    if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
        raise ArgumentTypeError(
            f"`strategy` must be a tf.distribute.Strategy, got {type(strategy).__name__}: create "
            f"one by name.", hints={"python": "E.g. make_strategy('mirrored').",
                                    "r": 'E.g. distribute_strategy("mirrored").'})
    strategy = strategy or tf.distribute.get_strategy()
    return per_replica * int(strategy.num_replicas_in_sync)


def _as_array(value, name: str):
    import numpy as np

    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    if isinstance(value, (list, tuple)) and value and not isinstance(value[0], numbers.Number):
        raise ArgumentTypeError(f"`{name}` must be an array, got a {type(value).__name__} of "
                                f"{type(value[0]).__name__}.")
    array = np.asarray(value)
    if array.dtype == object:
        raise ArgumentTypeError(f"`{name}` could not be turned into a numeric array "
                                f"(got {type(value).__name__}).")
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    return array


def _as_structure(value, name: str):
    """An input or target as checked arrays: one array, a dict of arrays (named inputs), or a
    tuple of arrays (several inputs), as Keras accepts them."""
    import numpy as np

    if isinstance(value, Mapping):
        if not value:
            raise ArgumentTypeError(f"`{name}` is an empty dict; give one array per named input.")
        return {str(k): _as_array(v, f"{name}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, np.ndarray) or hasattr(v, "to_numpy") for v in value):
        return tuple(_as_array(v, f"{name}[{i}]") for i, v in enumerate(value))
    return _as_array(value, name)


def _leaves(structure):
    if isinstance(structure, Mapping):
        return list(structure.items())
    if isinstance(structure, tuple):
        return [(str(i), v) for i, v in enumerate(structure)]
    return [(None, structure)]


def num_examples(structure) -> int:
    """The number of examples (rows) of an array or a dict/tuple of arrays of equal length.

    Example:
        >>> num_examples({"a": np.zeros((5, 2)), "b": np.zeros(5)})    # doctest: +SKIP
        5
    """
    return len(_leaves(structure)[0][1])


def as_arrays(x, y=None, sample_weight=None):
    """``[x, y?, sample_weight?]`` as checked NumPy arrays of equal length, and that length.

    Args:
        x: one array (NumPy, pandas, a list of numbers), a dict of arrays (named inputs) or a
            list of arrays (several inputs).
        y: the targets, shaped like ``x`` may be; left out of the result when None.
        sample_weight: one weight per example; left out of the result when None.

    Returns:
        ``(parts, n)``: the given parts in that order, float64 cast to float32, and the number
        of rows.

    Raises:
        ArgumentTypeError: a part is not numeric, or the parts differ in length.

    Example:
        >>> parts, n = as_arrays(np.zeros((10, 2)), np.arange(10))    # doctest: +SKIP
        >>> n, parts[0].dtype                                        # doctest: +SKIP
        (10, dtype('float32'))
    """
    parts = [("x", _as_structure(x, "x"))]
    for name, value in (("y", y), ("sample_weight", sample_weight)):
        if value is not None:
            parts.append((name, _as_structure(value, name) if name == "y"
                          else _as_array(value, name)))
    n = num_examples(parts[0][1])
    for name, structure in parts:
        for key, array in _leaves(structure):
            if len(array) != n:
                where = name if key is None else f"{name}[{key!r}]"
                raise ArgumentTypeError(f"`x` has {n} rows but `{where}` has {len(array)}; they "
                                        f"must match.")
    return [structure for _, structure in parts], n


def split_validation(arrays, fraction):
    """``(train, validation)`` from ``arrays`` as Keras' ``validation_split`` does: the last
    ``fraction`` of the rows, before any shuffling, batching or sharding.

    Args:
        arrays: a sequence of arrays (or dicts/tuples of arrays) of equal length.
        fraction: the share held out, strictly between 0 and 1.

    Returns:
        Two tuples of the same parts: the first rows and the held-out last rows.

    Raises:
        ArgumentTypeError: ``fraction`` is not strictly between 0 and 1, or leaves no rows.

    Example:
        >>> train, held_out = split_validation([x, y], 0.2)    # doctest: +SKIP
    """
    from keras.src.trainers.data_adapters import array_slicing

    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction < 1:
        raise ArgumentTypeError(f"`validation_split` must be a fraction between 0 and 1 "
                                f"(e.g. 0.2), got {fraction!r}.")
    try:
        return array_slicing.train_validation_split(tuple(arrays), validation_split=float(fraction))
    except ValueError as e:
        raise ArgumentTypeError(f"validation_split={fraction}: {e}") from None


def class_weight_to_sample_weight(y, class_weight, sample_weight=None):
    """Per-example weights from Keras' ``class_weight``, multiplied into ``sample_weight``.

    Args:
        y: integer targets (``(n,)`` or ``(n, 1)``) or one-hot targets (``(n, classes)``).
        class_weight: ``{class index: weight}``; a class it does not name weighs 1, as in
            Keras' ``fit`` on arrays (so plain ``model.fit`` under a parameter-server strategy,
            which comes here, takes the same ``class_weight`` as under any other).
        sample_weight: optional per-example weights to multiply in.

    Returns:
        A float32 array of one weight per example.

    Raises:
        ArgumentTypeError: ``class_weight`` is not a mapping of class indices to numbers.

    Example:
        >>> class_weight_to_sample_weight(np.array([0, 1, 1]), {0: 1.0, 1: 2.5})    # doctest: +SKIP
        array([1. , 2.5, 2.5], dtype=float32)
    """
    import numpy as np

    y = np.asarray(y)
    labels = y.argmax(axis=-1) if y.ndim > 1 and y.shape[-1] > 1 else y.reshape(len(y), -1)[:, 0]
    try:
        lookup = {int(k): float(v) for k, v in dict(class_weight).items()}
        weights = np.array([lookup.get(int(label), 1.0) for label in labels], dtype=np.float32)
    except (TypeError, ValueError):
        raise ArgumentTypeError("`class_weight` must map class indices to weights, e.g. "
                                "{0: 1.0, 1: 2.5}.") from None
    if sample_weight is not None:
        weights = weights * np.asarray(sample_weight, dtype=np.float32).reshape(len(weights))
    return weights


def make_dataset(x, y=None, *, batch_size, shuffle=False, seed=None, sample_weight=None,
                 shard_policy: str = "data", drop_remainder=False):
    """Arrays (NumPy, pandas, lists) as a batched ``tf.data`` pipeline with a shard policy.

    Args:
        x, y, sample_weight: as :func:`as_arrays` takes them.
        batch_size: the *global* batch size.
        shuffle, seed: shuffle the examples every epoch (a whole-data buffer).
        shard_policy: the shard policy (as ``fit``'s, ``read_shards``' and ``load_tfds``');
            ``"data"`` by default: arrays held in memory have no files to split, so every worker
            keeps its share of elements.
        drop_remainder: drop a last, smaller batch.

    Returns:
        A ``tf.data.Dataset`` of ``x``, ``(x, y)`` or ``(x, y, sample_weight)`` batches.

    Raises:
        ArgumentTypeError: arrays that are not numeric or differ in length, or a batch size
            that is not a whole number >= 1.

    Example:
        >>> ds = make_dataset(x, y, batch_size=64, shuffle=True, seed=0)    # doctest: +SKIP
    """
    batch_size = as_int(batch_size, "batch_size", minimum=1)
    arrays, n = as_arrays(x, y, sample_weight)
    return batched(arrays, n, batch_size=batch_size, shuffle=shuffle, seed=seed,
                   policy=shard_policy, drop_remainder=drop_remainder)


def slices(arrays):
    """The examples of ``arrays`` (``as_arrays``' parts) as a dataset of single elements."""
    import tensorflow as tf

    # Several inputs without targets stay one element (x,): a bare tuple would read as (x, y).
    return tf.data.Dataset.from_tensor_slices(
        tuple(arrays) if len(arrays) > 1 or isinstance(arrays[0], tuple) else arrays[0])


def batched(arrays, n, *, batch_size, shuffle=False, seed=None, policy="data",
             drop_remainder=False):
    dataset = slices(arrays)
    if shuffle:
        dataset = dataset.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return with_shard_policy(dataset, policy)
