"""One shuffle order on every worker of a multi-worker job.

Under ``MultiWorkerMirroredStrategy`` each worker shuffles its own copy of the arrays and keeps
its share of every global batch (the ``"data"`` shard policy). Workers that shuffle in
different orders silently train an "epoch" in which some examples come twice and others never.
TensorFlow shuffles with a pair of seeds, the global one (``tf.random.set_seed``,
``keras.utils.set_random_seed``) and the operation's, so both must agree:

- :func:`shared_seed` gives :func:`tfdistributed.fit` its operation seed (the one a one-device
  shuffle would draw from the global seed; without a global seed, one derived from the
  cluster), and checks that every worker's pair is the same;
- :func:`keras_shuffles_alike` does the same for Keras' own ``model.fit(x, y, shuffle=True)``
  on arrays (Keras shuffles them with ``tf.random.shuffle``, its operation seed fixed by the
  graph it is built in, the same on every worker): workers with the same global seed already
  agree; workers with none get one for the call, derived from the cluster (unseeded, a new
  order in each job, as before, but one order); workers seeded differently are an error.

Both cost one all-gather of two numbers per call, before the first step.
"""

from __future__ import annotations

import contextlib

from ..errors import TrainingError


def shared_seed(seed, strategy, placement):
    """The shuffle seed ``fit`` gives the arrays it shuffles: in a multi-worker job one that
    every worker agrees on, checked (:class:`TrainingError` on every worker otherwise).

    - a global seed set and no ``seed``: the operation seed is drawn as a one-device shuffle
      draws it (the next of the global seed's sequence), so a seeded program shuffles the same
      way in every run, whatever ports the job was given;
    - no global seed and no ``seed``: every worker derives the same seed from the cluster it
      belongs to (a new order in each job, as an unseeded one-device program);
    - ``seed``: as given.

    Call it only for arrays about to be shuffled: a draw from the global seed's sequence where
    one device draws none would shift the rest.
    """
    if placement["kind"] != "multi_worker_mirrored" or placement["workers"] < 2:
        return seed
    from tensorflow.python.eager import context
    from tensorflow.python.framework import random_seed

    if seed is None and context.global_seed() is not None:
        seed = random_seed.get_seed(None)[1]
    elif seed is None:
        seed = _cluster_seed(strategy)
    pairs = _gathered(strategy, placement["workers"], random_seed.get_seed(seed))
    if len(set(pairs)) > 1:
        raise _apart("fit", [_pair_text(p) for p in pairs],
                     "Set the same random seed on every worker (or none), or pass the same "
                     "seed= to fit().")
    return seed


@contextlib.contextmanager
def keras_shuffles_alike(strategy, workers: int, what: str = "model.fit"):
    """Around Keras' own ``fit`` on arrays with ``shuffle``: every worker of a multi-worker job
    shuffles them in one order (see the module's docstring), or :class:`TrainingError` on every
    worker before the first step."""
    from tensorflow.python.eager import context

    mine = context.global_seed()
    seeds = _gathered(strategy, workers, (0, 0) if mine is None else (1, int(mine)))
    if len(set(seeds)) > 1:
        raise _apart(what, [f"global seed {s}" if is_set else "no global seed"
                            for is_set, s in seeds],
                     "Set the same random seed on every worker (or none).")
    if mine is not None:
        yield
        return
    # No worker set one: a global seed for this call only, the same on every worker.
    context.set_global_seed(_cluster_seed(strategy))
    try:
        yield
    finally:
        context.set_global_seed(None)


def _cluster_seed(strategy) -> int:
    import json
    import zlib

    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return zlib.crc32(json.dumps(cluster, sort_keys=True).encode()) & 0x7FFFFFFF


def _gathered(strategy, workers: int, pair) -> list:
    """Every worker's ``pair`` of whole numbers, in task order (one all-gather)."""
    import tensorflow as tf

    def gather():
        return tf.distribute.get_replica_context().all_gather(
            tf.constant([list(pair)], tf.int64), axis=0)

    # In a tf.function: run eagerly, TensorFlow warns of its overhead in every worker's output.
    with strategy.scope():
        rows = strategy.experimental_local_results(
            tf.function(lambda: strategy.run(gather))())[0].numpy()
    per_worker = strategy.num_replicas_in_sync // workers
    return [tuple(int(v) for v in row) for row in rows[::per_worker]]


def _pair_text(pair) -> str:
    from tensorflow.python.framework import random_seed

    global_seed, op_seed = pair
    if global_seed == random_seed.DEFAULT_GRAPH_SEED:
        return f"no global seed, shuffle seed {op_seed}"
    return f"global seed {global_seed}, shuffle seed {op_seed}"


def _apart(what: str, seen: list, fix: str) -> TrainingError:
    workers = ", ".join(f"worker {i}: {text}" for i, text in enumerate(seen))
    return TrainingError(
        f"{what}: the workers would shuffle the data in different orders ({workers}), so each "
        f"would train on its share of other batches: some examples twice, others never. {fix}",
        hints={"python": "E.g. keras.utils.set_random_seed(42) in every worker's program, not "
                         "a seed that depends on the task index.",
               "r": "E.g. keras$utils$set_random_seed(42L) in every worker's script, not one "
                    "that depends on the task index."})
