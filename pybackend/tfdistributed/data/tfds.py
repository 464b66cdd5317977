"""TFDS datasets read with tensorflow-datasets' own loader, with a shard policy.
"""

from __future__ import annotations

import os

from .._args import as_str
from ..errors import TFDistributedError
from .sharding import with_shard_policy


def import_tfds():
    """``tensorflow_datasets``, or an error naming the fix when its protocol buffers cannot load.

    tensorflow-metadata 1.21 (what pip picks for tensorflow-datasets) is generated with protobuf
    6 while declaring protobuf >= 4.25, and TensorFlow 2.18 and 2.19 require protobuf < 6: in
    such an environment the import fails with protobuf's "incompatible Protobuf Gencode/Runtime
    versions" (make compat found it)."""
    try:
        import tensorflow_datasets as tfds
    except Exception as e:  # protobuf's VersionError, or a TypeError of older protobufs
        if "Gencode/Runtime" not in str(e) and "Descriptors cannot be created" not in str(e):
            raise
        from importlib.metadata import PackageNotFoundError, version

        try:
            protobuf = version("protobuf")
        except PackageNotFoundError:
            protobuf = "?"
        raise TFDistributedError(
            f"tensorflow-datasets cannot load: its tensorflow-metadata was generated with a newer "
            f"protobuf than this environment's ({protobuf}, as TensorFlow 2.18 and 2.19 "
            f"require protobuf < 6). Fix: pip install \"tensorflow-metadata<1.21\" in this "
            f"environment. ({e})") from None
    return tfds


def load_tfds(name, split="train", data_dir=None, *, as_supervised=True, shard_policy=None,
              download=False, **kwargs):
    """A TFDS dataset read with tensorflow-datasets' own loader (``tfds.load``).

    tensorflow-datasets caches small datasets in memory by itself; unless you pass a
    ``read_config``, that is turned off here: an in-memory cache whose first pass fails (as a
    failed auto-shard does) stays empty for good, so the dataset could not be reused after
    :func:`~tfdistributed.data.sharding.check_sharding` reported the problem. Add ``.cache()``
    yourself after sharding.

    Args:
        name: the TFDS name (``"sklearn_digits"`` for :func:`write_digits_tfds`' data).
        split: the split (``"train"``, ``"test"``, TFDS slicing such as ``"train[:80%]"``).
        data_dir: the TFDS data directory; default: ``TFDS_DATA_DIR`` or
            ``~/tensorflow_datasets``.
        as_supervised: ``(input, target)`` pairs instead of feature dicts.
        shard_policy: the auto-shard policy of the returned dataset.
        download: False by default: in a multi-worker job every process runs this line, and
            several processes downloading into one directory race. Prepare the data once
            beforehand (``tfds.builder(name).download_and_prepare()``), or pass
            ``download=True`` on one machine.
        **kwargs: passed to ``tfds.load``.

    Returns:
        The ``tf.data.Dataset`` of the split (unbatched).

    Raises:
        TFDistributedError: the dataset is not prepared in ``data_dir`` (the message says how
            to prepare it).

    Example:
        >>> train = load_tfds("sklearn_digits", "train", data_dir,
        ...                   shard_policy="data")      # doctest: +SKIP
        >>> train = train.map(scale).batch(64)          # doctest: +SKIP
    """
    tfds = import_tfds()
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
