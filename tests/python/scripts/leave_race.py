"""One worker of a 2-worker job whose worker 1 is slow to make its last read from worker 0
(run by tfdistributed.launch; tests/python/engines/test_leave_together.py).

usage: leave_race.py SLOW_READ_SECONDS [PATH ...]
Both workers train a few steps through each PATH in turn: "tfd" (tfd.fit()), "keras" (Keras'
own model.fit; keras3's R fit() calls it too), default both. At the end of each training
(Keras' on_train_end, inside the fit), worker 0, the job's leader, which serves its coordination
service, publishes a value there and is done; worker 1 waits SLOW_READ_SECONDS, then reads it
from worker 0. After the fits both wait at one more barrier and print "barrier <seconds>":
what a barrier costs when every worker is at it.
"""

import sys
import time

import tfdistributed as tfd

slow = float(sys.argv[1])
paths = sys.argv[2:] or ["tfd", "keras"]
strategy = tfd.make_strategy("multi_worker_mirrored")
import keras  # noqa: E402
import numpy as np  # noqa: E402
from tensorflow.python.eager import context  # noqa: E402

from tfdistributed.cluster.leave import leave_together  # noqa: E402

index = tfd.strategy_info(strategy)["task_index"]


class LastRead(keras.callbacks.Callback):
    def __init__(self, key):
        super().__init__()
        self.key = key

    def on_train_end(self, logs=None):
        if index == 0:
            context.context().set_config_key_value(self.key, "trained")
            return
        time.sleep(slow)
        value = context.context().get_config_key_value(self.key, 30_000)
        print(f"worker 1 read {self.key} {value}", flush=True)


with strategy.scope():
    model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
for path in paths:
    callbacks = [LastRead(f"leave_race_{path}")]
    if path == "tfd":
        tfd.fit(model, x, x[:, :1], epochs=1, batch_size=16, verbose=0, callbacks=callbacks)
    else:
        model.fit(x, x[:, :1], epochs=1, batch_size=16, verbose=0, callbacks=callbacks)
waited = leave_together("the check", "the check")  # None: TFDISTRIBUTED_LEAVE_TIMEOUT=0
if waited is not None:
    print(f"barrier {waited:.4f}", flush=True)
