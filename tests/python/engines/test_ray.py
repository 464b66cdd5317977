"""Ray, against a real local Ray with 2 CPUs (tests/conftest.py: ray_cluster).

launch(..., engine=Ray()) runs the same script or function as the local launcher, one Ray actor
per task, with Keras 3 (not the legacy Keras Ray Train forces), per-task results, and failures,
lost actors and timeouts reported by task name.
"""

from __future__ import annotations

import textwrap
import time

import psutil

import pytest

import tfdistributed as tfd
from tfdistributed import LaunchError, LaunchTimeoutError

from enginesupport import (SCRIPTS, assert_history_and_figures_came_back, assert_identical_weights,
                           assert_the_cause_is_named, peer_brought_down, processes_running)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def _keras_and_task(x):
    import json
    import os

    import keras

    return (keras.__version__, os.environ.get("TF_USE_LEGACY_KERAS"),
            json.loads(os.environ["TF_CONFIG"])["task"], x)


def test_function_target_runs_keras_3_even_where_ray_train_asks_for_legacy(ray_cluster):
    # What Ray Train's TensorFlow backend puts in every worker's environment.
    legacy = {"runtime_env": {"env_vars": {"TF_USE_LEGACY_KERAS": "1"}}}
    result = tfd.launch(_keras_and_task, workers=2, args=(7,),
                        engine=tfd.engines.Ray(ray_options={"num_cpus": 1, **legacy}), timeout=120,
                        watch=tfd.Watch(echo=False))
    assert [v[1:] for v in result.values] == [(None, {"type": "worker", "index": 0}, 7),
                                              (None, {"type": "worker", "index": 1}, 7)]
    assert all(v[0].startswith("3.") for v in result.values)
    assert all(a.startswith("127.0.0.1:") for a in result.cluster["worker"])


def test_python_script_two_workers_identical_weights(ray_cluster, tmp_path):
    lines = []
    result = tfd.launch(str(SCRIPTS / "mwms_digits.py"), workers=2, engine=tfd.engines.Ray(),
                        args=[str(tmp_path), "--epochs", "2"], timeout=300,
                        watch=tfd.Watch(echo=False, on_output=lines.append))
    assert [(t.name, t.returncode) for t in result.tasks] == [("worker 0", 0), ("worker 1", 0)]
    assert any(line.startswith("[worker 1] done:") for line in lines)
    assert_history_and_figures_came_back(result, lines, tmp_path)
    assert_identical_weights(tmp_path)


def test_failing_task_fails_the_job_fast_and_by_name(ray_cluster, tmp_path):
    path = tmp_path / "fail.py"
    path.write_text(textwrap.dedent("""
        import json, os, time
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
            raise SystemExit("worker one gives up")
        time.sleep(300)
    """))
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="Task worker 1 exited with status 1") as info:
        tfd.launch(str(path), workers=2, engine=tfd.engines.Ray(), timeout=120,
                   watch=tfd.Watch(echo=False))
    # Fast means before the 120 s timeout and worker 0's 300 s sleep; Ray's actors are slow to
    # start on a busy 2-core machine.
    assert time.monotonic() - t0 < 90
    assert "worker one gives up" in str(info.value)
    assert processes_running(str(path)) == []


def test_the_task_that_ended_first_is_named_not_the_one_its_end_brought_down(ray_cluster,
                                                                             tmp_path):
    # As on the local engine (test_launch). Worker 1 waits 1 s after its line, so that the
    # line is polled while it still runs and the job is held (4 s) while both tasks end.
    path, held = peer_brought_down(tmp_path, pause=1.0, hold=4.0)
    with pytest.raises(LaunchError) as info:
        tfd.launch(path, workers=2, engine=tfd.engines.Ray(), timeout=120,
                   watch=tfd.Watch(echo=False, on_output=held))
    assert_the_cause_is_named(info.value)


def _kill_my_actor(pid_dir):
    import json
    import os
    import signal
    import time

    # Each task says who it is: the test checks that exactly these processes are gone (other
    # jobs may run beside it).
    with open(os.path.join(pid_dir, str(os.getpid())), "w"):
        pass
    if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
        # The task's parent is its Ray actor: a worker process lost with its machine.
        os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(300)


def test_a_lost_actor_fails_the_job_by_name(ray_cluster, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="Task worker 0 was lost: its Ray actor died"):
        tfd.launch(_kill_my_actor, workers=2, engine=tfd.engines.Ray(), timeout=120,
                   args=(str(tmp_path),), watch=tfd.Watch(echo=False))
    # Noticed before the 120 s timeout (a dead actor's poll answers at once, a silent one after
    # 30 s), with room for a busy machine.
    assert time.monotonic() - t0 < 100
    # The other task is stopped with its actor: gone within seconds (more on a busy machine).
    pids = [int(p.name) for p in tmp_path.iterdir()]
    for _ in range(40):
        if not [p for p in pids if psutil.pid_exists(p)]:
            break
        time.sleep(0.5)
    assert pids and not [p for p in pids if psutil.pid_exists(p)]


def test_max_restarts_as_on_the_local_engine(ray_cluster, tmp_path):
    # Each task knows its attempt; the same failure on two attempts in a row ends the job.
    path = tmp_path / "attempts.py"
    path.write_text(textwrap.dedent("""
        import os
        attempt = os.environ["TFDISTRIBUTED_ATTEMPT"]
        if attempt == "0":
            raise SystemExit("lost on attempt 0")
        if os.environ.get("BUG"):
            raise SystemExit("a bug")
        print("attempt", attempt, flush=True)
    """))
    result = tfd.launch(str(path), workers=1, engine=tfd.engines.Ray(),
                        restarts=tfd.Restarts(max_restarts=1), timeout=120,
                        watch=tfd.Watch(echo=False))
    assert result.tasks[0].output == ["attempt 1"]
    assert [a["error"] for a in result.attempts] == ["lost on attempt 0", None]
    with pytest.raises(LaunchError, match="failed the same way on attempts 2 and 3") as info:
        tfd.launch(str(path), workers=1, engine=tfd.engines.Ray(),
                   restarts=tfd.Restarts(max_restarts=5), timeout=120, env={"BUG": "1"},
                   watch=tfd.Watch(echo=False))
    assert len(info.value.attempts) == 3


def test_timeout_stops_every_task(ray_cluster, tmp_path):
    path = tmp_path / "slow.py"
    path.write_text("import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    # 15 s: room for Ray to start both actors on a busy machine (else the timeout is Ray's
    # placement's, with another message).
    with pytest.raises(LaunchTimeoutError, match="did not finish within 15 s") as info:
        tfd.launch(str(path), workers=2, engine=tfd.engines.Ray(), timeout=15,
                   watch=tfd.Watch(echo=False))
    assert "worker 0, worker 1" in str(info.value)
    assert processes_running(str(path)) == []


def test_more_tasks_than_the_cluster_can_place_is_a_timeout_that_says_so(ray_cluster):
    with pytest.raises(LaunchTimeoutError, match="Ray could not start the job's 3 task actors"):
        tfd.launch(_keras_and_task, workers=3, args=(0,), engine=tfd.engines.Ray(), timeout=5,
                   watch=tfd.Watch(echo=False))
