"""Runs an elastic Ray job on a local Ray cluster of 3 one-CPU nodes (Ray's own
ray.cluster_utils: a raylet per node on this machine) and prints the result as JSON on its last
line: launch(Scaling(workers=3, min_workers=2), engine=Ray()).

usage: elastic_ray_driver.py OUTDIR BACKUP LOSE_AT -- SCRIPT_ARGS...
Once worker 0 has trained LOSE_AT steps, the last node is removed (its raylet killed: a node
lost); once the job trains on 2 workers, a new node is added to the cluster (a node that joins).
"""

import json
import os
import sys
import threading
import time

import ray
from ray.cluster_utils import Cluster

import tfdistributed as tfd

outdir, backup, lose_at = sys.argv[1:4]
rest = sys.argv[sys.argv.index("--") + 1:]
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_job.py")
node = {"num_cpus": 1}
cluster = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
nodes = [cluster.add_node(**node) for _ in range(2)]
ray.init(address=cluster.address, log_to_driver=False)
gone, lines = threading.Event(), []


def steps_trained() -> int:
    try:
        with open(os.path.join(outdir, "steps-worker-0")) as f:
            return max((int(line.split()[2]) for line in f), default=0)
    except FileNotFoundError:
        return 0


def lose_a_node():
    while steps_trained() < int(lose_at):
        time.sleep(0.05)
    print(f"removing a node after step {steps_trained()}", flush=True)
    cluster.remove_node(nodes[-1], allow_graceful=False)


def on_output(line):
    lines.append(line)
    print(line, flush=True)
    if "is gone" in line:
        gone.set()
    if gone.is_set() and line.startswith("[tfdistributed] epoch") and len(nodes) == 2:
        nodes.append(cluster.add_node(**node))


threading.Thread(target=lose_a_node, daemon=True).start()
try:
    result = tfd.launch(script, tfd.Scaling(workers=3, min_workers=2), engine=tfd.engines.Ray(),
                        restarts=tfd.Restarts(join_timeout=15), timeout=600,
                        args=[outdir, "--backup", backup, *rest],
                        watch=tfd.Watch(on_output=on_output, echo=False))
    print(json.dumps({"sizes": result.sizes, "restarts": result.restarts,
                      "history": result.history, "lines": lines[-60:],
                      # the job's own announcements, whole (a traceback may fill the last 60)
                      "said": [line for line in lines if line.startswith("[tfdistributed]")]}))
finally:
    ray.shutdown()
    cluster.shutdown()
