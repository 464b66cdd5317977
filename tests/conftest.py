"""Shared by every test: this pytest process splits its CPU into 2 logical devices before
anything initializes TensorFlow, so in-process tests (and R code driven through rpy2, which
shares this interpreter) all see the same 2-replica machine."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

NUM_CPU_DEVICES = 2


def pytest_configure(config):
    import tfdistributed

    tfdistributed.configure_cpu_devices(NUM_CPU_DEVICES)


@pytest.fixture(scope="session")
def digits():
    import tfdistributed

    return tfdistributed.digits_arrays()


@pytest.fixture(scope="session")
def digits_tfds_dir(tmp_path_factory):
    """scikit-learn's digits written as a real TFDS dataset, one file per split."""
    import tfdistributed

    return tfdistributed.write_digits_tfds(tmp_path_factory.mktemp("tfds-one-file"), num_files=1)
