"""The R package's testthat suite, run in a fresh Rscript (its own TensorFlow with 2 logical
CPUs), so `make test` covers it. The summary line gives the counts."""

import json
import subprocess
import time

import pytest

from rsupport import ROOT, r_env

# A guard against a hang, not a speed check: alone the suite takes ~4.5 min here, and a CI run on
# a loaded machine once needed more than 10.
TIMEOUT = 1500


@pytest.mark.slow
def test_testthat_suite_passes(r_package):
    t0 = time.monotonic()
    proc = subprocess.run(["Rscript", "tests/r/run_testthat.R", "rpkg/tests/testthat"], cwd=ROOT,
                          env=r_env(), capture_output=True, text=True, timeout=TIMEOUT)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("TESTTHAT_SUMMARY ")]
    assert proc.returncode == 0 and lines, f"testthat did not finish:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    summary = json.loads(lines[-1].split(" ", 1)[1])
    print(f"\ntestthat: {summary['tests']} tests, {summary['expectations']} expectations, "
          f"{summary['failed']} failed, {summary['errors']} errors, {summary['skipped']} skipped "
          f"({time.monotonic() - t0:.0f} s; by file: {summary.get('by_file')})")
    assert summary["failed"] == 0 and summary["errors"] == 0, (
        f"failing: {summary['failing']}\n{proc.stdout[-6000:]}")
    assert summary["skipped"] == 0, f"testthat skipped tests (backend missing?)\n{proc.stdout[-3000:]}"
    assert summary["expectations"] > 100
