"""Fixtures for the rpy2-driven tests: R runs inside this very pytest process (rpy2), and its
reticulate attaches to this interpreter, so R and Python objects and TF_CONFIG are shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsupport import ROOT, ensure_r_package_installed  # noqa: E402


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.r)


@pytest.fixture(scope="session")
def r_package():
    ensure_r_package_installed()
    return ROOT


@pytest.fixture(scope="session")
def r(r_package):
    """The embedded R session with tfdistributed attached (one per pytest process)."""
    import rpy2.robjects as robjects

    robjects.r("suppressPackageStartupMessages(library(tfdistributed))")
    robjects.r("options(tfdistributed.verbose = 0L)")
    return robjects.r


@pytest.fixture
def clean_tf_config():
    import tfdistributed

    tfdistributed.clear_tf_config()
    yield
    tfdistributed.clear_tf_config()
