"""One task of an elastic job on the host bed (run by tfdistributed.launch with min_workers).

usage: elastic_job.py OUTDIR --backup DIR [--epochs N] [--save-freq N] [--examples N]
                      [--batch N] [--lose-at STEP] [--lose WORKER] [--step-seconds S]
Writes OUTDIR/<task>-<index>.npz (weights) and .json (history, attempt, workers, steps), and
appends "<attempt> <workers> <step>" to OUTDIR/steps-<task>-<index> for every step it trains.
--lose-at K: on the first attempt, worker --lose takes its own host's link down and SIGKILLs
itself once it has trained K steps: a host gone for good, until the test brings the link back.
It does so only inside a network namespace of its own (a host of the bed), never on the machine.
--step-seconds: each step lasts at least this long (a real job's pace, so that a host that comes
back finds the job still training).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import tfdistributed as tfd

parser = argparse.ArgumentParser()
parser.add_argument("outdir")
parser.add_argument("--backup", required=True)
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--save-freq", type=int, default=6)
parser.add_argument("--examples", type=int, default=1728)
parser.add_argument("--batch", type=int, default=96)
parser.add_argument("--lose-at", type=int)
parser.add_argument("--lose", type=int, default=2)
parser.add_argument("--step-seconds", type=float, default=0.0)
ns = parser.parse_args()

strategy = tfd.make_strategy("auto")
import keras  # noqa: E402
import numpy as np  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from models import digits_model  # noqa: E402  (tests/python/support/models.py)

info = tfd.strategy_info(strategy)
name = f"{info['task_type']}-{info['task_index']}"
attempt = int(os.environ.get("TFDISTRIBUTED_ATTEMPT", "0"))
workers = tfd.num_workers()


def on_the_bed() -> bool:
    """True on a host of the bed: its eth0 carries this task's own address, in the bed's subnet
    (tfdistributed.testbeds.hostbed.SUBNET), so the link taken down is the bed's."""
    from tfdistributed.testbeds.hostbed import SUBNET

    own = json.loads(os.environ["TF_CONFIG"])
    host = own["cluster"][own["task"]["type"]][own["task"]["index"]].rpartition(":")[0]
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", "eth0"], capture_output=True,
                           text=True, timeout=20).stdout
    return host.startswith(SUBNET + ".") and f" {host}/" in shown


def lose_this_host(step: int) -> None:
    if not on_the_bed():
        raise SystemExit("refusing to take a link down anywhere but on a host of the bed")
    print(f"taking this host's link down and killing myself after step {step}", flush=True)
    subprocess.run(["ip", "link", "set", "eth0", "down"], check=True, timeout=20)
    os.kill(os.getpid(), signal.SIGKILL)


class Steps(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.last = int(self.model.optimizer.iterations.numpy())
        self.began = time.monotonic()

    def on_train_batch_begin(self, batch, logs=None):
        self.began = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step == self.last:
            return
        self.last = step
        time.sleep(max(0.0, ns.step_seconds - (time.monotonic() - self.began)))
        with open(os.path.join(ns.outdir, f"steps-{name}"), "a") as f:
            f.write(f"{attempt} {workers} {step}\n")
        if attempt == 0 and step == ns.lose_at and name == f"worker-{ns.lose}":
            lose_this_host(step)


model = digits_model(strategy, seed=1, learning_rate=0.01)
(x, y), _ = tfd.digits_arrays()
history = tfd.fit(model, x[:ns.examples], y[:ns.examples], epochs=ns.epochs, batch_size=ns.batch,
                  shuffle=False, verbose=2, backup_dir=ns.backup, save_freq=ns.save_freq,
                  callbacks=[Steps()])
np.savez(os.path.join(ns.outdir, name + ".npz"), *model.get_weights())
with open(os.path.join(ns.outdir, name + ".json"), "w") as f:
    json.dump({"history": history.history, "attempt": attempt, "workers": workers,
               "steps": int(model.optimizer.iterations.numpy())}, f)
print(f"done on attempt {attempt} with {workers} workers", flush=True)
