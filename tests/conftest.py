"""Shared by every test: this pytest process splits its CPU into 2 logical devices before
anything initializes TensorFlow, so in-process tests (and R code driven through rpy2, which
shares this interpreter) all see the same 2-replica machine.

It also holds the engines shared by the Python and the rpy2-driven tests, one of each per
session: ``slurm_cluster``, a real single-node SLURM cluster (munged, slurmctld, slurmd from
Debian's packages, everything in a temporary directory, non-default ports), and
``ray_cluster``, a local Ray with 2 CPUs in this process. Neither installs anything
(scripts/setup.sh does); when one cannot start, every test that needs it FAILS with the reason:
a machine where the engines do not work must not look green.

Local jobs start warm (``TFDISTRIBUTED_WARM_START=1``, :mod:`tfdistributed.engines.warm`): their
Python tasks are forked from a process that imported TensorFlow once per pytest worker (and once
per R session a test starts), instead of each of the suite's few hundred tasks importing it
(~3 s of CPU each). The launcher's own tests (``tests/python/engines/test_launch.py``) run their
jobs cold, as a user's start by default, and so does one killed-worker test of self-healing
(tests/python/engines/conftest.py); ``tests/python/engines/test_warm.py`` checks that a warm
task is what a cold one would be."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TFDISTRIBUTED_WARM_START", "1")

import pytest  # noqa: E402

NUM_CPU_DEVICES = 2

# The documentation site, rendered once per session for the vignette and browser tests; each
# test's CPU seconds (--cpu-log, which make test passes).
pytest_plugins = ["sitefixtures", "cpuaccount"]


# The test files that cost the most in `make test` (3 pytest-xdist workers on 2 cores, measured
# 2026-11-29), the costliest first. `make test` runs --dist loadscope --no-loadscope-reorder:
# xdist hands out whole files in the order collected, so these start at once and the short files
# fill the end (longest first: the run does not end on one long file while a core idles), and
# the site's browser tier (tests/docs) and the R source package, which wait for the render
# test_vignettes starts, come last, when the render is done.
COSTLIEST_FIRST = [
    "tests/r/test_vignettes.py",                       # renders every article (~630 s)
    "tests/python/training/test_conformance.py",       # ~630 s
    "tests/peers/test_keras_peers.py",                 # Keras's own tests (~370 s)
    "tests/python/training/test_placement.py",
    "tests/r/test_r_keras3.py",
    "tests/python/training/test_multiworker.py",
    "tests/python/package/test_packaging.py",
    "tests/peers/test_keras3_peers.py",
    "tests/r/test_testthat.py",
    "tests/python/engines/test_self_healing.py",
    "tests/python/engines/test_warm_r.py",
    "tests/python/testbeds/test_hosts.py",
    "tests/python/watch/test_watch.py",
    "tests/python/engines/test_slurm.py",
    "tests/python/data/test_auto_shard.py",
    "tests/python/training/test_keras_surface.py",
    "tests/python/testbeds/test_slurm_hosts.py",
    "tests/python/training/test_training.py",
    "tests/r/test_r_values.py",
    "tests/python/engines/test_elastic_ray.py",
    "tests/python/engines/test_elastic_slurm.py",
    "tests/python/engines/test_elastic.py",
    "tests/python/cluster/test_join.py",
    "tests/python/engines/test_ray.py",
    "tests/r/test_engines.py",
    "tests/r/test_r_generators.py",
]


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(COSTLIEST_FIRST)}

    def order(item):
        path = item.nodeid.split("::")[0]
        if path.startswith("tests/docs/") or path == "tests/r/test_r_source_package.py":
            return (2, 0)   # they wait for the render test_vignettes starts
        return (0, rank[path]) if path in rank else (1, 0)

    items.sort(key=order)  # stable: each file keeps its own order


def pytest_configure(config):
    import tfdistributed

    tfdistributed.configure_cpu_devices(NUM_CPU_DEVICES)
    if not hasattr(config, "workerinput"):  # the controller, before it starts the workers
        _start_port_server(config)


def _start_port_server(config) -> None:
    """One portpicker port server for the session (the pytest workers and every process they
    start inherit ``PORTSERVER_ADDRESS``; portpicker, which picks every local job's ports, asks
    it). Without it each process picked a port the kernel had just handed out (its ephemeral
    range, 32768-60999 here), so a job's port could be taken by another job's pick or by any
    outgoing connection in the seconds before its task bound it: seen as "Could not start gRPC
    server" (4 workers, 2026-11-26). The server hands each port to one live process at a time
    from 15000-24999, below that range."""
    import tempfile

    import portserver

    if "PORTSERVER_ADDRESS" in os.environ:
        return  # the caller runs one
    # A file, not an abstract name: the host bed's network namespaces reach it too.
    address = os.path.join(tempfile.mkdtemp(prefix="tfdistributed-ports-"), "socket")
    try:
        proc = portserver.start(address)
    except RuntimeError as e:
        raise pytest.UsageError(str(e)) from None
    os.environ["PORTSERVER_ADDRESS"] = address
    config.port_server = proc


def pytest_unconfigure(config):
    proc = getattr(config, "port_server", None)
    if proc is not None:
        import shutil

        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(os.path.dirname(os.environ.pop("PORTSERVER_ADDRESS")), ignore_errors=True)


@pytest.fixture(scope="session")
def digits():
    import tfdistributed

    return tfdistributed.digits_arrays()


@pytest.fixture(scope="session")
def digits_tfds_dir(tmp_path_factory):
    """The demo digits written as a real TFDS dataset, one file per split."""
    import tfdistributed

    return tfdistributed.write_digits_tfds(tmp_path_factory.mktemp("tfds-one-file"), num_files=1)


@pytest.fixture(scope="session")
def slurm_cluster():
    from tfdistributed.testbeds.slurm import LocalSlurm

    slurm = LocalSlurm(cpus=2)
    try:
        slurm.start()
    except Exception as e:  # noqa: BLE001  (any reason must reach the report)
        pytest.fail(f"The local SLURM cluster did not start, so the SLURM backend cannot be tested "
                    f"here: {e}. Run scripts/setup.sh (as root) to install slurmd, slurmctld, "
                    f"slurm-client and munge.", pytrace=False)
    yield slurm
    slurm.stop()


# Per test file, not per session: an idle local Ray (its GCS, raylet and agents) burns ~3.5
# CPU-seconds a minute, ~6% of a core, for as long as the pytest worker that started it lives;
# a start costs ~5 CPU-seconds.
@pytest.fixture(scope="module")
def ray_cluster():
    try:
        import ray

        from tfdistributed.engines.ray.launcher import start_local_ray

        start_local_ray(num_cpus=2)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"A local Ray cluster did not start, so the Ray backend cannot be tested here: "
                    f"{type(e).__name__}: {e}. Run scripts/setup.sh to install the ray extra.",
                    pytrace=False)
    yield ray
    ray.shutdown()
