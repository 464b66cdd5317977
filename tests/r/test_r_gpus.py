"""gpus_per_task from R: scaling() passes it to the backend (R's whole doubles as integers), each
engine takes it from the job's shape, slurm_script() writes it; anything else an R error naming
the fix. No job is started: a shape the engine cannot run is refused when the plan is made."""

from __future__ import annotations

import pytest

from rsupport import ROOT

SCRIPT = ROOT / "tests" / "python" / "scripts" / "mwms_digits.R"


def r_error(r, code: str) -> str:
    return r(f"tryCatch({{ {code}; 'no error' }}, "
             f"tfdistributed_error = function(e) conditionMessage(e))")[0]


def test_scaling_passes_gpus_per_task_through(r):
    assert r("scaling(gpus_per_task = 1L)$gpus_per_task")[0] == 1
    # A whole double, as R users write numbers, is the integer.
    assert r("class(scaling(gpus_per_task = 2)$gpus_per_task)")[0] == "integer"
    assert r("scaling(gpus_per_task = 2)$gpus_per_task")[0] == 2
    assert r("is.null(scaling()$gpus_per_task)")[0]
    assert r('scaling(gpus_per_task = "all")$gpus_per_task')[0] == "all"


@pytest.mark.parametrize("engine", ["slurm", "ray"])
def test_all_on_this_computer_only(r, engine):
    message = r_error(r, f'launch_cluster("{SCRIPT}", scaling(gpus_per_task = "all"), '
                         f'engine = {engine}())')
    assert f"{engine.capitalize()} gives each task a number of GPUs" in message and \
        message.endswith("E.g. gpus_per_task = 1."), message


@pytest.mark.parametrize("code, expected", [
    ("scaling(gpus_per_task = 1.5)", "`gpus_per_task` must be a single whole number, got"),
    ("scaling(gpus_per_task = c(1, 2))", "`gpus_per_task` must be a single whole number"),
    ("scaling(gpus_per_task = -1)", "`gpus_per_task` must be a whole number of GPUs (0 or "
                                    "more), or 'all'"),
    (f'launch_cluster("{SCRIPT}", scaling(gpus_per_task = 1), '
     f'engine = slurm(sbatch_args = "--gpus-per-task=2"))', "give gpus_per_task alone"),
])
def test_wrong_values_are_r_errors_naming_the_fix(r, code, expected):
    message = r_error(r, code)
    assert expected in message, message


def test_slurm_script_takes_gpus_per_task(r):
    script = "\n".join(r(f'slurm_script("{SCRIPT}", scaling(workers = 2, gpus_per_task = 1))'))
    assert "#SBATCH --gpus-per-task=1\n" in script, script


def test_slurm_script_of_the_running_on_a_cluster_article(r):
    script = "\n".join(r(f'slurm_script("{SCRIPT}", scaling(workers = 2, gpus_per_task = 1), '
                         f'args = "results", partition = "gpu")'))
    assert "#SBATCH --partition=gpu\n" in script and "#SBATCH --ntasks=2\n" in script, script
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert srun.endswith(" results"), srun


def test_a_local_job_from_r_gives_each_task_its_gpus_as_the_gpus_article_does(r, tmp_path):
    # The article's chunk, on a machine whose GPUs are faked by the job's CUDA_VISIBLE_DEVICES.
    script = tmp_path / "which-gpus.R"
    script.write_text('cat("sees GPUs", Sys.getenv("CUDA_VISIBLE_DEVICES"), "\\n")\n')
    r(f"""
      four <- c(CUDA_VISIBLE_DEVICES = "0,1,2,3")
      gpu_job <- launch_cluster("{script}", scaling(workers = 2, gpus_per_task = 1), env = four,
                                timeout = 120, watch = watching(echo = FALSE))
    """)
    assert list(r('unlist(gpu_job$output)')) == ["sees GPUs 0 ", "sees GPUs 1 "]
    message = r_error(r, f'launch_cluster("{script}", scaling(workers = 4, gpus_per_task = 1), '
                         f'env = c(CUDA_VISIBLE_DEVICES = "0,1"))')
    assert "`gpus_per_task=1` for 4 training task(s) needs 4 GPU(s), and there are 2" in message, \
        message
