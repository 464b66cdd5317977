"""keras3, the R user's Keras (issue 51): R programs written with keras3 as R users write them
(``keras_model_sequential() %>% layer_dense()``, ``compile()``, ``fit()``...), with only
``library(tfdistributed)`` added, train as Python's one-device run of the same model, weight for
weight, under every strategy kind, wherever the program makes its model and calls compile; on a
launched 2-worker job and as the coordinator of a parameter-server job too. Loading both packages
masks nothing: with keras3 installed, tfdistributed's ``keras`` is keras3's.

keras3 lives in its own library (.rlib-keras3, made by scripts/setup.sh), put before .rlib here
only: the rest of the suite tests tfdistributed's own ``keras`` as users without keras3 have it.
The programs are tests/r/scripts/keras3_placements.R.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import placement
import tfdistributed as tfd
from rsupport import ROOT, keras3_env

SCRIPT = ROOT / "tests" / "r" / "scripts" / "keras3_placements.R"
PROGRAMS = ("all_inside", "compile_outside", "object_outside_compile_inside", "tutorial")
EXTRAS = ("extra_class_weight", "extra_dataset", "extra_fit_distributed")


def _rscript(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(["Rscript", "-e", code], cwd=ROOT, env=keras3_env(), text=True,
                          capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def python_one_device(tmp_path_factory):
    """Python's program with everything inside the scope, on one device."""
    return placement.run(tfd.make_strategy("default"), "all_inside",
                         str(tmp_path_factory.mktemp("python")))


def _close(actual, expected, what):
    np.testing.assert_allclose(np.asarray(actual, dtype="float64"),
                               np.asarray(expected, dtype="float64"), rtol=1e-5, atol=1e-6,
                               err_msg=what)


def _as_python_ran(result, reference, what):
    """An R program's result (read from its JSON) trained as Python's ``reference`` did."""
    for i, (a, b) in enumerate(zip(result["weights"], reference["weights"], strict=True)):
        _close(a, b, f"{what}: weight {i}")
    for key, values in reference["history"].items():
        _close(result["history"][key], values, f"{what}: history {key}")
    for key, value in reference["evaluate"].items():
        _close(result["evaluate"][key], value, f"{what}: evaluate {key}")
    _close(result["predict"], reference["predict"], f"{what}: predict")
    _close(result["loaded_predict"], result["predict"], f"{what}: the loaded model")


def _read(where):
    return json.loads(where.read_text())


@pytest.mark.parametrize("first,second", [("keras3", "tfdistributed"),
                                          ("tfdistributed", "keras3")])
def test_loading_both_packages_masks_nothing(first, second):
    proc = _rscript(f"library({first}); library({second}); "
                    "cat(identical(keras3::keras, tfdistributed::keras))")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "masked" not in proc.stderr, proc.stderr
    assert proc.stdout.strip().endswith("TRUE"), proc.stdout


@pytest.mark.slow
def test_keras3_programs_train_as_python_on_one_device_under_every_kind(tmp_path,
                                                                       python_one_device):
    kinds = ("default", "one_device", "mirrored", "central_storage")
    proc = subprocess.run(["Rscript", str(SCRIPT), ",".join(kinds), str(tmp_path)], cwd=ROOT,
                          env=keras3_env(), text=True, capture_output=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {kind: _read(tmp_path / f"{kind}-local.json") for kind in kinds}
    for kind, results in runs.items():
        replicas = 2 if kind in ("mirrored", "central_storage") else 1
        for name in PROGRAMS:
            assert results[name]["replicas"] == replicas, (kind, name)
            _as_python_ran(results[name], python_one_device, f"{kind}, {name}")
        for name in EXTRAS:  # the other fit() inputs, against one device
            for a, b in zip(results[name]["weights"], runs["default"][name]["weights"],
                            strict=True):
                _close(a, b, f"{kind}, {name}")
            _close(results[name]["history"]["loss"], runs["default"][name]["history"]["loss"],
                   f"{kind}, {name}")
    # fit_distributed() trains the tutorial's model as keras3's fit() does on the same batches
    # in the same order (a dataset of batches of 32, unshuffled).
    for a, b in zip(runs["default"]["extra_fit_distributed"]["weights"],
                    runs["default"]["extra_dataset"]["weights"], strict=True):
        _close(a, b, "fit_distributed() against keras3's fit() on a dataset")
    losses = runs["default"]["extra_class_weight"]["history"]["loss"]
    assert losses[-1] < losses[0], losses


@pytest.mark.cluster
def test_keras3_programs_on_a_two_worker_job_and_a_parameter_server_job(tmp_path,
                                                                       python_one_device):
    env = {"R_LIBS": keras3_env()["R_LIBS"]}
    tfd.launch(str(SCRIPT), workers=2, args=["auto", str(tmp_path / "mwms")], env=env,
               timeout=900, echo=False)
    workers = [_read(tmp_path / "mwms" / f"auto-worker-{i}.json") for i in (0, 1)]
    assert workers[0] == workers[1]  # lock-step: the same numbers on both workers
    for name in PROGRAMS:
        assert workers[0][name]["replicas"] == 2
        _as_python_ran(workers[0][name], python_one_device, f"2 workers, {name}")
    tfd.launch(str(SCRIPT), workers=1, ps=1, chief=True, args=["auto", str(tmp_path / "ps")],
               env=env, timeout=900, echo=False)
    chief = _read(tmp_path / "ps" / "auto-chief-0.json")
    for name in PROGRAMS:
        _as_python_ran(chief[name], python_one_device, f"parameter server, {name}")
