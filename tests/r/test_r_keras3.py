"""keras3, the R user's Keras (issue 51): R programs written with keras3 as R users write them
(``keras_model_sequential() %>% layer_dense()``, ``compile()``, ``fit()``...), with only
``library(tfdistributed)`` added, train as Python's one-device run of the same model, weight for
weight, without a strategy and with two replicas, wherever the program makes its model and calls
compile; on a launched 2-worker job and as the coordinator of a parameter-server job too. Loading
both packages masks nothing: with keras3 installed, tfdistributed's ``keras`` is keras3's.

keras3 lives in its own library (.rlib-keras3, made by scripts/setup.sh), put before .rlib here
only: the rest of the suite tests tfdistributed's own ``keras`` as users without keras3 have it.
The programs are tests/r/scripts/keras3_placements.R.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import conformance
import placement
import tfdistributed as tfd
from rsupport import ROOT, keras3_env

SCRIPT = ROOT / "tests" / "r" / "scripts" / "keras3_placements.R"
PROGRAMS = ("all_inside", "compile_outside", "object_outside_compile_inside", "tutorial")
EXTRAS = ("extra_class_weight", "extra_dataset", "extra_fit_distributed")


def _rscript(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(["Rscript", "-e", code], cwd=ROOT, env=keras3_env(), text=True,
                          capture_output=True, timeout=120)


# What R adds to Python's placement programs (test_placement.py, every placement under every
# kind) is the route of its calls: keras3's generics, R values, `with(strategy$scope(), ...)`.
# The R package has no branch by strategy kind on that route (what differs by kind is the
# backend's, which test_placement.py runs). So the R programs run on this machine without a
# strategy (the reference) and with two replicas (mirrored), then on the two cluster kinds;
# one_device and central_storage add no R path (measured 2026-11-28: they were half of the
# one-machine Rscript's ~140 s of CPU).
KINDS = ("default", "mirrored")
CLUSTERS = ("multi_worker_mirrored", "parameter_server")
SECTION = "## keras3: R programs as R users write them"


@pytest.fixture(scope="module")
def python_one_device(tmp_path_factory):
    """Python's program with everything inside the scope, on one device."""
    return placement.one_device(str(tmp_path_factory.mktemp("python")))


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory):
    """The R programs under each kind on this machine, one Rscript: ``{kind: results}``."""
    out = tmp_path_factory.mktemp("keras3")
    proc = subprocess.run(["Rscript", str(SCRIPT), ",".join(KINDS), str(out)], cwd=ROOT,
                          env=keras3_env(), text=True, capture_output=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {kind: _read(out / f"{kind}-local.json") for kind in KINDS}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """The R programs on a 2-worker job (``"worker 1"``: the second worker's) and as the
    coordinator of a chief + worker + ps job."""
    out = tmp_path_factory.mktemp("keras3-clusters")
    env = {"R_LIBS": keras3_env()["R_LIBS"]}
    tfd.launch(str(SCRIPT), workers=2, args=["auto", str(out / "mwms")], env=env, timeout=900,
               watch=tfd.Watch(echo=False))
    tfd.launch(str(SCRIPT), tfd.Scaling(workers=1, ps=1, chief=True),
               args=["auto", str(out / "ps")], env=env, timeout=900, watch=tfd.Watch(echo=False))
    return {"multi_worker_mirrored": _read(out / "mwms" / "auto-worker-0.json"),
            "worker 1": _read(out / "mwms" / "auto-worker-1.json"),
            "parameter_server": _read(out / "ps" / "auto-chief-0.json")}


def _close(actual, expected, what):
    np.testing.assert_allclose(np.asarray(actual, dtype="float64"),
                               np.asarray(expected, dtype="float64"), rtol=1e-5, atol=1e-6,
                               err_msg=what)


def _differs(result, reference):
    """What an R program's result (read from its JSON) has otherwise than ``reference``
    (Python's run, or the default kind's): None where weights, history, evaluation and
    predictions agree (rtol 1e-5)."""
    checks = [*((f"weight {i}", a, b) for i, (a, b) in
                enumerate(zip(result["weights"], reference["weights"], strict=True))),
              *((f"history {k}", result["history"].get(k), v)
                for k, v in reference["history"].items()),
              *((f"evaluate {k}", result["evaluate"].get(k), v)
                for k, v in reference["evaluate"].items())]
    if "predict" in reference:
        checks += [("predict", result["predict"], reference["predict"]),
                   ("the loaded model", result["loaded_predict"], result["predict"])]
    for what, a, b in checks:
        try:
            _close(a, b, what)
        except (AssertionError, TypeError, ValueError):
            return what
    return None


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
def test_keras3_programs_train_as_python_on_one_device_with_and_without_replicas(
        one_machine, python_one_device):
    for kind, results in one_machine.items():
        replicas = 2 if kind == "mirrored" else 1
        for name in PROGRAMS:
            assert results[name]["replicas"] == replicas, (kind, name)
            assert _differs(results[name], python_one_device) is None, \
                (kind, name, _differs(results[name], python_one_device))
        for name in EXTRAS:  # keras3's other fit() inputs, against one device
            assert _differs(results[name], one_machine["default"][name]) is None, (kind, name)
    # fit_distributed() trains the tutorial's model as keras3's fit() does on the same batches
    # in the same order (a dataset of batches of 32, unshuffled).
    default = one_machine["default"]
    assert _differs(default["extra_fit_distributed"], default["extra_dataset"]) is None
    losses = default["extra_class_weight"]["history"]["loss"]
    assert losses[-1] < losses[0], losses


@pytest.mark.cluster
def test_keras3_programs_on_a_two_worker_job_and_a_parameter_server_job(clusters,
                                                                       python_one_device):
    assert clusters["multi_worker_mirrored"] == clusters["worker 1"]  # lock-step, bit for bit
    for column in CLUSTERS:
        for name in PROGRAMS:
            result = clusters[column][name]
            assert _differs(result, python_one_device) is None, \
                (column, name, _differs(result, python_one_device))
    assert all(clusters["multi_worker_mirrored"][n]["replicas"] == 2 for n in PROGRAMS)


def render_section(columns, python_one_device) -> str:
    """The keras3 table of CONFORMANCE.md, from the results of every column."""
    def cell(column, name):
        if name in PROGRAMS:
            return _differs(columns[column][name], python_one_device) or "same as Python"
        return _differs(columns[column][name], columns["default"][name]) or \
            ("reference" if column == "default" else "same as default")

    lines = [
        SECTION, "",
        "Generated by `tests/r/test_r_keras3.py` from `tests/r/scripts/keras3_placements.R`: "
        "keras3 1.2.0",
        "programs with `library(tfdistributed)` added, `keras_model_sequential() %>% "
        "layer_flatten() %>%",
        "layer_dense()`, `compile()`, keras3's `fit(validation_split = 0.25)` with "
        "`callback_early_stopping()`",
        "and `callback_model_checkpoint()`, `evaluate()`, `predict()`, `save_model()` and "
        "`load_model()`.",
        "*Same as Python*: the weights, history, evaluation and predictions of the Python "
        "program",
        "`all_inside` of the section above on one device (relative tolerance 1e-5). The "
        "`extra_` rows train",
        "the `tutorial` placement with keras3's other `fit()` inputs (`class_weight` with",
        "`callback_backup_and_restore()`, a tf.data dataset) and with `fit_distributed()`, "
        "compared with",
        "the same row under the default strategy. On one machine the R programs run without a "
        "strategy and with",
        "two replicas (`mirrored`): R's calls take the same route under every kind, and the "
        "Python programs of",
        "the section above run under `one_device` and `central_storage` too.", "",
        "| R program | " + " | ".join(KINDS + CLUSTERS) + " |",
        "|---|" + "---|" * len(KINDS + CLUSTERS)]
    for name in PROGRAMS + EXTRAS:
        lines.append(f"| `{name}` | " + " | ".join(cell(c, name) for c in KINDS + CLUSTERS)
                     + " |")
    return "\n".join(lines) + "\n"


@pytest.mark.cluster
def test_keras3_section_of_the_conformance_table_is_current(one_machine, clusters,
                                                            python_one_device):
    columns = one_machine | clusters
    assert conformance.write_section(SECTION, render_section(columns, python_one_device)), \
        "CONFORMANCE.md was out of date and has been regenerated: commit it"


@pytest.mark.slow
def test_keras3s_distributed_training_guide_trains_under_mirrored_and_resumes(tmp_path):
    # keras3's own guide "Multi-GPU distributed training with TensorFlow" as it is written
    # (tests/r/scripts/keras3_guide.R says where this machine makes it differ): tfdatasets'
    # tensor_slices_dataset() |> dataset_batch(), tf$distribute$MirroredStrategy(), fit() with
    # validation data and evaluate() in the scope; then its fault-tolerance part, a
    # callback_model_checkpoint() every epoch and load_model() of the latest checkpoint inside
    # a new strategy's scope to resume.
    proc = subprocess.run(["Rscript", str(ROOT / "tests" / "r" / "scripts" / "keras3_guide.R"),
                           str(tmp_path)], cwd=ROOT, env=keras3_env(), text=True,
                          capture_output=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = _read(tmp_path / "keras3_guide.json")
    assert out["replicas"] == 2
    accuracy = out["history"]["sparse_categorical_accuracy"]
    assert accuracy[-1] > accuracy[0] + 0.2, out["history"]
    assert out["evaluate"]["sparse_categorical_accuracy"] > 0.9, out["evaluate"]
    assert out["checkpoints"] == "ckpt-1.keras"
    # The second run_training() starts from the first one's checkpoint, not from scratch: its
    # one epoch ends where a second epoch of training ends (the first run's epoch: loss 1.9).
    assert out["second"]["loss"] < 0.7 * out["first"]["loss"], (out["first"], out["second"])
