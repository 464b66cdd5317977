"""See the job, from R: launch_cluster() of a 2-worker R training script brings back the job's
history (the chief's own fit history, one entry per epoch; plot() draws it, as.data.frame()
gives its rows), the per-task table and the stragglers, and its console output, captured
non-interactively (Rscript's stdout), has one progress line per epoch instead of every
worker's Keras lines. Each job runs once (module-scoped) and serves several assertions."""

from __future__ import annotations

import csv
import json
import re
import subprocess

import pytest

from rsupport import ROOT, r_env

SCRIPT = ROOT / "tests" / "r" / "scripts" / "history_job.R"
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

# Run by Rscript, as a user's non-interactive session: the job's console output is its stdout.
DRIVER = """
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
out <- args[[1]]
job <- launch_cluster("{script}", workers = 2, args = args, timeout = 600)
print(job)
jsonlite::write_json(list(metrics = job$history$metrics, epochs = job$history$epochs,
                          stragglers = job$stragglers, class = class(job$history)),
                     file.path(out, "job.json"), digits = NA)
utils::write.csv(as.data.frame(job$history), file.path(out, "history.csv"), row.names = FALSE)
workers <- job$workers
workers$straggler_epochs <- vapply(workers$straggler_epochs, length, 1L)
utils::write.csv(workers, file.path(out, "workers.csv"), row.names = FALSE)
writeLines(job$output[["worker 0"]], file.path(out, "worker0.txt"))
grDevices::png(file.path(out, "history.png"))
shown <- plot(job$history)
grDevices::dev.off()
cat("PLOTTED", class(shown), "\\n")
"""


def _run_job(tmp_path_factory, how: str, epochs: int) -> dict:
    out = tmp_path_factory.mktemp(how)
    driver = out / "driver.R"
    driver.write_text(DRIVER.format(script=SCRIPT))
    done = subprocess.run(["Rscript", str(driver), str(out), how, str(epochs)], cwd=ROOT,
                          env=r_env(), capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    with open(out / "history.csv") as f:
        rows = list(csv.DictReader(f))
    with open(out / "workers.csv") as f:
        workers = list(csv.DictReader(f))
    return {"out": out, "stdout": done.stdout, "epochs": epochs, "rows": rows,
            "workers": workers, "job": json.loads((out / "job.json").read_text()),
            "chief": json.loads((out / "worker-0.json").read_text())}


@pytest.fixture(scope="module")
def fit_job(tmp_path_factory):
    return _run_job(tmp_path_factory, "fit_distributed", 3)


@pytest.fixture(scope="module")
def keras_fit_job(tmp_path_factory):
    return _run_job(tmp_path_factory, "keras_fit", 2)


def _same_history(job: dict) -> None:
    history, chief = job["job"]["metrics"], job["chief"]
    assert set(history) == set(chief), (history, chief)
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(history), history
    for metric, values in chief.items():
        assert len(values) == job["epochs"]
        assert history[metric] == pytest.approx(values, rel=1e-9, abs=0), metric
    assert job["job"]["epochs"] == list(range(1, job["epochs"] + 1))
    assert job["job"]["class"] == ["tfdistributed_history"]


def test_the_job_history_is_the_chiefs_own_fit_history(fit_job):
    _same_history(fit_job)


def test_plain_model_fit_in_the_script_brings_its_history_back_too(keras_fit_job):
    _same_history(keras_fit_job)


def test_the_history_plots_and_turns_into_rows(fit_job):
    png = fit_job["out"] / "history.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Two panels of lines and points, not an empty device (an empty 480x480 PNG is ~1.5 kB).
    assert png.stat().st_size > 5000, png.stat().st_size
    assert "PLOTTED tfdistributed_history" in fit_job["stdout"]
    rows = fit_job["rows"]
    assert list(rows[0]) == ["epoch", "metric", "value", "data"]
    history = fit_job["job"]["metrics"]
    assert len(rows) == sum(len(v) for v in history.values()) == 4 * fit_job["epochs"]
    for row in rows:
        assert float(row["value"]) == pytest.approx(history[row["metric"]][int(row["epoch"]) - 1])
        assert row["data"] == ("validation" if row["metric"].startswith("val_") else "training")


def test_the_per_task_table_has_a_row_per_task_with_its_pace(fit_job):
    workers = fit_job["workers"]
    assert [w["task"] for w in workers] == ["worker 0", "worker 1"]
    for w in workers:
        assert float(w["examples_per_second"]) > 0, w
        assert float(w["median_step_seconds"]) > 0, w
        # digits_data()'s 1437 training rows in global batches of 64: 23 steps an epoch.
        assert int(w["steps"]) >= 22 * fit_job["epochs"], w
        assert w["restarts"] == "0", w
    named = [w["task"] for w in workers if w["straggler"] == "TRUE"]
    assert fit_job["job"]["stragglers"] == named
    shown = fit_job["stdout"]
    assert "per task:" in shown and re.search(r"worker 1\s+\d+\s+\d+", shown), shown[-3000:]
    assert "history: 3 epochs" in shown, shown[-3000:]


def test_the_console_has_one_progress_line_per_epoch_not_every_workers_bar(fit_job):
    lines = fit_job["stdout"].splitlines()
    progress = [line for line in lines if line.startswith("[tfdistributed] epoch ")]
    assert len(progress) == fit_job["epochs"], lines
    assert [p.split()[2] for p in progress] == [f"{e}/3" for e in (1, 2, 3)], progress
    assert all("val_loss" in p and "examples/s" in p for p in progress), progress
    assert "\r" not in fit_job["stdout"]
    keras_lines = re.compile(r"^\[worker \d\] (Epoch \d+/\d+|\s*\d+/\d+ .*step)")
    assert not [line for line in lines if keras_lines.match(line)], lines
    # ... which each task's output keeps.
    kept = (fit_job["out"] / "worker0.txt").read_text()
    assert "Epoch 3/3" in kept and "/step" in kept, kept[-2000:]
