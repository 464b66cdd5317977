"""Keras's own tests pass with tfdistributed imported first, wherever they pass without it.

``keras-3.15.1/`` holds Keras 3.15.1's root conftest.py and its tests of TensorFlow
distribution, trainers, data adapters and models, unchanged (README.md). They run as Keras's CI
runs them on the TensorFlow backend: pytest in a process of its own, from a copy of the folder,
``KERAS_BACKEND=tensorflow``, Keras's conftest.py and no option of this suite's. First with
``import tfdistributed`` before pytest starts (as a user's program that imports it before its
Keras code: the repairs and the routing of ``model.fit`` are then in place for every test),
then the tests that did not pass, without it (peers.py says why only those).
"""

from __future__ import annotations

import json
import sys

import pytest

import conformance
import peers

KERAS_TESTS = peers.HERE / "keras-3.15.1"
# jax and torch, which these tests import, on their path only (constraints/peer-tests.txt).
PEER_DEPS = peers.ROOT / ".setup" / "peer-tests"
# A hang guard: the whole folder takes ~8 min of one process here (trainer_test.py's
# steps_per_execution tests, under XLA, most of it).
TIMEOUT = 2700


def _keras_tests(workdir, outcomes, *, tfdistributed_first: bool, tests=("keras",)) -> dict:
    assert PEER_DEPS.is_dir(), (f"{PEER_DEPS} is missing: `TESTS=1 bash scripts/setup.sh` "
                                "(make test's set-up) installs what Keras's tests import there")
    code = "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))"
    if tfdistributed_first:
        code = "import tfdistributed; " + code
    done = peers.run([sys.executable, "-c", code, "-q", "-p", "no:cacheprovider",
                      "-p", "peer_outcomes", *tests],
                     cwd=workdir, timeout=TIMEOUT,
                     env=peers.user_env(KERAS_BACKEND="tensorflow",
                                        PYTHONPATH=f"{PEER_DEPS}:{peers.HERE}",
                                        PEER_OUTCOMES=str(outcomes)))
    assert outcomes.exists(), f"Keras's tests did not run:\n{done.stdout[-6000:]}"
    return json.loads(outcomes.read_text())


@pytest.mark.slow
def test_every_keras_test_that_passes_without_tfdistributed_passes_with_it(tmp_path):
    workdir = peers.copy_of(KERAS_TESTS)
    with_us = _keras_tests(workdir, tmp_path / "with.json", tfdistributed_first=True)
    files = {t.split("::")[0] for t in with_us}
    assert len(files) == len(list(KERAS_TESTS.rglob("*_test.py"))), sorted(files)
    assert sum(o == "passed" for o in with_us.values()) > 300, with_us
    failed = peers.not_passed(with_us)
    plain = _keras_tests(workdir, tmp_path / "plain.json", tfdistributed_first=False,
                         tests=failed) if failed else {}
    broken, stale = peers.verdict("keras", with_us, plain)
    print(f"\nKeras {len(with_us)} tests with tfdistributed: "
          f"{sum(o == 'passed' for o in with_us.values())} passed, {len(failed)} failed "
          f"(without it: {sum(o == 'passed' for o in plain.values())} of those pass), "
          f"{sum(o == 'skipped' for o in with_us.values())} skipped")
    assert not broken, f"pass without tfdistributed, fail with it: {broken}"
    assert not stale, f"listed as changed on purpose, but they do not fail: {stale}"


def test_the_conformance_table_lists_what_changes_on_purpose():
    assert conformance.write_section(peers.SECTION, peers.render_section()), \
        "CONFORMANCE.md was out of date and has been regenerated: commit it"
