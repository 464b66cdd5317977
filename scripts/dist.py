"""The release files, what `make dist` runs: the Python wheel and sdist, and the R source package
that carries the wheel and has its vignettes built inside.

    python scripts/dist.py [DIST_DIR]           # default: dist/

1. :func:`python_artifacts`: `python -m build` (an isolated build, as a release's; the wheel is
   built from the sdist) into ``DIST_DIR``;
2. the R source package (scripts/dist_r.py: the tutorials knitted once, their pages built
   without running code again), with the wheel in its inst/python/, so that an R user's
   ``install_tfdistributed()`` installs this very backend with no package index and no checkout.

A user installs them with no root: ``install.packages("tfdistributed_<v>.tar.gz", repos =
NULL)`` then ``tfdistributed::install_tfdistributed()`` in R; ``pip install
tfdistributed-<v>-py3-none-any.whl`` (``[tensorflow]`` where the environment has no
TensorFlow) in Python. tests/python/package/test_packaging.py installs them both ways.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import dist_r  # noqa: E402
import docsite  # noqa: E402

BUILD_TIMEOUT = 900


def python_artifacts(dest: Path) -> tuple[Path, Path]:
    """The sdist and the wheel of the project, built into ``dest``: ``(wheel, sdist)``. Files of
    an earlier build of the same version are replaced."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in [*dest.glob("tfdistributed-*.whl"), *dest.glob("tfdistributed-*.tar.gz")]:
        old.unlink()
    run = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dest), str(ROOT)],
                         capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if run.returncode != 0:
        raise dist_r.DistError(f"python -m build failed (exit status {run.returncode}):\n"
                               f"{(run.stdout + run.stderr)[-6000:]}")
    return next(dest.glob("tfdistributed-*.whl")), next(dest.glob("tfdistributed-*.tar.gz"))


def main(argv: list[str]) -> int:
    dest = (Path(argv[0]) if argv else ROOT / "dist").resolve()
    try:
        wheel, sdist = python_artifacts(dest)
        print(f"Python wheel: {wheel}\nPython sdist: {sdist}", flush=True)
        tarball = dist_r.build(dest, wheel=wheel)
    except (dist_r.DistError, docsite.SiteError, subprocess.TimeoutExpired) as e:
        print(e, file=sys.stderr)
        return 1
    print(f"R source package (carrying the wheel): {tarball}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
