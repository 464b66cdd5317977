"""Shared by the elastic-job tests (tests/python/engines/test_elastic*.py): the job they run,
its size, a 3-host bed, and what a finished job's workers wrote."""

import json
from pathlib import Path

import numpy as np
import pytest

import tfdistributed as tfd

SCRIPT = str(Path(__file__).resolve().parents[1] / "scripts" / "elastic_job.py")
EPOCHS, BATCH, EXAMPLES, SAVE_FREQ = 6, 96, 1344, 6   # 14 steps an epoch, 84 in all


def build_bed3():
    from tfdistributed.testbeds import hostbed

    try:
        return hostbed.HostBed(3).up()
    except hostbed.HostBedError as e:
        pytest.fail(f"The test bed of hosts could not be built: {e}", pytrace=False)


def read(outdir, task):
    with open(outdir / f"{task}.json") as f:
        out = json.load(f)
    with np.load(outdir / f"{task}.npz") as w:
        out["weights"] = [w[k] for k in sorted(w.files, key=lambda k: int(k.split("_")[1]))]
    return out


def assert_ends_as_one_job_of_3(outdir, result):
    """The last attempt's 3 workers end with the same weights; every epoch once in the
    history the driver printed."""
    reports = [read(outdir, f"worker-{i}") for i in range(3)]
    assert {r["attempt"] for r in reports} == {2}
    for other in reports[1:]:
        for a, b in zip(reports[0]["weights"], other["weights"]):
            np.testing.assert_array_equal(a, b)
    assert len(result["history"]["loss"]) == EPOCHS


def one_device_accuracy():
    import keras

    from models import digits_model

    model = digits_model(tfd.make_strategy("default"), seed=1, learning_rate=0.01)
    (x, y), (xt, yt) = tfd.digits_arrays()
    tfd.fit(model, x[:EXAMPLES], y[:EXAMPLES], epochs=EPOCHS, batch_size=BATCH, shuffle=False,
            verbose=0)
    accuracy = tfd.evaluate(model, xt, yt, verbose=0)["accuracy"]
    keras.backend.clear_session()
    return model, accuracy


def accuracy_of(weights):
    from models import digits_model

    model = digits_model(tfd.make_strategy("default"), seed=1, learning_rate=0.01)
    model.set_weights(weights)
    _, (xt, yt) = tfd.digits_arrays()
    return tfd.evaluate(model, xt, yt, verbose=0)["accuracy"]


