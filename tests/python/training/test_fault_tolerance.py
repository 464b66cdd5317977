"""Chief-only saving and resuming after a worker is killed, on real multi-process clusters."""

import os

import numpy as np
import pytest

import tfdistributed as tfd
from test_multiworker import read_outputs, run_job

pytestmark = pytest.mark.cluster


def test_three_workers_and_the_chief_saved_model_loads_without_a_strategy(tmp_path, digits):
    out, models = tmp_path / "out", tmp_path / "models"
    out.mkdir()
    model_path = models / "digits.keras"
    # 63: the global batch must divide over the 3 replicas (fit() says so otherwise).
    result = run_job(out, "--epochs", "2", "--batch", "63", "--save", str(model_path), workers=3)
    assert [t.returncode for t in result.tasks] == [0, 0, 0]
    outputs = read_outputs(out)
    for other in ("worker-1", "worker-2"):
        assert len(outputs[other]["weights"]) == len(outputs["worker-0"]["weights"]) == 4
        for a, b in zip(outputs["worker-0"]["weights"], outputs[other]["weights"]):
            np.testing.assert_array_equal(a, b)
    # Only the chief's file is there: the other workers' temporary copies were removed.
    assert sorted(os.listdir(models)) == ["digits.keras"]
    import keras

    model = keras.models.load_model(model_path)
    _, (xt, yt) = digits
    loss, accuracy = model.evaluate(xt, yt, verbose=0)
    assert accuracy == pytest.approx(outputs["worker-0"]["metrics"]["accuracy"], abs=1e-6)
    assert len(model.get_weights()) == len(outputs["worker-0"]["weights"]) == 4
    for a, b in zip(model.get_weights(), outputs["worker-0"]["weights"]):
        np.testing.assert_array_equal(a, b)


def test_killed_worker_resumes_from_last_epoch_with_the_same_result(tmp_path):
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    reference.mkdir()
    interrupted.mkdir()
    run_job(reference, "--epochs", "5", "--backup", str(tmp_path / "backup-reference"))

    backup = tmp_path / "backup"
    with pytest.raises(tfd.LaunchError, match="Task worker 1 was killed by signal 9"):
        run_job(interrupted, "--epochs", "5", "--backup", str(backup), "--kill-at", "2")
    assert (backup / "training_metadata.json").read_text().startswith('{"epoch": 2')

    run_job(interrupted, "--epochs", "5", "--backup", str(backup))
    resumed, full = read_outputs(interrupted), read_outputs(reference)
    assert resumed["worker-0"]["epochs"] == [2, 3, 4]  # epochs 3..5, 1-based
    assert full["worker-0"]["epochs"] == [0, 1, 2, 3, 4]
    for task in ("worker-0", "worker-1"):
        assert len(resumed[task]["weights"]) == len(full[task]["weights"]) == 4
        for a, b in zip(resumed[task]["weights"], full[task]["weights"]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # A finished job deletes its backup, and no worker left a temporary directory behind.
    assert not backup.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".workertemp")]


def test_write_path_per_task(monkeypatch):
    from tfdistributed.training import checkpoints

    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}
    monkeypatch.setenv("TF_CONFIG", __import__("json").dumps(tfd.tf_config(cluster, "chief", 0)))
    assert checkpoints.write_path("/ckpt/model.keras") == "/ckpt/model.keras"
    monkeypatch.setenv("TF_CONFIG", __import__("json").dumps(tfd.tf_config(cluster, "worker", 1)))
    assert checkpoints.write_path("/ckpt/model.keras") == "/ckpt/.workertemp_worker_1/model.keras"
    monkeypatch.delenv("TF_CONFIG")
    assert checkpoints.write_path("/ckpt/model.keras") == "/ckpt/model.keras"
