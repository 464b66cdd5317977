"""pytest drives the R package through rpy2 and checks that R and Python agree.

R runs inside this process and its reticulate uses this interpreter, so an object made in R can
be handed to Python (through __main__) and TF_CONFIG set on one side is read on the other.
Training here uses the default strategy only: the 2-replica comparison runs in a fresh process
(same_model_session.py), independent of what earlier tests did to this process's TensorFlow.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rsupport import ROOT, r_env

CLUSTERS = [
    dict(workers=["127.0.0.1:2222"]),
    dict(workers=["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2222"]),
    dict(workers=["host-a:1", "host-b:2"], chief="host-c:3", ps=["host-d:4", "host-e:5"]),
    dict(workers=["[::1]:2222", "localhost:2223"], evaluator="localhost:2224"),
]


def r_str(value) -> str:
    """A Python value as R source: lists become character vectors."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return json.dumps(value)
    return "c(" + ", ".join(json.dumps(v) for v in value) + ")"


def r_cluster_call(spec) -> str:
    return "tf_cluster(" + ", ".join(f"{k} = {r_str(v)}" for k, v in spec.items()) + ")"


@pytest.mark.parametrize("spec", CLUSTERS, ids=lambda s: "+".join(sorted(s)) + f"-{len(s['workers'])}")
def test_tf_config_built_in_r_equals_python(r, spec):
    import tfdistributed as tfd

    cluster = tfd.cluster_spec(**spec)
    for task_type, addresses in cluster.items():
        for index in range(len(addresses)):
            # R passes the index as a double (no L): the boundary coerces it.
            text = r(f'format(tf_task_config({r_cluster_call(spec)}, "{task_type}", {index}))')[0]
            assert json.loads(text) == tfd.tf_config(cluster, task_type, index)


def test_tf_config_set_in_r_is_read_by_python_and_back(r, clean_tf_config):
    import os

    import tfdistributed as tfd

    r('set_tf_config(tf_cluster(workers = c("127.0.0.1:5000", "127.0.0.1:5001")), "worker", 1)')
    assert tfd.read_tf_config() == tfd.tf_config(
        {"worker": ["127.0.0.1:5000", "127.0.0.1:5001"]}, "worker", 1)
    assert json.loads(os.environ["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}

    tfd.set_tf_config(cluster=tfd.cluster_spec(["127.0.0.1:6000"], chief="127.0.0.1:6001"),
                      task_type="chief", task_index=0)
    assert r("get_tf_config()$task$type")[0] == "chief"
    assert list(r("get_tf_config()$cluster$worker")) == ["127.0.0.1:6000"]
    assert r("is_chief()")[0] is True
    assert r("num_workers()")[0] == 2
    r("clear_tf_config()")
    assert tfd.read_tf_config() is None


@pytest.mark.parametrize("kind", ["default", "one_device", "mirrored", "central_storage",
                                  "MultiWorkerMirroredStrategy"])
def test_strategy_made_in_r_matches_python(r, kind):
    import __main__

    import tfdistributed as tfd

    r(f'reticulate::py_set_attr(reticulate::import_main(), "r_strategy", distribute_strategy("{kind}"))')
    try:
        from_r = __main__.r_strategy
        from_py = tfd.make_strategy(kind)
        r_info, py_info = tfd.strategy_info(from_r), tfd.strategy_info(from_py)
        assert r_info["kind"] == py_info["kind"] == tfd.canonical_name(kind)
        assert r_info["num_replicas"] == py_info["num_replicas"] == int(from_r.num_replicas_in_sync)
        assert r_info["devices"] == py_info["devices"]
        shown = "\n".join(r(f'format(distribute_strategy("{kind}"))'))
        assert f"<tfdistributed strategy: {py_info['kind']}>" in shown
        assert f"replicas in sync: {py_info['num_replicas']}" in shown
    finally:
        del __main__.r_strategy


# (R code, part of the message that must reach pytest). Each runs through the package's
# boundary checks or the backend's own errors, and must arrive as an R error, not a traceback.
ERROR_CASES = {
    "batch_size_fraction": ("fit_distributed(model, x, y, batch_size = 64.5)",
                            "`batch_size` must be a single whole number, got numeric 64.5"),
    "batch_size_na": ("fit_distributed(model, x, y, batch_size = NA)", "`batch_size` must be a single whole number"),
    "epochs_null": ("fit_distributed(model, x, y, epochs = NULL)", "`epochs` is required"),
    "epochs_string": ("fit_distributed(model, x, y, epochs = '3')", "`epochs` must be a single whole number"),
    "y_na": ("fit_distributed(model, x, c(NA, y[-1]))", "`y` contains NA"),
    "unknown_strategy": ('distribute_strategy("mirroed")', "Unknown strategy 'mirroed'"),
    "strategy_not_string": ("distribute_strategy(2)", "`name` must be a single non-empty string"),
    "num_cpu_devices_fraction": ('distribute_strategy("mirrored", num_cpu_devices = 1.5)',
                                 "`num_cpu_devices` must be a single whole number"),
    "gradient_compression_fp8": ('distribute_strategy("multi_worker_mirrored", gradient_compression = "fp8")',
                                 'E.g. distribute_strategy("multi_worker_mirrored", gradient_compression = "fp16").'),
    "gradient_compression_local": ('distribute_strategy("mirrored", gradient_compression = "bf16")',
                                   "`gradient_compression` applies to 'multi_worker_mirrored'"),
    "gradient_compression_not_string": ('distribute_strategy("auto", gradient_compression = 16)',
                                        "`gradient_compression` must be a single non-empty string"),
    "cluster_no_port": ('tf_cluster(workers = c("127.0.0.1:2222", "127.0.0.1"))',
                        'TF_CONFIG["cluster"]["worker"][1] = "127.0.0.1" is not "host:port"'),
    "cluster_duplicate": ('tf_cluster(workers = c("h:1", "h:1"))', "every task needs its own host:port"),
    "cluster_ps_without_worker": ('tf_cluster(workers = character(0), ps = "h:2", chief = "h:1")',
                                  'has "ps" tasks but no "worker"'),
    "cluster_bad_role": ('tf_task_config(list(wroker = "h:1"), "worker", 0)', "Did you mean 'worker'"),
    "task_index_out_of_range": ('tf_task_config(tf_cluster(workers = "h:1"), "worker", 3)', "out of range"),
    "cluster_not_strings": ("tf_cluster(workers = 2222)", "`workers` must be a character vector"),
    "tf_config_bad_json": ('set_tf_config(config = "{oops")', "TF_CONFIG is not valid JSON"),
    "tf_config_empty": ('{ Sys.setenv(TF_CONFIG = ""); distribute_strategy("auto") }', "TF_CONFIG is set but empty"),
    "model_not_keras": ("fit_distributed('model', x, y)", "needs a Keras model"),
    "tf_config_config_and_cluster": ('set_tf_config(local_cluster(1), config = "{}")', "not both"),
    # The backend's neutral message with the R hint, not the Python one.
    "ps_without_chief_r_hint": ("local_cluster(2, ps = 1)", "E.g. local_cluster(2, ps = 1, chief = TRUE)."),
    "shard_policy_unknown": ('dataset_shard_policy(dataset_from_arrays(x, y, batch_size = 8), "files")',
                             "Unknown shard policy 'files'"),
}


@pytest.fixture(scope="module")
def r_default_model(r):
    """A small compiled model under the default strategy (no collectives shared with other
    tests), with data `x` (64 x 3 matrix) and `y` (a plain R vector) in R's global env."""
    r("""
      set.seed(1)
      x <- matrix(runif(64 * 3), 64, 3)
      y <- as.vector(x %*% c(1, -2, 0.5))
      with(distribute_strategy("default")$scope(), {
        model <- keras$Sequential(list(keras$Input(shape = input_shape(3)), keras$layers$Dense(1L)))
        model$compile(optimizer = "sgd", loss = "mse")
      })
    """)
    yield r
    r("rm(model, x, y); invisible(gc())")


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_r_errors_reach_pytest_with_our_message(r_default_model, clean_tf_config, case):
    from rpy2.rinterface_lib.embedded import RRuntimeError

    code, expected = ERROR_CASES[case]
    with pytest.raises(RRuntimeError) as raised:
        r_default_model(code)
    message = str(raised.value)
    assert expected in message
    assert "Traceback" not in message and "py_last_error" not in message
    # The R condition carries our class, so R code can catch it specifically.
    caught = r_default_model(f"class(tryCatch({code}, tfdistributed_error = function(e) e))[[1]]")[0]
    assert caught.startswith("tfdistributed_")


def test_batch_size_as_a_double_is_coerced_and_trains(r_default_model):
    r = r_default_model
    r("history <- fit_distributed(model, x, y, epochs = 2, batch_size = 64, shuffle = FALSE)")
    assert list(r("history$epochs")) == [1, 2]
    df = r("as.data.frame(history)")
    assert list(df.colnames) == ["epoch", "metric", "value", "data"]
    result = r("evaluate_distributed(model, x, y, batch_size = 32)")
    # The same MSE computed on the Python side, from the model's weights with NumPy: R hands the
    # model and the data (as float32, what training saw) to this interpreter's __main__.
    r("main <- reticulate::import_main(); reticulate::py_set_attr(main, 'r_model', model);"
      "reticulate::py_set_attr(main, 'r_x', reticulate::np_array(x, dtype = 'float32'));"
      "reticulate::py_set_attr(main, 'r_y', reticulate::np_array(y, dtype = 'float32')); rm(main)")
    import __main__
    import numpy as np

    kernel, bias = __main__.r_model.get_weights()
    x, y = np.asarray(__main__.r_x, dtype=np.float64), np.asarray(__main__.r_y, dtype=np.float64)
    assert x.shape == (64, 3) and y.shape == (64,) and kernel.shape == (3, 1)
    expected = float(np.mean((x @ kernel[:, 0] + bias[0] - y) ** 2))
    assert expected > 0.01  # a real loss (the model is far from fitted after 2 epochs), not a stub
    assert list(result.names) == ["loss"] and result[0] == pytest.approx(expected, rel=1e-4)
    del __main__.r_model, __main__.r_x, __main__.r_y


@pytest.mark.slow
def test_same_seeded_model_trained_from_r_and_python_has_same_weights(r_package):
    """In a fresh process: R builds and trains under mirrored (2 logical CPUs), Python trains the
    same seeded model under the same strategy; weights and losses agree; clean exit."""
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "r" / "same_model_session.py")],
                          cwd=ROOT, env=r_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    for bad in ("Segmentation fault", "Fatal Python error", "PyThreadState_Get"):
        assert bad not in proc.stderr
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:]
    result = json.loads(lines[-1].split(" ", 1)[1])
    assert result["r_info"]["kind"] == "mirrored" and result["r_info"]["num_replicas"] == 2
    assert result["num_weights"] == 4
    assert result["max_weight_diff"] < 1e-5
    assert result["r_loss"] == pytest.approx(result["py_loss"], rel=1e-5)
