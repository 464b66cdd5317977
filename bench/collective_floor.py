"""What a multi-worker step's collectives cost on their own: the floor under synchronisation.

    .venv/bin/python bench/collective_floor.py [--bytes 139308] [--steps 400]

Launches 2 workers pinned as the benchmarks pin them (one core, one TensorFlow thread each,
``bench/pinning.py``), with no model: each runs, in one ``tf.function`` per step as Keras does,
the collectives of a step of the bench CNN, ``--steps`` times, and prints the median time per
step. Two shapes of step: Keras' own, one all-reduce of the gradients (139,308 bytes of float32)
and then one of the logs (2 values); and tfdistributed's since ``logs_with_gradients``, the logs
in the gradients' all-reduce. A second pass of each adds a block of compute (a matrix product on
the same core, about as long as the CNN's step) before the collectives, so the workers also
arrive at them as unevenly as real steps. Whatever those take is synchronisation no change to
Keras or to tfdistributed can remove.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def worker(nbytes: int, steps: int, matmul: int) -> None:
    import numpy as np
    import tensorflow as tf

    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    grads = tf.ones([nbytes // 4], tf.float32)
    logs = tf.ones([2], tf.float32)
    a = tf.random.stateless_uniform([matmul, matmul], seed=[1, 2])

    def replica(g, m, compute, together):
        if compute:
            g = g + tf.reduce_sum(tf.matmul(a, a)) * 0.0
        ctx = tf.distribute.get_replica_context()
        if together:  # one all-reduce: the logs packed with the gradients
            g, m = ctx.all_reduce("sum", [g, m])
            return g[0] + m[0] / 2.0
        g = ctx.all_reduce("sum", g)
        with tf.control_dependencies([g]):
            return g[0] + ctx.all_reduce("mean", m)[0]

    out = {}
    for together in (False, True):
        for compute in (False, True):
            step = tf.function(lambda: strategy.run(replica, args=(grads, logs, compute,
                                                                   together)))
            for _ in range(20):
                step()
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                float(step())  # the host waits for the step's result, as Keras reads its logs
                times.append(time.perf_counter() - t0)
            shape = "1 all-reduce" if together else "2 all-reduces"
            out[f"{shape}, " + ("with compute" if compute else "collectives only")] = \
                float(np.median(times)) * 1000
    compute_alone = tf.function(lambda: tf.reduce_sum(tf.matmul(a, a)))
    for _ in range(20):
        compute_alone()
    t0 = time.perf_counter()
    for _ in range(steps):
        float(compute_alone())
    out["compute alone"] = (time.perf_counter() - t0) / steps * 1000
    print("FLOOR " + json.dumps(out), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=int, default=139_308, help="gradient bytes per step")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--matmul", type=int, default=384, help="side of the compute block")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.worker:
        return worker(ns.bytes, ns.steps, ns.matmul)

    import tfdistributed as tfd
    from pinning import pin_tasks

    result = tfd.launch(__file__, workers=2, args=["--worker", "--bytes", str(ns.bytes),
                                                   "--steps", str(ns.steps), "--matmul",
                                                   str(ns.matmul)], timeout=300,
                        engine=tfd.engines.Local(prepare_task=pin_tasks()),
                        watch=tfd.Watch(echo=False))
    for task in result.tasks:
        line = next(l for l in task.output if l.startswith("FLOOR "))
        values = json.loads(line[len("FLOOR "):])
        print(f"worker {task.task_index}: " + ", ".join(
            f"{k} {v:.2f} ms/step" for k, v in values.items()))


if __name__ == "__main__":
    main()
