"""`R CMD build` + `R CMD check --no-manual` on the R package: no ERROR and no WARNING.

The check runs every help page's examples against the real backend (RETICULATE_PYTHON is the
project's Python, so `backend_available()` is TRUE and the guarded examples really run).

It leaves out what other tests already run, to stay within a few minutes on 2 cores:
- `--no-build-vignettes` / `--ignore-vignettes`: tests/r/test_vignettes.py renders every
  tutorial and checks its output;
- `--no-tests`: tests/r/test_testthat.py runs the testthat suite against the installed package;
- `--no-manual`: the PDF manual needs LaTeX, which set-up does not install.
NOTEs are allowed but printed; the check log is printed on failure.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from rsupport import ROOT, r_env

TIMEOUT = 300

def _run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("R") is None, reason="R is not installed")
def test_r_cmd_check_has_no_error_or_warning(r_package, tmp_path):
    env = r_env()
    # No network here: skip the checks that ask a time server or CRAN (they would wait on
    # time-outs and then NOTE "unable to verify current time").
    env.update(_R_CHECK_CRAN_INCOMING_REMOTE_="false", _R_CHECK_FUTURE_FILE_TIMESTAMPS_="false",
               _R_CHECK_SYSTEM_CLOCK_="false",
               # keras3 is suggested (the tutorials use it), and checked without: .rlib alone is
               # how users without keras3 have the package (its own `keras` object then).
               _R_CHECK_FORCE_SUGGESTS_="false")
    # The Rd cross-references to a package not installed (keras3) are looked up in a
    # repository's index: an empty one of our own, so that the check asks no server (it would
    # ask CRAN, which this machine must not reach). keras3's links are then NOTEd unchecked.
    repository = tmp_path / "no-repository"
    (repository / "src" / "contrib").mkdir(parents=True)
    (repository / "src" / "contrib" / "PACKAGES").write_text("")
    env["_R_CHECK_XREFS_REPOSITORIES_"] = repository.as_uri()
    t0 = time.monotonic()
    build = _run(["R", "CMD", "build", "--no-build-vignettes", "--no-manual",
                  str(ROOT / "rpkg")], tmp_path, env)
    assert build.returncode == 0, f"R CMD build failed:\n{build.stdout}\n{build.stderr}"
    tarball = next(tmp_path.glob("tfdistributed_*.tar.gz"))

    check = _run(["R", "CMD", "check", "--no-manual", "--ignore-vignettes", "--no-tests",
                  tarball.name], tmp_path, env)
    log_path = tmp_path / "tfdistributed.Rcheck" / "00check.log"
    log = log_path.read_text() if log_path.exists() else check.stdout
    status = re.search(r"^Status: .*$", log, re.M)
    print(f"\nR CMD check ({time.monotonic() - t0:.0f} s): {status.group(0) if status else '?'}")
    examples_out = tmp_path / "tfdistributed.Rcheck" / "tfdistributed-Ex.Rout"
    problems = re.findall(r"^\* checking .*\.\.\. (?:ERROR|WARNING)$", log, re.M)
    details = log + (f"\n--- examples output (tail) ---\n{examples_out.read_text()[-6000:]}"
                     if examples_out.exists() and problems else "")
    assert check.returncode == 0 and status, f"R CMD check failed:\n{details}\n{check.stderr[-3000:]}"
    assert not problems, f"R CMD check reported {problems}:\n{details}"
    assert "ERROR" not in status.group(0) and "WARNING" not in status.group(0), details
    notes = re.findall(r"^\* checking .*\.\.\. NOTE$", log, re.M)
    if notes:
        print("NOTEs:\n" + "\n".join(notes))
