"""launch_cluster(engine = slurm() / ray()) and tf_config_from_slurm() from R, against the real
engines of tests/conftest.py (a single-node SLURM cluster, a local Ray with 2 CPUs).

The same R script (tests/python/scripts/mwms_digits.R, distribute_strategy("auto") inside) runs
as a 2-worker multi_worker_mirrored job on each; both workers must end with identical weights.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from rsupport import ROOT, r_env

SCRIPT = ROOT / "tests" / "python" / "scripts" / "mwms_digits.R"
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def identical_weights(outdir):
    first, second = (np.load(outdir / f"worker-{i}.npz") for i in (0, 1))
    assert first.files == second.files and len(first.files) == 4
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])


def test_launch_cluster_runs_an_r_script_on_slurm(r, slurm_cluster, tmp_path):
    r(f"""
      engine_job <- launch_cluster("{SCRIPT}", workers = 2, args = "{tmp_path}",
                                   timeout = 300, watch = watching(echo = FALSE),
                                   engine = slurm())
    """)
    assert list(r("engine_job$tasks$returncode")) == [0, 0]
    assert list(r("engine_job$tasks$task_type")) == ["worker", "worker"]
    assert r("engine_job$backend")[0] == "slurm"
    # SLURM's job id and its wait in the queue (not counted in the timeout) reach R.
    assert r("engine_job$job_id")[0].isdigit()
    assert 0 <= r("engine_job$queue_seconds")[0] < 300
    for i in (0, 1):
        output = list(r(f'engine_job$output[["worker {i}"]]'))
        assert any(line.startswith(f"worker {i}: test accuracy") for line in output), output[-20:]
    identical_weights(tmp_path)


def test_launch_cluster_runs_an_r_script_on_the_connected_ray_cluster(ray_cluster, tmp_path):
    # An R session of its own (as R users run it), connected to the session's Ray cluster
    # through RAY_ADDRESS, as to any existing Ray cluster.
    address = ray_cluster.get_runtime_context().gcs_address
    code = f"""
      library(tfdistributed)
      job <- launch_cluster("{SCRIPT}", workers = 2, args = "{tmp_path}", timeout = 300,
                            engine = ray())
      print(job)
      cat("backend:", job$backend, "\n")
    """
    done = subprocess.run(["Rscript", "-e", code], env=r_env() | {"RAY_ADDRESS": address},
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for i in (0, 1):
        assert f"[worker {i}] worker {i}: test accuracy" in done.stdout
        assert f"  worker {i}: exit 0" in done.stdout
    assert "backend: ray" in done.stdout
    identical_weights(tmp_path)


def test_launch_cluster_failure_is_an_r_error_naming_the_task(r, slurm_cluster, tmp_path):
    script = tmp_path / "fail.R"
    script.write_text('if (Sys.getenv("SLURM_PROCID") == "1") stop("worker one gives up")\n'
                      'Sys.sleep(300)\n')
    message = r(f"""
      tryCatch(launch_cluster("{script}", workers = 2, timeout = 120,
                              watch = watching(echo = FALSE), engine = slurm()),
               tfdistributed_error = function(e) conditionMessage(e))
    """)[0]
    assert "Task worker 1 exited with status 1" in message and "worker one gives up" in message
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""


def test_unknown_backend_and_unnamed_options_are_r_errors(r):
    message = r("""tryCatch(launch_cluster("%s", engine = "slurm"),
                   tfdistributed_error = function(e) conditionMessage(e))""" % SCRIPT)[0]
    assert "`engine` must be an engine (Local, Slurm or Ray)" in message, message
    assert message.endswith("E.g. engine = slurm()."), message
    # An engine's option given to another: R names the argument it does not know.
    message = r("""tryCatch(launch_cluster("%s", engine = ray(partition = "cpu")),
                   error = function(e) conditionMessage(e))""" % SCRIPT)[0]
    assert "partition" in message, message
    # One argument too many: R's own error, launch_cluster() has no `...`.
    message = r("""tryCatch(launch_cluster("%s", NULL, 2, NULL, NULL, NULL, NULL, NULL, 60, 3),
                   error = function(e) conditionMessage(e))""" % SCRIPT)[0]
    assert "unused argument" in message, message


def test_tf_config_from_slurm_in_r_tasks(slurm_cluster):
    code = ('library(tfdistributed); cfg <- tf_config_from_slurm(); '
            'cat(Sys.getenv("SLURM_PROCID"), cfg$task$type, cfg$task$index, '
            'unlist(cfg$cluster$worker), "\\n")')
    done = slurm_cluster.run(["srun", "-n2", "--label", "Rscript", "-e", code], timeout=120,
                             check=False, env=r_env())
    assert done.returncode == 0, done.stderr[-2000:]
    lines = sorted(line.split(": ", 1)[1].split() for line in done.stdout.splitlines() if ": " in line)
    node = slurm_cluster.node
    assert [line[:3] for line in lines] == [["0", "worker", "0"], ["1", "worker", "1"]]
    assert lines[0][3:] == lines[1][3:] and all(a.startswith(f"{node}:") for a in lines[0][3:])


def test_launch_cluster_timeout_cancels_the_slurm_job(r, slurm_cluster, tmp_path):
    script = tmp_path / "slow.R"
    script.write_text('cat("started\\n"); Sys.sleep(300)\n')
    message = r(f"""
      tryCatch(launch_cluster("{script}", workers = 2, timeout = 4,
                              watch = watching(echo = FALSE), engine = slurm()),
               tfdistributed_error = function(e) conditionMessage(e))
    """)[0]
    assert "did not finish within 4 s and was cancelled" in message
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""


def test_a_failing_r_task_on_ray_is_an_r_error_naming_it(ray_cluster, tmp_path):
    script = tmp_path / "fail.R"
    script.write_text('cfg <- jsonlite::fromJSON(Sys.getenv("TF_CONFIG"))\n'
                      'if (cfg$task$index == 1) stop("worker one gives up")\nSys.sleep(300)\n')
    code = f"""
      library(tfdistributed)
      message <- tryCatch(launch_cluster("{script}", workers = 2, timeout = 120,
                                         watch = watching(echo = FALSE), engine = ray()),
                          tfdistributed_error = function(e) conditionMessage(e))
      cat(message, "\\n")
    """
    address = ray_cluster.get_runtime_context().gcs_address
    done = subprocess.run(["Rscript", "-e", code], env=r_env() | {"RAY_ADDRESS": address},
                          capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Task worker 1 exited with status 1" in done.stdout
    assert "worker one gives up" in done.stdout
