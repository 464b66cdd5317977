"""Warm starts (tfdistributed.engines.warm): tasks forked from a Python that has imported
TensorFlow are the tasks a fresh interpreter would have run: the same numbers from the same
training, the same exit statuses, output, environment and teardown; and what cannot be forked
starts the usual way, saying why when a warm start was asked for and failed."""

import json
import os
import sys
import textwrap
import time

import psutil
import pytest

import tfdistributed as tfd
from tfdistributed import LaunchError, LaunchTimeoutError
from tfdistributed.engines.warm import client

pytestmark = pytest.mark.cluster

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "support"))


def script(tmp_path, body, name="task.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _train(strategy_name):
    """Two epochs of the digits model on 256 examples: each task's losses and weights' sum."""
    import json
    import os

    import numpy as np

    import tfdistributed as tfd
    from models import digits_model

    (x, y), _ = tfd.digits_arrays()
    strategy = tfd.make_strategy(strategy_name)
    model = digits_model(strategy, seed=3)
    history = tfd.fit(model, x[:256], y[:256], strategy=strategy, epochs=2, batch_size=32,
                      shuffle=False, verbose=0)
    role = json.loads(os.environ["TF_CONFIG"])["task"]
    return {"task": f"{role['type']} {role['index']}", "loss": history.history["loss"],
            "weights": float(sum(np.abs(w).sum() for w in model.get_weights())),
            "ppid": os.getppid()}


@pytest.fixture(scope="module")
def training():
    """The same multi-worker and parameter-server jobs, started cold and warm."""
    runs = {}
    for warm in (False, True):
        for name, shape in (("multi_worker_mirrored", tfd.Scaling(workers=2)),
                            ("parameter_server", tfd.Scaling(workers=1, ps=1, chief=True))):
            runs[name, warm] = tfd.launch(_train, shape, args=(name,), timeout=300,
                                          engine=tfd.engines.Local(warm_start=warm),
                                          watch=tfd.Watch(echo=False))
    return runs


@pytest.mark.parametrize("strategy", ["multi_worker_mirrored", "parameter_server"])
def test_a_warm_job_trains_to_the_same_numbers_as_a_cold_one(training, strategy):
    cold, warm = training[strategy, False], training[strategy, True]
    for c, w in zip(cold.values, warm.values):
        assert (c["task"], c["loss"], c["weights"]) == (w["task"], w["loss"], w["weights"])
    if strategy == "multi_worker_mirrored":
        # The workers agree with each other too (one all-reduced model).
        assert warm.values[0]["weights"] == warm.values[1]["weights"]


def test_warm_tasks_are_forked_by_the_warm_server_and_cold_ones_by_the_launcher(training):
    cold = training["multi_worker_mirrored", False].values
    warm = training["multi_worker_mirrored", True].values
    assert {v["ppid"] for v in cold} == {os.getpid()}
    servers = set(client.server_pids())
    assert {v["ppid"] for v in warm} <= servers and len({v["ppid"] for v in warm}) == 1
    # Every warm task of the session came from one server (the same environment).
    ps_job = training["parameter_server", True]
    assert {v["ppid"] for v in ps_job.values} == {v["ppid"] for v in warm}


def test_a_warm_task_runs_as_python_would_run_it(tmp_path):
    path = script(tmp_path, """
        import json, os, sys
        import numpy as np
        role = json.loads(os.environ["TF_CONFIG"])["task"]
        with open(f"seen-{role['index']}.json", "w") as f:
            json.dump({"argv": sys.argv, "file": __file__, "name": __name__,
                          "path0": sys.path[0], "cwd": os.getcwd(), "mine": os.environ["MINE"],
                          "session": os.getsid(0) == os.getpid(), "stdin": sys.stdin.read(),
                          "draw": float(np.random.rand()), "role": role["index"]}, f)
    """)
    result = tfd.launch(path, workers=2, args=("a", 1), env={"MINE": "yes"}, timeout=120,
                        engine=tfd.engines.Local(warm_start=True), cwd=str(tmp_path),
                        watch=tfd.Watch(echo=False))
    seen = [json.loads((tmp_path / f"seen-{i}.json").read_text()) for i in (0, 1)]
    assert [t.returncode for t in result.tasks] == [0, 0]
    for record in seen:
        assert record["argv"] == [path, "a", "1"]
        assert record["file"] == path and record["name"] == "__main__"
        assert record["path0"] == str(tmp_path) and record["cwd"] == str(tmp_path)
        assert record["mine"] == "yes" and record["session"] and record["stdin"] == ""
    assert [r["role"] for r in seen] == [0, 1]
    # NumPy's global generator is drawn afresh in each task, as in a fresh interpreter.
    assert seen[0]["draw"] != seen[1]["draw"]


@pytest.mark.parametrize("body, message", [
    ("import sys; sys.exit(3)", "Task worker 0 exited with status 3"),
    ("raise ValueError('broken on purpose')", "Its error: ValueError: broken on purpose"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
     "Task worker 0 was killed by signal 9"),
    ("import sys; sys.exit('a message')", "exited with status 1"),
])
def test_a_warm_task_ends_with_the_status_a_fresh_python_would(tmp_path, body, message):
    path = script(tmp_path, body)
    for warm in (False, True):
        with pytest.raises(LaunchError, match=message) as caught:
            tfd.launch(path, workers=1, timeout=120, engine=tfd.engines.Local(warm_start=warm),
                       watch=tfd.Watch(echo=False))
        if "ValueError" in body:
            lines = caught.value.results[0].output
            # The traceback starts at the script, as Python prints it.
            assert lines[-3:-2] == [f'  File "{path}", line 1, in <module>']


def test_a_hanging_warm_job_is_stopped_at_its_timeout_and_leaves_nothing(tmp_path):
    path = script(tmp_path, """
        import os, time
        print("pid", os.getpid(), flush=True)
        time.sleep(600)
    """)
    lines = []
    started = time.monotonic()
    with pytest.raises(LaunchTimeoutError, match="did not finish within 20 s"):
        tfd.launch(path, workers=2, timeout=20, engine=tfd.engines.Local(warm_start=True),
                   restarts=tfd.Restarts(grace=2),
                   watch=tfd.Watch(echo=False, on_output=lines.append))
    assert time.monotonic() - started < 60
    pids = [int(line.split()[-1]) for line in lines if " pid " in line]
    assert len(pids) == 2
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_warm_task_stopped_by_sigterm_reports_the_signal(tmp_path):
    path = script(tmp_path, """
        import os, signal, time
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    """)
    with pytest.raises(LaunchError, match="killed by signal 15"):
        tfd.launch(path, workers=1, timeout=120, engine=tfd.engines.Local(warm_start=True),
                   watch=tfd.Watch(echo=False))


def test_a_warm_tasks_cpu_is_counted_when_it_ends(tmp_path):
    # Its server reaps it, so the launcher's RUSAGE_CHILDREN does not see it (pytest's CPU
    # accounting adds this count); the server reports what wait4 measured.
    path = script(tmp_path, """
        import time
        end = time.process_time() + 1.0
        while time.process_time() < end:
            pass
    """)
    before = client.tasks_cpu_seconds()
    tfd.launch(path, workers=2, timeout=120, engine=tfd.engines.Local(warm_start=True),
               watch=tfd.Watch(echo=False))
    assert 2.0 <= client.tasks_cpu_seconds() - before < 10.0


def test_what_cannot_be_forked_starts_the_usual_way(tmp_path):
    path = script(tmp_path, """
        import os
        print("parent", os.getppid())
    """)
    lines = []

    def pin(task):
        task.preexec_fn = lambda: None

    tfd.launch(path, workers=1, timeout=120,
               engine=tfd.engines.Local(warm_start=True, prepare_task=pin),
               watch=tfd.Watch(echo=False, on_output=lines.append))
    assert f"[worker 0] parent {os.getpid()}" in lines
    python = sys.executable
    assert client._warm_argv([python, "-m", "tfdistributed", "server"], python).argv == [
        "-m", "tfdistributed", "server"]
    assert client._warm_argv([python, "t.py", "x"], python).argv == ["t.py", "x"]
    # (R scripts: test_warm_r.py.)
    for argv in ([python, "-c", "pass"], [python, "-u", "t.py"],
                 ["ip", "netns", "exec", "ns0", python, "t.py"], ["/other/python", "t.py"]):
        assert client._warm_argv(argv, python) is None


def test_a_server_that_cannot_start_is_named_and_the_tasks_start_cold(tmp_path):
    path = script(tmp_path, """
        import os
        print("parent", os.getppid())
    """)
    lines = []
    # Keras refuses an unknown backend at import: the server cannot start with this environment.
    result = tfd.launch(path, workers=2, timeout=180, engine=tfd.engines.Local(warm_start=True),
                        env={"KERAS_BACKEND": "no-such-backend"},
                        watch=tfd.Watch(echo=False, on_output=lines.append))
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert f"[worker 0] parent {os.getpid()}" in lines
    told = [line for line in lines if "warm-start server" in line]
    assert len(told) == 1, lines
    assert told[0].startswith("[launch] the warm-start server failed to start (")
    assert "no-such-backend" in told[0] and told[0].endswith("; tasks start the usual way")


def test_a_server_whose_imports_print_on_stdout_still_starts(tmp_path):
    # Seen under rpy2: R's LD_LIBRARY_PATH made Python print a warning on stdout as it imported
    # ssl, which the launcher took for the server's answer ("failed to start") and started every
    # later task of that environment cold, silently slower. The answer has a pipe of its own.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text('print("a notice on stdout", flush=True)\n')
    path = script(tmp_path, """
        import os
        print("parent", os.getppid())
    """)
    lines = []
    # PYTHONPATH is read at import: a server of this test's own.
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    tfd.launch(path, workers=1, timeout=120, engine=tfd.engines.Local(warm_start=True),
               env={"PYTHONPATH": pythonpath}, watch=tfd.Watch(echo=False, on_output=lines.append))
    assert not [line for line in lines if "warm-start server" in line], lines
    parent = int(next(line for line in lines if " parent " in line).split()[-1])
    assert parent in client.server_pids()


def test_a_task_whose_server_dies_is_not_reported_as_succeeded(tmp_path):
    path = script(tmp_path, """
        import os, signal, sys, time
        import psutil
        if sys.argv[1] == "kill":
            # The warm server, and nothing else (were this task started cold, its parent would
            # be pytest).
            parent = psutil.Process(os.getppid())
            assert "tfdistributed.engines.warm.server" in " ".join(parent.cmdline())
            parent.send_signal(signal.SIGKILL)
            time.sleep(1)
        print("parent", os.getppid())
    """)
    # A TF_ variable (read at import, so the server's): a server of this test's own to kill.
    env = {"TF_TEST_OWN_SERVER": "1"}
    lines = []
    with pytest.raises(LaunchError, match=f"exited with status {client.LOST_STATUS}"):
        tfd.launch(path, workers=1, args=("kill",), timeout=120,
                   engine=tfd.engines.Local(warm_start=True), env=env,
                   watch=tfd.Watch(echo=False, on_output=lines.append))
    assert any("the warm server that started worker 0 died; its exit status is lost" in line
               for line in lines)
    # The next job with that environment gets a new server.
    lines.clear()
    tfd.launch(path, workers=1, args=("again",), timeout=120,
               engine=tfd.engines.Local(warm_start=True), env=env,
               watch=tfd.Watch(echo=False, on_output=lines.append))
    parent = int(next(line for line in lines if " parent " in line).split()[-1])
    assert parent in client.server_pids()


@pytest.mark.parametrize("value, message", [
    ("yes", "`warm_start` must be TRUE/True or FALSE/False, got 'yes'"),
    (1, "`warm_start` must be TRUE/True or FALSE/False, got 1"),
])
def test_warm_start_must_be_a_boolean(value, message):
    with pytest.raises(tfd.ArgumentTypeError, match=message):
        tfd.engines.Local(warm_start=value)


def test_the_environment_variable_is_checked(monkeypatch):
    monkeypatch.setenv(client.WARM_START_ENV, "on")
    with pytest.raises(tfd.ArgumentTypeError, match="TFDISTRIBUTED_WARM_START must be 1"):
        tfd.launch(_train, workers=1)
    monkeypatch.setenv(client.WARM_START_ENV, "1")
    assert client.warm_start_wanted(None) is True
    monkeypatch.setenv(client.WARM_START_ENV, "0")
    assert client.warm_start_wanted(None) is False


def test_warm_starts_are_the_local_engines():
    with pytest.raises(TypeError, match="warm_start"):
        tfd.engines.Slurm(warm_start=True)


def test_shutdown_stops_every_server():
    pids = [s.proc.pid for s in client._servers]
    assert pids  # the tests above started at least one
    client.shutdown()
    assert not client._servers
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]



def _repairs_and_parent():
    import os

    from tfdistributed.training import compat

    return sorted(n for n, e in compat.status().items() if e["applied"]), os.getppid()


def test_a_variable_read_at_import_gets_a_server_of_its_own_and_others_do_not():
    plain = tfd.launch(_repairs_and_parent, workers=1, timeout=120,
                       engine=tfd.engines.Local(warm_start=True), env={"MY_OWN": "1"},
                       watch=tfd.Watch(echo=False))
    other = tfd.launch(_repairs_and_parent, workers=1, timeout=120,
                       engine=tfd.engines.Local(warm_start=True),
                       env={"MY_OWN": "2", "TFDISTRIBUTED_ATTEMPT": "7"},
                       watch=tfd.Watch(echo=False))
    off = tfd.launch(_repairs_and_parent, workers=1, timeout=120,
                     engine=tfd.engines.Local(warm_start=True),
                     env={"TFDISTRIBUTED_DISABLE_COMPAT": "all"}, watch=tfd.Watch(echo=False))
    (repairs, parent), (repairs2, parent2), (none, parent3) = (
        plain.values[0], other.values[0], off.values[0])
    # Variables read at run time do not matter: the same server.
    assert parent == parent2 and repairs == repairs2 and repairs
    # The repairs are applied as tfdistributed is imported: switched off in a server of its own.
    assert none == [] and parent3 != parent
