"""Helpers shared by the engine tests (local, SLURM, Ray): weights written by each worker, the
processes a job may leave behind, a job in which one task's end brings the other down, and a
task's pid found from inside the job."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "tests" / "python" / "scripts"


def r_env(**extra) -> dict:
    """Environment for tasks that run R: this project's R library and this Python."""
    env = dict(os.environ)
    env.update(R_LIBS=str(ROOT / ".rlib"), RETICULATE_PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def assert_identical_weights(outdir, names=("worker-0", "worker-1")) -> list:
    """Both workers trained in lock-step: their saved weights are identical, array by array."""
    loaded = []
    for name in names:
        with np.load(Path(outdir) / f"{name}.npz") as f:
            loaded.append([f[k] for k in sorted(f.files, key=lambda k: int(k.strip("warr_")))])
    first, *others = loaded
    assert len(first) >= 2
    for other in others:
        assert len(other) == len(first)
        for a, b in zip(first, other):
            np.testing.assert_array_equal(a, b)
    return first


def assert_history_and_figures_came_back(result, lines, outdir, epochs=2) -> None:
    """What the tasks told the launcher while they trained (tfdistributed.watch), on any engine:
    the chief's own fit history, each task's figures, one progress line per epoch."""
    import json

    with open(Path(outdir) / "worker-0.json") as f:
        own = json.load(f)["history"]
    assert result.history == own and result.epochs == list(range(epochs))
    assert [r["task"] for r in result.workers] == ["worker 0", "worker 1"]
    assert all(r["examples_per_second"] > 0 and r["steps"] > 0 for r in result.workers)
    progress = [ln for ln in lines if ln.startswith("[tfdistributed] epoch")]
    assert len(progress) == epochs, lines


def processes_running(marker: str) -> list:
    """Live processes whose command line mentions ``marker`` (zombies are already gone)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(p.info["cmdline"] or []):
                found.append((p.pid, p.info["cmdline"]))
        except psutil.Error:
            continue
    return found


def peer_brought_down(tmp_path, pause=0.0, hold=2.0):
    """A 2-worker job in which one task's end brings the other down, seen in one poll: the
    script's path and the ``on_output`` that holds the engine meanwhile (as a loaded machine
    holds it). Worker 1 prints "stalled", waits ``pause`` s and exits with the stall timeout's
    status 76; worker 0, as a peer waiting in a collective would, then fails with status 1."""
    import textwrap
    import time

    gone = tmp_path / "worker-1-gone"
    path = tmp_path / "peer_brought_down.py"
    path.write_text(textwrap.dedent(f"""
        import json, os, sys, time
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
            print("stalled", flush=True)
            time.sleep({pause!r})
            open({str(gone)!r}, "w").close()
            os._exit(76)
        while not os.path.exists({str(gone)!r}):
            time.sleep(0.01)
        time.sleep(0.1)
        sys.exit("worker 0: its peer is gone")
    """))

    def held(line):
        if line.endswith("stalled"):
            time.sleep(hold)

    return str(path), held


def assert_the_cause_is_named(error) -> None:
    """``error`` (a LaunchError of :func:`peer_brought_down`'s job) names worker 1, whose end
    came first, not worker 0, which its end brought down."""
    codes = {t.name: t.returncode for t in error.results}
    assert codes == {"worker 0": 1, "worker 1": 76}  # both ended before the engine looked
    assert "Task worker 1 exited with status 76" in str(error)
    assert error.failure["task"] == "worker 1"


def task_pid(task_type: str, task_index: int, timeout: float = 60.0) -> int:
    """The pid of this job's task ``task_type task_index``: the process listening on its port of
    TF_CONFIG, waited for up to ``timeout`` seconds (it may still be starting). Not found by its
    command line or its environment in /proc: a task forked by a warm server
    (tfdistributed.engines.warm) shows the server's there."""
    import time

    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    port = int(cluster[task_type][task_index].rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout
    while True:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
                return conn.pid
        if time.monotonic() > deadline:
            raise RuntimeError(f"{task_type} {task_index} of this cluster is not running "
                               f"(nothing listened on port {port} for {timeout:g} s)")
        time.sleep(0.2)
