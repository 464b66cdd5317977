#' TF_CONFIG from a SLURM job step
#'
#' Inside `srun -n 2 Rscript train.R`, [distribute_strategy()] with `"auto"`
#' (or `"multi_worker_mirrored"`, `"parameter_server"`) needs no TF_CONFIG: when
#' none is set and the job step has 2 or more tasks, it builds one from SLURM's
#' environment, the way `tf_config_from_slurm()` shows it. Hosts come from the
#' step's node list (expanded with `scontrol show hostnames`), this task from
#' `SLURM_PROCID`; ports are SLURM's reserved ports of the step when it has them
#' (`srun --resv-ports`), else `port_base` plus the task's local id on its node
#' (`TFDISTRIBUTED_SLURM_PORT_BASE`, default 15000), so tasks sharing a node
#' never collide. It works on CPU and GPU nodes alike (TensorFlow's own SLURM
#' resolver needs `nvidia-smi`).
#'
#' @param port_base First port when SLURM reserved none for the step.
#' @param ps Number of parameter-server tasks: tasks 1..`ps` become `ps`, task 0
#'   the chief. Default `TFDISTRIBUTED_SLURM_PS`, else 0.
#' @param chief Make task 0 the chief. Default `TFDISTRIBUTED_SLURM_CHIEF`.
#' @return The TF_CONFIG of this task (class `tfdistributed_tf_config`; it is
#'   not set).
#' @seealso [slurm_script()] for a batch script whose tasks get theirs this
#'   way, [launch_cluster()] with `engine = slurm()` to submit a job from R.
#' @family cluster configuration
#' @export
#' @examples
#' \dontrun{
#' # Not run here: it needs a SLURM job step (the article "Running on a cluster"
#' # runs it under srun on a real SLURM cluster).
#' # in a script run with: srun -n 2 Rscript train.R
#' tf_config_from_slurm()
#' strategy <- distribute_strategy("auto")   # multi_worker_mirrored over the 2 tasks
#' }
tf_config_from_slurm <- function(port_base = NULL, ps = NULL, chief = NULL) {
  config <- with_backend(backend()$slurm$tf_config_from_slurm(
    port_base = as_integer(port_base), ps = as_integer(ps),
    chief = as_flag(chief, allow_null = TRUE)))
  as_tfdistributed_tf_config(config)
}

#' A SLURM batch script that runs a training script as a cluster
#'
#' The text of an `sbatch` script that runs `script` as a job of the shape
#' `scaling` ([scaling()]: its workers, ps and chief, and each task's GPUs,
#' `#SBATCH --gpus-per-task`), each task with its TF_CONFIG, built from
#' SLURM's environment as [tf_config_from_slurm()] shows it. `writeLines()` it to a
#' file and submit it with `sbatch`, or let
#' `launch_cluster(script, engine = slurm())` do both and follow the job.
#'
#' @inheritParams launch_cluster
#' @param preemption_notice With a `time_limit`, seconds before it at which
#'   SLURM sends the tasks SIGTERM (`--signal`; left out: 120): a script whose
#'   [fit_distributed()] has a `backup_dir` backs up and exits with status 75.
#'   `NULL`: no notice.
#' @param requeue Let SLURM requeue the job (`--requeue`), and requeue it when
#'   its tasks stopped on a preemption notice (status 75), so that it resumes
#'   from its backup by itself (left out: yes).
#' @param ... Options of the batch script: `partition`,
#'   `time_limit` (minutes), `sbatch_args`, `srun_args`, `job_name`,
#'   `directory`, `env`.
#' @return The text of the `sbatch` script.
#' @family launching
#' @export
#' @examples
#' if (backend_available()) {
#'   script <- tempfile(fileext = ".R")
#'   writeLines("library(tfdistributed)", script)
#'   cat(slurm_script(script, workers = 2, partition = "cpu"))
#' }
slurm_script <- function(script, scaling = NULL, workers = NULL, args = NULL,
                         preemption_notice, requeue, ...) {
  with_backend(do.call(backend()$slurm$slurm_script, c(list(
    normalizePath(as_string(script), mustWork = FALSE), scaling = scaling,
    workers = as_integer(workers), args = py_list(as.character(args)),
    rscript = file.path(R.home("bin"), "Rscript")),
    given_arguments(environment(), list(preemption_notice = as_integer,
                                        requeue = optional_flag)),
    list(...))))
}
