"""One worker of a multi-worker job on the digits data (run by tfdistributed.launch).

usage: mwms_digits.py OUTDIR [--epochs N] [--source arrays|tfds] [--data-dir D] [--policy P]
                      [--save MODEL.keras] [--backup DIR [--kill-at EPOCH]] [--examples N]
                      [--steps-per-execution K] [--keras-fit] [--model digits|busy]
                      [--validation-split F] [--floatx DTYPE] [--compression fp16|bf16|powersgd]
                      [--powersgd RANK,WARMUP] [--dtype-policy POLICY] [--bytes-per-pack B]
       mwms_digits.py OUTDIR --variants VARIANTS.json
Writes OUTDIR/<task>-<index>.npz (weights) and .json (history and test metrics).
--kill-at E: worker 1 SIGKILLs itself when epoch E (0-based) begins, once the chief's backup
of the previous epoch is on disk (a machine failure at a known point).

--variants: one job trains several models in turn, one per variant of the file
({name: [the options above]}), each writing OUTDIR/<name>/ as a job of its own would. A job
costs each worker seconds of CPU to import TensorFlow and Keras and to join the cluster, so
the tests run the variants that need no process of their own in one job. The variants share
the process's one strategy (a MultiWorkerMirroredStrategy is made once per process: TensorFlow
configures the process's collectives and server with the first one): each variant's gradient
compression and pack size are set on it, as make_strategy() sets them for the gradients
(set_gradient_compression(), set_bytes_per_pack()), and Keras' floatx and dtype policy are put
back after it. Each variant came out as in a job of its own (2026-11-26: the same history,
metrics and weights bit for bit, the same all-reduces). Its output lies between the lines
"mwms_digits variant NAME begins" and "... ends". A variant that fails writes its traceback to
OUTDIR/<name>/<task>-<index>.error and the next one runs (the job still exits 0; the
variant's test reads the error), so one failure hides none of the other results.
"""

import argparse
import json
import os
import sys
import traceback

import tfdistributed as tfd

VARIANT_MARK = "mwms_digits variant"
SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")


def parse_args(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--source", default="arrays")
    parser.add_argument("--data-dir")
    parser.add_argument("--policy")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--save")
    parser.add_argument("--backup")
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--examples", type=int, help="train on the first N examples only")
    parser.add_argument("--steps-per-execution", type=int, default=1)
    parser.add_argument("--keras-fit", action="store_true", help="plain model.fit on the arrays")
    parser.add_argument("--model", choices=("digits", "busy"), default="digits")
    parser.add_argument("--validation-split", type=float, default=0.0)
    parser.add_argument("--floatx", help="keras.config.set_floatx() before the model is built")
    parser.add_argument("--compression", help="make_strategy's gradient_compression")
    parser.add_argument("--powersgd",
                        help="RANK,WARMUP: gradient_compression=powersgd(rank, warmup)")
    parser.add_argument("--dtype-policy", help="Keras' dtype policy (mixed precision) for the model")
    parser.add_argument("--bytes-per-pack", type=int, help="make_strategy's bytes_per_pack")
    parser.add_argument("--shuffle", action="store_true",
                        help="tfd.fit(shuffle=True), its seed drawn from the model's global seed")
    parser.add_argument("--seed-per-worker", action="store_true",
                        help="then keras.utils.set_random_seed(100 + the task's index) before fit")
    parser.add_argument("--variants", help="a JSON file {name: [options]}: train each in turn")
    return parser.parse_args(argv)


def compression_of(ns):
    if ns.powersgd:
        rank, warmup = map(int, ns.powersgd.split(","))
        return tfd.powersgd(rank=rank, warmup_steps=warmup)
    return ns.compression


def record_collectives():
    """Every all-reduce TensorFlow builds from now on, by the graph (step function) it is
    built in: the list they are appended to."""
    from tensorflow.python.ops import collective_ops

    collectives = []
    all_reduce_v2 = collective_ops.all_reduce_v2

    def recording(t, *args, **kwargs):
        out = all_reduce_v2(t, *args, **kwargs)
        graph = getattr(out, "graph", None)
        collectives.append({"graph": getattr(graph, "name", "eager"), "graph_id": id(graph),
                            "elements": int(t.shape.num_elements() or 0), "dtype": t.dtype.name})
        return out

    collective_ops.all_reduce_v2 = recording
    return collectives


def train(ns, strategy, collectives):
    """Build, train and evaluate the model ``ns`` asks for under ``strategy``; write its
    weights and report to ``ns.outdir``."""
    import keras
    import numpy as np
    from models import busy_digits_model, digits_model  # tests/python/support/models.py

    if ns.floatx:
        keras.config.set_floatx(ns.floatx)
    if ns.dtype_policy:
        keras.mixed_precision.set_dtype_policy(ns.dtype_policy)
    if ns.model == "busy":
        model = busy_digits_model(strategy, seed=1)
    else:
        model = digits_model(strategy, seed=1, learning_rate=0.01)
    if ns.steps_per_execution > 1:
        with strategy.scope():  # Keras makes its loss tracker here: a per-worker one outside the scope
            model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"],
                          steps_per_execution=ns.steps_per_execution)

    callbacks = []
    if ns.kill_at is not None:
        import signal
        import time

        class KillWorkerOne(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                if epoch != ns.kill_at or tfd.read_tf_config()["task"]["index"] != 1:
                    return
                metadata = os.path.join(ns.backup, "training_metadata.json")
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if os.path.exists(metadata) and json.load(open(metadata))["epoch"] >= epoch:
                        break
                    time.sleep(0.1)
                print(f"killing myself at the start of epoch {epoch + 1}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

        callbacks.append(KillWorkerOne())

    if ns.source == "tfds":
        def scale(image, label):
            return keras.ops.cast(image, "float32") / 255.0, label

        train_data = tfd.load_tfds("sklearn_digits", "train", ns.data_dir, shard_policy=ns.policy)
        train_data = train_data.map(scale).batch(ns.batch)
        history = tfd.fit(model, train_data, epochs=ns.epochs, verbose=2)
    elif ns.keras_fit:
        (x, y), _ = tfd.digits_arrays()
        history = model.fit(x[:ns.examples], y[:ns.examples], epochs=ns.epochs,
                            batch_size=ns.batch, shuffle=False, verbose=2)
    else:
        (x, y), (xt, yt) = tfd.digits_arrays()
        x, y = x[:ns.examples], y[:ns.examples]
        if ns.seed_per_worker:
            keras.utils.set_random_seed(100 + tfd.read_tf_config()["task"]["index"])
        history = tfd.fit(model, x, y, epochs=ns.epochs, batch_size=ns.batch, shuffle=ns.shuffle,
                          verbose=2, backup_dir=ns.backup, callbacks=callbacks,
                          validation_split=ns.validation_split or None)
    (_, _), (xt, yt) = tfd.digits_arrays()
    metrics = tfd.evaluate(model, xt, yt, batch_size=ns.batch, verbose=0)

    if ns.save:
        tfd.checkpoints.save_model(model, ns.save)
    info = tfd.strategy_info(strategy)
    name = f"{info['task_type']}-{info['task_index']}"
    np.savez(os.path.join(ns.outdir, name + ".npz"),
             *[w.numpy() if hasattr(w, "numpy") else np.asarray(w) for w in model.get_weights()])
    with open(os.path.join(ns.outdir, name + ".json"), "w") as f:
        json.dump({"history": history.history, "epochs": history.epoch, "metrics": metrics,
                   "info": info, "steps": int(model.optimizer.iterations.numpy()),
                   "collectives": collectives}, f)
    print(f"done: {metrics}", flush=True)


def train_variants(ns, strategy, collectives):
    """Each variant of ``ns.variants`` in turn (see the module docstring)."""
    import keras

    with open(ns.variants) as f:
        # All parsed first: a wrong option ends the job before any training.
        variants = {name: parse_args([os.path.join(ns.outdir, name), *options])
                    for name, options in json.load(f).items()}
    info = tfd.strategy_info(strategy)
    task = f"{info['task_type']}-{info['task_index']}"
    for name, variant in variants.items():
        os.makedirs(variant.outdir, exist_ok=True)
        print(f"{VARIANT_MARK} {name} begins", flush=True)
        floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
        if variant.floatx and not variant.dtype_policy:
            # Keras fixes its global dtype policy (the layers') from floatx when the first
            # layer is made, here in an earlier variant (or just above): set_floatx() alone
            # would then leave the layers in float32.
            keras.config.set_dtype_policy(variant.floatx)
        tfd.set_gradient_compression(strategy, compression_of(variant))
        tfd.set_bytes_per_pack(strategy, variant.bytes_per_pack)
        del collectives[:]
        try:
            train(variant, strategy, collectives)
        except Exception:  # noqa: BLE001  (reported to the variant's test, the next one runs)
            traceback.print_exc()
            with open(os.path.join(variant.outdir, task + ".error"), "w") as f:
                f.write(traceback.format_exc())
        finally:
            keras.config.set_floatx(floatx)
            keras.config.set_dtype_policy(policy)
            tfd.set_gradient_compression(strategy, None)
            tfd.set_bytes_per_pack(strategy, None)
            sys.stderr.flush()
            print(f"{VARIANT_MARK} {name} ends", flush=True)


def main(argv):
    ns = parse_args(argv)
    # Created first: multi-worker collectives must be configured before TensorFlow runs anything.
    strategy = tfd.make_strategy("auto", gradient_compression=compression_of(ns),
                                 bytes_per_pack=ns.bytes_per_pack)
    import keras  # noqa: F401  (imported before the all-reduce is recorded, as it always was)

    sys.path.insert(0, SUPPORT)
    collectives = record_collectives()
    if ns.variants:
        train_variants(ns, strategy, collectives)
    else:
        train(ns, strategy, collectives)


if __name__ == "__main__":
    main(sys.argv[1:])
