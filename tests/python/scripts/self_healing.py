"""One task of a job that is interrupted and restarted (run by tfdistributed.launch).

usage: self_healing.py OUTDIR [--epochs N] [--save-freq N] [--backup DIR] [--stop-at STEP]
                       [--signal KILL|TERM|RAISE] [--examples N] [--every-attempt]
                       [--powersgd RANK,WARMUP] [--strategy NAME] [--slow-decision SECONDS]
Writes OUTDIR/<task>-<index>.npz (weights) and .json (history, epochs, steps), and appends
"<attempt> <step>" to OUTDIR/<task>-<index>.steps for every step it trains.
--stop-at K: on the first attempt, worker 1 sends itself SIG<signal> once it has trained K
steps (a machine lost, or a preemption notice, at a step the test chose); RAISE raises a
RuntimeError there instead (a bug). K0,K1,...: on attempt a, at step K_a (-1: none).
--every-attempt: at step K on every attempt (a bug, or an OOM kill, that comes back).
--powersgd RANK,WARMUP: gradient_compression=powersgd(rank=RANK, warmup_steps=WARMUP).
--strategy: make_strategy's name (default "auto").
--slow-decision S: worker 0 takes S seconds more to decide to stop once told it is preempted, and
writes when it has to OUTDIR/worker-0.decided; every task appends when its process exits to
OUTDIR/<task>-<index>.left.
"""

import argparse
import atexit
import json
import os
import signal
import sys
import time

import tfdistributed as tfd

parser = argparse.ArgumentParser()
parser.add_argument("outdir")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--save-freq", default="epoch")
parser.add_argument("--backup")
parser.add_argument("--stop-at", type=lambda v: [int(k) for k in v.split(",")])
parser.add_argument("--every-attempt", action="store_true")
parser.add_argument("--signal", default="KILL")
parser.add_argument("--examples", type=int)
parser.add_argument("--powersgd")
parser.add_argument("--strategy", default="auto")
parser.add_argument("--slow-decision", type=float)
ns = parser.parse_args()

compression = None
if ns.powersgd:
    rank, warmup = map(int, ns.powersgd.split(","))
    compression = tfd.powersgd(rank=rank, warmup_steps=warmup)
strategy = tfd.make_strategy(ns.strategy, gradient_compression=compression)
import keras  # noqa: E402
import numpy as np  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from models import digits_model  # noqa: E402  (tests/python/support/models.py)

info = tfd.strategy_info(strategy)
name = f"{info['task_type']}-{info['task_index']}"
attempt = os.environ.get("TFDISTRIBUTED_ATTEMPT", "0")

if ns.slow_decision:
    from tfdistributed.training import checkpoints

    decide = checkpoints._preempted

    def slow_decision(callback):
        said = decide(callback)
        if said and name == "worker-0":
            time.sleep(ns.slow_decision)
            with open(os.path.join(ns.outdir, name + ".decided"), "w") as f:
                f.write(f"{time.time()}\n")
        return said

    def leaving():
        with open(os.path.join(ns.outdir, name + ".left"), "a") as f:
            f.write(f"{time.time()}\n")

    checkpoints._preempted = slow_decision
    atexit.register(leaving)


class Steps(keras.callbacks.Callback):
    """Logs each step trained (a step skipped on resuming trains nothing) and stops on cue."""

    def __init__(self):
        super().__init__()
        self.last = None

    def on_train_begin(self, logs=None):
        self.last = int(self.model.optimizer.iterations.numpy())  # restored from a backup

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step == self.last:
            return
        self.last = step
        with open(os.path.join(ns.outdir, name + ".steps"), "a") as f:
            f.write(f"{attempt} {step}\n")
        if step == stop_at() and name == "worker-1":
            if ns.signal == "RAISE":
                raise RuntimeError(f"a bug at step {step}")
            print(f"sending myself SIG{ns.signal} after step {step}", flush=True)
            os.kill(os.getpid(), getattr(signal, "SIG" + ns.signal))


def stop_at():
    """The step at which worker 1 stops on this attempt (None: it does not)."""
    if not ns.stop_at:
        return None
    if ns.every_attempt:
        return ns.stop_at[0]
    return ns.stop_at[int(attempt)] if int(attempt) < len(ns.stop_at) else None


model = digits_model(strategy, seed=1, learning_rate=0.01)
(x, y), _ = tfd.digits_arrays()
x, y = x[:ns.examples], y[:ns.examples]
save_freq = ns.save_freq if ns.save_freq == "epoch" else int(ns.save_freq)
history = tfd.fit(model, x, y, epochs=ns.epochs, batch_size=64, shuffle=False, verbose=2,
                  backup_dir=ns.backup, save_freq=save_freq, callbacks=[Steps()])
np.savez(os.path.join(ns.outdir, name + ".npz"), *model.get_weights())
with open(os.path.join(ns.outdir, name + ".json"), "w") as f:
    json.dump({"history": history.history, "epochs": history.epoch, "attempt": attempt,
               "steps": int(model.optimizer.iterations.numpy())}, f)
print(f"done on attempt {attempt}", flush=True)
