"""The one import hook (tfdistributed.versions.after_import): what runs once TensorFlow or
Keras is imported, for the Keras repairs (training/compat.py) and the live TF_CONFIG and join
watch (cluster/join.py) alike. Two copies of it had drifted apart: one put itself back when
finding the package failed, the other did not.

The mechanism is tested on small packages written for each test; the real hooks in fresh
interpreters, with TensorFlow and Keras imported before and after tfdistributed.
"""

import json
import os
import subprocess
import sys

import pytest

from tfdistributed import versions


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A function that writes a top-level package ``name`` (its code ``code``) that can be
    imported in this process, forgotten again after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(name, code="ready = True\n"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(code)
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)
        versions._HOOK.waiting.pop(name, None)
    if not versions._HOOK.waiting and versions._HOOK in sys.meta_path:
        sys.meta_path.remove(versions._HOOK)


def test_runs_once_right_after_the_import_in_order_and_then_leaves(package):
    name = package("hooked_a", "import sys\nsys.seen.append('code')\nready = True\n")
    sys.seen = []
    first = lambda: sys.seen.append("first")  # noqa: E731
    versions.after_import(name, first, ready="ready")
    versions.after_import(name, lambda: sys.seen.append("second"), ready="ready")
    versions.after_import(name, first, ready="ready")  # already waiting: not added again
    assert sys.seen == [] and versions._HOOK in sys.meta_path
    __import__(name)
    assert sys.seen == ["code", "first", "second"]
    __import__(name)
    assert sys.seen == ["code", "first", "second"]
    assert versions._HOOK not in sys.meta_path  # nothing waits any more


def test_runs_at_once_when_the_package_is_imported_already(package):
    name = package("hooked_b")
    __import__(name)
    seen = []
    versions.after_import(name, lambda: seen.append(1), ready="ready")
    assert seen == [1] and name not in versions._HOOK.waiting


def test_an_import_that_fails_leaves_the_function_waiting_for_the_next(package):
    name = package("hooked_d", "import os\nif os.environ.get('HOOKED_FAIL'):\n"
                               "    raise RuntimeError('broken')\nready = True\n")
    seen = []
    versions.after_import(name, lambda: seen.append(1), ready="ready")
    os.environ["HOOKED_FAIL"] = "1"
    try:
        with pytest.raises(RuntimeError, match="broken"):
            __import__(name)
    finally:
        del os.environ["HOOKED_FAIL"]
    assert seen == [] and versions._HOOK in sys.meta_path
    __import__(name)
    assert seen == [1]


def test_a_package_that_cannot_be_found_leaves_the_hook_in_place(package):
    seen = []
    versions.after_import("hooked_missing", lambda: seen.append(1), ready="ready")
    try:
        with pytest.raises(ModuleNotFoundError):
            __import__("hooked_missing")
        assert versions._HOOK in sys.meta_path
        name = package("hooked_missing")
        __import__(name)
        assert seen == [1]
    finally:
        versions._HOOK.waiting.pop("hooked_missing", None)


def test_other_imports_pass_by(package):
    name = package("hooked_e")
    versions.after_import(name, lambda: None, ready="ready")
    assert versions._HOOK.find_spec("json") is None
    __import__(name)


@pytest.mark.parametrize("order", ["import tfdistributed; import keras",
                                   pytest.param("import keras; import tfdistributed",
                                                marks=pytest.mark.slow),
                                   pytest.param("import tfdistributed; import tensorflow as tf; "
                                                "tf.keras.Model", marks=pytest.mark.slow),
                                   pytest.param("import tensorflow; import tfdistributed; "
                                                "import keras", marks=pytest.mark.slow)])
def test_the_repairs_and_the_join_watch_are_in_place_whichever_was_imported_first(order):
    # A fresh interpreter each: the order of the first imports is what is tested.
    code = (f"{order}\nimport json\nfrom tfdistributed.training import compat\n"
            "from tfdistributed.cluster import join\n"
            "print(json.dumps([compat.status(), join.status()]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    repairs, joining = json.loads(proc.stdout.strip().splitlines()[-1])
    from tfdistributed.training import compat

    assert set(repairs) == set(compat.REPAIRS)
    assert all(s == {"defect_present": True, "applied": True} for s in repairs.values()), repairs
    assert joining == {"live_tf_config": True, "join_watch": True}


def test_import_alone_does_not_import_tensorflow():
    code = "import sys, tfdistributed; print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "False"], proc.stderr[-2000:]
