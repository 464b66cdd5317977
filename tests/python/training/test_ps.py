"""Parameter-server training (tfdistributed.training.ps) on real clusters of separate processes.

Three cluster runs, each shared by several tests (module-scoped fixtures), chief script
tests/python/scripts/ps_train.py:

- chief + 2 workers + 1 ps train the digits model through tfdistributed.fit / evaluate, then
  one more epoch with weighted validation data;
- 2 ps tasks and a partitioner split a large Embedding across both and still train;
- the chief SIGKILLs one worker as epoch 2 begins and waits for its death before scheduling the
  epoch; launch() lets the job finish with the other worker.
"""

import json
import os

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed import ArgumentTypeError, TrainingError
from tfdistributed.training import ps
from models import digits_model

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "ps_train.py")
TIMEOUT = 240
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
BATCH = 64
EPOCHS = 12


def _run_chief(outdir, mode, *args, **launch_kwargs):
    tfd.launch(SCRIPT, tfd.Scaling(workers=2, ps=launch_kwargs.pop("ps", 1), chief=True),
               args=[outdir, mode, *args], timeout=TIMEOUT, env=ENV, watch=tfd.Watch(echo=False),
               **launch_kwargs)
    with open(os.path.join(outdir, "result.json")) as f:
        return json.load(f)


# Daemons of the session's engines, which a test module run earlier on this pytest worker may
# have started (pytest-xdist): they live until the session ends.
SESSION_DAEMONS = {"munged", "slurmctld", "slurmd", "slurmstepd"}


def _leftovers():
    import psutil

    from tfdistributed.engines.warm import server_pids

    found = []
    # This pytest worker's warm servers (tests/conftest.py) live until the session ends; a task
    # one of them forked would be found as their child.
    servers = set(server_pids())
    for p in psutil.Process().children(recursive=True):
        if p.pid in servers:
            continue
        try:
            command = p.cmdline()
            if command and os.path.basename(command[0]) in SESSION_DAEMONS:
                continue  # the session's local SLURM (conftest.slurm_cluster), not this test's
            if any("tfdistributed" in part or "ps_train" in part for part in command):
                found.append((p.pid, p.cmdline()))
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    outdir = str(tmp_path_factory.mktemp("ps-train"))
    return outdir, _run_chief(outdir, "train")


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    return _run_chief(str(tmp_path_factory.mktemp("ps-partition")), "partition", ps=2)


@pytest.fixture(scope="module")
def worker_killed(tmp_path_factory):
    """The chief SIGKILLs worker 1, a server launch() started, as epoch 2 begins, and waits
    until it is dead before scheduling that epoch's steps: launch() must let the job go on, and
    the coordinator must run the steps it could not give the lost worker on the other one."""
    outdir = str(tmp_path_factory.mktemp("ps-kill"))
    launched = tfd.launch(SCRIPT, tfd.Scaling(workers=2, ps=1, chief=True), args=[outdir, "kill"],
                          timeout=TIMEOUT, env=ENV, watch=tfd.Watch(echo=False))
    with open(os.path.join(outdir, "result.json")) as f:
        result = json.load(f)
    assert launched.task("chief").returncode == 0
    return result, launched.task("worker", 1).returncode


def _digits_model():
    """The chief's model, without a strategy: to evaluate its weights in a plain process."""
    return digits_model(tfd.make_strategy("default"), seed=None, learning_rate=0.01)


def _weights(outdir):
    with np.load(os.path.join(outdir, "weights.npz")) as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


@pytest.mark.cluster
def test_fit_trains_digits_with_history_and_callbacks(trained):
    _, result = trained
    assert result["strategy"] == "parameter_server"
    history = result["history"]
    assert set(history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert all(len(v) == EPOCHS for v in history.values())
    assert result["epochs_seen"] == list(range(EPOCHS))
    assert history["loss"][-1] < history["loss"][0]
    assert all(0.0 <= a <= 1.0 for a in history["accuracy"] + history["val_accuracy"])
    assert result["evaluate"]["accuracy"] >= 0.9
    # Every scheduled step updated the ps exactly once: no update lost between workers.
    assert result["iterations"] == EPOCHS * result["steps_per_epoch"]
    # Validation after the last epoch and evaluate() see the same weights and data.
    assert history["val_accuracy"][-1] == pytest.approx(result["evaluate"]["accuracy"])


@pytest.mark.cluster
def test_validation_data_sample_weights_are_used(trained):
    """(x_val, y_val, sample_weight_val): the third part weights the validation loss, as
    evaluate(sample_weight=) and the weighted loss computed from the predictions say."""
    _, result = trained
    weighted = result["weighted_evaluate"]["loss"]
    assert result["weighted_val_loss"] == pytest.approx(weighted, rel=1e-5)
    assert weighted == pytest.approx(result["weighted_evaluate_by_hand"], rel=1e-4)
    assert abs(weighted - result["unweighted_evaluate"]["loss"]) > 1e-3


@pytest.mark.cluster
def test_evaluate_matches_single_process_model(trained, digits):
    outdir, result = trained
    _, (x_test, y_test) = digits
    model = _digits_model()
    model.set_weights(_weights(outdir))
    expected = model.evaluate(x_test, y_test, batch_size=BATCH, verbose=0, return_dict=True)
    assert result["evaluate"]["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-6)
    assert result["evaluate"]["loss"] == pytest.approx(expected["loss"], rel=1e-4)
    predictions = model.predict(x_test[:50], verbose=0)
    assert result["predict_shape"] == [50, 10]
    assert result["predict_accuracy"] == pytest.approx(
        float(np.mean(predictions.argmax(-1) == y_test[:50])))


@pytest.mark.cluster
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_checkpoints_hold_the_trained_weights(trained):
    import tensorflow as tf

    outdir, _ = trained
    weights = _weights(outdir)
    latest = tf.train.latest_checkpoint(os.path.join(outdir, "ckpt"))
    assert latest is not None and latest.endswith(f"-{EPOCHS}")
    restored = _digits_model()
    tf.train.Checkpoint(model=restored).restore(latest).expect_partial()
    from_keras = _digits_model()
    from_keras.load_weights(os.path.join(outdir, "keras.weights.h5"))
    for model in (restored, from_keras):
        assert len(model.get_weights()) == len(weights) == 4  # zip() alone passes on empty lists
        for got, want in zip(model.get_weights(), weights):
            np.testing.assert_allclose(got, want)


@pytest.mark.cluster
def test_partitioner_splits_embedding_over_two_ps(partitioned):
    assert partitioned["is_sharded"] and partitioned["type"] == "ShardedVariable"
    assert partitioned["devices"] == ["/job:ps/replica:0/task:0/device:CPU:0",
                                      "/job:ps/replica:0/task:1/device:CPU:0"]
    assert sum(shape[0] for shape in partitioned["shapes"]) == 5000
    assert partitioned["loss"][-1] < partitioned["loss"][0]


@pytest.mark.cluster
def test_fit_from_dataset_and_dataset_function(partitioned):
    # The dataset-function run asked for 5 epochs; EarlyStopping ended it after 2.
    assert len(partitioned["dataset_loss"]) == 4 and len(partitioned["dataset_fn_loss"]) == 2
    assert partitioned["dataset_loss"][-1] < partitioned["dataset_loss"][0]
    assert partitioned["dataset_fn_loss"][-1] < partitioned["dataset_loss"][0]
    assert partitioned["dataset_evaluate"]["accuracy"] >= 0.9
    assert partitioned["dataset_predict_accuracy"] == pytest.approx(
        partitioned["dataset_evaluate"]["accuracy"])


@pytest.mark.cluster
def test_training_survives_a_killed_worker(worker_killed):
    result, victim_code = worker_killed
    assert victim_code == -9
    assert result["killed_during_epoch"] == [1]
    assert result["epochs"] == 6
    # The dead worker's steps were re-run by the other one: none missing.
    assert result["iterations"] >= 6 * result["steps_per_epoch"]
    assert result["evaluate"]["accuracy"] >= 0.9


@pytest.mark.cluster
def test_no_process_left_behind(trained, partitioned, worker_killed):
    assert _leftovers() == []


def test_partitioner_kinds(monkeypatch):
    import tensorflow as tf

    partitioners = tf.distribute.experimental.partitioners
    shape = tf.TensorShape([100000, 4])
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert ps.partitioner("min_size")(shape, tf.float32) == [1, 1]
    tfd.set_tf_config(cluster=tfd.cluster_spec(["127.0.0.1:1"], ps=["127.0.0.1:2", "127.0.0.1:3"],
                                               chief="127.0.0.1:4"), task_type="chief")
    try:
        assert isinstance(ps.partitioner(), partitioners.MinSizePartitioner)
        assert ps.partitioner("min_size")(shape, tf.float32) == [2, 1]
    finally:
        tfd.clear_tf_config()
    assert isinstance(ps.partitioner("max_size", max_shard_bytes=1 << 20),
                      partitioners.MaxSizePartitioner)
    fixed = ps.partitioner("fixed", num_shards=2)
    assert isinstance(fixed, partitioners.FixedShardsPartitioner)
    assert fixed(tf.TensorShape([10, 4]), tf.float32) == [2, 1]
    assert ps.partitioner("max_size", max_shard_bytes=100 << 10)(shape, tf.float32)[0] == 16
    with pytest.raises(ArgumentTypeError, match="min_size, max_size, fixed"):
        ps.partitioner("round_robin")
    with pytest.raises(ArgumentTypeError, match="num_shards"):
        ps.partitioner("fixed")


def test_fit_needs_steps_for_a_dataset_function():
    import tensorflow as tf

    def dataset_fn(context):
        return tf.data.Dataset.range(8).map(lambda i: (i, i)).batch(2)

    with pytest.raises(TrainingError, match="steps_per_epoch"):
        ps.fit(None, dataset_fn, strategy=tf.distribute.get_strategy())
    with pytest.raises(ArgumentTypeError, match="max_queue_size"):
        ps.fit(None, dataset_fn, strategy=tf.distribute.get_strategy(), max_queue_size=2)
