"""make_strategy("auto") on TF_CONFIG shapes written by platforms, in real jobs on 127.0.0.1.

- AI Platform / Vertex AI: chief called "master", extra keys "job", "environment", task "trial"
  and "cloud". Two processes build a multi_worker_mirrored strategy and all-reduce a value.
- A parameter-server cluster of workers and ps tasks without a chief (TensorFlow's own
  tutorial's shape): the coordinator has no task, and TensorFlow adds it to the cluster.
"""

import json
import os
import subprocess
import sys

import pytest

import tfdistributed as tfd

pytestmark = pytest.mark.cluster
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "platform_tf_config.py")
TIMEOUT = 180


def _start(args, tf_config=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return subprocess.Popen([sys.executable, SCRIPT, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _results(processes):
    outputs = []
    try:
        for p in processes:
            out, _ = p.communicate(timeout=TIMEOUT)
            outputs.append(out)
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for p, out in zip(processes, outputs):
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert p.returncode == 0 and lines, out[-3000:]
        results.append(json.loads(lines[-1][len("RESULT "):]))
    return results


def test_ai_platform_master_and_vertex_keys_train_with_auto():
    master, worker = (f"127.0.0.1:{port}" for port in tfd.cluster.free_ports(2))
    base = {"cluster": {"master": [master], "worker": [worker]}, "environment": "cloud",
            "job": {"scale_tier": "CUSTOM", "master_type": "n1-standard-4", "worker_count": "1"}}
    tasks = [{"type": "master", "index": 0, "trial": "1", "cloud": "c"},
             {"type": "worker", "index": 0, "trial": "1", "cloud": "c"}]
    results = _results([_start(["mwms"], {**base, "task": t}) for t in tasks])
    for r in results:
        assert r["kind"] == "multi_worker_mirrored" and r["replicas"] == 2
        assert r["value"] == 3.0  # 1 from the chief + 2 from worker 0: the all-reduce ran
        # What TensorFlow read: "master" renamed, the platform's keys kept.
        assert r["tf_config"]["cluster"] == {"chief": [master], "worker": [worker]}
        assert r["tf_config"]["job"] == base["job"] and r["tf_config"]["environment"] == "cloud"
    assert [r["tf_config"]["task"]["type"] for r in results] == ["chief", "worker"]


def test_parameter_server_cluster_without_chief_trains_with_auto():
    (result,) = _results([_start(["ps", *map(str, tfd.cluster.free_ports(2))])])
    assert result == {"kind": "parameter_server", "replicas": 1, "value": 2.0, "is_chief": True}
