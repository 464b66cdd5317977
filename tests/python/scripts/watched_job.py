"""One worker of a 2-worker job that goes wrong on purpose (run by tfdistributed.launch).

usage: watched_job.py OUTDIR [--epochs N] [--keras-fit] [--slow-callback S] [--slow-input S]
                      [--stall-callback STEP] [--stall-input STEP] [--uneven] [--then EPOCHS]

--slow-callback S: worker 1 sleeps S seconds after every step, in a callback (a straggler).
--slow-input S: worker 1's input pipeline sleeps S seconds a batch (a straggler).
--stall-callback STEP: worker 1 sleeps for good in a callback after its step STEP.
--stall-input STEP: worker 1's input pipeline blocks for good at its batch STEP.
--then EPOCHS: fit a second time, from epoch 0 (what the launcher's history keeps).
--uneven: worker 1 trains one epoch fewer than worker 0 (as if each worker counted its own part
  of the data), so that it stops first, then stays busy with something else.
Writes OUTDIR/<task>-<index>.json: the history its (last) fit returned.
"""

import argparse
import json
import os
import time

import tfdistributed as tfd

parser = argparse.ArgumentParser()
parser.add_argument("outdir")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--keras-fit", action="store_true")
parser.add_argument("--slow-callback", type=float, default=0.0)
parser.add_argument("--slow-input", type=float, default=0.0)
parser.add_argument("--stall-callback", type=int)
parser.add_argument("--stall-input", type=int)
parser.add_argument("--uneven", action="store_true")
parser.add_argument("--then", type=int, metavar="EPOCHS",
                    help="then fit again, from epoch 0, for EPOCHS epochs (a second fit)")
ns = parser.parse_args()

strategy = tfd.make_strategy("auto")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

config = json.loads(os.environ["TF_CONFIG"])
me = config["task"]["index"]
slow = me == 1
(x, y), _ = tfd.digits_arrays()
x, y = x[:1024], y[:1024]
with strategy.scope():
    model = keras.Sequential([keras.layers.Input((8, 8, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Sleepy(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if ns.slow_callback:
            time.sleep(ns.slow_callback)
        if ns.stall_callback is not None and batch == ns.stall_callback:
            time.sleep(3600)


def batches():
    """This worker's batches of 32 (a Python generator, so that it can sleep)."""
    n = 0
    while True:
        for i in range(0, len(x), 32):
            if slow and ns.slow_input:
                time.sleep(ns.slow_input)
            if slow and ns.stall_input is not None and n == ns.stall_input:
                time.sleep(3600)
            n += 1
            yield x[i:i + 32], y[i:i + 32]


callbacks = [Sleepy()] if slow else []
steps = len(x) // 32
if ns.slow_input or ns.stall_input is not None or ns.uneven:
    spec = (tf.TensorSpec((None, 8, 8, 1), tf.float32), tf.TensorSpec((None,), y.dtype))
    data = tf.data.Dataset.from_generator(batches, output_signature=spec)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = data.with_options(options)
    history = model.fit(data, epochs=ns.epochs - (ns.uneven and slow), steps_per_epoch=steps,
                        callbacks=callbacks, verbose=2)
elif ns.keras_fit:
    history = model.fit(x, y, batch_size=64, epochs=ns.epochs, callbacks=callbacks,
                        validation_split=0.1, shuffle=False, verbose=2)
else:
    history = tfd.fit(model, x, y, batch_size=64, epochs=ns.epochs, callbacks=callbacks,
                      validation_split=0.1, shuffle=False)
if ns.then:
    history = tfd.fit(model, x, y, batch_size=64, epochs=ns.then, callbacks=callbacks,
                      validation_split=0.1, shuffle=False)
if ns.uneven and slow:
    time.sleep(3600)  # e.g. evaluating or saving, while worker 0 waits in its next step
with open(os.path.join(ns.outdir, f"worker-{me}.json"), "w") as f:
    json.dump({k: [float(v) for v in vs] for k, vs in history.history.items()}, f)
print(f"worker {me} done", flush=True)
