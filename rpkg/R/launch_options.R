# launch_cluster()'s options as objects: each constructor returns the Python object (made by the
# backend, which holds every default and every rule), built from only the arguments the caller
# gave. An argument left out is not passed on, so Python's default applies; none is typed here.

#' The shape of a job: its tasks, the fewest workers it goes on with, its GPUs
#'
#' What [launch_cluster()] runs: `workers` worker tasks, `ps` parameter
#' servers and a chief; checked once, here, so a mistake is an R error naming
#' the fix before anything starts. `launch_cluster("train.R", workers = 3)` is
#' short for `launch_cluster("train.R", scaling(workers = 3))`.
#'
#' With `min_workers`, a job goes on with fewer workers when hosts it runs on
#' are gone for good: `workers` is the size the job wants, `min_workers` the
#' fewest it trains with. It needs places that can be lost: hosts of
#' [local_hosts()] (with a `cluster`), or [slurm()] or [ray()] nodes. After a
#' failure, a host that does not answer within the join timeout
#' ([restarts()]) is lost: the job restarts on the others from its backup,
#' with the same global batch and learning rate, at the most workers over
#' which the global batch splits evenly. A lost host is probed in the
#' background; when it answers again, the job grows back at its next backup.
#' These restarts do not count in `max_restarts`. Without `min_workers`, a lost
#' host ends the job with an error of class `tfdistributed_host_lost_error`
#' naming it. The article "Jobs that heal themselves" tells the whole story.
#'
#' With `gpus_per_task`, each task that trains gets that many GPUs: on this
#' computer its share in its `CUDA_VISIBLE_DEVICES` (left out: the GPUs R's
#' process may use, its `CUDA_VISIBLE_DEVICES` or those `nvidia-smi -L` lists,
#' split evenly among the tasks that train; `"all"`: every task sees every
#' GPU); on SLURM `#SBATCH --gpus-per-task` (every task, parameter servers
#' too; left out: none asked for); on Ray the actors' `num_gpus` (left out:
#' none). Parameter servers, and a parameter-server job's chief, get none on
#' this computer and on Ray. Asking for more GPUs than there are is an error
#' naming the fix. The article "GPUs" tells the whole story; no GPU run has
#' been measured yet.
#'
#' An argument left out takes the backend's default.
#'
#' @param workers Number of worker tasks (left out: 2).
#' @param ps Number of parameter-server tasks (needs `chief = TRUE`: the script
#'   runs as the chief, the coordinator; left out: none).
#' @param chief Add a chief task (left out: no).
#' @param min_workers The fewest workers the job goes on with when hosts are
#'   gone for good (left out: every one is needed). Multi-worker jobs only.
#' @param gpus_per_task GPUs each task that trains gets: a whole number (`0`
#'   hides every GPU), or `"all"` (this computer only).
#' @param cluster The cluster to run instead of `workers`, `ps` and `chief`: a
#'   [tf_cluster()], its addresses loopback or on the hosts of
#'   [local_hosts()] (this computer's engine only); its counts are the job's.
#' @return The shape (a Python `tfdistributed.Scaling`), for
#'   `launch_cluster(scaling = )`.
#' @family launching
#' @export
#' @examples
#' if (backend_available()) {
#'   scaling(workers = 3, min_workers = 2)
#'   scaling(workers = 2, ps = 1, chief = TRUE)
#'   scaling(workers = 2, gpus_per_task = 1)   # one GPU per task
#'   try(scaling(workers = 2, ps = 1))          # the error names the fix
#' }
scaling <- function(workers, ps, chief, min_workers, gpus_per_task, cluster) {
  with_backend(do.call(backend()$Scaling, given_arguments(environment(), list(
    workers = as_integer, ps = as_integer, chief = optional_flag, min_workers = as_integer,
    gpus_per_task = gpus_option,
    cluster = function(x, arg, call) cluster_to_py(x, call = call)))))
}

#' Where a job runs: this computer, or hosts of your own
#'
#' The engine of [launch_cluster()] that runs each task as a process on this
#' computer, at free ports of 127.0.0.1 (the default engine), or on hosts you
#' set up yourself.
#'
#' With `hosts`, the job's `scaling(cluster = )` ([tf_cluster()]) may name
#' addresses on those hosts: each task whose address is on one of them runs behind that
#' host's command (`c("ip", "netns", "exec", "ns0")` for a network namespace,
#' `c("ssh", "node1")` has the same shape), with the task's environment (`ip
#' netns exec` keeps it; a remote shell does not). An address on no host, and
#' not loopback, is an error naming it: TensorFlow's servers have no
#' authentication. Each task checks that its address is its host's.
#'
#' Warm starts fork each task from a process that has loaded TensorFlow
#' already, started once per R session, instead of each task loading it: for
#' an `.R` script an `Rscript` that has loaded this package, reticulate, Python
#' and TensorFlow, for a `.py` script a Python. The task runs as a fresh
#' `Rscript` or `python` would run it (output, errors, exit status,
#' `commandArgs()`, its own `tempdir()` and random seed), but cannot change
#' variables read at import (`KERAS_BACKEND`, ...) before it imports them.
#' Tasks on `hosts` start the usual way.
#'
#' On a computer with GPUs, each task that trains gets its share of them in its
#' `CUDA_VISIBLE_DEVICES`: the GPUs R's process may use (its
#' `CUDA_VISIBLE_DEVICES`, else those `nvidia-smi -L` lists) split evenly
#' among the tasks (fewer GPUs than tasks: one each, shared), or
#' `scaling(gpus_per_task = )` each. Parameter servers, and a parameter-server
#' job's chief, get none. Tasks given GPUs start the usual way, not warm. No
#' GPU found and no `gpus_per_task`: nothing changes. The article "GPUs" tells
#' the whole story; no GPU run has been measured yet.
#'
#' An argument left out takes the backend's default.
#'
#' @param hosts Hosts of your own: a named list, names the hosts' addresses,
#'   values the command that starts a process there (character vectors).
#' @param warm_start `TRUE` to fork each task from a warm process, `FALSE`
#'   not to; `NULL` (the default): as the environment variable
#'   `TFDISTRIBUTED_WARM_START` says (`"1"`: on).
#' @param ... Other fields of the Python object `tfd$engines$Local` (e.g.
#'   `python`, the Python that runs a `.py` script), passed on as they are.
#' @return The engine (a Python `tfdistributed.engines.Local`), for
#'   `launch_cluster(engine = )`.
#' @family launching
#' @export
#' @examples
#' if (backend_available()) {
#'   local_hosts(warm_start = TRUE)
#'   # Two network namespaces as two hosts (needs root; see the article
#'   # "Clusters and networks"):
#'   local_hosts(hosts = list("10.77.0.2" = c("ip", "netns", "exec", "ns0"),
#'                            "10.77.0.3" = c("ip", "netns", "exec", "ns1")))
#' }
local_hosts <- function(hosts, warm_start, ...) {
  engine_options(backend()$engines$Local, given_arguments(environment(), list(
    hosts = function(x, arg, call) if (is.null(x)) NULL else hosts_to_py(x, call = call),
    warm_start = optional_flag)), list(...))
}

#' Where a job runs: a SLURM job
#'
#' The engine of [launch_cluster()] that submits the job with `sbatch` from
#' the script of [slurm_script()], follows each task's output from its file,
#' and cancels the job with `scancel` on a failure, the timeout or an
#' interrupt. The job's directory must be on storage this computer and the
#' nodes share. The training script itself does not change.
#'
#' With `scaling(gpus_per_task = )`, SLURM gives each task GPUs of its own
#' (`#SBATCH --gpus-per-task`) and sets its `CUDA_VISIBLE_DEVICES`; every task
#' of the job gets them, parameter servers too.
#'
#' Two clocks: `time` is SLURM's own limit on the job; [launch_cluster()]'s
#' `timeout` counts the job's running time, summed over its attempts (each
#' restart waits in the queue again), not its wait in SLURM's queue. While the
#' job waits, the launcher prints so with SLURM's reason (`[launch] SLURM job
#' 42 is waiting in the queue (Resources)`), again every minute, and when it
#' starts (`SLURM job 42 started after 37 s in the queue`).
#'
#' An argument left out takes the backend's default.
#'
#' @param partition The partition (`sbatch --partition`).
#' @param time SLURM's time limit (`sbatch --time`): `"02:00:00"`, or a number
#'   of minutes. Left out, none is asked for and the partition's default
#'   applies (it is not derived from `timeout`); give one to bound a job whose
#'   R session was lost, which cannot cancel it.
#' @param sbatch_args,srun_args More `sbatch` and `srun` options, e.g.
#'   `"--constraint=a100"`.
#' @param job_name The job's name (`sbatch --job-name`).
#' @param directory The job's directory, on shared storage; left out, a new
#'   directory under the working directory, removed afterwards.
#' @param keep_files Keep the job's directory.
#' @param queue_timeout Seconds each attempt may wait in SLURM's queue before
#'   it is cancelled with an error naming SLURM's reason; left out, as long as
#'   SLURM keeps it queued.
#' @param ... Other fields of the Python object `tfd$engines$Slurm` (e.g.
#'   `python`, the Python on the nodes), passed on as they are.
#' @return The engine (a Python `tfdistributed.engines.Slurm`), for
#'   `launch_cluster(engine = )`.
#' @family launching
#' @export
#' @examples
#' if (backend_available()) {
#'   slurm(partition = "gpu", time = "02:00:00")
#' }
slurm <- function(partition, time, sbatch_args, srun_args, job_name, directory, keep_files,
                  queue_timeout, ...) {
  string <- function(x, arg, call) as_string(x, arg, allow_null = TRUE, call = call)
  options <- function(x, arg, call) py_list(as.character(x))
  engine_options(backend()$engines$Slurm, given_arguments(environment(), list(
    partition = string,
    time = function(x, arg, call) {
      if (is.numeric(x)) as_number(x, arg, call) else string(x, arg, call)
    },
    sbatch_args = options, srun_args = options, job_name = string,
    directory = function(x, arg, call) if (is.null(x)) NULL else path.expand(string(x, arg, call)),
    keep_files = optional_flag, queue_timeout = as_number)), list(...))
}

#' Where a job runs: Ray actors
#'
#' The engine of [launch_cluster()] that runs one Ray actor per task, on the
#' Ray cluster Python is connected to (or the one at `address`), else on a
#' local Ray started for the job and shut down after it. Script paths (and the
#' working directory) must exist on every node.
#'
#' With `scaling(gpus_per_task = )`, the actor of each task that trains asks
#' Ray for that many GPUs (`num_gpus`), and Ray sets its
#' `CUDA_VISIBLE_DEVICES`; parameter servers, and a parameter-server job's
#' chief, ask for none.
#'
#' An argument left out takes the backend's default.
#'
#' @param address The Ray cluster to connect to; left out, `RAY_ADDRESS`, else
#'   a local Ray.
#' @param ray_options Options of every task's actor, a named list such as
#'   `list(num_cpus = 2)`.
#' @param ... Other fields of the Python object `tfd$engines$Ray`, passed on as
#'   they are.
#' @return The engine (a Python `tfdistributed.engines.Ray`), for
#'   `launch_cluster(engine = )`.
#' @family launching
#' @export
#' @examples
#' if (backend_available()) {
#'   ray(ray_options = list(num_cpus = 1))
#' }
ray <- function(address, ray_options, ...) {
  engine_options(backend()$engines$Ray, given_arguments(environment(), list(
    address = function(x, arg, call) as_string(x, arg, allow_null = TRUE, call = call),
    ray_options = function(x, arg, call) {
      check_named(x, arg, what = "a named list of actor options",
                  example = "list(num_cpus = 2)", call = call)
      if (is.null(x) || is_py(x)) x else reticulate::r_to_py(as.list(x))
    })), list(...))
}

#' How a job heals: restarts
#'
#' The restart policy of [launch_cluster()]. After a task fails or is
#' preempted (exit status 75 after a SIGTERM, see [fit_distributed()]'s
#' `backup_dir`), every task is stopped and the job starts again as a whole
#' on new ports, announced in the output with the failed task, its error line
#' and the attempt. A task that fails the same way twice in a row, with no
#' progress in between, is a bug, not bad luck: the job stops there. An
#' interrupt (Ctrl-C) stops everything and restarts nothing. With `backup_dir`
#' in the script's [fit_distributed()], a restarted job resumes from its last
#' backup.
#'
#' A job that goes on with fewer workers when hosts it runs on are gone for
#' good is a job of a shape: `scaling(min_workers = )` ([scaling()]); the join
#' timeout here is how long a lost host may take to answer.
#'
#' An argument left out takes the backend's default. The article "Jobs that
#' heal themselves" tells the whole story.
#'
#' @param max_restarts How many times the whole job is started again after a
#'   failure (left out: none).
#' @param join_timeout Seconds each task waits for the others to join its
#'   strategy (meanwhile it names those it waits for), then fails with an
#'   error naming them; also how long a lost host may take to answer.
#' @param grace Seconds between SIGTERM and SIGKILL when tasks are stopped
#'   (left out: 5).
#' @return The policy (a Python `tfdistributed.Restarts`), for
#'   `launch_cluster(restarts = )`.
#' @family launching
#' @export
#' @examples
#' if (backend_available()) {
#'   restarts(max_restarts = 3, join_timeout = 120)
#'   try(restarts(max_restarts = -1))
#' }
restarts <- function(max_restarts, join_timeout, grace) {
  with_backend(do.call(backend()$Restarts, given_arguments(environment(), list(
    max_restarts = as_integer, join_timeout = as_number, grace = as_number))))
}

#' What is shown of a running job
#'
#' How [launch_cluster()] shows the job: one progress display for the whole
#' job instead of each task's Keras progress bar (`[tfdistributed] epoch 3/10
#' - 12/22 - loss: ...`, with the job's examples/s, elapsed and remaining
#' time); the task the others wait for, named when no step comes; the job's
#' TensorBoard curves. Stragglers and stalls are named in the output whatever
#' the display. The article "Seeing a launched job" shows them.
#'
#' An argument left out takes the backend's default.
#'
#' @param progress `TRUE` (one line redrawn in an interactive session, else a
#'   line per epoch, so knitr, `Rscript` and [base::sink()] get plain lines),
#'   `"lines"`, `"live"` or `FALSE` (each task's own Keras progress).
#' @param stall_warning Seconds without a training step from any task before
#'   the output names the task the others wait for and where it is; `NULL`:
#'   never.
#' @param stall_timeout Seconds without a step after which every task ends
#'   (exit status 76), so that [restarts()] restarts the job; left out, a stall
#'   is named, not ended.
#' @param tensorboard A directory for the job's TensorBoard event files,
#'   written by this session alone as the job runs: the history's metrics
#'   (`train/`, `validation/`, as Keras' TensorBoard callback writes them),
#'   each task's examples/s and the restarts (`job/`).
#' @param show_all Also print each task's Keras progress lines and
#'   TensorFlow's start-up lines (always kept in the job's `$output`).
#' @param echo Print the job's lines to R's console (left out: yes); `FALSE`
#'   prints nothing, and the lines are still in the job's `$output`.
#' @param on_output An R function called with each of the job's lines (a
#'   string), on R's own thread, as they arrive.
#' @return What to show (a Python `tfdistributed.Watch`), for
#'   `launch_cluster(watch = )`.
#' @family launching
#' @export
#' @examples
#' if (backend_available()) {
#'   watching(stall_warning = 120, tensorboard = file.path(tempdir(), "logs"))
#'   watching(progress = FALSE, stall_warning = NULL)
#'   watching(echo = FALSE, on_output = function(line) message(line))
#' }
watching <- function(progress, stall_warning, stall_timeout, tensorboard, show_all, echo,
                     on_output) {
  with_backend(do.call(backend()$Watch, given_arguments(environment(), list(
    progress = function(x, arg, call) x, stall_warning = as_number, stall_timeout = as_number,
    tensorboard = function(x, arg, call) {
      if (is.null(x)) NULL else path.expand(as_string(x, arg, call = call))
    },
    show_all = optional_flag, echo = optional_flag,
    on_output = function(x, arg, call) {
      if (!is.null(x) && !is.function(x) && !is_py(x)) {
        tfd_abort("`on_output` must be a function of one line, got ", describe(x), ".",
                  call = call)
      }
      x
    }))))
}

# `gpus_per_task`: "all" as it is (the backend says which engines take it), a number as an
# integer (R's whole doubles such as 1 accepted; 1.5 an error naming the fix).
gpus_option <- function(x, arg = "gpus_per_task", call = rlang::caller_env()) {
  if (is.character(x)) as_string(x, arg, call = call) else as_integer(x, arg, call = call)
}

# The engine `engine` (a Python class of tfd$engines) made from the arguments given.
engine_options <- function(engine, given, more, call = rlang::caller_env()) {
  check_named(more, "...", what = "named fields of the engine", example = 'python = "python3"',
              call = call)
  with_backend(do.call(engine, c(given, more)), call = call)
}
