"""Keras' own model$fit() / $evaluate() / $predict() called from R with R values, as R users
write them, under every strategy (issue: R programs as R users write them).

- The mlverse/distributed multi-worker program (TF_CONFIG written by hand with jsonlite,
  TensorFlow's own MultiWorkerMirroredStrategy, `model$fit` on digits_data() as it comes with
  `batch_size = 64 * num_workers`) runs on 2 Rscript workers started here, each with its own
  TF_CONFIG, and both end with identical weights and a model that learnt.
- The R-values row of the conformance matrix: the same cell (R array, R integer labels, whole
  doubles, validation data as an R list, class weights as a named R list) under the default,
  one_device, mirrored and central_storage strategies (one R process), multi_worker_mirrored
  (a launched 2-worker job) and parameter_server (chief + worker + ps): every cell has the
  default strategy's history, evaluate results and weights. The table is the "R side" section
  of CONFORMANCE.md, regenerated from these results.
- Mistakes an R user makes get an R error naming the argument and the fix, before Keras runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import portpicker
import psutil
import pytest

import tfdistributed as tfd
from rsupport import ROOT, r_env

sys.path.insert(0, str(ROOT / "tests" / "python" / "support"))
import conformance  # noqa: E402
from test_conformance import ATOL, RTOL  # noqa: E402

SCRIPTS = ROOT / "tests" / "r" / "scripts"
IN_PROCESS = ("default", "one_device", "mirrored", "central_storage")
STRATEGIES = IN_PROCESS + ("multi_worker_mirrored", "parameter_server")
R_SECTION = "## R side: Keras' own `model$fit()` with R values"


def _rscript(*args, timeout=300):
    return subprocess.Popen(["Rscript", *map(str, args)], cwd=ROOT, env=r_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_all(procs, timeout):
    """Each process's (returncode, output); every process is killed if one outlives `timeout`."""
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                for child in psutil.Process(p.pid).children(recursive=True):
                    child.kill()
                p.kill()
                p.wait()
    return [(p.returncode, out) for p, out in zip(procs, outputs)]


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_mlverse_program_with_its_own_tf_config_on_two_rscript_workers(tmp_path):
    # Written as users write it: TF_CONFIG by Sys.setenv() after Python started (issue 30: "late",
    # which TensorFlow alone never sees), TensorFlow's own strategy, R values in model$fit().
    ports = ",".join(str(portpicker.pick_unused_port()) for _ in range(2))
    procs = [_rscript(SCRIPTS / "mlverse_mwms.R", i, ports, tmp_path, "late") for i in (0, 1)]
    results = _wait_all(procs, timeout=420)
    for i, (code, output) in enumerate(results):
        assert code == 0, f"worker {i}:\n{output[-4000:]}"
        assert "Unrecognized data type" not in output and "Expected int32" not in output
        assert "started before TF_CONFIG is set" in output
        assert "[tfdistributed]" not in output  # a normal join: no waiting notice
    first, second = (np.load(tmp_path / f"worker-{i}.npz") for i in (0, 1))
    assert int(first["replicas"]) == 2 and int(second["replicas"]) == 2
    assert first.files == second.files
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    losses = first["loss"]
    assert len(losses) == 12 and losses[-1] < 0.5 * losses[0], losses
    # evaluate's accuracy is the accuracy of the model's own predictions on every test example.
    assert first["score"][1] == pytest.approx(np.mean(first["predicted"] == first["labels"]), abs=1e-6)
    assert first["score"][1] > 0.8


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    out = tmp_path_factory.mktemp("r-values")
    script = SCRIPTS / "r_values_cells.R"
    [(code, output)] = _wait_all([_rscript(script, out, *IN_PROCESS)], timeout=420)
    assert code == 0, output[-4000:]
    tfd.launch(str(script), workers=2, args=(str(out), "auto"), timeout=420,
               watch=tfd.Watch(echo=False))
    tfd.launch(str(script), tfd.Scaling(workers=1, ps=1, chief=True), args=(str(out), "auto"),
               timeout=420, watch=tfd.Watch(echo=False))
    named = {name: f"{name}.json" for name in IN_PROCESS}
    named.update({"multi_worker_mirrored": "auto-worker-0.json",
                  "multi_worker_mirrored:worker 1": "auto-worker-1.json",
                  "parameter_server": "auto-chief-0.json"})
    return {name: json.loads((out / file).read_text()) for name, file in named.items()}


def _close(actual, expected, what):
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.mark.cluster
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_r_values_cell_is_the_default_strategys(cells, strategy):
    cell, reference = cells[strategy], cells["default"]
    assert cell["status"] == "ok", cell.get("message")
    assert cell["kind"] == strategy
    assert cell["evaluate"]["accuracy"] == pytest.approx(cell["true_accuracy"], abs=1e-6)
    assert sorted(cell["history"]) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    for key, values in reference["history"].items():
        assert len(cell["history"][key]) == 3
        _close(cell["history"][key], values, f"{strategy}: history[{key!r}]")
    for key, value in reference["evaluate"].items():
        _close(cell["evaluate"][key], value, f"{strategy}: evaluate[{key!r}]")
    assert len(cell["weights"]) == len(reference["weights"]) == 4
    for i, (a, b) in enumerate(zip(cell["weights"], reference["weights"])):
        _close(a, b, f"{strategy}: weight {i}")


@pytest.mark.cluster
def test_r_values_workers_agree_bit_for_bit(cells):
    chief, other = cells["multi_worker_mirrored"], cells["multi_worker_mirrored:worker 1"]
    assert chief["history"] == other["history"] and chief["weights"] == other["weights"]


def render_r_section(cells) -> str:
    def text(strategy):
        if cells[strategy]["status"] != "ok":
            return "FAILS"
        return "reference" if strategy == "default" else "same as default"

    return "\n".join([
        R_SECTION,
        "",
        "Generated by `tests/r/test_r_values.py`. R code calls Keras' own `model$fit()`,",
        "`model$evaluate()` and `model$predict()` with R values as R users have them: an R array,",
        "an R integer vector of labels, whole doubles for counts (`batch_size = 64 * 2`,",
        "`epochs = 3`), validation data as an R list and class weights as a named R list.",
        "`library(tfdistributed)` converts them as `fit_distributed()` does. Same clusters,",
        f"tolerance (relative {RTOL:g}) and whole global batches (1280 examples) as above.",
        "",
        "| feature | " + " | ".join(STRATEGIES) + " |",
        "|---|" + "---|" * len(STRATEGIES),
        "| `r_values_model_fit` | " + " | ".join(text(s) for s in STRATEGIES) + " |",
    ]) + "\n"


@pytest.mark.cluster
def test_r_side_of_the_conformance_table_is_current(cells):
    assert conformance.write_section(R_SECTION, render_r_section(cells)), \
        "CONFORMANCE.md was out of date and has been regenerated: commit it"


# --- mistakes, in the embedded R session (rpy2) -----------------------------------------------

@pytest.fixture(scope="module")
def r_model(r):
    r("""
      keras$utils$set_random_seed(1L)
      r_values_model <- keras$Sequential(list(keras$Input(shape = input_shape(8, 8, 1)),
                                              keras$layers$Flatten(), keras$layers$Dense(10L)))
      r_values_model$compile(optimizer = "sgd", metrics = list("accuracy"),
                             loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
      r_values_digits <- digits_data()
    """)
    return "r_values_model"


MISTAKES = {
    "fractional_batch": ("r_values_model$fit(r_values_digits$train$x, r_values_digits$train$y, "
                         "batch_size = 64.5)", "`batch_size` must be a single whole number"),
    "epochs_string": ("r_values_model$fit(r_values_digits$train$x, r_values_digits$train$y, "
                      "epochs = 'two')", "`epochs` must be a single whole number"),
    "na_labels": ("r_values_model$fit(r_values_digits$train$x, "
                  "replace(r_values_digits$train$y, 3, NA))", "`y` contains NA"),
    "character_labels": ("r_values_model$evaluate(r_values_digits$test$x, "
                         "as.character(r_values_digits$test$y))", "`y` must be numeric"),
    "class_weight_unnamed": ("r_values_model$fit(r_values_digits$train$x, r_values_digits$train$y, "
                             "class_weight = c(1, 2))", "`class_weight` must be named by class index"),
    "positional_fraction": ("r_values_model$predict(r_values_digits$test$x, 10.5)",
                            "`batch_size` must be a single whole number"),
}


@pytest.mark.parametrize("case", list(MISTAKES))
def test_r_mistakes_name_the_argument_before_keras_runs(r, r_model, case):
    from rpy2.rinterface_lib.embedded import RRuntimeError

    code, expected = MISTAKES[case]
    with pytest.raises(RRuntimeError) as error:
        r(code)
    assert expected in str(error.value), str(error.value)
    classes = list(r(f"class(tryCatch({code}, error = function(e) e))"))
    assert "tfdistributed_error" in classes, classes


def test_r_vectors_of_every_kind_train_like_the_same_arrays(r, r_model):
    """Integer, double, named and logical label vectors, counts as doubles, by name or by
    position: each model$fit() from R gives the losses of Python's own fit on NumPy arrays."""
    import __main__

    r("""
      x <- r_values_digits$train$x[1:256, , , , drop = FALSE]
      y <- r_values_digits$train$y[1:256]
      w0 <- r_values_model$get_weights()
      fit_loss <- function(...) {
        r_values_model$set_weights(w0)
        unlist(r_values_model$fit(x, ..., verbose = 0, shuffle = FALSE)$history$loss)
      }
      main <- reticulate::import_main()
      reticulate::py_set_attr(main, "r_values_model", r_values_model)
      reticulate::py_set_attr(main, "r_values_x", reticulate::np_array(x, dtype = "float32"))
      reticulate::py_set_attr(main, "r_values_w0", w0)
    """)
    from_r = {kind: np.asarray(r(code)) for kind, code in {
        "integer": "fit_loss(y, 64, 2)",
        "double": "fit_loss(as.numeric(y), batch_size = 64, epochs = 2)",
        "named": 'fit_loss(stats::setNames(y, paste0("id", seq_along(y))), 64L, 2)',
        "logical": "fit_loss(y > 4, batch_size = 64, epochs = 2)",
    }.items()}
    model, x, y = __main__.r_values_model, __main__.r_values_x, np.asarray(r("y"), dtype=np.int32)
    try:
        for kind, labels in (("integer", y), ("double", y), ("named", y), ("logical", y > 4)):
            model.set_weights(__main__.r_values_w0)
            history = model.fit(x, labels.astype(np.int32 if kind != "logical" else np.float32),
                                batch_size=64, epochs=2, shuffle=False, verbose=0)
            np.testing.assert_allclose(from_r[kind], history.history["loss"], rtol=1e-6,
                                       err_msg=kind)
    finally:
        for name in ("r_values_model", "r_values_x", "r_values_w0"):
            delattr(__main__, name)
