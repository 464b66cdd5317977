"""One worker of a 2-worker job that calls Keras' own model.fit/evaluate/predict on file-backed data, as
users write it (run by tfdistributed.launch).

usage: plain_fit_files.py OUTDIR --strategy tensorflow|ours --source tfds|tfrecord --data PATH
                          [--policy auto|file|data|off] [--validation]
--strategy tensorflow: tf.distribute.MultiWorkerMirroredStrategy() built by the script itself;
ours: tfdistributed.make_strategy("auto"). --source tfds: tensorflow_datasets.load() of the digits
in the TFDS directory PATH; tfrecord: the TFRecord file PATH of "x" (8x8x1 floats) and "y".
--policy: set on the dataset with tf.data.Options (none: TensorFlow's default).
Writes OUTDIR/worker-<index>.npz (weights) and .json (history, evaluate's metrics, the shape
of predict's output).
"""

import argparse
import json
import os

import tfdistributed as tfd

parser = argparse.ArgumentParser()
parser.add_argument("outdir")
parser.add_argument("--strategy", choices=("tensorflow", "ours"), required=True)
parser.add_argument("--source", choices=("tfds", "tfrecord"), required=True)
parser.add_argument("--data", required=True)
parser.add_argument("--policy")
parser.add_argument("--validation", action="store_true", help="fit(validation_data=the data)")
ns = parser.parse_args()

import tensorflow as tf  # noqa: E402

# Created first: multi-worker collectives must be configured before TensorFlow runs anything.
strategy = (tf.distribute.MultiWorkerMirroredStrategy() if ns.strategy == "tensorflow"
            else tfd.make_strategy("auto"))
import keras  # noqa: E402
import numpy as np  # noqa: E402

if ns.source == "tfds":
    import tensorflow_datasets as tfds

    data = tfds.load("sklearn_digits", split="train", data_dir=ns.data, as_supervised=True)
else:
    features = {"x": tf.io.FixedLenFeature([8, 8, 1], tf.float32),
                "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        return example["x"], example["y"]

    data = tf.data.TFRecordDataset(ns.data).map(parse)
if ns.policy:
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(
        tf.data.experimental.AutoShardPolicy, ns.policy.upper())
    data = data.with_options(options)
data = data.batch(64)

with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Rescaling(1 / 255),
                              keras.layers.Flatten(), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(data, epochs=2, verbose=2, validation_data=data if ns.validation else None)
metrics = model.evaluate(data, verbose=0, return_dict=True)
predictions = model.predict(data.map(lambda x, y: x), verbose=0)

task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}-{task['index']}"
np.savez(os.path.join(ns.outdir, name + ".npz"), *model.get_weights())
with open(os.path.join(ns.outdir, name + ".json"), "w") as f:
    json.dump({"history": history.history, "metrics": metrics,
               "predictions": [int(n) for n in predictions.shape]}, f)
print(f"done: {metrics}", flush=True)
