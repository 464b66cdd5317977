"""Chief of a parameter-server job that loses its ps task (run by tfdistributed.launch).

usage: ps_lose_ps.py OUTDIR BACKUP
On the first attempt, as epoch 3 begins (the backup of epoch 2 written), the chief SIGKILLs the
job's ps task: the variables are gone, the coordinator's next step fails, and the job needs a
restart from the backup. Writes OUTDIR/result-<attempt>.json on the attempt that finishes.
"""

import json
import os
import signal
import sys
import time

import psutil

import tfdistributed as tfd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from enginesupport import task_pid  # noqa: E402  (tests/python/support/enginesupport.py)
from models import digits_model  # noqa: E402  (tests/python/support/models.py)

outdir, backup = sys.argv[1], sys.argv[2]
attempt = os.environ["TFDISTRIBUTED_ATTEMPT"]


def kill_the_ps():
    """The ps server of this job: the process listening on ps 0's port."""
    proc = psutil.Process(task_pid("ps", 0))
    print(f"killing ps 0 (pid {proc.pid}) as epoch 3 begins", flush=True)
    proc.send_signal(signal.SIGKILL)
    psutil.wait_procs([proc], timeout=30)


def main():
    import keras

    strategy = tfd.make_strategy("auto")
    model = digits_model(strategy, seed=1, learning_rate=0.01)
    (x, y), (xt, yt) = tfd.digits_arrays()

    def on_epoch_begin(epoch, logs=None):
        if attempt == "0" and epoch == 2:
            time.sleep(0.5)
            kill_the_ps()

    history = tfd.fit(model, x, y, epochs=4, batch_size=64, backup_dir=backup, verbose=2,
                      callbacks=[keras.callbacks.LambdaCallback(on_epoch_begin=on_epoch_begin)])
    result = {"epochs": history.epoch, "loss": history.history["loss"],
              "evaluate": tfd.evaluate(model, xt, yt, batch_size=64)}
    with open(os.path.join(outdir, f"result-{attempt}.json"), "w") as f:
        json.dump(result, f)


main()
