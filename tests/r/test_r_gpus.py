"""gpus_per_task from R: local_hosts(), slurm(), ray() and slurm_script() pass it to the backend,
R's whole doubles as integers, anything else an R error naming the fix. No job is started."""

from __future__ import annotations

import pytest

from rsupport import ROOT

SCRIPT = ROOT / "tests" / "python" / "scripts" / "mwms_digits.R"


def r_error(r, code: str) -> str:
    return r(f"tryCatch({{ {code}; 'no error' }}, "
             f"tfdistributed_error = function(e) conditionMessage(e))")[0]


@pytest.mark.parametrize("engine", ["local_hosts", "slurm", "ray"])
def test_each_engine_passes_gpus_per_task_through(r, engine):
    assert r(f"{engine}(gpus_per_task = 1L)$gpus_per_task")[0] == 1
    # A whole double, as R users write numbers, is the integer.
    assert r(f"class({engine}(gpus_per_task = 2)$gpus_per_task)")[0] == "integer"
    assert r(f"{engine}(gpus_per_task = 2)$gpus_per_task")[0] == 2
    assert r(f"is.null({engine}()$gpus_per_task)")[0]


def test_all_on_this_computer_only(r):
    assert r('local_hosts(gpus_per_task = "all")$gpus_per_task')[0] == "all"
    message = r_error(r, 'ray(gpus_per_task = "all")')
    assert "Ray gives each task a number of GPUs" in message and \
        message.endswith("E.g. gpus_per_task = 1."), message


@pytest.mark.parametrize("code, expected", [
    ("local_hosts(gpus_per_task = 1.5)", "`gpus_per_task` must be a single whole number, got"),
    ("slurm(gpus_per_task = c(1, 2))", "`gpus_per_task` must be a single whole number"),
    ("local_hosts(gpus_per_task = -1)", "`gpus_per_task` must be a whole number of GPUs (0 or "
                                        "more), or 'all'"),
    ('slurm(gpus_per_task = 1, sbatch_args = "--gpus-per-task=2")', "give gpus_per_task alone"),
])
def test_wrong_values_are_r_errors_naming_the_fix(r, code, expected):
    message = r_error(r, code)
    assert expected in message, message


def test_slurm_script_takes_gpus_per_task(r):
    script = "\n".join(r(f'slurm_script("{SCRIPT}", workers = 2, gpus_per_task = 1)'))
    assert "#SBATCH --gpus-per-task=1\n" in script, script
