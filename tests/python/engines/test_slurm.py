"""SLURM, against a real single-node cluster started here (tests/conftest.py: slurm_cluster).

Inside `srun`, make_strategy("auto") / distribute_strategy("auto") builds the cluster from
SLURM's environment with no TF_CONFIG and no SLURM code in the script; launch(...,
engine=Slurm()) submits with sbatch, follows each task, and cancels failed or late jobs. Jobs
held in the queue (`sbatch --hold`, released by `ReleaseAfter`) show that the timeout counts
running time, not the wait in the queue.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tfdistributed as tfd
from tfdistributed import ClusterConfigError, LaunchError, LaunchTimeoutError
from tfdistributed.cluster.from_slurm import tf_config_from_slurm

from enginesupport import (SCRIPTS, assert_history_and_figures_came_back, assert_identical_weights,
                           processes_running, r_env)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


class ReleaseAfter:
    """``Watch(on_output=)`` for jobs submitted held (``Slurm(sbatch_args=["--hold"])``):
    keeps the lines, and ``scontrol release``-s each submitted job ``seconds`` after its
    submission line, from a timer thread, noting the time limit SLURM gave it (``TimeLimit``)
    first. A context manager: timers not yet fired are cancelled on exit."""

    def __init__(self, slurm, seconds: float):
        self.slurm, self.seconds = slurm, seconds
        self.lines, self.jobs, self.time_limits, self.timers = [], [], [], []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        submitted = re.match(r"\[launch\] submitted SLURM job (\d+) ", line)
        if submitted:
            self.jobs.append(submitted.group(1))
            timer = threading.Timer(self.seconds, self._release, (submitted.group(1),))
            self.timers.append(timer)
            timer.start()

    def _release(self, job: str) -> None:
        shown = self.slurm.run(["scontrol", "show", "job", job], check=False).stdout
        self.time_limits.append(re.search(r"TimeLimit=(\S+)", shown).group(1))
        self.slurm.run(["scontrol", "release", job], check=False)

    def queue_waits(self) -> list:
        """Seconds of each "started after N s in the queue" line."""
        return [int(m.group(1)) for line in self.lines
                for m in [re.search(r"started after (\d+) s in the queue", line)] if m]

    def __enter__(self) -> "ReleaseAfter":
        return self

    def __exit__(self, *exc) -> None:
        for timer in self.timers:
            timer.cancel()
            timer.join(timeout=30)


def step_env(procid, ntasks, nodelist, per_node, localid, nodeid=0, **more):
    env = {"SLURM_PROCID": str(procid), "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": str(ntasks),
           "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": per_node,
           "SLURM_LOCALID": str(localid), "SLURM_NODEID": str(nodeid)}
    env.update(more)
    return env


def test_block_layout_over_nodes_with_port_base_and_local_ids(slurm_cluster):
    # 5 tasks on node[1-2]: 3 + 2, as srun's default block distribution places them.
    config = tf_config_from_slurm(step_env(4, 5, "node[1-2]", "3,2", 1, nodeid=1), port_base=20000)
    assert config["cluster"] == {"worker": ["node1:20000", "node1:20001", "node1:20002",
                                            "node2:20000", "node2:20001"]}
    assert config["task"] == {"type": "worker", "index": 4}


def test_cyclic_layout_and_reserved_ports(slurm_cluster):
    env = step_env(1, 4, "n[7,9]", "2(x2)", 0, nodeid=1, SLURM_DISTRIBUTION="cyclic",
                   SLURM_STEP_RESV_PORTS="12001-12002")
    config = tf_config_from_slurm(env)
    assert config["cluster"]["worker"] == ["n7:12001", "n9:12001", "n7:12002", "n9:12002"]
    assert config["task"]["index"] == 1


def test_parameter_server_roles_by_option():
    env = step_env(2, 4, "n1", "4", 2, TFDISTRIBUTED_SLURM_PS="1")
    config = tf_config_from_slurm(env)
    assert config["cluster"] == {"chief": ["n1:15000"], "ps": ["n1:15001"],
                                 "worker": ["n1:15002", "n1:15003"]}
    assert config["task"] == {"type": "worker", "index": 0}
    chief = tf_config_from_slurm(step_env(0, 3, "n1", "3", 0), chief=True)
    assert chief["cluster"] == {"chief": ["n1:15000"], "worker": ["n1:15001", "n1:15002"]}


def test_layout_errors_name_the_fix():
    with pytest.raises(ClusterConfigError, match="start it with srun"):
        tf_config_from_slurm({})
    with pytest.raises(ClusterConfigError, match="--distribution=block"):
        tf_config_from_slurm(step_env(0, 2, "n1", "2", 0, SLURM_DISTRIBUTION="plane=2"))
    # Task 1 says it is local task 0 of node 1; block layout puts it on node 0: not ours to guess.
    with pytest.raises(ClusterConfigError, match="--distribution=block"):
        tf_config_from_slurm(step_env(1, 2, "n[1-2]", "1(x2)", 0, nodeid=0))
    with pytest.raises(ClusterConfigError, match="at least 3 SLURM tasks"):
        tf_config_from_slurm(step_env(0, 2, "n1", "2", 0), ps=1)


def test_srun_python_script_trains_two_workers_with_no_configuration(slurm_cluster, tmp_path):
    done = slurm_cluster.run(
        ["srun", "-N1", "-n2", "--label", sys.executable, str(SCRIPTS / "mwms_digits.py"),
         str(tmp_path), "--epochs", "2"], timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_identical_weights(tmp_path)
    for i in (0, 1):
        assert f"{i}: done:" in done.stdout


def test_srun_output_cut_inside_a_character_is_still_read(slurm_cluster):
    # srun --label relays a task's output in 1024-byte pieces, each labelled: a progress bar of
    # 3-byte characters redrawn with \r on one line is cut inside a character. Reading it must
    # not fail (a UnicodeDecodeError once failed the R script's test above in CI).
    code = ("import sys\nfor i in range(300):\n"
            "    sys.stdout.write('\\r' + '\u2501' * (i % 40) + ' step %d' % i)\nprint()")
    done = slurm_cluster.run(["srun", "-n2", "--label", sys.executable, "-c", code], timeout=120)
    assert done.stdout.startswith(("0: ", "1: ")) and "step 299" in done.stdout
    assert "\ufffd" in done.stdout  # the cut characters, replaced


def test_srun_r_script_trains_two_workers_with_distribute_strategy_auto(slurm_cluster, tmp_path):
    done = slurm_cluster.run(
        ["srun", "-N1", "-n2", "--label", "Rscript", str(SCRIPTS / "mwms_digits.R"), str(tmp_path)],
        timeout=300, check=False, env=r_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_identical_weights(tmp_path)
    # SLURM's reserved ports of the step (MpiParams=ports=... in the cluster's slurm.conf).
    assert "worker 1 of 2 workers" in done.stdout
    assert f'"{slurm_cluster.node}:' in done.stdout


def _task_and_argument(x):
    import json
    import os

    return json.loads(os.environ["TF_CONFIG"])["task"], os.environ["SLURM_PROCID"], x


def test_launch_function_target_returns_each_tasks_value(slurm_cluster):
    result = tfd.launch(_task_and_argument, workers=2, args=("hi",),
                        engine=tfd.engines.Slurm(partition=slurm_cluster.partition, time="5"),
                        timeout=120, watch=tfd.Watch(echo=False))
    assert result.values == [({"type": "worker", "index": 0}, "0", "hi"),
                             ({"type": "worker", "index": 1}, "1", "hi")]
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert len(result.cluster["worker"]) == 2 and result.job_id
    # Slurm(time=) is SLURM's own limit of the job.
    shown = slurm_cluster.run(["scontrol", "show", "job", result.job_id]).stdout
    assert "TimeLimit=00:05:00" in shown


def test_launch_python_script_two_workers_identical_weights(slurm_cluster, tmp_path):
    lines = []
    result = tfd.launch(str(SCRIPTS / "mwms_digits.py"), workers=2, engine=tfd.engines.Slurm(),
                        args=[str(tmp_path), "--epochs", "2"], timeout=300,
                        watch=tfd.Watch(echo=False, on_output=lines.append))
    assert [(t.name, t.returncode) for t in result.tasks] == [("worker 0", 0), ("worker 1", 0)]
    assert any(line.startswith("[worker 1] done:") for line in lines)
    assert_history_and_figures_came_back(result, lines, tmp_path)
    assert any(line.startswith("done:") for line in result.task("worker", 0).output)
    assert_identical_weights(tmp_path)


def test_failing_task_fails_the_job_fast_and_by_name(slurm_cluster, tmp_path):
    path = tmp_path / "fail.py"
    path.write_text(textwrap.dedent("""
        import json, os, time
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
            raise SystemExit("worker one gives up")
        time.sleep(300)
    """))
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"Task worker 1 exited with status 1") as info:
        tfd.launch(str(path), workers=2, engine=tfd.engines.Slurm(), timeout=120,
                   watch=tfd.Watch(echo=False))
    # Fast means before the 120 s timeout and worker 0's 300 s sleep: submission, start-up and
    # the cancel (which waits until SLURM lets go of the job) fit with room on a busy machine.
    assert time.monotonic() - t0 < 90
    assert "worker one gives up" in str(info.value)
    assert [t.returncode for t in info.value.results][1] == 1
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""
    assert processes_running(str(path)) == []


def test_max_restarts_submits_the_job_again_and_each_attempt_waits_in_the_queue(
        slurm_cluster, tmp_path):
    path = tmp_path / "flaky.py"
    path.write_text(textwrap.dedent("""
        import json, os
        attempt = os.environ["TFDISTRIBUTED_ATTEMPT"]
        if attempt == "0" and json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
            raise SystemExit("lost on attempt 0")
        print("attempt", attempt, flush=True)
    """))
    # Each attempt is submitted held and released 12 s later: 24 s in the queue in all, more
    # than the 20 s timeout, which counts the attempts' running time only.
    with ReleaseAfter(slurm_cluster, 12) as releaser:
        result = tfd.launch(str(path), workers=2, engine=tfd.engines.Slurm(sbatch_args=["--hold"]),
                            restarts=tfd.Restarts(max_restarts=1), timeout=20,
                            watch=tfd.Watch(echo=False, on_output=releaser))
    lines = releaser.lines
    assert result.restarts == 1
    assert [t.output for t in result.tasks] == [["attempt 1"], ["attempt 1"]]
    assert [a["task"] for a in result.attempts] == ["worker 1", None]
    assert "[tfdistributed] worker 1 exited with status 1 on attempt 1 of 2 (lost on attempt " \
           "0); restarting the job" in lines
    assert len(releaser.jobs) == 2 and result.job_id == releaser.jobs[1]
    for job in releaser.jobs:
        assert f"[launch] SLURM job {job} is waiting in the queue (JobHeldUser: it is held; " \
               f"`scontrol release {job}` lets it start)" in lines
    waits = releaser.queue_waits()
    assert len(waits) == 2 and min(waits) >= 12, lines
    assert 24 <= result.queue_seconds < result.seconds
    assert result.queue_seconds > 20  # the timeout: it did not count the waits
    # No time limit of ours (the timeout is not SLURM's --time): the partition's applies.
    assert releaser.time_limits == ["UNLIMITED", "UNLIMITED"]
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""
    assert processes_running(str(path)) == []


def test_timeout_counts_running_time_after_the_wait_in_the_queue(slurm_cluster, tmp_path):
    path = tmp_path / "slow.py"
    path.write_text("import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    t0 = time.monotonic()
    # Held 16 s, longer than the 12 s timeout, which then counts from the job's start: 12 s
    # leaves room for the tasks to start on a busy machine.
    with ReleaseAfter(slurm_cluster, 16) as releaser, pytest.raises(
            LaunchTimeoutError, match="did not finish within 12 s and was cancelled") as info:
        tfd.launch(str(path), workers=2, engine=tfd.engines.Slurm(sbatch_args=["--hold"]),
                   timeout=12, watch=tfd.Watch(echo=False, on_output=releaser))
    # Cancelled, not waited for (the tasks sleep 300 s): the cancel alone may wait up to 30 s
    # for SLURM to let go of the job, more on a busy machine.
    assert 16 + 12 <= time.monotonic() - t0 < 150
    message = str(info.value)
    assert "Still running at the timeout: worker 0, worker 1." in message
    waited = re.search(r"The timeout counts the job's running time; it also waited (\d+) s in "
                       r"SLURM's queue\.", message)
    assert waited and int(waited.group(1)) >= 16, message
    assert "[worker 0] started" in releaser.lines and "[worker 1] started" in releaser.lines
    assert releaser.queue_waits()[0] >= 16
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""
    assert processes_running(str(path)) == []


def test_queue_timeout_cancels_a_job_that_never_leaves_the_queue(slurm_cluster):
    # Never released: held, it waits until the queue_timeout cancels it. No task runs.
    lines = []
    t0 = time.monotonic()
    with pytest.raises(LaunchTimeoutError) as info:
        tfd.launch(_task_and_argument, workers=1, args=("held",),
                   engine=tfd.engines.Slurm(sbatch_args=["--hold"], queue_timeout=3), timeout=120,
                   watch=tfd.Watch(echo=False, on_output=lines.append))
    assert time.monotonic() - t0 < 60
    job = re.match(r"\[launch\] submitted SLURM job (\d+) ", lines[0]).group(1)
    assert re.match(rf"SLURM job {job} waited \d+ s in the queue without starting \(JobHeldUser: "
                    rf"it is held; `scontrol release {job}` lets it start\) and was cancelled at "
                    rf"its queue_timeout \(3 s\)\. .*allow a longer queue_timeout",
                    str(info.value)), str(info.value)
    assert [t.returncode for t in info.value.results] == [None]
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""


def _parameter_server_chief():
    import tensorflow as tf

    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    with strategy.scope():
        v = tf.Variable(3.0)
    v.assign_add(1.0)
    return tfd.strategy_info(strategy)["num_ps"], v.device, float(v.numpy())


def test_parameter_server_job_on_slurm_servers_stop_after_the_chief(slurm_cluster):
    # 4 tasks on 2 CPUs: --overcommit lets SLURM start them all (the servers mostly wait).
    result = tfd.launch(_parameter_server_chief, tfd.Scaling(workers=2, ps=1, chief=True),
                        engine=tfd.engines.Slurm(sbatch_args=["--overcommit"]), timeout=240,
                        watch=tfd.Watch(echo=False))
    assert [(t.name, t.server, t.returncode) for t in result.tasks] == [
        ("chief 0", False, 0), ("ps 0", True, 0), ("worker 0", True, 0), ("worker 1", True, 0)]
    num_ps, device, value = result.values[0]
    assert (num_ps, value) == (1, 4.0) and "/job:ps/replica:0/task:0" in device
    assert any("serving at" in line for line in result.task("ps", 0).output)


def test_slurm_script_is_a_batch_script_to_keep(tmp_path):
    script = tfd.slurm_script(str(SCRIPTS / "mwms_digits.R"), workers=4, args=["out"],
                              partition="gpu", sbatch_args=["--gres=gpu:1"])
    assert script.startswith("#!/bin/bash\n")
    for expected in ("#SBATCH --ntasks=4", "#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1",
                     "srun --kill-on-bad-exit=1", "Rscript --no-save --no-restore",
                     "mwms_digits.R out"):
        assert expected in script
    with pytest.raises(tfd.ArgumentTypeError, match=r"engine=tfd\.engines\.Slurm\(\)"):
        tfd.slurm_script(_task_and_argument)


def test_slurm_script_asks_for_a_preemption_notice_and_requeues_a_preempted_job():
    script = tfd.slurm_script(str(SCRIPTS / "mwms_digits.py"), workers=2, time_limit=60)
    assert "#SBATCH --time=60\n#SBATCH --signal=TERM@120\n#SBATCH --requeue\n" in script
    # Tasks that stopped on the notice (status 75, backup written) put the job back in the queue.
    assert script.rstrip().endswith('if [ "$status" -eq 75 ]; then\n  scontrol requeue '
                                    '"$SLURM_JOB_ID"\nfi\nexit "$status"')
    plain = tfd.slurm_script(str(SCRIPTS / "mwms_digits.py"), time_limit=60,
                             preemption_notice=None, requeue=False)
    assert "--signal" not in plain and "requeue" not in plain
    assert "--signal" not in tfd.slurm_script(str(SCRIPTS / "mwms_digits.py"))  # no time limit
    with pytest.raises(tfd.ArgumentTypeError, match="preemption_notice"):
        tfd.slurm_script(str(SCRIPTS / "mwms_digits.py"), time_limit=60, preemption_notice=1.5)


def test_reading_slurms_environment_does_not_load_the_sbatch_engine():
    """A training script builds its strategy (which reads SLURM's environment) and a task under
    srun reads its cluster: neither submits jobs, so neither imports the sbatch engine."""
    code = ("import sys, tfdistributed.strategies, tfdistributed.engines.slurm.task, tfdistributed.engines.slurm; "
            "print(sorted(m for m in sys.modules if m.startswith('tfdistributed.engines.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.split("\n")[-2]
    assert "tfdistributed.engines.slurm.launcher'" not in loaded, loaded
    assert "tfdistributed.cluster.from_slurm" in subprocess.run(
        [sys.executable, "-c", "import sys, tfdistributed.strategies; print(list(sys.modules))"],
        capture_output=True, text=True, timeout=120).stdout


def test_engine_arguments_are_checked_before_anything_starts():
    with pytest.raises(tfd.ArgumentTypeError, match=r"`engine` must be an engine.*Slurm\(\)"):
        tfd.launch(_task_and_argument, engine="slurm")
    with pytest.raises(tfd.ArgumentTypeError, match="`time` must be SLURM's --time"):
        tfd.engines.Slurm(time="two hours")
    with pytest.raises(tfd.ArgumentTypeError, match="`queue_timeout` must be a number of seconds"):
        tfd.engines.Slurm(queue_timeout="1h")
    with pytest.raises(tfd.ArgumentTypeError, match="`cluster` only applies to local clusters"):
        tfd.launch(_task_and_argument, tfd.Scaling(cluster=tfd.local_cluster(2)),
                   engine=tfd.engines.Slurm())
    with pytest.raises(tfd.ArgumentTypeError, match="`gpus_per_task='all'` is for tasks on this "
                                                    "machine; Slurm gives each task a number"):
        tfd.launch(_task_and_argument, tfd.Scaling(gpus_per_task="all"),
                   engine=tfd.engines.Slurm())
    with pytest.raises(TypeError, match="prepare_task"):
        tfd.engines.Slurm(prepare_task=lambda task: None)


def test_command_line_launches_on_slurm(slurm_cluster, tmp_path):
    """`python -m tfdistributed launch --backend slurm`: the same job as launch(), from a shell."""
    done = slurm_cluster.run(
        [sys.executable, "-m", "tfdistributed", "launch", "--workers", "2", "--backend", "slurm",
         "--timeout", "240", str(SCRIPTS / "mwms_digits.py"), str(tmp_path), "--epochs", "1"],
        timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_identical_weights(tmp_path)
    assert "all tasks finished" in done.stderr and "worker 1: 0" in done.stderr
    refused = slurm_cluster.run([sys.executable, "-m", "tfdistributed", "launch", "--partition",
                                 "debug", str(SCRIPTS / "mwms_digits.py")], check=False)
    assert refused.returncode == 2 and "--partition applies to --backend slurm" in refused.stderr
