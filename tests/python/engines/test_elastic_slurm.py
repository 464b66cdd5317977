"""Elastic jobs on SLURM (a 3-node cluster of the host bed): a node lost for good shrinks the job,
a node that comes back grows it (tfdistributed.engines.elastic; the job of
tests/python/engines/test_elastic.py)."""

import json
import random
import subprocess
import threading

import pytest

from elasticsupport import (BATCH, EPOCHS, EXAMPLES, SAVE_FREQ, SCRIPT, assert_ends_as_one_job_of_3,
                            build_bed3)


@pytest.fixture(scope="module")
def bed3():
    """Three hosts, 10.77.0.2 to 10.77.0.4, on a bed of their own."""
    built = build_bed3()
    yield built
    built.down()


@pytest.fixture(scope="module")
def slurm3(bed3):
    """A SLURM node on each of the 3 hosts (slurmctld on the first)."""
    from tfdistributed.testbeds.slurm import LocalSlurm

    slurm = LocalSlurm(cpus=2, hosts=bed3.hosts)
    try:
        slurm.start()
    except Exception as e:  # noqa: BLE001  (any reason must reach the report)
        pytest.fail(f"The 3-node SLURM cluster did not start: {e}", pytrace=False)
    yield slurm
    slurm.stop()


def bring_back_when_asked(flag, host, slurm, node, done):
    """The driver runs inside the bed: the test brings the lost node back for it (its link up,
    its slurmd started again, as a node that rebooted)."""
    import os
    import time

    while not done.is_set():
        if os.path.exists(flag):
            subprocess.run(["ip", "-n", host.name, "link", "set", "eth0", "up"], timeout=20)
            slurm.reboot_node(node)
            done.wait()  # the new slurmd lives as long as the thread that started it
            return
        time.sleep(0.2)


@pytest.mark.cluster
def test_on_slurm_a_node_lost_for_good_shrinks_the_job_and_its_return_grows_it(bed3, slurm3,
                                                                            tmp_path):
    import sys

    lose_at = random.Random().randrange(SAVE_FREQ + 1, 2 * 14)
    flag, done = str(tmp_path / "link-up"), threading.Event()
    helper = threading.Thread(target=bring_back_when_asked,
                              args=(flag, bed3.hosts[2], slurm3, "h2", done), daemon=True)
    helper.start()
    driver = str(__import__("pathlib").Path(SCRIPT).with_name("elastic_slurm_driver.py"))
    outdir = tmp_path / "out"
    outdir.mkdir()
    try:
        run = slurm3.run([sys.executable, driver, str(outdir), str(tmp_path / "backup"),
                          str(lose_at), flag, "--", "--epochs", str(EPOCHS), "--batch",
                          str(BATCH), "--examples", str(EXAMPLES), "--save-freq", str(SAVE_FREQ),
                          "--step-seconds", "0.3"], timeout=700, check=False)
    finally:
        done.set()
        helper.join(timeout=60)
        subprocess.run(["ip", "-n", bed3.hosts[2].name, "link", "set", "eth0", "up"], timeout=20)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    sizes = [(s["workers"], s["why"], s["places"]) for s in result["sizes"]]
    assert sizes == [(3, "start", []), (2, "lost", ["h2"]), (3, "back", ["h2"])], \
        (lose_at, "\n".join(result["lines"]))
    said = "\n".join(result["said"])
    assert "node h2 is gone" in said and "SLURM says it is" in said, said
    assert_ends_as_one_job_of_3(outdir, result)
