"""Joining a multi-worker job from R (issue 30): TF_CONFIG set with Sys.setenv() after Python
started reaches TensorFlow's own MultiWorkerMirroredStrategy (the mlverse program, in
test_r_values.py, sets it so), and join_timeout is R's too.
"""

from __future__ import annotations

import subprocess

import portpicker
import pytest

from rsupport import ROOT, r_env


def _r(code, timeout=240):
    return subprocess.run(["Rscript", "-e", code], cwd=ROOT, env=r_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_distribute_strategy_join_timeout_names_the_peer_that_never_came():
    ports = [portpicker.pick_unused_port() for _ in range(2)]
    code = f"""
    library(tfdistributed)
    invisible(digits_data())   # Python is running: TF_CONFIG comes after
    Sys.setenv(TF_CONFIG = '{{"cluster": {{"worker": ["127.0.0.1:{ports[0]}", "127.0.0.1:{ports[1]}"]}},
                             "task": {{"type": "worker", "index": 0}}}}')
    result <- tryCatch(distribute_strategy("multi_worker_mirrored", join_timeout = 15),
                       error = function(e) e)
    cat("class:", class(result), "\\n")
    cat("message:", conditionMessage(result), "\\n")
    """
    done = _r(code)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    missing = f"worker 1 at 127.0.0.1:{ports[1]}: connection refused"
    assert f"[tfdistributed] worker 0 has waited" in output and missing in output, output[-3000:]
    assert "message: worker 0 gave up joining the job after 15 s" in output, output[-3000:]
    assert f"missing: {missing}" in output


@pytest.mark.slow  # a fresh R that launches a task
def test_launch_cluster_passes_a_whole_double_join_timeout_to_every_task(tmp_path):
    script = tmp_path / "show.R"
    script.write_text('cat("join timeout", Sys.getenv("TFDISTRIBUTED_JOIN_TIMEOUT"), "\\n")\n')
    done = _r(f"""
    library(tfdistributed)
    job <- launch_cluster("{script}", workers = 1, restarts = restarts(join_timeout = 40),
                          watch = watching(echo = FALSE))
    cat(unlist(job$output), sep = "\\n")
    print(tryCatch(restarts(join_timeout = "soon"), error = conditionMessage))
    """)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "join timeout 40" in output
    assert "`join_timeout` must be a single number" in output


@pytest.mark.slow
def test_a_strategy_built_before_tf_config_refuses_to_train_alone_from_r():
    done = _r("""
    library(tfdistributed)
    tf <- reticulate::import("tensorflow")
    strategy <- tf$distribute$MultiWorkerMirroredStrategy()   # no TF_CONFIG yet: 1 worker
    Sys.setenv(TF_CONFIG = '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                             "task": {"type": "worker", "index": 0}}')
    with(strategy$scope(), {
      model <- keras$Sequential(list(keras$Input(shape = list(3L)), keras$layers$Dense(1L)))
      model$compile(optimizer = "sgd", loss = "mse")
    })
    x <- matrix(0, 8, 3)
    y <- matrix(0, 8, 1)
    cat("error:", tryCatch({model$fit(x, y, verbose = 0L); "none"}, error = conditionMessage), "\\n")
    """)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "error: model.fit: This process's TF_CONFIG names 2 training tasks" in output, output[-3000:]
    assert "built for 1 worker" in output
    assert 'Sys.setenv(TF_CONFIG = ...) first, then strategy <- distribute_strategy("auto")' in output
