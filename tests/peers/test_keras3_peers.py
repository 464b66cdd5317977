"""keras3's own testthat tests pass with ``library(tfdistributed)`` loaded, wherever they pass
without it.

``keras3-1.2.0/testthat/`` is keras3 1.2.0's testthat folder, unchanged (README.md). It runs as
keras3's R CMD check runs it: testthat's ``test_dir(package = "keras3", load_package =
"installed")`` against the keras3 that set-up installed, in an Rscript of its own. First with
``library(tfdistributed)`` (the R package's `$` on Keras models and datasets, and the backend's
repairs, then serve every keras3 call), then the files holding a test that did not pass,
without it (peers.py says why only those).
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

import peers
from rsupport import ensure_r_package_installed, keras3_env

KERAS3_TESTS = peers.HERE / "keras3-1.2.0" / "testthat"
RUNNER = peers.HERE / "run_keras3_tests.R"
# A hang guard: the whole folder takes ~2 min here.
TIMEOUT = 1500


def _r_user_env() -> dict:
    """A user's environment (peers.user_env) with the R library that holds keras3 and
    tfdistributed, and the Python they use."""
    return peers.user_env(**{k: v for k, v in keras3_env().items()
                             if k in ("R_LIBS", "RETICULATE_PYTHON")})


def _keras3_tests(workdir, out, *, with_tfdistributed: bool, files=None) -> dict:
    args = ["Rscript", str(RUNNER), str(workdir), str(out),
            "with" if with_tfdistributed else "without"]
    if files:
        args.append("^(" + "|".join(re.escape(f) for f in files) + ")$")
    done = peers.run(args, cwd=workdir, timeout=TIMEOUT, env=_r_user_env())
    assert out.exists(), f"keras3's tests did not run:\n{done.stdout[-6000:]}"
    seen = Counter()
    outcomes = {}
    for test in json.loads(out.read_text()):
        key = (test["file"], test["test"])
        seen[key] += 1
        outcomes[f"{test['file']}: {test['test']} #{seen[key]}"] = test["outcome"]
    return outcomes


@pytest.mark.slow
@pytest.mark.r
def test_every_keras3_test_that_passes_without_tfdistributed_passes_with_it(tmp_path):
    ensure_r_package_installed()
    workdir = peers.copy_of(KERAS3_TESTS)
    with_us = _keras3_tests(workdir, tmp_path / "with.json", with_tfdistributed=True)
    assert sum(o == "passed" for o in with_us.values()) > 150, with_us
    failed = peers.not_passed(with_us)
    # testthat's filter names files without "test-" and ".R".
    files = sorted({re.sub(r"^test-|\.R$", "", t.split(": ")[0]) for t in failed})
    plain = _keras3_tests(workdir, tmp_path / "plain.json", with_tfdistributed=False,
                          files=files) if files else {}
    print(f"\nkeras3 {len(with_us)} tests with tfdistributed: "
          f"{sum(o == 'passed' for o in with_us.values())} passed, {len(failed)} failed "
          f"(without it, {sum(o == 'passed' for t, o in plain.items() if t in failed)} of "
          f"those pass), {sum(o == 'skipped' for o in with_us.values())} skipped")
    broken, stale = peers.verdict("keras3", with_us, plain, key=lambda t: t.rsplit(" #", 1)[0])
    assert not broken, f"pass without tfdistributed, fail with it: {broken}"
    assert not stale, f"listed as changed on purpose, but they do not fail: {stale}"


@pytest.mark.slow  # two fresh R and Python pairs
@pytest.mark.r
def test_keras3_calls_reach_keras_as_they_do_without_tfdistributed(tmp_path):
    # keras3_calls.R records what Keras' compile/fit/evaluate/predict receive (types, dtypes,
    # shapes and sums of every array) from keras3 calls that involve no strategy: with
    # library(tfdistributed) loaded, the R package's `$` on Keras models sees every one of them.
    ensure_r_package_installed()
    seen = {}
    for loaded in ("without", "with"):
        out = tmp_path / f"{loaded}.json"
        done = peers.run(["Rscript", str(peers.HERE / "keras3_calls.R"), str(out), loaded],
                         cwd=tmp_path, timeout=600, env=_r_user_env())
        assert out.exists(), done.stdout[-4000:]
        seen[loaded] = json.loads(out.read_text())
    assert [call[0] for call in seen["without"]].count("fit") == 6, seen["without"]
    assert [call[0] for call in seen["without"]].count("batch") == 9, seen["without"]
    assert seen["with"] == seen["without"]
