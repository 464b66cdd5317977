"""The local cluster launcher: output, results, failures, timeouts, and nothing left behind."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest

import tfdistributed as tfd
from tfdistributed import LaunchError, LaunchTimeoutError
from tfdistributed.engines import warm

from enginesupport import assert_the_cause_is_named, peer_brought_down

pytestmark = pytest.mark.cluster


def script(tmp_path, body, name="task.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def our_descendants():
    """This process' live descendants, its warm servers aside (they outlive a job by design;
    the tasks forked from them are their children, and are counted)."""
    servers = set(warm.server_pids())
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE and p.pid not in servers]


@pytest.fixture(autouse=True)
def no_process_left_behind():
    before = {p.pid for p in our_descendants()}
    yield
    left = [p for p in our_descendants() if p.pid not in before]
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


def test_each_task_gets_its_tf_config_and_prefixed_output(tmp_path):
    path = script(tmp_path, """
        import json, os
        config = json.loads(os.environ["TF_CONFIG"])
        print("task", config["task"]["type"], config["task"]["index"], json.dumps(config["cluster"]))
    """)
    lines = []
    result = tfd.launch(path, tfd.Scaling(workers=3, chief=True), timeout=60,
                        watch=tfd.Watch(on_output=lines.append, echo=False))
    assert [(t.task_type, t.task_index, t.returncode) for t in result.tasks] == [
        ("chief", 0, 0), ("worker", 0, 0), ("worker", 1, 0), ("worker", 2, 0)]
    assert set(lines) >= {f"[worker 2] task worker 2 {json.dumps(result.cluster)}",
                          f"[chief 0] task chief 0 {json.dumps(result.cluster)}"}
    assert all(a.startswith("127.0.0.1:") for role in result.cluster.values() for a in role)


def _square_of_index(extra):
    import json
    import os

    return json.loads(os.environ["TF_CONFIG"])["task"]["index"] ** 2 + extra


def test_function_target_returns_values():
    result = tfd.launch(_square_of_index, workers=3, args=(10,), timeout=60,
                        watch=tfd.Watch(echo=False))
    assert result.values == [10, 11, 14]


def _attempt_and_stall_warning():
    import os

    if os.environ["TFDISTRIBUTED_ATTEMPT"] == "0":
        raise SystemExit("the first attempt fails")
    return os.environ["TFDISTRIBUTED_ATTEMPT"], os.environ["TFDISTRIBUTED_STALL_WARNING"]


def test_each_option_object_reaches_the_job():
    # The engine's, the restarts' and the watch's options, each given in its object, reach the
    # job: the first attempt fails and is restarted, and the tasks are told the stall warning.
    result = tfd.launch(_attempt_and_stall_warning, workers=1, timeout=120,
                        engine=tfd.engines.Local(warm_start=False),
                        restarts=tfd.Restarts(max_restarts=1),
                        watch=tfd.Watch(stall_warning=30, echo=False))
    assert result.restarts == 1 and result.values == [("1", "30")]


def _pin_first_core(task):
    task.env["TASK_POSITION"] = str(task.position)
    task.preexec_fn = lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def test_prepare_task_changes_each_task_before_it_starts(tmp_path):
    path = script(tmp_path, """
        import json, os
        role = json.loads(os.environ["TF_CONFIG"])["task"]
        print(role["type"], role["index"], os.environ["TASK_POSITION"], sorted(os.sched_getaffinity(0)))
    """)
    seen = []
    result = tfd.launch(path, tfd.Scaling(workers=2, chief=True), timeout=60,
                        engine=tfd.engines.Local(prepare_task=lambda task: (
                            seen.append(task.name), _pin_first_core(task))),
                        watch=tfd.Watch(echo=False))
    assert seen == ["chief 0", "worker 0", "worker 1"]
    core = min(os.sched_getaffinity(0))
    assert [t.output for t in result.tasks] == [[f"chief 0 0 [{core}]"], [f"worker 0 1 [{core}]"],
                                                [f"worker 1 2 [{core}]"]]


def test_a_failing_prepare_task_starts_nothing_and_leaves_no_files(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = script(tmp_path, "print('hi')")

    def refuse(task):
        raise RuntimeError(f"no {task.name}")

    with pytest.raises(RuntimeError, match="no worker 0"):
        tfd.launch(path, workers=2, timeout=10, engine=tfd.engines.Local(prepare_task=refuse))
    assert not list(tmp_path.glob("tfdistributed-launch-*"))


def test_script_arguments_are_passed(tmp_path):
    path = script(tmp_path, "import sys; print(sys.argv[1:])")
    result = tfd.launch(path, workers=1, args=["--epochs", 3], timeout=60,
                        watch=tfd.Watch(echo=False))
    assert result.tasks[0].output == ["['--epochs', '3']"]


def test_failing_task_is_named_and_the_others_are_stopped(tmp_path):
    path = script(tmp_path, """
        import json, os, time
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
            time.sleep(0.5)
            raise SystemExit("worker one gives up")
        time.sleep(120)
    """)
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as info:
        tfd.launch(path, workers=3, timeout=120, watch=tfd.Watch(echo=False))
    # Fast means well before the others' 120 s sleep and the 120 s timeout (usually ~2 s); the
    # margin holds on a busy 2-core machine, where starting 3 interpreters alone can take 10 s.
    assert time.monotonic() - t0 < 60
    assert "Task worker 1 exited with status 1" in str(info.value)
    assert "worker one gives up" in str(info.value)
    codes = {t.name: t.returncode for t in info.value.results}
    assert codes["worker 1"] == 1 and codes["worker 0"] < 0 and codes["worker 2"] < 0


def test_the_task_that_ended_first_is_named_not_the_one_its_end_brought_down(tmp_path):
    # Both ends pass while the supervisor is held in on_output: it sees them in one poll.
    path, held = peer_brought_down(tmp_path)
    with pytest.raises(LaunchError) as info:
        tfd.launch(path, workers=2, timeout=120, watch=tfd.Watch(echo=False, on_output=held))
    assert_the_cause_is_named(info.value)


class _Status:
    """A task's process as the supervisor polls it; ``returncode`` None while it runs."""

    def __init__(self, returncode):
        self.returncode = returncode
        self.stdout = None

    def poll(self):
        return self.returncode


def test_the_cause_is_named_when_its_exit_status_arrives_after_the_consequences(tmp_path,
                                                                             monkeypatch):
    # A warm task's exit status comes from its server, which reaps its children in its own
    # time (the oldest first): the supervisor can see worker 0, brought down, fail before it
    # hears that worker 1, whose output ended first, was killed.
    from tfdistributed.engines.base import Deadline
    from tfdistributed.engines.local import supervisor
    from tfdistributed.engines.options import JobPlan
    from tfdistributed.engines.output import job_relay

    watch = tfd.Watch(echo=False)
    plan = JobPlan(target=script(tmp_path, "pass"), scaling=tfd.Scaling(workers=2),
                   engine=tfd.engines.Local(), restarts=tfd.Restarts(), watch=watch, timeout=60)
    launcher = plan.engine.launcher(plan, job_relay(watch))
    job = launcher.job(0, Deadline(60, time.monotonic()), None)
    worker0, worker1 = job.tasks
    worker0.proc, worker1.proc = _Status(1), _Status(None)
    worker1.ended_at, worker0.ended_at = time.monotonic() - 2, time.monotonic() - 1

    def stop(procs, grace):  # nothing to stop; worker 1's status arrives meanwhile
        worker1.proc.returncode = -9

    monkeypatch.setattr(supervisor, "_kill_tree", stop)
    with pytest.raises(LaunchError) as info:
        job.wait(Deadline(60, time.monotonic()))
    assert info.value.failure["task"] == "worker 1"
    assert "Task worker 1 was killed by signal 9" in str(info.value)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_launcher_killed_outright_takes_its_tasks_with_it(tmp_path, warm):
    # SIGKILL (the OOM killer, kill -9, a closed terminal's session) runs no teardown in the
    # launcher: its tasks, in sessions of their own, would train on or wait forever. Warm, the
    # tasks are the warm server's children (engines/warm): the server goes, and they with it.
    pids = tmp_path / "pids"
    pids.mkdir()
    task = script(tmp_path, f"""
        import os, time
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        time.sleep(300)
    """)
    launcher = script(tmp_path, f"""
        import tfdistributed as tfd
        tfd.launch({task!r}, workers=2, timeout=300, watch=tfd.Watch(echo=False),
                   engine=tfd.engines.Local(warm_start={warm!r}))
    """, name="launcher.py")
    proc = subprocess.Popen([sys.executable, launcher])
    tasks = []
    try:
        deadline = time.monotonic() + 60
        while len(os.listdir(pids)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tasks = [psutil.Process(int(name)) for name in os.listdir(pids)]
        assert len(tasks) == 2
        parents = {" ".join(t.parent().cmdline()) for t in tasks}
        assert all(("engines.warm.server" in p) == warm for p in parents), parents
        proc.kill()
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(tasks, timeout=10)
        assert alive == []
    finally:
        proc.kill()
        for task in tasks:
            if task.is_running():
                task.kill()


def test_sigkilled_task_is_named(tmp_path):
    path = script(tmp_path, """
        import json, os, signal, subprocess, sys, time
        # A grandchild in the same process group must go too.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)
    """)
    with pytest.raises(LaunchError, match="Task worker 0 was killed by signal 9"):
        tfd.launch(path, workers=2, timeout=120, watch=tfd.Watch(echo=False))


def test_timeout_stops_everything(tmp_path):
    path = script(tmp_path, "import time; time.sleep(120)")
    t0 = time.monotonic()
    with pytest.raises(LaunchTimeoutError, match="did not finish within 3 s") as info:
        tfd.launch(path, workers=2, timeout=3, watch=tfd.Watch(echo=False))
    # The tasks were stopped, not waited for (they sleep 120 s); usually ~4 s, with room for a
    # busy machine.
    assert time.monotonic() - t0 < 60
    assert "worker 0, worker 1" in str(info.value)


MWMS_SCRIPT = """
import tfdistributed as tfd
strategy = tfd.make_strategy("auto")
import keras
with strategy.scope():
    model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(1)])
print("never reached without the other worker", flush=True)
"""


def test_task_that_never_joins_is_named_at_the_timeout(tmp_path):
    cluster = tfd.local_cluster(2)
    path = script(tmp_path, MWMS_SCRIPT)
    with pytest.raises(LaunchTimeoutError) as info:
        tfd.launch(path, tfd.Scaling(cluster=cluster),
                   engine=tfd.engines.Local(tasks=[("worker", 0)]), timeout=15,
                   watch=tfd.Watch(echo=False))
    message = str(info.value)
    assert f"never joined the cluster (no server on their address): worker 1 ({cluster['worker'][1]})" in message
    assert "worker 0" in message.split("Still running")[1]


def test_missing_script_and_unknown_kind(tmp_path):
    with pytest.raises(LaunchError, match="does not exist"):
        tfd.launch(str(tmp_path / "nope.py"), timeout=10)
    other = tmp_path / "train.sh"
    other.write_text("echo hi")
    with pytest.raises(LaunchError, match="runs .py scripts with Python, .R"):
        tfd.launch(str(other), timeout=10)
    with pytest.raises(tfd.ArgumentTypeError, match="script path or a Python function"):
        tfd.launch(42, timeout=10)
    with pytest.raises(tfd.ArgumentTypeError, match="positive number"):
        tfd.launch(str(other), timeout=0)


def test_port_already_in_use(tmp_path):
    path = script(tmp_path, "print('hi')")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        with pytest.raises(LaunchError, match=f"worker 0 \\({address}\\) is already in use"):
            tfd.launch(path, tfd.Scaling(cluster={"worker": [address]}), timeout=10)


def test_non_loopback_cluster_refused(tmp_path):
    path = script(tmp_path, "print('hi')")
    with pytest.raises(tfd.ClusterConfigError, match="not a loopback address"):
        tfd.launch(path, tfd.Scaling(cluster={"worker": ["192.0.2.10:2222"]}), timeout=10)


def test_r_script_target(tmp_path):
    path = script(tmp_path, 'cat("R task", jsonlite::fromJSON(Sys.getenv("TF_CONFIG"))$task$index, "\\n")',
                  name="task.R")
    result = tfd.launch(path, workers=2, timeout=60, watch=tfd.Watch(echo=False))
    assert [t.output for t in result.tasks] == [["R task 0 "], ["R task 1 "]]


def test_command_line(tmp_path):
    ok = script(tmp_path, "print('fine')", name="ok.py")
    bad = script(tmp_path, "raise SystemExit(3)", name="bad.py")
    env = dict(os.environ)
    run = lambda *args: subprocess.run([sys.executable, "-m", "tfdistributed", "launch", *args],
                                       capture_output=True, text=True, timeout=60, env=env)
    done = run("--workers", "2", ok)
    assert done.returncode == 0, done.stderr
    assert "[worker 1] fine" in done.stdout and "all tasks finished" in done.stderr
    failed = run("--workers", "2", bad)
    assert failed.returncode == 1 and "exited with status 3" in failed.stderr
