"""One task of a job whose TF_CONFIG was written by a platform, not by tfdistributed.

    python platform_tf_config.py mwms    # TF_CONFIG from the test (AI Platform / Vertex AI shape)
    python platform_tf_config.py ps W P  # in-process worker and ps servers on ports W and P, and
                                         # this process as the coordinator, TF_CONFIG with no task

Prints one JSON line: the strategy kind, the number of replicas and a value computed by the
cluster, which proves the tasks really talked to each other.
"""

import json
import os
import sys

import tfdistributed as tfd


def mwms():
    import tensorflow as tf

    strategy = tfd.make_strategy("auto")
    # Each replica contributes its worker's position in the cluster + 1: the sum is 1 + 2.
    resolver = strategy.cluster_resolver
    rank = tf.constant(float(1 + (resolver.task_type == "worker") * (1 + resolver.task_id)))
    total = strategy.reduce("SUM", strategy.run(lambda: rank), axis=None)
    return {"kind": tfd.strategy_kind(strategy), "replicas": int(strategy.num_replicas_in_sync),
            "value": float(total), "tf_config": json.loads(os.environ["TF_CONFIG"])}


def ps(worker_port, ps_port):
    import tensorflow as tf

    cluster = {"worker": [f"127.0.0.1:{worker_port}"], "ps": [f"127.0.0.1:{ps_port}"]}
    # TensorFlow's in-process cluster recipe: the servers live in this process, which is also
    # the coordinator. The coordinator's TF_CONFIG has the cluster and no task.
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)
    servers = [tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=0,
                                    protocol="grpc", config=config, start=True)
               for job in ("worker", "ps")]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster})
    strategy = tfd.make_strategy("auto")
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        counter = tf.Variable(0.0)

    @tf.function
    def step():
        counter.assign_add(2.0)
        return counter.read_value()

    coordinator.schedule(step)
    coordinator.join()
    result = {"kind": tfd.strategy_kind(strategy), "replicas": int(strategy.num_replicas_in_sync),
              "value": float(counter.numpy()), "is_chief": tfd.is_chief()}
    del servers
    return result


if __name__ == "__main__":
    out = mwms() if sys.argv[1] == "mwms" else ps(int(sys.argv[2]), int(sys.argv[3]))
    print("RESULT " + json.dumps(out), flush=True)
    # Skip TensorFlow's slow teardown of the servers and the coordinator's threads.
    os._exit(0)
