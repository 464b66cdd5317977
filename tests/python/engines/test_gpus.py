"""Which GPUs each task gets (tfdistributed/engines/gpus.py), on a machine without any: the
GPUs are faked where the launcher finds them (CUDA_VISIBLE_DEVICES, or an ``nvidia-smi`` on the
PATH that prints what the real one prints), and what is checked is each task's environment,
the SLURM batch script and the Ray actors' options that the engines really build.

The tests marked ``cluster`` start real jobs: two processes on 127.0.0.1 that print the
``CUDA_VISIBLE_DEVICES`` they were given, a submission to the session's SLURM cluster (which has
no GPU, so ``sbatch`` refuses it) and Ray actors asking for GPUs the session's Ray does not have.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

import tfdistributed as tfd
from tfdistributed.cluster.local import checked_local, local_cluster
from tfdistributed.engines import gpus
from tfdistributed.engines.base import Deadline
from tfdistributed.engines.local import plan_launch
from tfdistributed.engines import ENGINES
from tfdistributed.engines.options import JobPlan
from tfdistributed.engines.output import job_relay

FOUR = ["0", "1", "2", "3"]
# What `nvidia-smi -L` prints on a machine with two GPUs, the second split into MIG instances.
LISTING = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d3f1c2a-8e4b-4c1d-9a7e-0f1e2d3c4b5a)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-9b8a7c6d-1e2f-4a3b-8c7d-6e5f4a3b2c1d)
  MIG 3g.20gb     Device  0: (UUID: MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d)
  MIG 3g.20gb     Device  1: (UUID: MIG-6f5e4d3c-2b1a-5f9e-8d7c-6b5a4f3e2d1c)
"""


def trainers(n, role="worker"):
    return [(role, i, True) for i in range(n)]


# --- the choice, from a list of GPUs -----------------------------------------------------------

def test_the_gpus_split_evenly_among_2_and_4_tasks():
    assert list(gpus.local_shares(FOUR, trainers(2)).values()) == ["0,1", "2,3"]
    assert list(gpus.local_shares(FOUR, trainers(4)).values()) == FOUR
    # Left over: the same number on every worker (a multi-worker strategy needs it).
    assert list(gpus.local_shares(FOUR[:3], trainers(2)).values()) == ["0", "1"]


def test_fewer_gpus_than_tasks_are_shared_one_each():
    assert list(gpus.local_shares(["0", "1"], trainers(3)).values()) == ["0", "1", "0"]


def test_all_and_a_number_each():
    assert list(gpus.local_shares(FOUR, trainers(2), "all").values()) == ["0,1,2,3"] * 2
    assert list(gpus.local_shares(FOUR, trainers(4), 1).values()) == FOUR
    assert list(gpus.local_shares(FOUR, trainers(2), 1).values()) == ["0", "1"]
    assert list(gpus.local_shares(FOUR, trainers(2), 0).values()) == [gpus.HIDDEN] * 2


def test_parameter_servers_and_the_coordinator_get_none():
    tasks = [("chief", 0, gpus.trains("chief", True)), ("worker", 0, gpus.trains("worker", True)),
             ("worker", 1, gpus.trains("worker", True)), ("ps", 0, gpus.trains("ps", True))]
    assert gpus.local_shares(FOUR, tasks) == {tasks[0]: "-1", tasks[1]: "0,1",
                                              tasks[2]: "2,3", tasks[3]: "-1"}
    # In a multi-worker job the chief trains too.
    assert gpus.trains("chief", False) and not gpus.trains("ps", True)


def test_no_gpu_found_and_nothing_asked_changes_nothing():
    assert gpus.local_shares([], trainers(2)) == {}
    assert gpus.local_shares([], trainers(2), "all") == {}


def test_too_few_gpus_is_an_error_naming_the_fix():
    with pytest.raises(tfd.ArgumentTypeError) as info:
        gpus.local_shares(FOUR, trainers(2), 3, "CUDA_VISIBLE_DEVICES='0,1,2,3'")
    message = str(info.value)
    assert "`gpus_per_task=3` for 2 training task(s) needs 6 GPU(s), and there are 4 here " \
           "(CUDA_VISIBLE_DEVICES='0,1,2,3')" in message, message
    assert "gpus_per_task=2 or at most 1 training task(s)" in message, message
    assert "leave gpus_per_task out" in message
    with pytest.raises(tfd.ArgumentTypeError, match="this machine shows none"):
        gpus.local_shares([], trainers(2), 1, "no nvidia-smi on the PATH")


@pytest.mark.parametrize("value, engine, message", [
    (-1, "local", "a whole number of GPUs (0 or more), or 'all'"),
    (1.0, "local", "E.g. gpus_per_task=1."),
    (True, "local", "must be a whole number"),
    ("two", "local", "or 'all'"),
    ("all", "slurm", "Slurm gives each task a number of GPUs"),
    ("all", "ray", "Ray gives each task a number of GPUs"),
])
def test_gpus_per_task_is_checked_where_it_is_given(value, engine, message):
    # In the job's shape, and against the engine when the plan is made: before anything starts.
    with pytest.raises(tfd.ArgumentTypeError) as info:
        JobPlan(target=__file__, scaling=tfd.Scaling(gpus_per_task=value),
                engine=ENGINES[engine](), restarts=tfd.Restarts(), watch=tfd.Watch())
    assert message in str(info.value), str(info.value)


def test_gpus_given_twice_is_an_error():
    shape = tfd.Scaling(gpus_per_task=1)
    with pytest.raises(tfd.ArgumentTypeError, match="give gpus_per_task alone"):
        tfd.engines.Slurm(sbatch_args=["--gpus-per-task=2"]).check(shape)
    with pytest.raises(tfd.ArgumentTypeError, match="give gpus_per_task alone"):
        tfd.engines.Ray(ray_options={"num_gpus": 1}).check(shape)


# --- where the GPUs are found ------------------------------------------------------------------

def test_cuda_visible_devices_is_read_as_cuda_reads_it():
    assert gpus.parse_visible("0,2, 3") == ["0", "2", "3"]
    assert gpus.parse_visible("1,-1,2") == ["1"]            # CUDA stops at an invalid entry
    assert gpus.parse_visible("") == [] and gpus.parse_visible("-1") == []
    assert gpus.parse_visible("GPU-5d3f1c2a-8e4b") == ["GPU-5d3f1c2a-8e4b"]
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "4,5"}) == \
        (["4", "5"], "CUDA_VISIBLE_DEVICES='4,5'")


def test_nvidia_smi_listing_gives_uuids_and_mig_instances():
    assert gpus.nvidia_smi_gpus(LISTING) == [
        "GPU-5d3f1c2a-8e4b-4c1d-9a7e-0f1e2d3c4b5a",
        "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d", "MIG-6f5e4d3c-2b1a-5f9e-8d7c-6b5a4f3e2d1c"]


def fake_nvidia_smi(directory, listing=LISTING, status=0):
    """An ``nvidia-smi`` that prints ``listing`` for ``-L`` (and exits with ``status``)."""
    program = directory / "nvidia-smi"
    program.write_text(f"#!/bin/sh\n[ \"$1\" = -L ] || exit 2\ncat <<'EOF'\n{listing}EOF\n"
                       f"exit {status}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return f"{directory}{os.pathsep}{os.environ['PATH']}"


def test_without_cuda_visible_devices_nvidia_smi_is_asked(tmp_path):
    path = fake_nvidia_smi(tmp_path)
    found, where = gpus.visible_gpus({"PATH": path})
    assert len(found) == 3 and where == "nvidia-smi -L"
    failing = tmp_path / "failing"
    failing.mkdir()
    path = fake_nvidia_smi(failing, "NVIDIA-SMI has failed because it couldn't communicate with "
                                    "the NVIDIA driver.\n", status=9)
    found, where = gpus.visible_gpus({"PATH": path})
    assert found == [] and "couldn't communicate with the NVIDIA driver" in where
    if shutil.which("nvidia-smi") is None:   # this machine: no GPU, no nvidia-smi
        assert gpus.visible_gpus({"PATH": os.environ["PATH"]}) == \
            ([], "no nvidia-smi on the PATH")


# --- each task's environment, as the local engine plans it -------------------------------------

def planned(workers, env, ps=0, chief=False, gpus_per_task=None, target=None):
    cluster = checked_local(local_cluster(workers, ps, chief))
    plan = plan_launch(target or __file__, cluster, env=env, gpus_per_task=gpus_per_task)
    shutil.rmtree(plan.workdir, ignore_errors=True)
    return {t.name: (t.env.get("CUDA_VISIBLE_DEVICES"), t.gpus) for t in plan.tasks}


@pytest.fixture
def no_gpus_of_ours(monkeypatch):
    """This process' own CUDA_VISIBLE_DEVICES (if any) out of the way: the tests say which
    GPUs there are."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_each_tasks_environment_from_cuda_visible_devices(no_gpus_of_ours):
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert planned(2, env) == {"worker 0": ("0,1", "0,1"), "worker 1": ("2,3", "2,3")}
    assert planned(4, env) == {f"worker {i}": (str(i), str(i)) for i in range(4)}
    assert planned(2, env, gpus_per_task="all") == {"worker 0": ("0,1,2,3",) * 2,
                                                    "worker 1": ("0,1,2,3",) * 2}
    assert planned(2, env, gpus_per_task=1) == {"worker 0": ("0", "0"), "worker 1": ("1", "1")}
    assert planned(1, env, ps=1, chief=True) == {
        "chief 0": ("-1", "-1"), "worker 0": ("0,1,2,3",) * 2, "ps 0": ("-1", "-1")}
    with pytest.raises(tfd.ArgumentTypeError, match="needs 8 GPU\\(s\\), and there are 4 here"):
        planned(4, env, gpus_per_task=2)


def test_each_tasks_environment_from_nvidia_smi(no_gpus_of_ours, tmp_path):
    env = {"PATH": fake_nvidia_smi(tmp_path)}
    tasks = planned(2, env, gpus_per_task=1)
    assert tasks["worker 0"][0] == "GPU-5d3f1c2a-8e4b-4c1d-9a7e-0f1e2d3c4b5a"
    assert tasks["worker 1"][0] == "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d"


def test_no_gpu_found_and_nothing_asked_leaves_the_environment_alone(no_gpus_of_ours, tmp_path):
    # No nvidia-smi on this PATH (whatever this machine has).
    assert planned(2, {"PATH": str(tmp_path)}) == {"worker 0": (None, None),
                                                   "worker 1": (None, None)}


WHO_AM_I = """\
import os
cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode()
print("gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), "warm" if "warm.server" in cmdline
      else "cold")
"""


@pytest.mark.cluster
def test_a_local_job_gives_each_task_its_gpus_and_starts_them_cold(no_gpus_of_ours, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("TFDISTRIBUTED_WARM_START", "1")   # asked for: GPU tasks start cold
    script = tmp_path / "who.py"
    script.write_text(WHO_AM_I)
    result = tfd.launch(str(script), tfd.Scaling(workers=2, gpus_per_task=2), timeout=120,
                        env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, engine=tfd.engines.Local(),
                        watch=tfd.Watch(echo=False))
    said = {t.name: [line for line in t.output if line.startswith("gpus")] for t in result.tasks}
    assert said == {"worker 0": ["gpus 0,1 cold"], "worker 1": ["gpus 2,3 cold"]}, said


# --- SLURM: the batch script -------------------------------------------------------------------

def test_slurm_script_asks_for_gpus_per_task():
    script = tfd.slurm_script(__file__, tfd.Scaling(workers=2, gpus_per_task=2))
    assert "#SBATCH --gpus-per-task=2\n" in script and "#SBATCH --ntasks=2\n" in script
    assert "--gpus" not in tfd.slurm_script(__file__, workers=2)
    assert "--gpus" not in tfd.slurm_script(__file__, tfd.Scaling(workers=2, gpus_per_task=0))


def slurm_plan(engine, tmp_path, scaling):
    return JobPlan(target=__file__, scaling=scaling, engine=engine, restarts=tfd.Restarts(),
                   watch=tfd.Watch(progress=False, echo=False), cwd=str(tmp_path), timeout=60)


def test_the_slurm_engine_writes_the_option_into_its_job(tmp_path):
    engine = tfd.engines.Slurm(directory=str(tmp_path / "job"), keep_files=True)
    plan = slurm_plan(engine, tmp_path, tfd.Scaling(workers=2, gpus_per_task=1))
    job = engine.launcher(plan, job_relay(plan.watch)).job(0, Deadline(60, time.monotonic()),
                                                            None)
    script = (tmp_path / "job" / "job.sh").read_text()
    assert job.script_path.endswith("job.sh") and "#SBATCH --gpus-per-task=1\n" in script


@pytest.mark.cluster
def test_slurm_without_gpus_refuses_the_job_and_the_error_says_so(slurm_cluster, tmp_path):
    with pytest.raises(tfd.LaunchError) as info:
        tfd.launch(__file__, tfd.Scaling(workers=2, gpus_per_task=1), timeout=60, cwd=str(tmp_path),
                   engine=tfd.engines.Slurm(), watch=tfd.Watch(echo=False))
    message = str(info.value)
    assert "sbatch" in message and "gres" in message.lower(), message
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""


# --- Ray: the actors' options ------------------------------------------------------------------

def test_ray_actor_options_give_gpus_to_the_tasks_that_train():
    assert gpus.ray_actor_options(2, "worker", False) == {"num_gpus": 2}
    assert gpus.ray_actor_options(2, "chief", False) == {"num_gpus": 2}
    assert gpus.ray_actor_options(2, "chief", True) == {}      # the coordinator
    assert gpus.ray_actor_options(2, "ps", True) == {}
    assert gpus.ray_actor_options(None, "worker", False) == {}


@pytest.mark.cluster
def test_ray_actors_ask_for_the_gpus_and_the_timeout_names_them(ray_cluster):
    with pytest.raises(tfd.LaunchTimeoutError) as info:
        tfd.launch(__file__, tfd.Scaling(workers=1, ps=1, chief=True, gpus_per_task=1), timeout=8,
                   engine=tfd.engines.Ray(), watch=tfd.Watch(echo=False))
    message = str(info.value)
    # The session's Ray has no GPU: the worker's actor is never placed, and the error says
    # what each actor asked for.
    assert "{'num_cpus': 1, 'num_gpus': 1}" in message and "{'num_cpus': 1}" in message, message


@pytest.mark.cluster
def test_the_command_line_takes_gpus_per_task(no_gpus_of_ours, tmp_path):
    script = tmp_path / "who.py"
    script.write_text(WHO_AM_I)
    done = subprocess.run([sys.executable, "-m", "tfdistributed", "launch", "--workers", "2",
                           "--gpus-per-task", "all", "--timeout", "120", str(script)],
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"}, capture_output=True,
                          text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-2000:]
    for i in (0, 1):
        assert f"[worker {i}] gpus 0,1 cold" in done.stdout, done.stdout
    refused = subprocess.run([sys.executable, "-m", "tfdistributed", "launch",
                              "--gpus-per-task", "two", str(script)], capture_output=True,
                             text=True, timeout=200)
    assert refused.returncode == 2 and "--gpus-per-task: invalid gpu_count value: 'two'" in \
        refused.stderr, refused.stderr
