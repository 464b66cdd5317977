"""A pytest plugin for the runs of Keras's own tests (``-p peer_outcomes``): each test's outcome
by node id, written as JSON to the file ``PEER_OUTCOMES`` names when the session ends.

An outcome is ``passed``, ``failed`` (any phase failed: set-up, the test, teardown, or its
module did not import) or ``skipped`` (xfail counts as skipped, xpass as passed).
"""

import json
import os

_outcomes: dict[str, str] = {}


def pytest_runtest_logreport(report):
    if report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.skipped and _outcomes.get(report.nodeid) != "failed":
        _outcomes[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed:
        _outcomes.setdefault(report.nodeid, "passed")


def pytest_collectreport(report):
    if report.failed:  # a test module that does not import
        _outcomes[report.nodeid] = "failed"


def pytest_sessionfinish(session):
    with open(os.environ["PEER_OUTCOMES"], "w") as f:
        json.dump(_outcomes, f, indent=0, sort_keys=True)
