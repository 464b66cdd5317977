"""The workers of a 2-worker job that call Keras' own model.fit/evaluate/predict on file-backed
data, as users write it (run by tfdistributed.launch): the strategy first, as users build it,
then one or more runs in sequence in the same processes, each a new model on its own data.

usage: plain_fit_files.py OUTDIR --strategy tensorflow|ours --run SPEC [--run SPEC ...]
--strategy tensorflow: tf.distribute.MultiWorkerMirroredStrategy() built by the script itself;
ours: tfdistributed.make_strategy("auto"). One per process, shared by the runs: each new
MultiWorkerMirroredStrategy numbers its collectives from the same keys, so a second one in a
process reuses the first one's (tried: with another model's shapes, a worker hung).
SPEC: a JSON object: "name"; "source": "tfds" (tensorflow_datasets.load() of the digits in the
TFDS directory "data") or "tfrecord" (the TFRecord file "data" of "x" (8x8x1 floats) and "y");
optional "policy" (auto|file|data|off, set on the dataset with tf.data.Options; none:
TensorFlow's default), "validation" (true: fit(validation_data=the data)) and "uncaught".

Each run first prints "=== run NAME ===" (the tests read a run's lines between its mark and
the next) and writes OUTDIR/NAME/worker-<index>.npz (weights) and .json (history, evaluate's
metrics, the shape of predict's output, "error": null). A run's exception is caught and
written as that .json's "error", so the runs after it still run and report; an "uncaught"
run's exception ends the job instead, as it ends a user's script (give it last).
"""

import argparse
import json
import os
import traceback

import tfdistributed as tfd

parser = argparse.ArgumentParser()
parser.add_argument("outdir")
parser.add_argument("--strategy", choices=("tensorflow", "ours"), required=True)
parser.add_argument("--run", dest="runs", action="append", type=json.loads, required=True)
ns = parser.parse_args()

import tensorflow as tf  # noqa: E402

# Created first: multi-worker collectives must be configured before TensorFlow runs anything.
strategy = (tf.distribute.MultiWorkerMirroredStrategy() if ns.strategy == "tensorflow"
            else tfd.make_strategy("auto"))
import keras  # noqa: E402
import numpy as np  # noqa: E402

task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}-{task['index']}"


def load(spec):
    if spec["source"] == "tfds":
        import tensorflow_datasets as tfds

        data = tfds.load("sklearn_digits", split="train", data_dir=spec["data"],
                         as_supervised=True)
    else:
        features = {"x": tf.io.FixedLenFeature([8, 8, 1], tf.float32),
                    "y": tf.io.FixedLenFeature([], tf.int64)}

        def parse(record):
            example = tf.io.parse_single_example(record, features)
            return example["x"], example["y"]

        data = tf.data.TFRecordDataset(spec["data"]).map(parse)
    if spec.get("policy"):
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = getattr(
            tf.data.experimental.AutoShardPolicy, spec["policy"].upper())
        data = data.with_options(options)
    return data.batch(64)


def run(spec, outdir):
    data = load(spec)
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Rescaling(1 / 255),
                                  keras.layers.Flatten(), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(0.01), metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(data, epochs=2, verbose=2,
                        validation_data=data if spec.get("validation") else None)
    metrics = model.evaluate(data, verbose=0, return_dict=True)
    predictions = model.predict(data.map(lambda x, y: x), verbose=0)
    np.savez(os.path.join(outdir, name + ".npz"), *model.get_weights())
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump({"history": history.history, "metrics": metrics,
                   "predictions": [int(n) for n in predictions.shape], "error": None}, f)
    print(f"done: {metrics}", flush=True)


for spec in ns.runs:
    outdir = os.path.join(ns.outdir, spec["name"])
    os.makedirs(outdir, exist_ok=True)
    print(f"=== run {spec['name']} ===", flush=True)
    if spec.get("uncaught"):
        run(spec, outdir)
        continue
    try:
        run(spec, outdir)
    except Exception as e:  # noqa: BLE001  (its test fails with it; the next runs still run)
        # One line, not the traceback: the launcher names a failed job by the last exception
        # line its tasks printed, which must stay the uncaught run's.
        print(f"run {spec['name']} failed: {type(e).__name__}: {e}".splitlines()[0], flush=True)
        with open(os.path.join(outdir, name + ".json"), "w") as f:
            json.dump({"error": traceback.format_exc()}, f)
