"""tfdistributed.versions: the supported ranges read from the package's own metadata, the
installed TensorFlow whatever its distribution, and what is said when one is outside its range.

The decisions are fed metadata as an environment would give it (importlib.metadata's answers
replaced for the test); the real environment's answer, through the command line, is checked
too. tests/python/package/test_install.py checks the same in a fresh environment.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import warnings

import pytest

from tfdistributed import versions

REQUIRES = [
    "keras<4,>=3.8",
    "tensorflow-datasets>=4.9.7",
    "numpy",
    'tensorflow<2.22,>=2.18; extra == "tensorflow"',
    'tensorflow[and-cuda]<2.22,>=2.18; extra == "and-cuda"',
    'pytest>=8; extra == "test"',
]


def _environment(monkeypatch, installed: dict[str, str], requires=REQUIRES):
    def version(name):
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(versions.metadata, "version", version)
    monkeypatch.setattr(versions.metadata, "requires", lambda name: list(requires))


def test_ranges_come_from_the_package_metadata_and_its_tensorflow_extra(monkeypatch):
    _environment(monkeypatch, {})
    assert versions.supported() == {"tensorflow": "<2.22,>=2.18", "keras": "<4,>=3.8",
                                    "tensorflow-datasets": ">=4.9.7"}


@pytest.mark.parametrize("dist", ["tensorflow", "tensorflow-cpu", "tensorflow-intel"])
def test_any_tensorflow_distribution_within_the_range_is_accepted(monkeypatch, dist):
    _environment(monkeypatch, {dist: "2.19.1", "keras": "3.10.0",
                               "tensorflow-datasets": "4.9.9"})
    state = versions.report()
    assert state["tensorflow"] == {"distribution": dist, "version": "2.19.1",
                                   "supported": "<2.22,>=2.18", "ok": True}
    versions.check_tensorflow()   # says nothing


def test_an_older_tensorflow_is_an_error_naming_the_upgrade(monkeypatch):
    _environment(monkeypatch, {"tensorflow": "2.15.0", "keras": "3.8.0"})
    with pytest.raises(versions.VersionError,
                       match=r"tensorflow 2\.15\.0 is outside .*tensorflow<2\.22,>=2\.18.*"
                             r"pip install \"tensorflow<2\.22,>=2\.18\""):
        versions.check_tensorflow()


def test_a_newer_tensorflow_is_a_warning_and_strict_makes_it_an_error(monkeypatch):
    _environment(monkeypatch, {"tensorflow": "2.23.0", "keras": "3.16.0"})
    with pytest.warns(UserWarning, match="2.23.0 .*has not been tested"):
        versions.check_tensorflow()
    with pytest.raises(versions.VersionError):
        versions.check_tensorflow(strict=True)
    # A pre-release of a supported minor is within the range.
    _environment(monkeypatch, {"tensorflow": "2.21.0rc1", "keras": "3.16.0"})
    assert versions.report()["tensorflow"]["ok"]


def test_no_tensorflow_names_the_extra(monkeypatch):
    _environment(monkeypatch, {"keras": "3.10.0"})
    with pytest.raises(versions.VersionError, match=r'pip install "tfdistributed\[tensorflow\]"'):
        versions.check_tensorflow()
    # On import it is a warning: the command line and R's installer must still run.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions.warn_if_unsupported()
    assert [w.category for w in caught] == [versions.VersionWarning]


def test_the_command_line_reports_this_environment_without_importing_tensorflow():
    code = ("import sys, runpy; sys.argv = ['tfdistributed', 'versions', '--check'];"
            "import tfdistributed.__main__ as m; rc = m.main(sys.argv[1:]);"
            "print('TF-IMPORTED' if 'tensorflow' in sys.modules else 'no-tf'); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    *report, imported = done.stdout.strip().splitlines()
    assert imported == "no-tf"
    state = json.loads("\n".join(report))
    assert state["tensorflow"]["ok"] and state["keras"]["ok"], state
    # Whichever build is installed (tensorflow, tensorflow-cpu...): the version TensorFlow says.
    import tensorflow as tf

    assert state["tensorflow"]["version"] == tf.__version__
