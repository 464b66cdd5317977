"""The AUTO shard policy as TensorFlow documents it ("FILE-based sharding, falling back to
DATA-based sharding") on the fit users already call: plain model.fit/evaluate on a one-file
data set (TFDS writes small splits as one file; a TFRecord file), on 2 launched workers, under
TensorFlow's own MultiWorkerMirroredStrategy and ours, from Python and from R.

Without the pre-flight, the same jobs stop at the first step with TensorFlow's "Could not apply
FILE based sharding: the dataset only has 1 file(s)".
"""

import json
import os
import sys

import numpy as np
import pytest

import tfdistributed as tfd

pytestmark = pytest.mark.cluster
HERE = os.path.dirname(os.path.dirname(__file__))
SCRIPT = os.path.join(HERE, "scripts", "plain_fit_files.py")
R_SCRIPT = os.path.join(HERE, "scripts", "plain_fit_files.R")
ROOT = os.path.dirname(os.path.dirname(HERE))
TIMEOUT = 300
NOTICE = "too few to shard by file: sharded by data"


@pytest.fixture(scope="module")
def one_tfrecord(tmp_path_factory, digits):
    """The digits' training split as one TFRecord file of "x" (8x8x1 in 0-255) and "y"."""
    import tensorflow as tf

    (x, y), _ = digits
    path = str(tmp_path_factory.mktemp("tfrecord") / "digits.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for image, label in zip(x * 255.0, y):
            feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=image.ravel())),
                       "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                         .SerializeToString())
    return path


def run_job(outdir, *args, env=None):
    return tfd.launch(SCRIPT, workers=2, args=[str(outdir), *args], timeout=TIMEOUT, echo=False,
                      env=env)


def notices(result):
    """The sharding notices each worker printed."""
    return [[line for line in task.output if NOTICE in line] for task in result.tasks]


def outputs(outdir):
    out = {}
    for i in (0, 1):
        with np.load(os.path.join(outdir, f"worker-{i}.npz")) as weights:
            out[i] = {"weights": [weights[f"arr_{k}"] for k in range(len(weights.files))],
                      **json.loads((outdir / f"worker-{i}.json").read_text())}
    return out


def assert_trained_alike(outdir):
    """Both workers trained (the loss falls), end with identical weights, evaluate alike and
    predict every example."""
    out = outputs(outdir)
    assert len(out[0]["weights"]) == len(out[1]["weights"]) == 4
    for a, b in zip(out[0]["weights"], out[1]["weights"]):
        np.testing.assert_array_equal(a, b)
    assert out[0]["history"] == out[1]["history"] and out[0]["metrics"] == out[1]["metrics"]
    losses = out[0]["history"]["loss"]
    assert len(losses) == 2 and losses[-1] < losses[0]
    assert out[0]["metrics"]["accuracy"] > 0.5
    assert out[0]["predictions"] == [1347, 10]  # model.predict too: every example, once
    return out


@pytest.fixture(scope="module")
def tensorflow_strategy_tfds(tmp_path_factory, digits_tfds_dir):
    outdir = tmp_path_factory.mktemp("tf-tfds")
    result = run_job(outdir, "--strategy", "tensorflow", "--source", "tfds", "--data",
                     str(digits_tfds_dir), "--validation")
    return result, outdir


def test_tensorflow_strategy_one_file_tfds_trains_with_one_notice(tensorflow_strategy_tfds):
    result, outdir = tensorflow_strategy_tfds
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert_trained_alike(outdir)
    # fit's data, its validation data and evaluate's data are one data set: one notice each.
    for lines in notices(result):
        assert len(lines) == 1, lines
        assert "reads 1 file (sklearn_digits-train.tfrecord-00000-of-00001)" in lines[0]
        assert "for 2 workers" in lines[0] and "ShardingWarning: model.fit(), the training data" \
            in lines[0]


def test_an_explicit_data_policy_is_kept_silently_and_trains_the_same(tmp_path, digits_tfds_dir,
                                                                      tensorflow_strategy_tfds):
    result = run_job(tmp_path, "--strategy", "tensorflow", "--source", "tfds", "--data",
                     str(digits_tfds_dir), "--validation", "--policy", "data")
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert notices(result) == [[], []]
    explicit, fallback = assert_trained_alike(tmp_path), outputs(tensorflow_strategy_tfds[1])
    for a, b in zip(explicit[0]["weights"], fallback[0]["weights"]):
        np.testing.assert_array_equal(a, b)


def test_our_strategy_one_tfrecord_file_trains_with_one_notice(tmp_path, one_tfrecord):
    result = run_job(tmp_path, "--strategy", "ours", "--source", "tfrecord", "--data", one_tfrecord)
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert_trained_alike(tmp_path)
    for lines in notices(result):
        assert len(lines) == 1 and "reads 1 file (digits.tfrecord) for 2 workers" in lines[0], lines


def test_an_explicit_file_policy_gets_our_message_before_the_first_step(tmp_path, one_tfrecord):
    with pytest.raises(tfd.LaunchError) as info:
        run_job(tmp_path, "--strategy", "tensorflow", "--source", "tfrecord", "--data",
                one_tfrecord, "--policy", "file")
    message = str(info.value)
    assert "ShardingError" in message and "model.fit(), the training data cannot be split over " \
        "2 workers with the shard policy 'file'" in message
    assert "Set the shard policy to 'data'" in message
    output = [line for t in info.value.results for line in t.output]
    assert not any("Epoch 1" in line for line in output)
    assert not any(NOTICE in line for line in output)


def test_without_the_pre_flight_the_same_job_stops_at_the_first_step(tmp_path, one_tfrecord):
    """The defect is real: with plain model.fit left as Keras has it, TensorFlow's error."""
    with pytest.raises(tfd.LaunchError) as info:
        run_job(tmp_path, "--strategy", "tensorflow", "--source", "tfrecord", "--data",
                one_tfrecord, env={"TFDISTRIBUTED_DISABLE_COMPAT": "strategy_aware_fit"})
    output = "\n".join(line for t in info.value.results for line in t.output)
    assert "Could not apply FILE based sharding: the dataset only has 1 file(s)" in output
    assert NOTICE not in output


@pytest.mark.parametrize("strategy,source", [("tensorflow", "tfds"), ("ours", "tfrecord")])
def test_r_model_fit_on_one_file_trains_with_one_notice(tmp_path, digits_tfds_dir, one_tfrecord,
                                                         strategy, source):
    """From R: Keras' own model$fit() and model$evaluate() in an Rscript worker."""
    data = str(digits_tfds_dir) if source == "tfds" else one_tfrecord
    result = tfd.launch(R_SCRIPT, workers=2, args=[str(tmp_path), data, strategy, source],
                        timeout=TIMEOUT, echo=False,
                        env={"R_LIBS": os.path.join(ROOT, ".rlib"),
                             "RETICULATE_PYTHON": sys.executable})
    assert [t.returncode for t in result.tasks] == [0, 0]
    reports = [json.loads((tmp_path / f"worker-{i}.json").read_text()) for i in (0, 1)]
    assert reports[0] == reports[1] and len(reports[0]["weights"]) == 4
    assert reports[0]["loss"][-1] < reports[0]["loss"][0] and reports[0]["accuracy"] > 0.5
    name = "sklearn_digits-train.tfrecord" if source == "tfds" else "digits.tfrecord"
    for lines in notices(result):
        assert len(lines) == 1 and f"model.fit(), the training data reads 1 file ({name}" \
            in lines[0], lines
