"""The main job (``make demo``): train the digits model under every strategy this machine can run.

Single-process strategies run here, on the CPU split into 2 logical devices; the multi-worker
and parameter-server rows are real local clusters of separate processes on 127.0.0.1 started
with :func:`tfdistributed.launch`. Prints one table: strategy, replicas, workers, test accuracy,
seconds.

    python -m tfdistributed.demo [--epochs 15] [--skip parameter_server]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

BATCH = 64
LEARNING_RATE = 0.005


def build_model(strategy, seed=1, learning_rate=LEARNING_RATE):
    """The demo's digits classifier: small, and >= 0.9 accurate in seconds.

    Args:
        strategy: built and compiled in this strategy's scope.
        seed: Keras' global seed, set first (``None`` leaves it as it is).
        learning_rate: Adam's learning rate.

    Returns:
        The compiled ``keras.Sequential``.

    Example:
        >>> model = build_model(make_strategy("mirrored"))    # doctest: +SKIP
    """
    import keras

    if seed is not None:
        keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = keras.Sequential([
            keras.layers.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    return model


def train_and_evaluate(strategy_name, epochs):
    """Train under ``strategy_name`` in this process; returns one table row."""
    import tfdistributed as tfd

    t0 = time.perf_counter()
    strategy = tfd.make_strategy(strategy_name)
    info = tfd.strategy_info(strategy)
    (x, y), (xt, yt) = tfd.digits_arrays()
    model = build_model(strategy)
    tfd.fit(model, x, y, epochs=epochs, batch_size=BATCH, seed=0, verbose=0)
    metrics = tfd.evaluate(model, xt, yt, batch_size=BATCH, verbose=0)
    return {"strategy": info["kind"], "replicas": info["num_replicas"],
            "workers": info["num_workers"], "ps": info.get("num_ps", 0),
            "accuracy": metrics["accuracy"], "seconds": time.perf_counter() - t0}


def _cluster_task(epochs):
    """One task of a local cluster: the same code as a single process, strategy from TF_CONFIG."""
    return train_and_evaluate("auto", epochs)


def run_cluster(workers, ps, epochs, timeout):
    import tfdistributed as tfd

    t0 = time.perf_counter()
    result = tfd.launch(_cluster_task, tfd.Scaling(workers=workers, ps=ps, chief=ps > 0),
                        args=(epochs,), timeout=timeout, env={"TF_CPP_MIN_LOG_LEVEL": "3"},
                        watch=tfd.Watch(echo=False))
    row = dict(result.values[0])
    row["seconds"] = time.perf_counter() - t0
    return row


def format_table(rows) -> str:
    header = f"{'strategy':<24}{'replicas':>9}{'workers':>9}{'ps':>4}{'accuracy':>10}{'seconds':>9}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['strategy']:<24}{r['replicas']:>9}{r['workers']:>9}{r['ps']:>4}"
                     f"{r['accuracy']:>10.3f}{r['seconds']:>9.1f}")
    return "\n".join(lines)


LOCAL = ("default", "one_device", "mirrored", "central_storage")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--skip", action="append", default=[], help="strategy to leave out")
    ns = parser.parse_args(argv)

    import tfdistributed as tfd

    # Before anything initializes TensorFlow: 2 logical CPUs, so mirrored has 2 replicas.
    tfd.configure_cpu_devices(2)
    rows = []
    print(f"Training scikit-learn's digits ({ns.epochs} epochs, global batch {BATCH}) under each "
          f"strategy...", flush=True)
    for name in LOCAL:
        if name not in ns.skip:
            rows.append(train_and_evaluate(name, ns.epochs))
            print(f"  {name}: done", flush=True)
    if "multi_worker_mirrored" not in ns.skip:
        rows.append(run_cluster(2, 0, ns.epochs, ns.timeout))
        print("  multi_worker_mirrored (2 worker processes): done", flush=True)
    if "parameter_server" not in ns.skip:
        rows.append(run_cluster(2, 1, ns.epochs, ns.timeout))
        print("  parameter_server (chief + 2 workers + 1 ps): done", flush=True)
    print()
    print(format_table(rows))
    print("(seconds include building the model; cluster rows also start their processes)")
    articles = os.path.join(os.getcwd(), "site", "articles")
    if os.path.isdir(articles):
        print(f"\nRendered tutorials (make docs): {articles}/*.html")
    else:
        print("\nTutorials: vignettes/*.Rmd (`make docs` renders them into the site, site/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
