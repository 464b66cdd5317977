"""Run a command with its full output kept in a log, and TensorFlow's start-up noise hidden.

    quiet.py LOG -- COMMAND [ARGS...]

TensorFlow's C++ layer prints INFO lines (oneDNN, "Could not find cuda drivers") and, on every
machine without a GPU, "failed call to cuInit: ... CUDA error" before its logging is configured,
so TF_CPP_MIN_LOG_LEVEL cannot silence them. `make demo` and `make test` run through this
script: every line goes to LOG, and the terminal gets the rest (the same filter the launcher
applies to its tasks). Its last line is the command's wall time (for `make test`, the suite's:
its budget is 30 minutes on a 2-core machine). The command's exit status is returned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tfdistributed.engines.output import NOISE


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    log_path, command = argv[0], argv[2:]
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # Ctrl-C reaches the command (same process group); this process only waits for its end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    hidden = 0
    started = time.monotonic()
    with open(log_path, "wb") as log, subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as proc:
        for raw in iter(proc.stdout.readline, b""):
            log.write(raw)
            log.flush()
            if NOISE.match(raw.decode(errors="replace")):
                hidden += 1
                continue
            sys.stdout.buffer.write(raw)
            sys.stdout.flush()
    if hidden:
        print(f"({hidden} lines of TensorFlow start-up messages are in {log_path})")
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    print(f"(wall time {minutes} min {seconds} s; the whole output is in {log_path})")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
