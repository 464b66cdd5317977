"""The sharded files (tfdistributed.data.shards): a table written as TFRecord/CSV shards and read back
by TensorFlow's readers, with the file shard policy, and the mistakes their helpers name."""

import os

import numpy as np
import pytest

import tfdistributed as tfd


@pytest.mark.parametrize("fmt", ["tfrecord", "csv"])
def test_sharded_files_round_trip_and_train(tmp_path, digits, fmt):
    (x, y), _ = digits
    flat = x.reshape(len(x), -1)
    columns = {f"p{i}": flat[:, i].astype(np.float64) for i in range(64)}
    columns["label"] = y
    paths = tfd.write_shards(columns, tmp_path, num_shards=4, format=fmt)
    assert [os.path.basename(p) for p in paths] == [f"part-0000{i}-of-00004.{fmt}" for i in range(4)]
    dataset = tfd.read_shards(tmp_path, "label", batch_size=64)
    assert tfd.shard_policy(dataset) == "file"
    xs, ys = zip(*[(bx.numpy(), by.numpy()) for bx, by in dataset])
    np.testing.assert_allclose(np.concatenate(xs), flat, rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate(ys), y)
    assert tfd.check_sharding(dataset, 4) == "file"
    with pytest.raises(tfd.ShardingError, match="write the data as at least 5 files"):
        tfd.check_sharding(dataset, 5)


def test_file_helpers_name_the_mistake(tmp_path):
    with pytest.raises(tfd.ArgumentTypeError, match="Unknown format 'parquet'"):
        tfd.write_shards({"a": np.zeros(4)}, tmp_path, format="parquet")
    with pytest.raises(tfd.ArgumentTypeError, match="use num_shards <= 2"):
        tfd.write_shards({"a": np.zeros(2)}, tmp_path, num_shards=3)
    tfd.write_shards({"a": np.zeros(4), "b": np.arange(4)}, tmp_path)
    with pytest.raises(tfd.ArgumentTypeError, match="No column 'label'.*a, b"):
        tfd.read_shards(tmp_path, "label", batch_size=2)
    with pytest.raises(tfd.TFDistributedError, match="'.*nowhere' does not exist.*write_shards"):
        tfd.read_shards(tmp_path / "nowhere", "a", batch_size=2)
    (tmp_path / "other").mkdir()
    with pytest.raises(tfd.TFDistributedError, match="has no schema.json"):
        tfd.read_shards(tmp_path / "other", "a", batch_size=2)
