"""The AUTO shard policy as TensorFlow documents it ("FILE-based sharding, falling back to
DATA-based sharding") on the fit users already call: plain model.fit/evaluate on a one-file
data set (TFDS writes small splits as one file; a TFRecord file), on 2 launched workers, under
TensorFlow's own MultiWorkerMirroredStrategy and ours, from Python and from R.

Without the pre-flight, the same jobs stop at the first step with TensorFlow's "Could not apply
FILE based sharding: the dataset only has 1 file(s)".

Every job costs two TensorFlow start-ups and a join, so the variants under TensorFlow's own
strategy with the repairs in place share one job (``tensorflow_strategy_runs``); a variant
keeps a job of its own when it needs another process: another strategy (a process builds one
multi-worker strategy, see scripts/plain_fit_files.py), a repair switched off from the start,
or R.
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


def spec(name, source, data, policy=None, validation=False, uncaught=False):
    """One run of scripts/plain_fit_files.py (its --run)."""
    return json.dumps({"name": name, "source": source, "data": str(data), "policy": policy,
                       "validation": validation, "uncaught": uncaught})


def run_job(outdir, strategy, *runs, env=None, timeout=TIMEOUT):
    args = [str(outdir), "--strategy", strategy]
    for run in runs:
        args += ["--run", run]
    return tfd.launch(SCRIPT, workers=2, args=args, timeout=timeout, env=env,
                      watch=tfd.Watch(echo=False))


def run_output(task, run):
    """The lines ``task`` printed in the run ``run``: after its mark, before the next one."""
    lines, inside = [], False
    for line in task.output:
        if line.startswith("=== run "):
            inside = line.strip() == f"=== run {run} ==="
        elif inside:
            lines.append(line)
    return lines


def notices(tasks, run=None):
    """The sharding notices each worker printed (in the run ``run``, if given)."""
    return [[line for line in (task.output if run is None else run_output(task, run))
             if NOTICE in line] for task in tasks]


def outputs(outdir):
    """Each worker's report of a run; a run that raised fails the test with its error."""
    out = {}
    for i in (0, 1):
        out[i] = json.loads((outdir / f"worker-{i}.json").read_text())
        assert out[i]["error"] is None, f"worker {i}: {out[i]['error']}"
        with np.load(os.path.join(outdir, f"worker-{i}.npz")) as weights:
            out[i]["weights"] = [weights[f"arr_{k}"] for k in range(len(weights.files))]
    return out


def assert_trained_alike(outdir):
    """Both workers ran the run to its end, trained (the loss falls), end with identical
    weights, evaluate alike and predict every example."""
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


class Runs:
    """A shared job's outcome: its tasks (the result's, or those of the LaunchError that ended
    it), that error (None if it finished) and the directory of its runs' reports."""

    def __init__(self, outdir, job):
        self.outdir = outdir
        try:
            self.tasks, self.error = job().tasks, None
        except tfd.LaunchError as e:
            self.tasks, self.error = e.results, e

    def reports(self, run):
        """The directory of the run's reports, once both workers wrote theirs."""
        missing = [i for i in (0, 1) if not (self.outdir / run / f"worker-{i}.json").exists()]
        assert not missing, f"no report of run {run!r} from worker(s) {missing}: {self.error}"
        return self.outdir / run


@pytest.fixture(scope="module")
def tensorflow_strategy_runs(tmp_path_factory, digits_tfds_dir, one_tfrecord):
    """ONE job under TensorFlow's own MultiWorkerMirroredStrategy, the repairs in place, for
    three tests that had a job each: the explicit 'data' policy first (the notice comes once
    per data set and process, so run after the fall-back its silence would prove nothing),
    then the fall-back, then the explicit 'file' policy, whose ShardingError must end the job
    as it ends a user's: last, uncaught."""
    outdir = tmp_path_factory.mktemp("tf-runs")
    return Runs(outdir, lambda: run_job(
        outdir, "tensorflow",
        spec("data", "tfds", digits_tfds_dir, policy="data", validation=True),
        spec("fallback", "tfds", digits_tfds_dir, validation=True),
        spec("file", "tfrecord", one_tfrecord, policy="file", uncaught=True),
        timeout=2 * TIMEOUT))


def test_tensorflow_strategy_one_file_tfds_trains_with_one_notice(tensorflow_strategy_runs):
    runs = tensorflow_strategy_runs
    # Both workers ran it to its end (each worker's report says so: the job's exit status is
    # the 'file' run's).
    assert_trained_alike(runs.reports("fallback"))
    # fit's data, its validation data and evaluate's data are one data set: one notice each,
    # and the job printed no other.
    assert notices(runs.tasks) == notices(runs.tasks, "fallback")
    for lines in notices(runs.tasks, "fallback"):
        assert len(lines) == 1, lines
        assert "reads 1 file (sklearn_digits-train.tfrecord-00000-of-00001)" in lines[0]
        assert "for 2 workers" in lines[0] and "ShardingWarning: model.fit(), the training data" \
            in lines[0]


def test_an_explicit_data_policy_is_kept_silently_and_trains_the_same(tensorflow_strategy_runs):
    runs = tensorflow_strategy_runs
    assert notices(runs.tasks, "data") == [[], []]
    explicit, fallback = (assert_trained_alike(runs.reports("data")),
                          outputs(runs.reports("fallback")))
    for a, b in zip(explicit[0]["weights"], fallback[0]["weights"]):
        np.testing.assert_array_equal(a, b)


# Its own job: make_strategy("auto") builds a multi-worker strategy, and the shared job's
# process has TensorFlow's.
def test_our_strategy_one_tfrecord_file_trains_with_one_notice(tmp_path, one_tfrecord):
    result = run_job(tmp_path, "ours", spec("ours", "tfrecord", one_tfrecord, uncaught=True))
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert_trained_alike(tmp_path / "ours")
    for lines in notices(result.tasks, "ours"):
        assert len(lines) == 1 and "reads 1 file (digits.tfrecord) for 2 workers" in lines[0], lines


def test_an_explicit_file_policy_gets_our_message_before_the_first_step(tensorflow_strategy_runs):
    runs = tensorflow_strategy_runs
    assert isinstance(runs.error, tfd.LaunchError), "the job did not fail"
    message = str(runs.error)
    assert "ShardingError" in message and "model.fit(), the training data cannot be split over " \
        "2 workers with the shard policy 'file'" in message
    assert "Set the shard policy to 'data'" in message
    # Its own lines: every worker reached the run (so the scope below is not empty).
    assert all("=== run file ===" in t.output for t in runs.tasks)
    output = [line for t in runs.tasks for line in run_output(t, "file")]
    assert not any("Epoch 1" in line for line in output)
    assert not any(NOTICE in line for line in output)


# Its own job: the repair must be absent from the start (TFDISTRIBUTED_DISABLE_COMPAT is read
# as Keras is repaired, when it is imported), and the failure ends the job.
def test_without_the_pre_flight_the_same_job_stops_at_the_first_step(tmp_path, one_tfrecord):
    """The defect is real: with plain model.fit left as Keras has it, TensorFlow's error."""
    with pytest.raises(tfd.LaunchError) as info:
        run_job(tmp_path, "tensorflow", spec("off", "tfrecord", one_tfrecord, uncaught=True),
                env={"TFDISTRIBUTED_DISABLE_COMPAT": "strategy_aware_fit"})
    output = "\n".join(line for t in info.value.results for line in t.output)
    assert "Could not apply FILE based sharding: the dataset only has 1 file(s)" in output
    assert NOTICE not in output


# A job each: each builds another multi-worker strategy (R's own tf$distribute one, or ours).
@pytest.mark.parametrize("strategy,source", [("tensorflow", "tfds"), ("ours", "tfrecord")])
def test_r_model_fit_on_one_file_trains_with_one_notice(tmp_path, digits_tfds_dir, one_tfrecord,
                                                         strategy, source):
    """From R: Keras' own model$fit() and model$evaluate() in an Rscript worker."""
    data = str(digits_tfds_dir) if source == "tfds" else one_tfrecord
    result = tfd.launch(R_SCRIPT, workers=2, args=[str(tmp_path), data, strategy, source],
                        timeout=TIMEOUT, env={"R_LIBS": os.path.join(ROOT, ".rlib"),
                             "RETICULATE_PYTHON": sys.executable}, watch=tfd.Watch(echo=False))
    assert [t.returncode for t in result.tasks] == [0, 0]
    reports = [json.loads((tmp_path / f"worker-{i}.json").read_text()) for i in (0, 1)]
    assert reports[0] == reports[1] and len(reports[0]["weights"]) == 4
    assert reports[0]["loss"][-1] < reports[0]["loss"][0] and reports[0]["accuracy"] > 0.5
    name = "sklearn_digits-train.tfrecord" if source == "tfds" else "digits.tfrecord"
    for lines in notices(result.tasks):
        assert len(lines) == 1 and f"model.fit(), the training data reads 1 file ({name}" \
            in lines[0], lines
