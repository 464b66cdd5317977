"""What the peers' tests share: a process of their own with a user's environment, bounded in
time, and the one comparison that matters.

Each peer suite runs once with tfdistributed loaded; the tests that did not pass there run again
without it. A test that passes there is one tfdistributed broke. Running only those a second
time gives the verdict of two whole runs (a test that passes with tfdistributed needs no plain
run to clear us) at about half the cost.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def user_env(**extra) -> dict:
    """The environment of a user's process: none of this suite's own settings (warm task starts,
    the port server, pytest-xdist's worker), no LD_LIBRARY_PATH of R's (rpy2 puts Debian's
    libraries first in a pytest worker that ran R, where a fresh Python loads the wrong
    libpython), and TensorFlow's C++ start-up chatter off."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TFDISTRIBUTED_", "PYTEST_", "PORTSERVER"))
           and k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "TF_CONFIG")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra)
    return env


def copy_of(folder: Path) -> Path:
    """A fresh copy of a peer's test folder in a temporary directory: the tests write files
    beside themselves, and Keras's must run from a folder not named ``keras`` (or the copy
    would shadow the installed package)."""
    where = Path(tempfile.mkdtemp(prefix=f"peer-{folder.name}-"))
    shutil.copytree(folder, where / folder.name)
    return where / folder.name


def run(args, *, cwd, env, timeout) -> subprocess.CompletedProcess:
    """``args`` in a process group of their own, killed whole if they outlast ``timeout``."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{args[:3]} did not finish in {timeout} s:\n{out[-4000:]}") from None
    return subprocess.CompletedProcess(args, proc.returncode, out)


def broken_by_us(with_us: dict, plain: dict) -> list:
    """The tests that failed with tfdistributed loaded and pass without it."""
    return sorted(t for t, outcome in with_us.items()
                  if outcome == "failed" and plain.get(t) == "passed")


def not_passed(outcomes: dict) -> list:
    return sorted(t for t, outcome in outcomes.items() if outcome == "failed")
