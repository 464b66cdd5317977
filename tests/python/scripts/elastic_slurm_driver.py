"""Runs an elastic SLURM job from where slurmctld is (the first host of the bed) and prints its
result as JSON on the last line: launch(Scaling(workers=3, min_workers=2), engine=Slurm()).

usage: elastic_slurm_driver.py OUTDIR BACKUP LOSE_AT LINK_UP_FLAG -- SCRIPT_ARGS...
The job's worker 2 takes its node's link down at step LOSE_AT (elastic_job.py); once the job
trains on 2 workers, the driver touches LINK_UP_FLAG and waits for the test to bring the link
back (the driver runs inside the bed and cannot).
"""

import json
import os
import sys
import threading

import tfdistributed as tfd

outdir, backup, lose_at, flag = sys.argv[1:5]
rest = sys.argv[sys.argv.index("--") + 1:]
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_job.py")
gone = threading.Event()
lines = []


def on_output(line):
    lines.append(line)
    print(line, flush=True)
    if "is gone" in line:
        gone.set()
    if gone.is_set() and line.startswith("[tfdistributed] epoch") and not os.path.exists(flag):
        open(flag, "w").close()


result = tfd.launch(script, tfd.Scaling(workers=3, min_workers=2), engine=tfd.engines.Slurm(),
                    restarts=tfd.Restarts(join_timeout=20), timeout=600,
                    args=[outdir, "--backup", backup, "--lose-at", lose_at, *rest],
                    watch=tfd.Watch(on_output=on_output, echo=False))
print(json.dumps({"sizes": result.sizes, "restarts": result.restarts,
                  "history": result.history, "lines": lines[-60:],
                  # the job's own announcements, whole: a worker's traceback may fill the last 60
                  "said": [line for line in lines if line.startswith("[tfdistributed]")]}))
