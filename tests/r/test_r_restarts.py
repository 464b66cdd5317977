"""Jobs that heal themselves, driven from R: launch_cluster(restarts = restarts(max_restarts =))
restarts a failed job, says so, and reports every attempt; a failure that repeats is named, not retried forever;
an R interrupt stops everything and restarts nothing. The tasks are small R scripts without
TensorFlow (tests/python/engines/test_self_healing.py trains for real; the multi-worker tutorial kills a
training worker during its render)."""

from __future__ import annotations

import signal
import subprocess
import time

import psutil
import pytest

from rsupport import ROOT, r_env

FLAKY = ROOT / "tests" / "r" / "scripts" / "flaky_task.R"
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def _flaky_tasks():
    return [p for p in psutil.process_iter(["cmdline"]) if str(FLAKY) in " ".join(p.info["cmdline"] or [])]


def test_launch_cluster_restarts_a_failed_job_and_reports_the_attempts(r):
    lines = list(r(f"""
      restart_job <- NULL
      restart_output <- utils::capture.output(
        restart_job <- launch_cluster("{FLAKY}", workers = 2, args = "once",
                                      restarts = restarts(max_restarts = 2), timeout = 120))
      restart_output
    """))
    announced = [line for line in lines if line.startswith("[tfdistributed]")]
    assert len(announced) == 1, lines
    assert "worker 1" in announced[0] and "attempt 1 of 3" in announced[0], announced
    assert "the data server went away" in announced[0], announced
    assert list(r("restart_job$restarts")) == [1]
    assert list(r("restart_job$attempts$attempt")) == [0, 1]
    assert list(r("restart_job$attempts$task"))[0] == "worker 1"
    assert list(r("is.na(restart_job$attempts$task)")) == [False, True]
    assert list(r("restart_job$tasks$returncode")) == [0, 0]
    shown = "\n".join(r("utils::capture.output(print(restart_job))"))
    assert "2 tasks" in shown and "1 restart" in shown and "attempt 1: worker 1" in shown, shown
    assert not _flaky_tasks()


def test_a_failure_that_repeats_is_named_not_retried_to_the_end(r):
    message = r(f"""
      tryCatch(launch_cluster("{FLAKY}", workers = 2, args = "always",
                              restarts = restarts(max_restarts = 5), timeout = 120,
                              watch = watching(echo = FALSE)),
               tfdistributed_launch_error = conditionMessage)
    """)[0]
    assert "the data server went away" in message, message
    assert "same way" in message or "twice" in message, message
    assert not _flaky_tasks()


def test_an_r_interrupt_stops_every_task_and_restarts_nothing(tmp_path):
    script = tmp_path / "interrupted.R"
    script.write_text(f"""
      library(tfdistributed)
      outcome <- tryCatch(
        launch_cluster("{FLAKY}", workers = 2, args = "hang", restarts = restarts(max_restarts = 3),
                       timeout = 200),
        interrupt = function(e) "INTERRUPTED")
      cat("OUTCOME", if (identical(outcome, "INTERRUPTED")) outcome else "finished", "\\n")
    """)
    proc = subprocess.Popen(["Rscript", str(script)], cwd=ROOT, env=r_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "attempt 0: worker 1 started" in line:
                break
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(seen) + rest
    assert "OUTCOME INTERRUPTED" in output, output[-3000:]
    assert "restarting" not in output and "attempt 1:" not in output, output[-3000:]
    deadline = time.time() + 20
    while _flaky_tasks() and time.time() < deadline:
        time.sleep(0.5)
    assert not _flaky_tasks(), [p.info["cmdline"] for p in _flaky_tasks()]
