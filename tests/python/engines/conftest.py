"""Which of the engines' local jobs start cold (each task a fresh interpreter, as a user's job
starts by default) and which warm, as the rest of the suite's (tests/conftest.py).

- ``test_launch.py``, the launcher's own tests, start cold even when the shell running pytest
  sets TFDISTRIBUTED_WARM_START=1: the default path, every way a task starts, ends and fails.
- The other modules start their local jobs warm: ``test_self_healing.py`` starts some 40 tasks,
  and cold each imports TensorFlow (~3 s of CPU; the module took 187 s of CPU cold, 47 s warm,
  measured alone). Its killed-worker test runs cold too (``cold_start``), so that kills,
  restarts and resuming from a backup are checked on the default path; ``test_warm.py``
  compares warm and cold jobs number for number.
- Tasks on hosts (``Local(hosts=)``), SLURM and Ray start cold whatever the setting.
"""

import pytest

COLD_MODULES = ("test_launch",)


@pytest.fixture(scope="module", autouse=True)
def cold_modules(request):
    # Module scope, so that a module's shared jobs (module fixtures) start as its tests do.
    if request.module.__name__ not in COLD_MODULES:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TFDISTRIBUTED_WARM_START", raising=False)
        yield


@pytest.fixture
def cold_start(monkeypatch):
    """This test's jobs start cold."""
    monkeypatch.delenv("TFDISTRIBUTED_WARM_START", raising=False)
