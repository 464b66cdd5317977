"""Tables written as sharded TFRecord/CSV files, and read back as a ``tf.data`` pipeline.

**Why files.** Some input pipelines cannot call R: under ``parameter_server`` each worker's
pipeline runs inside that worker's TensorFlow server, which has no R session, and a
``from_generator`` callback cannot be sent to another process (:mod:`tfdistributed.r.feed`
refuses R generators there and points here). Files written once, before training, are read by
every worker with TensorFlow's own readers (``TFRecordDataset``, ``TextLineDataset``), so the
same data trains under every strategy, and the ``"file"`` shard policy gives each worker whole
files of its own.

:func:`write_shards` writes a table (from R: a data frame) as ``num_shards`` files plus a
``schema.json`` naming the columns and their types; :func:`read_shards` reads such a directory
as batched ``(x, y)``. This module is apart from the R-generator feed because the two share
nothing but their purpose (data bigger than memory): one is files and TensorFlow readers, the
other threads and a queue served from R's main thread.
"""

from __future__ import annotations

import csv
import json
import os

from .._args import as_int, as_str
from .sharding import with_shard_policy
from ..errors import ArgumentTypeError, TFDistributedError

FORMATS = ("tfrecord", "csv")
SCHEMA_FILE = "schema.json"


def _shard_paths(directory, prefix, num_shards, fmt):
    ext = "tfrecord" if fmt == "tfrecord" else "csv"
    return [os.path.join(directory, f"{prefix}-{i:05d}-of-{num_shards:05d}.{ext}")
            for i in range(num_shards)]


def _columns(columns):
    import numpy as np

    if not isinstance(columns, dict) or not columns:
        raise ArgumentTypeError("write_shards() needs columns as a non-empty {name: array} dict "
                                "(from R: a data frame).")
    out, n = {}, None
    for name, values in columns.items():
        array = np.asarray(values)
        if array.ndim != 1 or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
            raise ArgumentTypeError(f"Column {name!r} must be a numeric vector (got dtype "
                                    f"{array.dtype}, {array.ndim} dimensions); convert factors "
                                    f"and strings to numbers first.")
        kind = "int" if np.issubdtype(array.dtype, np.integer) or array.dtype == bool else "float"
        out[str(name)] = (array.astype(np.int64 if kind == "int" else np.float32), kind)
        if n is not None and len(array) != n:
            raise ArgumentTypeError("All columns must have the same length.")
        n = len(array)
    return out, n


def write_shards(columns, directory, num_shards=2, *, format="tfrecord", prefix="part"):
    """Write a table (``{name: 1-D array}``) as ``num_shards`` files for multi-worker reading.

    Rows are split into ``num_shards`` contiguous, nearly equal parts, one file each
    (``part-00000-of-00004.tfrecord``...). ``format`` is ``"tfrecord"`` (one ``tf.train.Example``
    per row, int64 or float features) or ``"csv"`` (with a header). A ``schema.json`` next to the
    files records the columns and their types for :func:`read_shards`. Use at least as many
    files as workers (the ``"file"`` shard policy gives each worker whole files). Returns the
    file paths.
    """
    import numpy as np
    import tensorflow as tf

    fmt = as_str(format, "format").lower()
    if fmt not in FORMATS:
        raise ArgumentTypeError(f"Unknown format {format!r}; use 'tfrecord' or 'csv'.")
    num_shards = as_int(num_shards, "num_shards", minimum=1)
    cols, n = _columns(columns)
    if n < num_shards:
        raise ArgumentTypeError(f"{n} rows cannot fill {num_shards} files; use num_shards <= {n}.")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    paths = _shard_paths(directory, as_str(prefix, "prefix"), num_shards, fmt)
    bounds = np.linspace(0, n, num_shards + 1).round().astype(int)
    names = list(cols)
    for path, start, stop in zip(paths, bounds[:-1], bounds[1:]):
        if fmt == "tfrecord":
            with tf.io.TFRecordWriter(path) as writer:
                for i in range(start, stop):
                    feature = {}
                    for name, (values, kind) in cols.items():
                        if kind == "int":
                            feature[name] = tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[int(values[i])]))
                        else:
                            feature[name] = tf.train.Feature(
                                float_list=tf.train.FloatList(value=[float(values[i])]))
                    example = tf.train.Example(features=tf.train.Features(feature=feature))
                    writer.write(example.SerializeToString())
        else:
            with open(path, "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(names)
                block = [cols[name][0][start:stop] for name in names]
                writer.writerows(zip(*[b.tolist() for b in block]))
    schema = {"format": fmt, "columns": [{"name": k, "type": v[1]} for k, v in cols.items()],
              "files": [os.path.basename(p) for p in paths], "rows": int(n)}
    with open(os.path.join(directory, SCHEMA_FILE), "w") as f:
        json.dump(schema, f, indent=1)
    return paths


def _schema(directory):
    if not os.path.isdir(directory):
        raise TFDistributedError(
            f"Directory {directory!r} does not exist; write the data with its shard writer first.",
            hints={"python": "It is tfdistributed.write_shards().",
                   "r": "It is write_dataset_shards()."})
    path = os.path.join(directory, SCHEMA_FILE)
    if not os.path.isfile(path):
        raise TFDistributedError(
            f"{directory!r} has no {SCHEMA_FILE}: only directories of shards written by this "
            f"package can be read this way; write the data with its shard writer first.",
            hints={"python": "It is tfdistributed.write_shards().",
                   "r": "It is write_dataset_shards()."})
    with open(path) as f:
        return json.load(f)


def read_shards(directory, label, *, batch_size, features=None, shuffle_files=False,
                seed=None, shard_policy="file"):
    """The files written by :func:`write_shards` as a batched ``(x, y)`` ``tf.data.Dataset``.

    Read with TensorFlow's own readers (``TFRecordDataset`` / ``TextLineDataset`` with
    ``decode_csv``), one file after
    the other; ``x`` is a float32 matrix of the ``features`` columns (default: every column
    but ``label``), ``y`` the ``label`` column. The shard policy defaults to ``"file"``: with
    several workers each reads whole files, so it needs at least as many files as workers
    (``fit`` checks that before training: :func:`tfdistributed.check_sharding`).
    ``batch_size`` is the global batch size.
    """
    import tensorflow as tf

    directory = os.fspath(directory)
    schema = _schema(directory)
    types = {c["name"]: c["type"] for c in schema["columns"]}
    label = as_str(label, "label")
    if label not in types:
        raise ArgumentTypeError(f"No column {label!r} in {directory!r}; its columns are "
                                f"{', '.join(types)}.")
    features = [as_str(f, "features") for f in (features or [c for c in types if c != label])]
    unknown = [f for f in features if f not in types]
    if unknown:
        raise ArgumentTypeError(f"Unknown feature column(s) {unknown}; the columns are "
                                f"{', '.join(types)}.")
    batch_size = as_int(batch_size, "batch_size", minimum=1)
    paths = [os.path.join(directory, name) for name in schema["files"]]
    files = tf.data.Dataset.from_tensor_slices(paths)
    if shuffle_files:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    label_dtype = tf.int32 if types[label] == "int" else tf.float32
    if schema["format"] == "tfrecord":
        spec = {name: tf.io.FixedLenFeature([], tf.int64 if kind == "int" else tf.float32)
                for name, kind in types.items()}

        def parse(records):
            parsed = tf.io.parse_example(records, spec)
            x = tf.stack([tf.cast(parsed[f], tf.float32) for f in features], axis=1)
            return x, tf.cast(parsed[label], label_dtype)

        dataset = files.interleave(tf.data.TFRecordDataset, cycle_length=1)
        dataset = dataset.batch(batch_size).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        names = [c["name"] for c in schema["columns"]]
        defaults = [tf.constant(0, tf.int64) if types[n] == "int" else tf.constant(0.0)
                    for n in names]

        def parse(lines):
            values = dict(zip(names, tf.io.decode_csv(lines, defaults)))
            x = tf.stack([tf.cast(values[f], tf.float32) for f in features], axis=1)
            return x, tf.cast(values[label], label_dtype)

        # TextLineDataset, not CsvDataset: TensorFlow's file-level auto-sharding recognises the
        # former as a file reader and refuses the latter ("unshardable source dataset").
        dataset = files.interleave(lambda path: tf.data.TextLineDataset(path).skip(1),
                                   cycle_length=1)
        dataset = dataset.batch(batch_size).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return with_shard_policy(dataset.prefetch(tf.data.AUTOTUNE), shard_policy)


__all__ = ["FORMATS", "SCHEMA_FILE", "read_shards", "write_shards"]
