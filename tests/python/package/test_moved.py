"""Module paths of earlier releases keep working after the third layout pass, with a
DeprecationWarning naming the new path, as the very module now at the new path; and nothing of
ours (code, tests, tutorials, R) still uses them."""

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tfdistributed
from tfdistributed import _moved

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_an_old_path_is_the_new_module_with_a_warning_naming_it(old):
    new = importlib.import_module(_moved.new_name(f"tfdistributed.{old}"))
    sys.modules.pop(f"tfdistributed.{old}", None)
    with pytest.warns(DeprecationWarning, match=re.escape(new.__name__)):
        module = importlib.import_module(f"tfdistributed.{old}")
    assert module is new


def test_names_under_an_old_package_path_are_the_same_objects():
    from tfdistributed.engines.local import LocalLauncher
    from tfdistributed.training.repairs.common import Repair

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from tfdistributed.launchers.local import LocalLauncher as old_launcher
        from tfdistributed.repairs.common import Repair as old_repair
    assert old_launcher is LocalLauncher and old_repair is Repair


def test_an_old_module_attribute_of_the_package_still_resolves():
    vars(tfdistributed).pop("generators", None)  # set by an import of the old path above
    with pytest.warns(DeprecationWarning, match="tfdistributed.r.feed"):
        assert tfdistributed.generators.BatchFeed.__module__ == "tfdistributed.r.feed"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        tfdistributed.nothing_here  # noqa: B018


def test_the_old_launch_module_path_leaves_the_function_alone():
    from tfdistributed.launch import LaunchResult

    assert LaunchResult is tfdistributed.LaunchResult and callable(tfdistributed.launch)


def test_python_dash_m_on_an_old_path_runs_the_module_at_its_new_path():
    run = subprocess.run([sys.executable, "-m", "tfdistributed.hostbed"], capture_output=True,
                         text=True, timeout=120)
    assert "usage: python -m tfdistributed.testbeds.hostbed" in run.stdout + run.stderr


def test_nothing_of_ours_uses_an_old_path():
    old = "|".join(re.escape(name) for name in sorted(_moved.MOVED, key=len, reverse=True)
                   if name not in {"checkpoints", "loops", "ps", "slurm"})
    pattern = re.compile(rf"tfdistributed[.$](?:{old})\b|tfd\$(?:{old})\$")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    found = [f"{name}:{i}" for name in files
             if name.endswith((".py", ".R", ".Rmd", ".Rd", ".md", ".sh", "Makefile"))
             and not name.endswith(("_moved.py", "test_moved.py")) and (ROOT / name).exists()
             for i, line in enumerate((ROOT / name).read_text().splitlines(), 1)
             if pattern.search(line)]
    assert not found, found
