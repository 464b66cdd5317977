"""Shard policies, the pre-flight shard check, global batch sizes, TFDS loading, arrays."""

import os
import re

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


def test_one_file_split_cannot_be_file_sharded(digits_tfds_dir):
    ds = tfd.load_tfds("sklearn_digits", "train", digits_tfds_dir, shard_policy="file").batch(32)
    with pytest.raises(ShardingError) as info:
        tfd.check_sharding(ds, 2)
    message = str(info.value)
    assert "Set the shard policy to 'data'" in message and "2 workers" in message
    assert "1 file" in message  # TensorFlow's own diagnosis is kept


def test_one_file_split_under_auto_is_sharded_by_data_with_one_notice(digits_tfds_dir):
    """AUTO as TensorFlow documents it: FILE, falling back to DATA (which TensorFlow does not do
    when files are short); said once per data set, naming it, the workers and the choices."""
    import warnings

    ds = tfd.load_tfds("sklearn_digits", "train", digits_tfds_dir).batch(32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tfd.check_sharding(ds, 3) == "data"
        assert tfd.check_sharding(ds, 3, "auto") == "data"  # an explicit "auto" is the default
        sharded = tfd.data.sharding.shard_for_workers(ds, 3, "fit(), the training data")
    assert tfd.shard_policy(sharded) == "data" and tfd.shard_policy(ds) == "auto"
    notices = [w for w in caught if issubclass(w.category, tfd.ShardingWarning)]
    assert len(notices) == 1, [str(w.message) for w in notices]
    message = str(notices[0].message)
    assert message.startswith("This dataset reads 1 file (sklearn_digits-train.tfrecord-")
    assert "for 3 workers" in message and "'file' with >= 3 files" in message
    assert "R: dataset_shard_policy()" in message
    assert notices[0].filename == __file__  # the warning names the user's line


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
    with pytest.raises(ShardingError, match="worker 0 of 3 would get no data"):
        tfd.check_sharding(ds, 3, "data")
    # "auto" without files shards by element, so the same diagnosis applies.
    with pytest.raises(ShardingError, match="fewer elements"):
        tfd.check_sharding(ds, 3)


def test_a_shuffle_without_a_seed_before_the_workers_split_the_data_is_announced(tmp_path):
    """Without a seed TensorFlow draws a shuffle's seeds at random in each process: each worker
    shuffles its own way and keeps its share, so a pass reads some examples twice and others
    never (TensorFlow's own multi-worker tutorial shuffles so). Said once, where the shuffle
    comes before the split: anywhere when sharding by data, on the file names when by file."""
    import warnings

    import tensorflow as tf

    paths = []
    for i in range(2):
        paths.append(str(tmp_path / f"part-{i}.tfrecord"))
        with tf.io.TFRecordWriter(paths[-1]) as writer:
            for j in range(16):
                writer.write(str(16 * i + j).encode())
    pattern = str(tmp_path / "part-*.tfrecord")

    def records(names):
        return names.interleave(tf.data.TFRecordDataset, cycle_length=2).batch(4)

    cases = {
        "unseeded, by data": (lambda: tf.data.Dataset.range(64).shuffle(64).batch(8),
                              "the data"),
        "seeded, by data": (lambda: tf.data.Dataset.range(64).shuffle(64, seed=1).batch(8), None),
        "global seed, by data": (lambda: tf.data.Dataset.range(64).shuffle(64).batch(8), None),
        "after the split": (lambda: records(tf.data.Dataset.list_files(pattern, shuffle=False))
                            .shuffle(16), None),
        "file names": (lambda: records(tf.data.Dataset.list_files(pattern)), "the file names"),
        "file names, seeded": (lambda: records(tf.data.Dataset.list_files(pattern, seed=2)),
                               None),
        "unseeded, off": (lambda: tfd.with_shard_policy(
            tf.data.Dataset.range(64).shuffle(64).batch(8), "off"), None),
    }
    from tensorflow.python.eager import context

    before = context.global_seed()  # another test's, in this pytest worker
    for what, (make, cut) in cases.items():
        tf.random.set_seed(7 if what.startswith("global seed") else None)
        try:
            dataset = make()
        finally:
            tf.random.set_seed(before)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):  # once per data and process
                tfd.data.sharding.shard_for_workers(dataset, 2, what)
        notices = [str(w.message) for w in caught if issubclass(w.category, tfd.ShardingWarning)]
        if cut is None:
            assert notices == [], what
            continue
        assert len(notices) == 1, (what, notices)
        assert notices[0].startswith(f"{what} is shuffled without a seed, then split over 2 "
                                     f"workers: each worker shuffles {cut} its own way"), notices
        assert "Seed it: shuffle(n, seed=42)" in notices[0]


def test_single_worker_needs_no_check():
    import tensorflow as tf

    assert tfd.check_sharding(tf.data.Dataset.range(1), 1) == "auto"


def test_global_batch_size():
    assert tfd.global_batch_size(32, tfd.make_strategy("mirrored")) == 64
    assert tfd.global_batch_size(32, tfd.make_strategy("default")) == 32
    with pytest.raises(tfd.ArgumentTypeError, match="pass 32 ") as info:
        tfd.global_batch_size(32.0, tfd.make_strategy("default"))
    r_message = info.value.message_for("r") if hasattr(info.value, "message_for") else \
        str(info.value)
    assert "32L" in r_message  # R users are shown R's way of writing it
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
    """The pre-flight reads a copy without caches: tfds.load() caches small data sets in memory
    by default, and a cache whose first pass failed or stopped early stays empty for good."""
    import tensorflow_datasets as tfds

    ds = tfds.load("sklearn_digits", split="train", data_dir=digits_tfds_dir, as_supervised=True)
    with pytest.raises(ShardingError, match="'data'"):
        tfd.check_sharding(ds, 2, "file")
    assert tfd.check_sharding(ds, 2) == "data"
    assert sum(1 for _ in ds) == 1347


def test_poisoned_cache_is_explained():
    import tensorflow as tf

    ds = tf.data.Dataset.range(10).cache()
    for _ in ds:  # a completed first pass fills the cache
        pass
    ds = ds.filter(lambda x: x > 100).batch(2)  # and nothing survives the filter
    with pytest.raises(ShardingError, match="caches in memory"):
        tfd.check_sharding(ds, 2, "data")


# --- the input plan: one set of rules for the collective and the parameter-server paths --------

KINDS = [dict(kind="mirrored", replicas=2, workers=1),
         dict(kind="multi_worker_mirrored", replicas=2, workers=2),
         dict(kind="parameter_server", replicas=1, workers=2)]


def _arrays(n=40):
    x = np.arange(n * 2, dtype="float64").reshape(n, 2)
    return x, np.arange(n) % 3, np.linspace(0.5, 1.5, n)


@pytest.mark.parametrize("where", KINDS, ids=lambda k: k["kind"])
def test_plan_batches_arrays_with_keras_default(where):
    from tfdistributed.data.arrays import DEFAULT_BATCH_SIZE
    from tfdistributed.data.plan import plan_input

    x, y, _ = _arrays(70)
    plan = plan_input("fit", x, y, **where)
    assert plan.source == "arrays" and plan.num_examples == 70
    assert plan.global_batch == DEFAULT_BATCH_SIZE == 32
    assert plan.per_replica_batch == 32 // where["replicas"]
    if where["kind"] != "parameter_server":
        assert [int(b[0].shape[0]) for b in plan.dataset()] == [32, 32, 6]
    assert plan.steps_per_epoch() == 2
    assert plan_input("fit", x, y, batch_size=64, **where).per_replica_batch == \
        64 // where["replicas"]


@pytest.mark.parametrize("where", KINDS, ids=lambda k: k["kind"])
def test_plan_validation_data_keeps_its_sample_weights(where):
    from tfdistributed.data.plan import plan_input

    x, y, w = _arrays()
    plan = plan_input("fit", x, y, validation_data=(x[:10], y[:10], w[:10]), batch_size=4,
                      **where)
    x_val, y_val, w_val = plan.validation
    assert plan.validation_source == "arrays"
    np.testing.assert_array_equal(w_val, w[:10].astype("float32"))
    batches = list(plan.validation_dataset())
    assert [len(b) for b in batches] == [3, 3, 3]  # (x, y, sample_weight) in every batch
    np.testing.assert_allclose(np.concatenate([b[2] for b in batches]), w[:10], rtol=1e-6)
    two_parts = plan_input("fit", x, y, validation_data=[x[:10], y[:10]], batch_size=4, **where)
    assert two_parts.validation[2] is None
    assert all(len(b) == 2 for b in two_parts.validation_dataset())


@pytest.mark.parametrize("where", KINDS, ids=lambda k: k["kind"])
def test_plan_refuses_alike_on_every_path(where):
    import tensorflow as tf

    from tfdistributed.data.plan import plan_input

    x, y, _ = _arrays()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    with pytest.raises(tfd.ArgumentTypeError, match="already holds the targets"):
        plan_input("fit", ds, y, **where)
    with pytest.raises(tfd.ArgumentTypeError, match="applies to arrays only"):
        plan_input("fit", ds, batch_size=4, **where)
    with pytest.raises(tfd.ArgumentTypeError, match="validation_split works with arrays only"):
        plan_input("fit", ds, validation_split=0.2, **where)
    with pytest.raises(tfd.ArgumentTypeError, match="validation_data must be .* of length 1"):
        plan_input("fit", x, y, validation_data=(x,), **where)
    with pytest.raises(tfd.ArgumentTypeError, match="needs data"):
        plan_input("evaluate", None, **where)
    if where["replicas"] > 1:
        with pytest.raises(tfd.TrainingError, match="use 62 .*or 64"):
            plan_input("fit", x, y, batch_size=63, **where)


def test_plan_validation_split_takes_the_last_rows_of_every_part():
    from tfdistributed.data.plan import plan_input

    x, y, w = _arrays()
    plan = plan_input("fit", x, y, sample_weight=w, validation_split=0.25, kind="default")
    assert plan.num_examples == 30 and len(plan.y) == len(plan.sample_weight) == 30
    x_val, y_val, w_val = plan.validation
    np.testing.assert_array_equal(x_val, x[30:].astype("float32"))
    np.testing.assert_array_equal(y_val, y[30:])
    np.testing.assert_allclose(w_val, w[30:], rtol=1e-6)
    # Without targets, the weights stay weights (they are not taken for `y`).
    no_y = plan_input("fit", x, sample_weight=w, validation_split=0.25, kind="default")
    assert no_y.y is None and len(no_y.sample_weight) == 30
    assert no_y.validation[1] is None and len(no_y.validation[2]) == 10
    # validation_data wins over validation_split, as in Keras.
    both = plan_input("fit", x, y, validation_split=0.25, validation_data=(x[:5], y[:5]),
                      kind="default")
    assert both.num_examples == 40 and len(both.validation[0]) == 5
    assert plan.validation_source == no_y.validation_source == both.validation_source == "arrays"
    assert plan_input("fit", x, y, kind="default").validation_source is None


@pytest.mark.parametrize("where", KINDS, ids=lambda k: k["kind"])
def test_plan_class_weight(where):
    import tensorflow as tf

    from tfdistributed.data.plan import plan_input

    x, y, w = _arrays()
    plan = plan_input("fit", x, y, sample_weight=w, class_weight={0: 1.0, 1: 2.0, 2: 3.0},
                      **where)
    assert plan.class_weight is None
    np.testing.assert_allclose(plan.sample_weight, w * (1 + y), rtol=1e-6)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    if where["kind"] == "parameter_server":
        with pytest.raises(tfd.ArgumentTypeError, match="class_weight works with arrays"):
            plan_input("fit", ds, class_weight={0: 1.0}, **where)
    else:  # Keras applies it to the dataset's batches
        assert plan_input("fit", ds, class_weight={0: 1.0}, **where).class_weight == {0: 1.0}


def test_plan_dataset_function_is_for_parameter_server_fit_only():
    from tfdistributed.data.plan import plan_input

    def dataset_fn(context):
        raise AssertionError("not called by the plan")

    plan = plan_input("fit", dataset_fn, kind="parameter_server", workers=2)
    assert plan.source == "function"
    with pytest.raises(tfd.TrainingError, match="steps_per_epoch"):
        plan.steps_per_epoch()
    assert plan.steps_per_epoch(7) == 7
    with pytest.raises(tfd.ArgumentTypeError, match="builds its own targets"):
        plan_input("fit", dataset_fn, np.zeros(3), kind="parameter_server")
    with pytest.raises(tfd.ArgumentTypeError, match="for fit\\(\\) under 'parameter_server'"):
        plan_input("fit", dataset_fn, kind="mirrored", replicas=2)


def test_plan_checks_shards_of_a_multi_worker_dataset(digits_tfds_dir):
    from tfdistributed.data.plan import plan_input

    train = tfd.load_tfds("sklearn_digits", "train", digits_tfds_dir).batch(32)
    plan = plan_input("fit", train, kind="multi_worker_mirrored", workers=2, shard_policy="file")
    with pytest.raises(ShardingError, match="fit\\(\\), the training data cannot .*'data'"):
        plan.dataset()
    # "auto" (the dataset's own) falls back to sharding by data, as TensorFlow documents it.
    assert tfd.shard_policy(plan_input("fit", train, kind="multi_worker_mirrored",
                                       workers=2).dataset()) == "data"
    assert tfd.shard_policy(plan_input("fit", train, kind="multi_worker_mirrored", workers=2,
                                       shard_policy="data").dataset()) == "data"
    # The parameter-server chief evaluates by itself: nothing to shard there.
    on_chief = plan_input("evaluate", train, kind="parameter_server", workers=2,
                          validation_data=train)
    assert on_chief.chief_reads_whole_input and on_chief.validation_source == "dataset"
    assert on_chief.dataset() is train and on_chief.validation_dataset() is train


def test_parameter_server_epochs_of_arrays_that_do_not_divide_are_announced(caplog):
    """A parameter-server epoch is whole global batches of a repeating input: with 70 examples
    at 32, epochs do not end where one device's do, and the log says so with the fix."""
    import logging

    from tfdistributed.data.plan import plan_input

    x, y, _ = _arrays(70)
    with caplog.at_level(logging.WARNING, logger="tfdistributed.data"):
        assert plan_input("fit", x, y, kind="parameter_server", batch_size=32).steps_per_epoch() == 2
        assert plan_input("fit", x[:64], y[:64], kind="parameter_server",
                          batch_size=32).steps_per_epoch() == 2
    [record] = caplog.records
    assert "an epoch is 2 whole global batches of 32 (64 of the 70 examples)" in record.getMessage()
    assert "use a batch_size that divides 70" in record.getMessage()


def test_digits_arrays_ship_with_the_package_split_by_class():
    """The default split is the shipped one (scikit-learn's, seed 0): 1347 + 450 images, every
    image once, each class split a quarter for testing, the same at every call."""
    (x, y), (xt, yt) = tfd.digits_arrays()
    assert x.shape == (1347, 8, 8, 1) and xt.shape == (450, 8, 8, 1)
    assert x.dtype == xt.dtype == np.float32 and y.dtype == yt.dtype == np.int32
    assert 0.0 <= x.min() and x.max() == 1.0 and sorted(set(y.tolist())) == list(range(10))
    counts, test_counts = np.bincount(y, minlength=10), np.bincount(yt, minlength=10)
    assert np.all(np.abs(test_counts - 0.25 * (counts + test_counts)) <= 1)
    with np.load(os.path.join(os.path.dirname(tfd.__file__), "data", "digits.npz")) as f:
        images = f["images"]
    every = np.concatenate([x, xt])[..., 0] * 16
    assert sorted(map(bytes, every.astype(np.uint8))) == sorted(map(bytes, images))
    again = tfd.digits_arrays(test_fraction=0.25, seed=0)
    for got, want in zip((*again[0], *again[1]), (x, y, xt, yt)):
        assert np.array_equal(got, want)


def test_other_digit_splits_are_stratified_and_seeded():
    (x, y), (xt, yt) = tfd.digits_arrays(test_fraction=0.1, seed=1)
    assert len(x) + len(xt) == 1797 and 170 <= len(xt) <= 190
    whole = np.bincount(y, minlength=10) + np.bincount(yt, minlength=10)
    assert np.array_equal(np.bincount(yt, minlength=10), np.round(0.1 * whole))
    same = tfd.digits_arrays(test_fraction=0.1, seed=1)
    assert np.array_equal(same[1][1], yt) and np.array_equal(same[0][0], x)
    assert not np.array_equal(tfd.digits_arrays(test_fraction=0.1, seed=2)[1][1], yt)
    assert not np.array_equal(tfd.digits_arrays(seed=1)[1][1], tfd.digits_arrays()[1][1])


@pytest.mark.parametrize("kwargs, words", [
    ({"test_fraction": 1.5}, "`test_fraction` must be a number between 0 and 1"),
    ({"test_fraction": True}, "`test_fraction` must be a number between 0 and 1"),
    ({"test_fraction": "0.2"}, "pass e.g. 0.25"),
    ({"test_fraction": 0.0001}, "leaves no example for testing"),
    ({"seed": 1.5}, "seed"),
])
def test_digit_split_arguments_are_checked(kwargs, words):
    with pytest.raises(tfd.ArgumentTypeError, match=re.escape(words)):
        tfd.digits_arrays(**kwargs)


@pytest.mark.parametrize("what", ["fit", "evaluate", "predict"])
def test_plan_checks_arrays_sharded_by_data_from_their_batch_count(what):
    """Arrays sharded by data fail the pre-flight exactly when there are fewer batches than
    workers: the plan says so from the count, in the pre-flight's own words, without reading
    them (which serialized the arrays into the dataset's graph at every call)."""
    from tfdistributed.data.arrays import batched
    from tfdistributed.data.plan import plan_input
    from tfdistributed.data.sharding import shard_for_workers

    def outcome(check, *args):
        try:
            check(*args)
        except ShardingError as e:
            return str(e)
        return None

    label = "the training data" if what == "fit" else "the data"
    refused = []
    for n in (0, 1, 5, 64, 129):
        for batch in (1, 4, 64):
            for workers in (2, 3):
                x, y, _ = _arrays(n)
                plan = plan_input(what, x, None if what == "predict" else y, batch_size=batch,
                                  kind="multi_worker_mirrored", workers=workers)
                read = batched(plan.arrays, n, batch_size=batch, policy="data")
                preflight = outcome(shard_for_workers, read, workers, f"{what}(), {label}")
                assert outcome(plan.dataset) == preflight, (n, batch, workers)
                refused.append(preflight is not None)
    assert any(refused) and not all(refused)


def test_tensorflow_datasets_that_cannot_load_its_protocol_buffers_names_the_fix(tmp_path):
    """TensorFlow 2.18/2.19 (protobuf < 6) beside tensorflow-metadata 1.21 (generated with
    protobuf 6): importing tensorflow_datasets fails with protobuf's VersionError. That
    environment costs a TensorFlow install; here a stand-in tensorflow_datasets raises the
    same error (protobuf's own class and message), and the real import path translates it."""
    import subprocess
    import sys

    fake = tmp_path / "tensorflow_datasets"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "from google.protobuf.runtime_version import VersionError\n"
        "raise VersionError('Detected incompatible Protobuf Gencode/Runtime versions when "
        "loading tensorflow_metadata/proto/v0/anomalies.proto: gencode 6.31.1 runtime 5.29.6.')\n")
    code = ("import tfdistributed as tfd\n"
            "try:\n    tfd.load_tfds('sklearn_digits', data_dir='.')\n"
            "except tfd.TFDistributedError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'pip install "tensorflow-metadata<1.21"' in done.stdout, done.stdout
    assert "TensorFlow 2.18 and 2.19 require protobuf < 6" in done.stdout
