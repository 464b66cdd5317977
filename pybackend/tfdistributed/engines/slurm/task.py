"""One task of a job written by :func:`tfdistributed.engines.slurm.slurm_script` (run by ``srun``).

It reads SLURM's environment with :mod:`tfdistributed.cluster.from_slurm` only: a task never loads
the ``sbatch`` engine that submitted it.


``python -m tfdistributed.engines.slurm.task JOBDIR -- ARGV...``: sets TF_CONFIG from SLURM's
environment, then runs ARGV (``{task}`` in it becomes this task's number) and writes its exit
code to ``JOBDIR/task-N.rc`` (and the time it exited, seconds since the epoch, to
``JOBDIR/task-N.end``: which task ended first names the cause of a failure) for the submitting
process, which reads no other channel. In a
parameter-server job the ``worker`` and ``ps`` tasks instead serve TensorFlow until the chief
has written ``JOBDIR/chief.done``: servers never exit on their own, and the step ends only
when every task has.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from ...cluster.local import Cluster
from ...cluster.spec import tf_config
from ...cluster.from_slurm import slurm_cluster


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main(argv) -> int:
    jobdir, sep, *command = argv
    if sep != "--" or not command:
        raise SystemExit("usage: python -m tfdistributed.engines.slurm.task JOBDIR -- COMMAND...")
    rank = int(os.environ["SLURM_PROCID"])
    cluster, (role, index) = slurm_cluster()
    env = dict(os.environ, TF_CONFIG=json.dumps(tf_config(cluster, role, index)))
    if rank == 0:
        # The submitting process reports the cluster the tasks really ran as.
        _write(os.path.join(jobdir, "cluster.json"), json.dumps(cluster))
    # In a parameter-server cluster the workers and ps tasks serve; the chief runs the program.
    server = Cluster.of(cluster).parameter_server and role != "chief"
    if server:
        command = [sys.executable, "-m", "tfdistributed", "server"]
    command = [part.replace("{task}", str(rank)) for part in command]
    proc = subprocess.Popen(command, env=env)
    # scancel and --kill-on-bad-exit signal this process; the program must hear it too.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: proc.send_signal(signum))
    done = os.path.join(jobdir, "chief.done")
    while True:
        try:
            proc.wait(timeout=0.2)  # returns as the process exits: its end time below is exact
            break
        except subprocess.TimeoutExpired:
            pass
        if server and os.path.exists(done):
            proc.terminate()
            proc.wait()
            _write(os.path.join(jobdir, f"task-{rank}.rc"), "0")
            return 0
    code = proc.returncode
    _write(os.path.join(jobdir, f"task-{rank}.end"), repr(time.time()))
    _write(os.path.join(jobdir, f"task-{rank}.rc"), str(code))
    if role == "chief":
        _write(done, str(code))
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
