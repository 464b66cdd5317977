"""Shared by the rpy2-driven tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# rpy2 starts R on import and R reads these once; the Makefile exports the same values.
os.environ.setdefault("R_LIBS", str(ROOT / ".rlib"))
os.environ.setdefault("RETICULATE_PYTHON", sys.executable)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def r_env() -> dict:
    """Environment for R subprocesses (Rscript, or a fresh Python that embeds R)."""
    env = dict(os.environ)
    env.update(R_LIBS=str(ROOT / ".rlib"), RETICULATE_PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return env


def keras3_env() -> dict:
    """:func:`r_env` with keras3's library (.rlib-keras3, made by scripts/setup.sh) before
    .rlib: R programs written with keras3, as R users run them. The rest of the suite runs
    without it, as users without keras3 do (tfdistributed's own `keras` is then ours)."""
    env = r_env()
    env["R_LIBS"] = f"{ROOT / '.rlib-keras3'}:{env['R_LIBS']}"
    return env


def ensure_r_package_installed() -> None:
    """Reinstall rpkg into .rlib when its files changed (scripts/setup.sh keeps the same stamp),
    so `pytest tests/r` never tests a stale installed copy."""
    import fcntl

    stamp = ROOT / ".setup" / "rpkg.hash"
    stamp.parent.mkdir(exist_ok=True)
    # pytest-xdist's workers may get here at once: one installs, the others wait and see it done.
    with open(ROOT / ".setup" / "rpkg.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = subprocess.run(
            "find rpkg -type f -not -path '*/tests/*' -print0 | sort -z | xargs -0 sha256sum "
            "| sha256sum | cut -d' ' -f1", shell=True, cwd=ROOT, capture_output=True, text=True,
            check=True).stdout.strip()
        if stamp.exists() and stamp.read_text().strip() == current:
            return
        subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, check=True,
                       env={**os.environ, "R_LIBS": str(ROOT / ".rlib")})
