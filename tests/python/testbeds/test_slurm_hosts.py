"""SLURM across hosts: a 2-node cluster on the test bed of network namespaces (tfdistributed.testbeds.hostbed).

Node ``h<i>`` is host ``i`` of the bed, with its own slurmd and ``NodeAddr`` the host's address;
the names ``h0``/``h1`` resolve nowhere, so a job trains only if tfdistributed builds TF_CONFIG
from SLURM's node addresses. Every SLURM command runs in the first host's namespace, where
slurmctld is (``slurm.prefix``): nothing outside the bed gets an address or traffic.

Needs root, iproute2 and Debian's slurmd slurmctld slurm-client munge; where the bed or the
cluster cannot be built the tests FAIL with the reason, never skip.
"""

import json
import os
import subprocess
import sys

import pytest

from tfdistributed.errors import LaunchError
from tfdistributed.testbeds.slurm import LocalSlurm

from enginesupport import SCRIPTS, assert_identical_weights, processes_running, r_env

from tfdistributed.testbeds import hostbed as hosts

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]
WORKERS = [f"worker-{i}" for i in range(4)]
ADDRESSES = ["10.77.0.2", "10.77.0.3"]


def start_cluster():
    """A bed of 2 hosts and a SLURM node on each; both torn down if either fails to start."""
    try:
        bed = hosts.HostBed(2).up()
    except hosts.HostBedError as e:
        pytest.fail(f"The test bed of hosts could not be built, so SLURM across hosts cannot be "
                    f"tested here: {e}", pytrace=False)
    slurm = LocalSlurm(cpus=2, hosts=bed.hosts)
    try:
        slurm.start()
    except BaseException as e:
        bed.down()
        if not isinstance(e, Exception):
            raise
        pytest.fail(f"The 2-node SLURM cluster did not start, so SLURM across hosts cannot be "
                    f"tested here: {e}. Run scripts/setup.sh (as root) to install slurmd, "
                    f"slurmctld, slurm-client and munge.", pytrace=False)
    return bed, slurm


@pytest.fixture(scope="module")
def cluster():
    """One 2-node cluster (2 CPUs each) for the module."""
    bed, slurm = start_cluster()
    try:
        yield slurm
    finally:
        slurm.stop()
        bed.down()


def srun(slurm, argv, distribution, env=None, timeout=300):
    return slurm.run(["srun", "-N2", "--ntasks-per-node=2", f"--distribution={distribution}",
                      "--kill-on-bad-exit=1", "--label", *argv],
                     timeout=timeout, check=False, env=env)


def test_nodes_are_known_by_their_addresses_in_the_bed(cluster):
    nodes = cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split()
    assert nodes == ["h0", "idle", "h1", "idle"]
    code = ("from tfdistributed.engines.slurm import node_addresses; job = {'SLURM_JOB_ID': '1'}; "
            "print(node_addresses(['h1', 'h0'], job), node_addresses(['elsewhere'], job))")
    done = cluster.run([sys.executable, "-c", code], timeout=120)
    # SLURM does not know `elsewhere`: its name is kept, with a warning.
    assert done.stdout.strip() == "['10.77.0.3', '10.77.0.2'] ['elsewhere']"
    assert "`scontrol show node` failed" in done.stderr and "elsewhere" in done.stderr


@pytest.mark.parametrize("distribution", ["block", "cyclic"])
def test_srun_python_script_trains_four_tasks_on_two_nodes(cluster, tmp_path, distribution):
    done = srun(cluster, [sys.executable, str(SCRIPTS / "mwms_digits.py"), str(tmp_path),
                          "--epochs", "2"], distribution)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_identical_weights(tmp_path, WORKERS)
    for name in WORKERS:
        assert json.loads((tmp_path / f"{name}.json").read_text())["info"]["num_workers"] == 4


def tf_configs(output):
    """{task: TF_CONFIG} from the lines mwms_digits.R prints ("N: worker I of 4 workers, ...")."""
    found = {}
    for line in output.splitlines():
        if "workers, TF_CONFIG " in line:
            found[int(line.split(":")[0])] = json.loads(line.split("TF_CONFIG ", 1)[1])
    return found


def test_srun_r_script_cyclic_tasks_find_each_other_by_address(cluster, tmp_path):
    done = srun(cluster, ["Rscript", str(SCRIPTS / "mwms_digits.R"), str(tmp_path)], "cyclic",
                env=r_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_identical_weights(tmp_path, WORKERS)
    configs = tf_configs(done.stdout)
    assert sorted(configs) == [0, 1, 2, 3]
    workers = configs[0]["cluster"]["worker"]
    # Cyclic: tasks 0 and 2 on h0, 1 and 3 on h1, each at its node's address.
    assert [w.split(":")[0] for w in workers] == ADDRESSES * 2
    assert all(c["cluster"]["worker"] == workers and c["task"]["index"] == i
               for i, c in configs.items())


def test_launch_submits_a_two_node_job_with_sbatch(cluster, tmp_path):
    """`python -m tfdistributed launch --backend slurm` (launch()) run where slurmctld is."""
    done = cluster.run(
        [sys.executable, "-m", "tfdistributed", "launch", "--workers", "4", "--backend", "slurm",
         "--timeout", "280", str(SCRIPTS / "mwms_digits.py"), str(tmp_path), "--epochs", "2"],
        timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_identical_weights(tmp_path, WORKERS)
    assert "all tasks finished" in done.stderr and "worker 3: 0" in done.stderr
    # SLURM keeps a finished job for MinJobAge (300 s): it ran on both nodes.
    jobs = cluster.run(["scontrol", "-o", "show", "job"]).stdout.splitlines()
    batch = [job for job in jobs if "JobName=tfdistributed " in job]
    assert len(batch) == 1 and " NodeList=h[0-1] " in batch[0], jobs


def test_teardown_leaves_no_namespace_link_or_daemon():
    bed, slurm = start_cluster()
    # munged, slurmctld, and the slurmds of h0 and h1, each named by its files' directory.
    assert len(processes_running(slurm.dir)) == 4
    slurm.stop()
    bed.down()
    assert hosts.namespaces(bed.prefix) == [] and hosts.links(bed.prefix) == []
    assert not os.path.exists(slurm.dir)
    assert processes_running(slurm.dir) == []
    assert processes_running(f"/run/netns/{bed.prefix}") == []


def test_a_node_that_cannot_start_stops_everything_started_before_it():
    missing = hosts.Host(f"{hosts.PREFIX}missing-h0", "10.77.0.2")
    slurm = LocalSlurm(hosts=[missing], start_timeout=20)
    with pytest.raises(LaunchError, match="slurmctld exited"):
        slurm.start()
    assert processes_running(slurm.dir) == [] and not os.path.exists(slurm.dir)
