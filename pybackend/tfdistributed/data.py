"""Input pipelines for distributed training: shard policies, a pre-flight shard check, global
batch sizes, TFDS loading, and arrays turned into ``tf.data`` pipelines.

With several workers, TensorFlow *auto-shards* each worker's copy of the dataset:

- ``"file"``: each worker reads a subset of the input files. Needs at least as many files as
  workers, otherwise TensorFlow fails at the first step with "There aren't enough elements in
  this dataset for each shard to have at least one element".
- ``"data"``: each worker reads everything and keeps every n-th element. Always works.
- ``"auto"`` (TensorFlow's default): ``"file"`` when the pipeline reads files, else ``"data"``.
- ``"hint"``: shard where ``dataset.shard(SHARD_HINT, ...)`` says.
- ``"off"``: no sharding; every worker sees every element.

:func:`check_sharding` runs TensorFlow's own auto-shard rewrite on the dataset before training,
so the failure above becomes our :class:`~tfdistributed.errors.ShardingError` that names the fix.
"""

from __future__ import annotations

import numbers
import os
import re
from collections.abc import Mapping

from ._args import as_int, as_str
from .errors import ArgumentTypeError, ShardingError, TFDistributedError, did_you_mean

SHARD_POLICIES = ("auto", "file", "data", "off", "hint")
#: Keras' default batch size, used when arrays come without one.
DEFAULT_BATCH_SIZE = 32


def _policy_enum(policy: str):
    import tensorflow as tf

    policy = as_str(policy, "policy")
    key = policy.lower()
    if key not in SHARD_POLICIES:
        raise ShardingError(f"Unknown shard policy {policy!r}; use one of "
                            f"{', '.join(SHARD_POLICIES)}.{did_you_mean(policy, SHARD_POLICIES)}")
    return getattr(tf.data.experimental.AutoShardPolicy, key.upper())


def with_shard_policy(dataset, policy: str):
    """``dataset`` with its auto-shard policy set to ``policy`` (see the module docstring)."""
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise ArgumentTypeError(f"with_shard_policy() needs a tf.data.Dataset, got {type(dataset).__name__}.")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = _policy_enum(policy)
    return dataset.with_options(options)


def shard_policy(dataset) -> str:
    """The auto-shard policy name set on ``dataset`` ("auto" when none was set)."""
    value = dataset.options().experimental_distribute.auto_shard_policy
    return str(getattr(value, "name", value)).lower()


def _first_element(dataset):
    for element in dataset.take(1):
        return element
    return None


def _tf_message(error) -> str:
    """TensorFlow's own sentence, without the function-node prefix it wraps it in."""
    text = str(getattr(error, "message", error)).strip()
    text = re.sub(r"^\{\{[^}]*\}\}\s*", "", text)
    return text.splitlines()[0][:300] if text else type(error).__name__


_READER_OPS = ("TFRecordDataset", "FixedLengthRecordDataset", "TextLineDataset", "ArrayRecordDataset",
               "CSVDataset", "ExperimentalCSVDataset")


def _dataset_ops(dataset) -> list[str]:
    """The op types of ``dataset``'s graph, including those inside its functions (map...)."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    ops = [node.op for node in graph.node]
    for function in graph.library.function:
        ops += [node.op for node in function.node_def]
    return ops


def _reads_files(dataset) -> bool:
    """Whether the pipeline reads files (TensorFlow's condition for sharding by file)."""
    return any(op.startswith(_READER_OPS) for op in _dataset_ops(dataset))


def _has_memory_cache(dataset) -> bool:
    return any(op.startswith("CacheDataset") for op in _dataset_ops(dataset))


def _shard_failure(dataset, num_shards):
    """TensorFlow's error for the first worker whose shard cannot be built, or None.

    Checks the first and the last worker: the rewrite fails for the first when files are
    short, and the last gets the empty remainder when elements are short.
    """
    import tensorflow as tf
    from tensorflow.python.distribute import input_ops

    for index in sorted({0, num_shards - 1}):
        sharded = input_ops.auto_shard_dataset(dataset, num_shards, index, num_shards)
        try:
            if _first_element(sharded) is None:
                return index, None
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
            if "shard" not in str(e):
                raise
            return index, e
    return None


def check_sharding(dataset, num_shards, policy: str | None = None) -> str:
    """Predict, before training, whether ``dataset`` can be auto-sharded over ``num_shards`` workers.

    Runs TensorFlow's own auto-shard rewrite (the one ``experimental_distribute_dataset`` uses)
    for the first and last worker and reads one element of each, so every failure TensorFlow
    would hit at the first training step happens here, with a message naming the fix. Returns the
    policy that was checked. ``policy`` overrides the one set on the dataset.
    """
    num_shards = as_int(num_shards, "num_shards", minimum=1)
    if policy is not None:
        dataset = with_shard_policy(dataset, policy)
    checked = shard_policy(dataset)
    if num_shards == 1 or checked == "off":
        return checked
    failure = _shard_failure(dataset, num_shards)
    if failure is None:
        return checked
    index, error = failure
    # TensorFlow words both failures alike ("not enough ... file(s)"). Under "auto" it shards by
    # file exactly when the pipeline has a file reader, so the graph tells which one fell short.
    files_short = checked == "file" or (checked != "data" and _reads_files(dataset))
    if files_short:
        raise ShardingError(
            f"This dataset cannot be split over {num_shards} workers with the shard policy "
            f"{checked!r}: it reads fewer input files than there are workers, so some workers "
            f"would get no file. Set the shard policy to 'data' (Python: "
            f"with_shard_policy(ds, 'data'); R: dataset_shard_policy(ds, \"data\")), or write "
            f"the data as at least {num_shards} files."
            + (f" (TensorFlow: {_tf_message(error)})" if error is not None else ""))
    if _has_memory_cache(dataset):
        raise ShardingError(
            f"Worker {index} of {num_shards} would get no data with the shard policy {checked!r}. "
            f"Note: this dataset caches in memory (.cache()), and TensorFlow keeps a cache whose "
            f"first pass failed empty: if an earlier attempt on this same dataset failed, create "
            f"the dataset again (with the shard policy 'data') instead of reusing it.")
    raise ShardingError(
        f"Worker {index} of {num_shards} would get no data with the shard policy {checked!r}: the "
        f"dataset has fewer elements (batches) than there are workers. Use more data or a smaller "
        f"batch size, or the shard policy 'off' to give every worker all of it.")


def global_batch_size(per_replica, strategy=None) -> int:
    """``per_replica`` times the number of replicas in sync (of ``strategy``, or the current one)."""
    import tensorflow as tf

    per_replica = as_int(per_replica, "per_replica", minimum=1)
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
    """The number of examples (rows) of an array or a dict/tuple of arrays of equal length."""
    return len(_leaves(structure)[0][1])


def as_arrays(x, y=None, sample_weight=None):
    """``[x, y?, sample_weight?]`` as checked NumPy arrays of equal length, and that length.

    ``x`` (and ``y``) may be one array, a dict of arrays (named inputs) or a list of arrays.
    """
    parts = [("x", _as_structure(x, "x"))]
    for name, value in (("y", y), ("sample_weight", sample_weight)):
        if value is not None:
            parts.append((name, _as_structure(value, name) if name == "y" else _as_array(value, name)))
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
    ``fraction`` of the rows, before any shuffling, batching or sharding."""
    from keras.src.trainers.data_adapters import array_slicing

    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction < 1:
        raise ArgumentTypeError(f"`validation_split` must be a fraction between 0 and 1 (e.g. 0.2), "
                                f"got {fraction!r}.")
    try:
        return array_slicing.train_validation_split(tuple(arrays), validation_split=float(fraction))
    except ValueError as e:
        raise ArgumentTypeError(f"validation_split={fraction}: {e}") from None


def class_weight_to_sample_weight(y, class_weight, sample_weight=None):
    """Per-example weights from Keras' ``class_weight`` (``{class index: weight}``) for integer
    or one-hot targets, multiplied into ``sample_weight`` when both are given."""
    import numpy as np

    y = np.asarray(y)
    labels = y.argmax(axis=-1) if y.ndim > 1 and y.shape[-1] > 1 else y.reshape(len(y), -1)[:, 0]
    try:
        lookup = {int(k): float(v) for k, v in dict(class_weight).items()}
        weights = np.array([lookup[int(label)] for label in labels], dtype=np.float32)
    except KeyError as e:
        raise ArgumentTypeError(f"`class_weight` has no weight for class {e.args[0]}: give a "
                                f"weight for every class index in `y`.") from None
    except (TypeError, ValueError):
        raise ArgumentTypeError("`class_weight` must map class indices to weights, e.g. "
                                "{0: 1.0, 1: 2.5}.") from None
    if sample_weight is not None:
        weights = weights * np.asarray(sample_weight, dtype=np.float32).reshape(len(weights))
    return weights


def make_dataset(x, y=None, *, batch_size, shuffle=False, seed=None, sample_weight=None,
                 policy: str = "data", drop_remainder=False):
    """Arrays (NumPy, pandas, lists) as a batched ``tf.data`` pipeline with a shard policy.

    ``batch_size`` is the *global* batch size. The policy defaults to ``"data"``: arrays held in
    memory have no files to split, so every worker keeps its share of elements.
    """
    import tensorflow as tf

    batch_size = as_int(batch_size, "batch_size", minimum=1)
    arrays, n = as_arrays(x, y, sample_weight)
    # Several inputs without targets stay one element (x,): a bare tuple would read as (x, y).
    dataset = tf.data.Dataset.from_tensor_slices(
        tuple(arrays) if len(arrays) > 1 or isinstance(arrays[0], tuple) else arrays[0])
    if shuffle:
        dataset = dataset.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return with_shard_policy(dataset, policy)


def load_tfds(name, split="train", data_dir=None, *, as_supervised=True, shard_policy=None,
              download=False, **kwargs):
    """A TFDS dataset read with tensorflow-datasets' own loader (``tfds.load``).

    ``download`` defaults to False: in a multi-worker job every process runs this line, and
    several processes downloading into one directory race. Prepare the data once beforehand
    (``tfds.builder(name).download_and_prepare()``), or pass ``download=True`` on one machine.
    ``shard_policy`` sets the auto-shard policy of the returned dataset.

    tensorflow-datasets caches small datasets in memory by itself; unless you pass a
    ``read_config``, that is turned off here: an in-memory cache whose first pass fails (as a
    failed auto-shard does) stays empty for good, so the dataset could not be reused after
    :func:`check_sharding` reported the problem. Add ``.cache()`` yourself after sharding.
    """
    import tensorflow_datasets as tfds

    name = as_str(name, "name")
    kwargs.setdefault("read_config", tfds.ReadConfig(try_autocache=False))
    try:
        dataset = tfds.load(name, split=split, data_dir=data_dir, as_supervised=as_supervised,
                            download=download, **kwargs)
    except (AssertionError, FileNotFoundError, tfds.core.registered.DatasetNotFoundError) as e:
        where = data_dir or os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"
        raise TFDistributedError(
            f"TFDS dataset {name!r} (split {split!r}) is not prepared in {where}: prepare it once "
            f"before training (tfds.builder({name!r}).download_and_prepare(), or "
            f"write_digits_tfds() for the demo data), or pass download=True. ({e})") from None
    if shard_policy is not None:
        dataset = with_shard_policy(dataset, shard_policy)
    return dataset


DIGITS_NAME = "sklearn_digits"


def _digits_builder_class():
    """A real TFDS builder for the digits (a class, so its info carries supervised keys)."""
    import numpy as np
    import tensorflow_datasets as tfds

    class SklearnDigits(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version("1.0.0")

        def __init__(self, *, test_fraction, seed, **kwargs):
            self._arrays = digits_arrays(test_fraction=test_fraction, seed=seed)
            super().__init__(**kwargs)

        @property
        def name(self):
            return DIGITS_NAME

        def _info(self):
            return self.dataset_info_from_configs(
                description="scikit-learn's handwritten digits (8x8), written by "
                            "tfdistributed.write_digits_tfds for demos and tests.",
                features=tfds.features.FeaturesDict({
                    "image": tfds.features.Image(shape=(8, 8, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }),
                supervised_keys=("image", "label"),
            )

        def _split_generators(self, dl_manager):
            (x_train, y_train), (x_test, y_test) = self._arrays
            return {"train": self._generate_examples(x_train, y_train),
                    "test": self._generate_examples(x_test, y_test)}

        def _generate_examples(self, x, y):
            for i, (image, label) in enumerate(zip(x, y)):
                yield i, {"image": (image * 255).round().astype(np.uint8), "label": int(label)}

    return SklearnDigits


def write_digits_tfds(data_dir, *, num_files=1, test_fraction=0.25, seed=0):
    """Write scikit-learn's handwritten digits (1797 8x8 images) as a real TFDS dataset on disk.

    Splits ``train`` and ``test``, each in ``num_files`` TFRecord files (TFDS writes one file per
    split by default: the case where multi-worker FILE sharding fails); images are 8x8x1 uint8
    in 0-255, labels 0-9, supervised keys ``(image, label)``. Read it back with
    ``load_tfds("sklearn_digits", "train", data_dir)``. Returns ``data_dir``; does nothing when
    the dataset is already there.
    """
    import tensorflow_datasets as tfds

    num_files = as_int(num_files, "num_files", minimum=1)
    data_dir = os.fspath(data_dir)
    builder = _digits_builder_class()(data_dir=data_dir, test_fraction=test_fraction, seed=seed)
    if not builder.is_prepared():
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(num_shards=num_files))
    return data_dir


def digits_arrays(*, test_fraction=0.25, seed=0):
    """scikit-learn's digits as ``((x_train, y_train), (x_test, y_test))``: float32 images
    of shape (n, 8, 8, 1) scaled to [0, 1], int32 labels; a seeded, stratified split."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return (x_train, y_train), (x_test, y_test)
