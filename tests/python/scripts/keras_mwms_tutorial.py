"""TensorFlow's multi-worker Keras tutorial as its users run it: the program builds its own
tf.distribute.MultiWorkerMirroredStrategy, its own tf.data pipeline and calls plain model.fit.
The one change for tfdistributed is the import. (The tutorial downloads MNIST; this machine has
no network, so the same pipeline reads the handwritten digits tfdistributed ships, padded to
28x28.) Added, as users add them: a CSVLogger and a metric of their own.

usage: keras_mwms_tutorial.py OUTDIR
"""

import json
import os
import sys

import tfdistributed  # the one change: Keras is repaired for multi-worker fit

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

outdir = sys.argv[1]
per_worker_batch_size = 32
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()


def mnist_dataset(batch_size):
    (x_train, y_train), _ = tfdistributed.digits_arrays()   # in place of the MNIST download
    x_train = np.pad(x_train[..., 0], ((0, 0), (10, 10), (10, 10)))
    y_train = y_train.astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2000).repeat().batch(
        batch_size)


class CorrectCount(keras.metrics.Metric):
    """A user's metric: the number of right predictions so far (a sum, not a mean)."""

    def __init__(self, name="correct", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_weight(name="count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        right = keras.ops.equal(keras.ops.argmax(y_pred, -1), keras.ops.cast(y_true, "int64"))
        self.count.assign_add(keras.ops.sum(keras.ops.cast(right, "float32")))

    def result(self):
        return self.count


def build_and_compile_cnn_model():
    model = keras.Sequential([
        keras.layers.InputLayer(input_shape=(28, 28)),
        keras.layers.Reshape(target_shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.SGD(learning_rate=0.01),
                  metrics=["accuracy", CorrectCount()])
    return model


global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)
with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()
history = multi_worker_model.fit(
    multi_worker_dataset, epochs=3, steps_per_epoch=20,
    callbacks=[keras.callbacks.CSVLogger(os.path.join(outdir, "log.csv"))])

task = f"{tf_config['task']['type']}-{tf_config['task']['index']}"
np.savez(os.path.join(outdir, task + ".npz"), *multi_worker_model.get_weights())
with open(os.path.join(outdir, task + ".json"), "w") as f:
    json.dump({k: [float(v) for v in vs] for k, vs in history.history.items()}, f)
