"""Self-healing jobs: restarts after a failure (launch(max_restarts=...)), on real processes."""

import os
import subprocess
import sys
import time

import pytest

import tfdistributed as tfd
from test_launch import no_process_left_behind, script  # noqa: F401  (an autouse fixture)

pytestmark = pytest.mark.cluster

# Worker 1 fails on attempts before FAIL_UNTIL (an environment variable), each attempt in its
# own words unless SAME is set; the others wait to be stopped. Every task logs its attempt.
FLAKY = """
    import json, os, signal, sys, time
    attempt = int(os.environ["TFDISTRIBUTED_ATTEMPT"])
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    with open(os.path.join(os.environ["LOG_DIR"], f"{index}-{attempt}"), "w"):
        pass
    if attempt < int(os.environ["FAIL_UNTIL"]):
        if index == 1:
            time.sleep(0.3)
            how = os.environ["HOW"]
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "preempt":
                print("told to stop", flush=True)
                sys.exit(75)
            raise RuntimeError("always this" if how == "same" else f"bad luck {attempt}")
        time.sleep(120)
    print("finished on attempt", attempt)
"""


def flaky(tmp_path, how, fail_until, **kwargs):
    """launch() of FLAKY: its result (or error), the lines it streamed, the attempts logged."""
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = []
    env = {"LOG_DIR": str(logs), "FAIL_UNTIL": str(fail_until), "HOW": how}
    try:
        outcome = tfd.launch(script(tmp_path, FLAKY), workers=2, env=env, echo=False,
                             on_output=lines.append, **dict(dict(timeout=120), **kwargs))
    except tfd.LaunchError as error:
        outcome = error
    return outcome, lines, sorted(os.listdir(logs))


def test_a_killed_task_restarts_the_whole_job_with_new_ports(tmp_path):
    result, lines, logged = flaky(tmp_path, "kill", 1, max_restarts=2)
    assert result.restarts == 1
    assert [t.output for t in result.tasks] == [["finished on attempt 1"]] * 2
    assert logged == ["0-0", "0-1", "1-0", "1-1"]
    first, second = result.attempts
    assert first == {"attempt": 0, "task": "worker 1", "ended": "was killed by signal 9",
                     "error": "", "preempted": False}
    assert second == {"attempt": 1, "task": None, "ended": None, "error": None, "preempted": False}
    announced = [ln for ln in lines if ln.startswith("[tfdistributed]")]
    assert announced == ["[tfdistributed] worker 1 was killed by signal 9 on attempt 1 of 3 "
                         "(no output); restarting the job"]
    # The announcement comes after the first attempt's lines and before the second's.
    assert lines.index(announced[0]) < lines.index("[worker 0] finished on attempt 1")


def test_a_preempted_task_is_restarted_even_twice_the_same_way(tmp_path):
    result, lines, logged = flaky(tmp_path, "preempt", 2, max_restarts=2)
    assert result.restarts == 2 and len(logged) == 6
    assert [a["preempted"] for a in result.attempts] == [True, True, False]
    assert "[tfdistributed] worker 1 was preempted (exit status 75) on attempt 2 of 3 " \
           "(told to stop); restarting the job" in lines


def test_a_failure_on_every_attempt_names_each_one(tmp_path):
    error, lines, logged = flaky(tmp_path, "differently", 5, max_restarts=2)
    assert isinstance(error, tfd.LaunchError) and len(logged) == 6
    message = str(error)
    assert "The job failed on each of its 3 attempts (max_restarts=2)" in message
    for n in range(3):
        assert f"attempt {n + 1}: worker 1 exited with status 1 (RuntimeError: bad luck {n})" \
               in message
    assert [a["error"] for a in error.attempts] == [f"RuntimeError: bad luck {n}" for n in range(3)]
    assert sum(ln.startswith("[tfdistributed]") for ln in lines) == 2
    assert {t.name: t.returncode for t in error.results}["worker 1"] == 1


def test_the_same_failure_twice_is_a_bug_and_ends_the_job(tmp_path):
    error, lines, logged = flaky(tmp_path, "same", 5, max_restarts=5)
    assert isinstance(error, tfd.LaunchError) and logged == ["0-0", "0-1", "1-0", "1-1"]
    assert "Task worker 1 failed the same way on attempts 1 and 2 (exited with status 1: " \
           "RuntimeError: always this): that is a bug" in str(error)
    assert lines[-1] == ("[tfdistributed] worker 1 exited with status 1 on attempt 2 of 6 with "
                         "the same error as on the attempt before: a bug, not bad luck; the job "
                         "is not restarted again")


def test_without_restarts_the_first_failure_ends_the_job(tmp_path):
    error, lines, logged = flaky(tmp_path, "differently", 1)
    assert logged == ["0-0", "1-0"] and not any(ln.startswith("[tfdistributed]") for ln in lines)
    assert "Task worker 1 exited with status 1" in str(error)
    assert error.attempts == [{"attempt": 0, "task": "worker 1", "ended": "exited with status 1",
                               "error": "RuntimeError: bad luck 0", "preempted": False}]


def test_the_timeout_covers_every_attempt(tmp_path):
    t0 = time.monotonic()
    error, _, logged = flaky(tmp_path, "preempt", 100, max_restarts=100, timeout=4)
    assert isinstance(error, tfd.LaunchTimeoutError), error
    assert "did not finish within 4 s" in str(error)
    assert len(logged) >= 2 and time.monotonic() - t0 < 60


def test_restarts_from_the_command_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    env = dict(os.environ, LOG_DIR=str(logs), FAIL_UNTIL="1", HOW="kill")
    done = subprocess.run([sys.executable, "-m", "tfdistributed", "launch", "--workers", "2",
                           "--max-restarts", "1", script(tmp_path, FLAKY)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "[tfdistributed] worker 1 was killed by signal 9 on attempt 1 of 2" in done.stdout
    assert "after 1 restart(s)" in done.stderr


@pytest.mark.parametrize("value, message", [(-1, "`max_restarts` must be >= 0"),
                                            (2.0, "`max_restarts` must be an integer"),
                                            ("3", "`max_restarts` must be an integer")])
def test_max_restarts_is_checked(tmp_path, value, message):
    with pytest.raises(tfd.ArgumentTypeError, match=message):
        tfd.launch(script(tmp_path, "pass"), workers=1, max_restarts=value)


def test_max_restarts_on_other_backends_is_refused(tmp_path):
    with pytest.raises(tfd.ArgumentTypeError, match="max_restarts applies to local clusters"):
        tfd.launch(script(tmp_path, "pass"), workers=1, max_restarts=1, backend="slurm")
