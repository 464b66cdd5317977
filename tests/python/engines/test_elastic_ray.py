"""Elastic jobs on Ray (a local 3-node Ray cluster): a node lost for good shrinks the job, a node
that joins grows it (tfdistributed.engines.elastic; the job of tests/python/engines/test_elastic.py)."""

import json
import random
import subprocess

import pytest

from elasticsupport import BATCH, EPOCHS, EXAMPLES, SAVE_FREQ, SCRIPT, assert_ends_as_one_job_of_3


@pytest.mark.cluster
def test_on_ray_a_node_lost_shrinks_the_job_and_a_node_that_joins_grows_it(tmp_path):
    """A local Ray cluster of 3 one-CPU nodes (Ray's own cluster_utils, in a process of its own
    beside this session's Ray): one node's raylet killed at a random step, a new node added."""
    import sys

    lose_at = random.Random().randrange(SAVE_FREQ + 1, 2 * 14)
    driver = str(__import__("pathlib").Path(SCRIPT).with_name("elastic_ray_driver.py"))
    outdir = tmp_path / "out"
    outdir.mkdir()
    run = subprocess.run([sys.executable, driver, str(outdir), str(tmp_path / "backup"),
                          str(lose_at), "--", "--epochs", str(EPOCHS), "--batch", str(BATCH),
                          "--examples", str(EXAMPLES), "--save-freq", str(SAVE_FREQ),
                          "--step-seconds", "0.3"], capture_output=True, text=True, timeout=700)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    sizes = [(s["workers"], s["why"]) for s in result["sizes"]]
    assert sizes == [(3, "start"), (2, "lost"), (3, "joined")], (lose_at, "\n".join(result["lines"]))
    lost, joined = result["sizes"][1]["places"], result["sizes"][2]["places"]
    assert len(lost) == len(joined) == 1 and lost != joined
    said = "\n".join(result["said"])
    assert f"node {lost[0]} is gone" in said and f"node {joined[0]} joined the cluster" in said, \
        said
    assert_ends_as_one_job_of_3(outdir, result)
