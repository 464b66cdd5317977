"""Shard policies, the pre-flight shard check, global batch sizes, TFDS loading, arrays."""

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed import ShardingError


@pytest.fixture(scope="module")
def digits_two_files(tmp_path_factory):
    return tfd.write_digits_tfds(tmp_path_factory.mktemp("tfds-two-files"), num_files=2)


def _files(data_dir):
    import glob
    import os

    return sorted(glob.glob(os.path.join(data_dir, "sklearn_digits", "1.0.0", "*train.tfrecord*")))


def test_digits_written_as_real_tfds(digits_tfds_dir, digits_two_files):
    assert len(_files(digits_tfds_dir)) == 1
    assert len(_files(digits_two_files)) == 2
    train = tfd.load_tfds("sklearn_digits", "train", digits_tfds_dir)
    test = tfd.load_tfds("sklearn_digits", "test", digits_tfds_dir)
    assert int(train.cardinality()) + int(test.cardinality()) == 1797
    image, label = next(iter(train))
    assert image.shape == (8, 8, 1) and image.dtype.name == "uint8" and 0 <= int(label) <= 9
    # Writing again is a no-op, not an error.
    assert tfd.write_digits_tfds(digits_tfds_dir) == digits_tfds_dir


def test_tfds_missing_dataset_says_how_to_prepare(tmp_path):
    with pytest.raises(tfd.TFDistributedError, match="not prepared.*write_digits_tfds"):
        tfd.load_tfds("sklearn_digits", "train", tmp_path)


@pytest.mark.parametrize("policy", tfd.SHARD_POLICIES)
def test_with_shard_policy_round_trip(policy):
    import tensorflow as tf

    ds = tfd.with_shard_policy(tf.data.Dataset.range(4), policy)
    assert tfd.shard_policy(ds) == policy


def test_unknown_policy():
    import tensorflow as tf

    with pytest.raises(ShardingError, match="Did you mean 'data'"):
        tfd.with_shard_policy(tf.data.Dataset.range(4), "dta")
    with pytest.raises(tfd.ArgumentTypeError, match="tf.data.Dataset"):
        tfd.with_shard_policy([1, 2], "data")


@pytest.mark.parametrize("policy", ["auto", "file"])
def test_one_file_split_cannot_be_file_sharded(digits_tfds_dir, policy):
    ds = tfd.load_tfds("sklearn_digits", "train", digits_tfds_dir, shard_policy=policy).batch(32)
    with pytest.raises(ShardingError) as info:
        tfd.check_sharding(ds, 2)
    message = str(info.value)
    assert "Set the shard policy to 'data'" in message and "2 workers" in message
    assert "1 file" in message  # TensorFlow's own diagnosis is kept


@pytest.mark.parametrize("policy", ["data", "off"])
def test_one_file_split_with_data_or_off(digits_tfds_dir, policy):
    ds = tfd.load_tfds("sklearn_digits", "train", digits_tfds_dir).batch(32)
    assert tfd.check_sharding(ds, 2, policy) == policy


def test_two_files_can_be_file_sharded(digits_two_files):
    ds = tfd.load_tfds("sklearn_digits", "train", digits_two_files).batch(32)
    assert tfd.check_sharding(ds, 2, "file") == "file"
    with pytest.raises(ShardingError, match="3 workers"):
        tfd.check_sharding(ds, 3, "file")


def test_too_few_batches_for_the_workers():
    import tensorflow as tf

    ds = tf.data.Dataset.range(10).batch(8)  # 2 batches
    assert tfd.check_sharding(ds, 2, "data") == "data"
    with pytest.raises(ShardingError, match="Worker 0 of 3 would get no data"):
        tfd.check_sharding(ds, 3, "data")
    # "auto" without files shards by element, so the same diagnosis applies.
    with pytest.raises(ShardingError, match="fewer elements"):
        tfd.check_sharding(ds, 3)


def test_single_worker_needs_no_check():
    import tensorflow as tf

    assert tfd.check_sharding(tf.data.Dataset.range(1), 1) == "auto"


def test_global_batch_size():
    assert tfd.global_batch_size(32, tfd.make_strategy("mirrored")) == 64
    assert tfd.global_batch_size(32, tfd.make_strategy("default")) == 32
    with pytest.raises(tfd.ArgumentTypeError, match="32L"):
        tfd.global_batch_size(32.0, tfd.make_strategy("default"))
    with pytest.raises(tfd.ArgumentTypeError, match=">= 1"):
        tfd.global_batch_size(0)


def test_make_dataset_from_arrays():
    x = np.arange(20, dtype="float64").reshape(10, 2)
    y = np.arange(10)
    ds = tfd.make_dataset(x, y, batch_size=4)
    batches = list(ds)
    assert [int(b[0].shape[0]) for b in batches] == [4, 4, 2]
    assert batches[0][0].dtype.name == "float32"  # float64 arrays are cast for Keras
    assert tfd.shard_policy(ds) == "data"
    with pytest.raises(tfd.ArgumentTypeError, match="10 rows but `y` has 3"):
        tfd.make_dataset(x, y[:3], batch_size=4)
    with pytest.raises(tfd.ArgumentTypeError, match="numeric array"):
        tfd.make_dataset(np.array([{"a": 1}], dtype=object), batch_size=1)


def test_dataset_is_reusable_after_a_failed_check(digits_tfds_dir):
    ds = tfd.load_tfds("sklearn_digits", "train", digits_tfds_dir)
    with pytest.raises(ShardingError, match="'data'"):
        tfd.check_sharding(ds, 2)
    assert tfd.check_sharding(ds, 2, "data") == "data"
    assert sum(1 for _ in ds) == 1347


def test_poisoned_cache_is_explained():
    import tensorflow as tf

    ds = tf.data.Dataset.range(10).cache()
    for _ in ds:  # a completed first pass fills the cache
        pass
    ds = ds.filter(lambda x: x > 100).batch(2)  # and nothing survives the filter
    with pytest.raises(ShardingError, match="caches in memory"):
        tfd.check_sharding(ds, 2, "data")
