"""Shard policies, and the pre-flight every entry point runs before a multi-worker job reads a
dataset.

With several workers, TensorFlow *auto-shards* each worker's copy of the dataset:

- ``"file"``: each worker reads a subset of the input files. Needs at least as many files as
  workers, otherwise TensorFlow fails at the first step ("Could not apply FILE based sharding:
  the dataset only has 1 file(s), which is not enough for the required 2 shards/workers").
- ``"data"``: each worker reads everything and keeps every n-th element. Always works.
- ``"auto"`` (TensorFlow's default): ``"file"`` when the pipeline reads files, else ``"data"``.
  TensorFlow documents it as "FILE-based sharding, falling back to DATA-based sharding", yet
  does not fall back when there are fewer files than workers (TFDS writes a small split as
  one file): here it does, and says so once per data set and process (a
  :class:`~tfdistributed.errors.ShardingWarning`, naming the files, the workers, and how to
  choose; a Python warning reaches R's console too, where reticulate shows Python's output).
- ``"hint"``: shard where ``dataset.shard(SHARD_HINT, ...)`` says.
- ``"off"``: no sharding; every worker sees every element.

Each worker builds its own copy of the pipeline, so a shuffle before the split must shuffle
alike everywhere: with no seed (``shuffle(n)`` in a program that set no global seed,
``list_files()``' default), TensorFlow draws one at random in each process, each worker keeps
its share of its own order, and a pass over the data reads some examples twice and others
never. The pre-flight says so once (a :class:`~tfdistributed.errors.ShardingWarning`): for any
such shuffle when sharding by data, for one of the file names when by file.

A policy set explicitly is kept: an explicit ``"file"`` that cannot work is our
:class:`~tfdistributed.errors.ShardingError`, naming the fix. tf.data cannot tell an explicit
``"auto"`` from the default (the options travel in a proto whose enum field defaults to AUTO,
and ``dataset.options()`` reads them back from it), so ``"auto"`` is always treated as the
default: for TensorFlow's own behaviour without the fall-back, choose ``"file"``.

:func:`shard_for_workers` is the pre-flight, one implementation for every entry point (our
``fit``/``evaluate``/``predict`` through :mod:`tfdistributed.data`'s input plan, plain
``model.fit``/``evaluate``/``predict`` through :mod:`tfdistributed.training.routing`, and
:func:`check_sharding`): it runs TensorFlow's own auto-shard rewrite for the first and the last
worker and reads one element of each, once per call, before the first step.
"""

from __future__ import annotations

import os
import re
import sys
import warnings

from .._args import as_int, as_str
from ..errors import ArgumentTypeError, ShardingError, ShardingWarning, did_you_mean

SHARD_POLICIES = ("auto", "file", "data", "off", "hint")

# (files, workers) of the data sets already announced as sharded by data: once per process.
_ANNOUNCED: set = set()


def _policy_enum(policy: str):
    import tensorflow as tf

    policy = as_str(policy, "policy")
    key = policy.lower()
    if key not in SHARD_POLICIES:
        raise ShardingError(f"Unknown shard policy {policy!r}; use one of "
                            f"{', '.join(SHARD_POLICIES)}.{did_you_mean(policy, SHARD_POLICIES)}")
    return getattr(tf.data.experimental.AutoShardPolicy, key.upper())


def with_shard_policy(dataset, policy: str):
    """``dataset`` with its auto-shard policy set to ``policy`` (see the module docstring).

    Args:
        dataset: a ``tf.data.Dataset``.
        policy: ``"auto"``, ``"file"``, ``"data"``, ``"off"`` or ``"hint"`` (any case).
            ``"auto"`` cannot be told from no policy at all, so it means the default.

    Returns:
        The dataset with the policy in its options (the elements are unchanged).

    Raises:
        ArgumentTypeError: ``dataset`` is not a ``tf.data.Dataset``.
        ShardingError: an unknown policy (the message names the closest one).

    Example:
        >>> ds = with_shard_policy(tf.data.Dataset.range(8).batch(2), "data")    # doctest: +SKIP
        >>> shard_policy(ds)                                                  # doctest: +SKIP
        'data'
    """
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise ArgumentTypeError(
            f"with_shard_policy() needs a tf.data.Dataset, got {type(dataset).__name__}.")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = _policy_enum(policy)
    return dataset.with_options(options)


def shard_policy(dataset) -> str:
    """The auto-shard policy name set on ``dataset`` ("auto" when none was set).

    Args:
        dataset: a ``tf.data.Dataset``.

    Returns:
        One of :data:`SHARD_POLICIES`.

    Example:
        >>> shard_policy(tf.data.Dataset.range(4))    # doctest: +SKIP
        'auto'
    """
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


_READER_OPS = ("TFRecordDataset", "FixedLengthRecordDataset", "TextLineDataset",
               "ArrayRecordDataset", "CSVDataset", "ExperimentalCSVDataset")


def _graph(dataset):
    from tensorflow.core.framework import graph_pb2

    return graph_pb2.GraphDef.FromString(dataset._as_serialized_graph().numpy())


def _dataset_ops(graph) -> list[str]:
    """The op types of a dataset's graph, including those inside its functions (map...)."""
    ops = [node.op for node in graph.node]
    for function in graph.library.function:
        ops += [node.op for node in function.node_def]
    return ops


def _input_files(graph) -> list[str]:
    """The files a dataset's graph names (its string constants that are files on this
    machine), to say which data set a notice is about; TensorFlow's rewrite counts them."""
    from tensorflow.python.framework import dtypes

    names = []
    for node in graph.node:
        tensor = node.attr["value"].tensor if node.op == "Const" else None
        if tensor is None or tensor.dtype != dtypes.string.as_datatype_enum:
            continue
        for value in tensor.string_val:
            name = value.decode("utf-8", "replace")
            if os.path.isabs(name) and os.path.isfile(name) and name not in names:
                names.append(name)
    return names


def _without_caches(dataset, graph):
    """``dataset`` rebuilt from its graph without its ``.cache()`` steps, for the pre-flight to
    read (the same elements). TensorFlow keeps a cache whose first pass failed or stopped early
    empty for good, and the pre-flight's reads do both: a rewrite short of files fails at the
    first read (a shard of the file list), and one element is read of each shard. Reading the
    dataset itself would leave the training with no data (``tfds.load`` caches small data sets
    in memory by default). None when the graph cannot be rebuilt: that dataset goes unchecked,
    to TensorFlow as it would without tfdistributed."""
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops

    caches = {node.name: node.input[0] for node in graph.node if node.op.startswith("CacheDataset")}
    if not caches:
        return dataset

    def upstream(name):
        while name in caches:
            name = caches[name].split(":")[0]
        return name

    for node in graph.node:
        inputs = [upstream(i.split(":")[0]) if i.split(":")[0] in caches else i
                  for i in node.input if not (i.startswith("^") and i[1:] in caches)]
        del node.input[:]
        node.input.extend(inputs)
    kept = [node for node in graph.node if node.name not in caches]
    del graph.node[:]
    graph.node.extend(kept)
    try:
        variant = tf.raw_ops.DatasetFromGraph(graph_def=graph.SerializeToString())
    except tf.errors.OpError:
        return None  # not rebuildable here: left unchecked rather than emptied
    return dataset_ops._VariantDataset(variant, dataset.element_spec)


def _shard_failure(dataset, num_shards, graph=None):
    """TensorFlow's error for the first worker whose shard cannot be built, or None.

    Checks the first and the last worker: the rewrite fails for the first when files are
    short, and the last gets the empty remainder when elements are short. Reads a copy without
    caches (:func:`_without_caches`), never ``dataset`` itself. ``graph``: the dataset's, when
    the caller has it (left as it is).
    """
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.distribute import input_ops

    if graph is None:
        graph = _graph(dataset)
    else:
        graph, given = graph_pb2.GraphDef(), graph
        graph.CopyFrom(given)
    dataset = _without_caches(dataset, graph)
    if dataset is None:
        return None
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


def _announce_data_sharding(graph, error, workers: int, what: str) -> None:
    """The notice of AUTO falling back to DATA, once per data set (its files) and process."""
    files = _input_files(graph)
    counted = re.search(r"only has (\d+) file", str(error or ""))
    count = int(counted.group(1)) if counted else len(files)
    key = (tuple(files) or what, workers)
    if key in _ANNOUNCED:
        return
    _ANNOUNCED.add(key)
    shown = ", ".join(os.path.basename(f) for f in files[:2]) + (
        f" and {len(files) - 2} more" if len(files) > 2 else "")
    # Short: a launched task's output shows the first 400 characters of a line.
    warnings.warn(
        f"{what} reads {count} file{'' if count == 1 else 's'} ({shown or '?'}) for {workers} "
        f"workers, too few to shard by file: sharded by data, as TensorFlow documents 'auto'. "
        f"To choose, set the shard policy (with_shard_policy(); R: dataset_shard_policy()): "
        f"'data' (no notice), 'off', or 'file' with >= {workers} files.",
        ShardingWarning, stacklevel=_user_stacklevel())


_SHUFFLE_OPS = ("ShuffleDataset", "ShuffleAndRepeatDataset")
# Where a file-based shard cuts a pipeline: a reader's file names, or the file names an
# interleave or flat_map opens readers on.
_FILE_CUT_OPS = _READER_OPS + ("InterleaveDataset", "ParallelInterleaveDataset",
                               "LegacyParallelInterleaveDataset", "FlatMapDataset")


def _shuffled_apart(graph, by_file: bool) -> bool:
    """Whether each worker would shuffle in an order of its own before the data is split: a
    shuffle with no seed (TensorFlow then draws its seeds at random in every process; seeds
    from ``shuffle(seed=)`` or from a global seed are the same in every worker running the
    same program) upstream of where the policy cuts. Sharding by data cuts after the whole
    pipeline; by file, the file names (``list_files()`` shuffles them by default)."""
    from tensorflow.python.framework import tensor_util

    nodes = {node.name: node for node in graph.node}

    def const(name):
        node = nodes.get(name.split(":")[0])
        return None if node is None or node.op != "Const" else \
            tensor_util.MakeNdarray(node.attr["value"].tensor).item()

    def unseeded(node):
        return node.op.startswith(_SHUFFLE_OPS) and len(node.input) >= 4 \
            and const(node.input[2]) == 0 and const(node.input[3]) == 0

    if not by_file:
        return any(unseeded(node) for node in graph.node)
    for cut in (node for node in graph.node if node.op.startswith(_FILE_CUT_OPS)):
        name = cut.input[0] if cut.input else None
        while name is not None and name.split(":")[0] in nodes:
            node = nodes[name.split(":")[0]]
            if unseeded(node):
                return True
            name = node.input[0] if node.input and node.op.endswith(("Dataset", "DatasetV2",
                                                                      "DatasetV3")) else None
    return False


def _announce_shuffled_apart(workers: int, what: str, by_file: bool) -> None:
    """The notice of a pipeline each worker shuffles its own way, once per data and process."""
    key = ("shuffled apart", what, workers)
    if key in _ANNOUNCED:
        return
    _ANNOUNCED.add(key)
    # Short: a launched task's output shows the first 400 characters of a line.
    warnings.warn(
        f"{what} is shuffled without a seed, then split over {workers} workers: each worker "
        f"shuffles {'the file names' if by_file else 'the data'} its own way, so a pass reads "
        f"some examples twice and others never. Seed it: shuffle(n, seed=42), or the same "
        f"keras.utils.set_random_seed(42) on every worker.", ShardingWarning,
        stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The ``stacklevel`` naming the user's call (the first frame outside tfdistributed, Keras
    and TensorFlow) in the warning, else the outermost frame (a call from R)."""
    internal = tuple(os.path.dirname(module.__file__) + os.sep
                     for module in (sys.modules.get(n)
                                    for n in ("tfdistributed", "keras", "tensorflow"))
                     if getattr(module, "__file__", None))
    frame, level = sys._getframe(2), 2  # 1: _announce_data_sharding, 2: its caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(internal):
        frame, level = frame.f_back, level + 1
    return level


def _files_short(policy: str, graph) -> bool:
    """Whether a failed rewrite is short of files: TensorFlow words both failures alike ("not
    enough ... file(s)"); under "auto" it shards by file exactly when the pipeline has a file
    reader, so the graph tells which one fell short."""
    return policy == "file" or (policy != "data"
                                and any(op.startswith(_READER_OPS) for op in _dataset_ops(graph)))


def shard_for_workers(dataset, workers, what: str = "This dataset"):
    """The dataset as the workers of a multi-worker job will shard it, checked before the first
    step: the pre-flight of every entry point (see the module docstring).

    Under ``"auto"``, a pipeline that reads fewer files than there are workers comes back with
    the ``"data"`` policy, announced once; every other policy comes back unchanged. A shuffle
    without a seed before the split is announced once too (see the module docstring).

    Args:
        dataset: the ``tf.data.Dataset`` each worker would read (batched as for training).
        workers: the number of workers (input pipelines); under 2 nothing is checked.
        what: how messages name the data (e.g. ``"model.fit(), the training data"``).

    Returns:
        The dataset to train on.

    Raises:
        ShardingError: some worker would get no file (an explicit ``"file"`` policy) or no
            element; the message says what to change.
        ArgumentTypeError: ``workers`` is not a whole number >= 1.

    Example:
        >>> train = shard_for_workers(
        ...     load_tfds("sklearn_digits", "train", d).batch(64), 2)  # doctest: +SKIP
        >>> shard_policy(train)  # one file: sharded by data, and a notice says so  # doctest: +SKIP
        'data'
    """
    workers = as_int(workers, "workers", minimum=1)
    policy = shard_policy(dataset)
    if workers == 1 or policy == "off":
        return dataset
    graph = _graph(dataset)
    failure = _shard_failure(dataset, workers, graph)
    if failure is not None and policy == "auto" and _files_short(policy, graph):
        _announce_data_sharding(graph, failure[1], workers, what)
        dataset = with_shard_policy(dataset, "data")
        policy, failure = "data", _shard_failure(dataset, workers)
    if failure is None:
        if policy in ("data", "file", "auto"):
            by_file = policy != "data" and _files_short(policy, graph)
            if _shuffled_apart(graph, by_file):
                _announce_shuffled_apart(workers, what, by_file)
        return dataset
    raise _sharding_error(what, policy, workers, failure, _files_short(policy, graph),
                          any(op.startswith("CacheDataset") for op in _dataset_ops(graph)))


def check_batches_for_workers(batches: int, workers, what: str = "This dataset") -> None:
    """The pre-flight of :func:`shard_for_workers` for arrays batched in memory and sharded by
    data, from their number of batches, without reading them.

    Sharding by data, each worker keeps every ``workers``-th batch: the pre-flight refuses such
    a dataset exactly when it has fewer batches than workers (TensorFlow's rewrite then leaves
    worker 0 without data), and this says so in the same words (``test_data.py`` compares the
    two). Reading the dataset to find that out serializes the arrays into its graph and runs
    TensorFlow's shard rewrite twice, at every ``fit``/``evaluate``/``predict`` of arrays in a
    multi-worker job: work that grows with the data.

    Args:
        batches: global batches in one pass over the arrays.
        workers: the number of workers (input pipelines); under 2 nothing is checked.
        what: how the message names the data.

    Raises:
        ShardingError: some worker would get no batch.
    """
    workers = as_int(workers, "workers", minimum=1)
    if workers > 1 and batches < workers:
        raise _sharding_error(what, "data", workers, (0, None), False, False)


def _sharding_error(what, policy, workers, failure, files_short, memory_cache) -> ShardingError:
    index, error = failure
    if files_short:
        return ShardingError(
            f"{what} cannot be split over {workers} workers with the shard policy "
            f"{policy!r}: it reads fewer input files than there are workers, so some workers "
            f"would get no file. Set the shard policy to 'data', or write "
            f"the data as at least {workers} files."
            + (f" (TensorFlow: {_tf_message(error)})" if error is not None else ""),
            hints={"python": "E.g. with_shard_policy(ds, 'data').",
                   "r": 'E.g. dataset_shard_policy(ds, "data").'})
    if memory_cache:
        return ShardingError(
            f"{what}: worker {index} of {workers} would get no data with the shard policy "
            f"{policy!r}. Note: this dataset caches in memory (.cache()), and TensorFlow keeps a "
            f"cache whose first pass failed empty: if an earlier attempt on this same dataset "
            f"failed, create the dataset again (with the shard policy 'data') instead of "
            f"reusing it.")
    return ShardingError(
        f"{what}: worker {index} of {workers} would get no data with the shard policy {policy!r}: "
        f"the dataset has fewer elements (batches) than there are workers. Use more data or a "
        f"smaller batch size, or the shard policy 'off' to give every worker all of it.")


def check_sharding(dataset, num_shards, policy: str | None = None) -> str:
    """Predict, before training, how ``dataset`` will be sharded over ``num_shards`` workers.

    Runs the pre-flight of every entry point (:func:`shard_for_workers`): TensorFlow's own
    auto-shard rewrite (the one ``experimental_distribute_dataset`` uses) for the first and last
    worker, reading one element of each, so every failure TensorFlow would hit at the first
    training step happens here, with a message naming the fix.

    Args:
        dataset: the ``tf.data.Dataset`` each worker would read (batched as for training).
        num_shards: the number of workers (input pipelines).
        policy: a shard policy that overrides the one set on the dataset.

    Returns:
        The policy the workers will shard by: the one checked, or ``"data"`` where ``"auto"``
        falls back to it (too few files; announced once).

    Raises:
        ShardingError: some worker would get no file (an explicit ``"file"`` policy) or no
            element; the message says what to change (usually: set the shard policy to
            ``"data"``).
        ArgumentTypeError: ``num_shards`` is not a whole number >= 1.

    Example:
        >>> train = load_tfds("sklearn_digits", "train", data_dir).batch(64)   # doctest: +SKIP
        >>> check_sharding(train, 2)    # one file per split: sharded by data  # doctest: +SKIP
        'data'
        >>> check_sharding(train, 2, "file")                   # doctest: +SKIP
        ShardingError: ... Set the shard policy to 'data' ...
    """
    num_shards = as_int(num_shards, "num_shards", minimum=1)
    if policy is not None:
        dataset = with_shard_policy(dataset, policy)
    return shard_policy(shard_for_workers(dataset, num_shards))
