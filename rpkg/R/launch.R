#' Run a training script as a local cluster
#'
#' Starts one process per task on this machine, each with its own TF_CONFIG on
#' free loopback ports, and prints every line they write prefixed with the
#' task (`[worker 1] ...`), but for each task's Keras progress: the job shows
#' one progress display of its own (`progress`). In R Markdown the output
#' lands in the document. When it is done, `$history` holds the job's
#' training history and `$workers` each task's figures. On
#' the first failure, or at the timeout, every process is stopped and the R
#' error names the task and shows its last output.
#'
#' The script is the same one you run on a laptop: it calls
#' `distribute_strategy("auto")` (or `"multi_worker_mirrored"`), which reads the
#' TF_CONFIG set by the launcher. `.R` scripts run with `Rscript`, `.py`
#' scripts with the Python that R uses. With `ps > 0` the script runs as the
#' chief (the parameter-server coordinator) and workers and ps tasks run
#' TensorFlow servers.
#'
#' @param script Path of a `.R` or `.py` training script.
#' @inheritParams local_cluster
#' @inheritParams distribute_strategy
#' @param timeout Seconds for the whole job; then every process is stopped.
#'   `NULL`: the backend's default (15 minutes).
#' @param env Named character vector of extra environment variables for every task.
#' @param args Command-line arguments for the script.
#' @param echo Print each task's output as it arrives.
#' @param max_restarts How many times to restart the whole job after a task
#'   fails or is preempted (exit status 75 after a SIGTERM, see
#'   [fit_distributed()]'s `backup_dir`): every task is stopped and the job
#'   starts again on new ports, announced in the output with the failed task,
#'   its error line and the attempt. A task that fails the same way twice in a
#'   row is a bug, not bad luck: the job stops there. An interrupt (Ctrl-C)
#'   stops everything and restarts nothing. With `backup_dir` in the script's
#'   `fit_distributed()`, a restarted job resumes from its last backup.
#' @param min_workers Let the job go on with fewer workers when hosts it runs
#'   on are gone for good: `workers` is the size the job wants, `min_workers`
#'   the fewest it trains with. Needs places that can be lost: `hosts` (with
#'   `cluster`), or the `"slurm"` or `"ray"` backend (nodes). After a failure, a
#'   host that does not answer within `join_timeout` is lost: the job restarts
#'   on the others from its backup (`fit_distributed(backup_dir =)`), with the
#'   same global batch and learning rate, at the most workers over which the
#'   global batch splits evenly. A lost host is probed in the background; when
#'   it answers again, the job grows back at its next backup. These restarts do
#'   not count in `max_restarts`. Without `min_workers`, a lost host ends the
#'   job with an error of class `tfdistributed_host_lost_error` naming it.
#' @param warm_start For the `"local"` backend, `TRUE` forks each task from a
#'   process that has loaded TensorFlow already, started once per R session,
#'   instead of each task loading it: for an `.R` script an `Rscript` that has
#'   loaded this package, reticulate, Python and TensorFlow (about 5 s of CPU
#'   less per task), for a `.py` script a Python (about 3 s). The task runs as
#'   a fresh `Rscript` or `python` would run it (output, errors, exit status,
#'   `commandArgs()`, its own `tempdir()` and random seed), but cannot change
#'   variables read at import (`KERAS_BACKEND`, ...) before it imports them.
#'   Tasks on `hosts` start the usual way. `NULL`: on when the environment
#'   variable `TFDISTRIBUTED_WARM_START` is `"1"`.
#' @param backend Where the tasks run: `"local"` (processes on this machine),
#'   `"slurm"` (a job submitted with `sbatch` from the script of
#'   [slurm_script()]; each task's output is followed from its file, and the job
#'   is cancelled with `scancel` on a failure, the timeout or an interrupt) or
#'   `"ray"` (one Ray actor per task, on the Ray cluster Python is connected to,
#'   or a local one). The script itself does not change.
#' @param ... Options of the `"slurm"` backend (`partition`, `sbatch_args`,
#'   `srun_args`, `directory`, `keep_files`, `job_name`) or of the `"ray"`
#'   backend (`address`, `ray_options`, `max_failures`).
#' @param cluster For the `"local"` backend, the cluster to run instead of one
#'   on free loopback ports: a [tf_cluster()] (its `workers`, `ps` and `chief`
#'   replace those arguments). Its addresses must be loopback or on `hosts`.
#' @param hosts With `cluster`, hosts you set up yourself, each with the
#'   command that starts a process there: a named list, names the hosts'
#'   addresses, values character vectors such as
#'   `c("ip", "netns", "exec", "ns0")`. Each task whose address is on one of
#'   them runs behind that command; an address on no host (and not loopback) is
#'   an error naming it.
#' @param progress One progress display for the whole job instead of each
#'   task's Keras progress bar (`[tfdistributed] epoch 3/10 - 12/22 - loss:
#'   ...`, with the job's examples/s, elapsed and remaining time): `TRUE` (one
#'   line redrawn in an interactive session, else a line per epoch, so knitr,
#'   `Rscript` and [base::sink()] get plain lines), `"lines"`, `"live"` or `FALSE`.
#'   Stragglers and stalls are named in the output either way.
#' @param stall_warning Seconds without a training step from any task before
#'   the output names the task the others wait for and where it is; `NULL`:
#'   never.
#' @param stall_timeout Seconds without a step after which every task ends
#'   (exit status 76), so that `max_restarts` restarts the job; `NULL` (the
#'   default): a stall is named, not ended.
#' @param show_all Also print each task's Keras progress lines and
#'   TensorFlow's start-up lines (always kept in `$output`).
#' @param tensorboard A directory for the job's TensorBoard event files,
#'   written by this session alone as the job runs: the history's metrics
#'   (`train/`, `validation/`, as Keras' TensorBoard callback writes them), each
#'   task's examples/s and the restarts (`job/`). `NULL`: none.
#' @return A `tfdistributed_launch` object, invisibly: `$tasks` is a data frame
#'   (`task_type`, `task_index`, `returncode`), `$output` a list of each task's
#'   lines, `$seconds` the wall time, `$cluster` the cluster; `$restarts` the
#'   number of restarts and `$attempts` a data frame with one row per attempt
#'   (`attempt`, the failed `task`, how it `ended`, its `error` line,
#'   `preempted`, and `resized` when it ended because the hosts of an elastic
#'   job changed; `NA` for the attempt that succeeded). Tasks, output and
#'   cluster are those of the last attempt. `$sizes` is a data frame with
#'   one row per size an elastic job (`min_workers`) ran at: `attempt`,
#'   `workers`, `wanted`, `why` (`"start"`, `"lost"`, `"back"`), `places` (the
#'   hosts or nodes that left or came), `position` (the step it resumed from)
#'   and `seconds` (since the start); no rows for other jobs.
#'
#'   What the tasks reported while they trained, from scripts that call
#'   [fit_distributed()] or plain `model$fit()`: `$history` is the job's
#'   training history (the chief's, else worker 0's; after restarts the whole
#'   run's, each epoch once; of a script that fits twice, the last fit's), the
#'   same kind of object as [fit_distributed()]
#'   returns: `plot(job$history)` draws it, `as.data.frame(job$history)` gives
#'   its rows. `$workers` is a data frame with one row per task: `task`,
#'   `steps`, `examples_per_second`, `median_step_seconds`, `wait_seconds`
#'   (median time a step spent waiting for the others), `outside_seconds`
#'   (median time between its steps: its callbacks, its input), `restarts`, `straggler` (its own work
#'   markedly slower than the others') and `straggler_epochs` (a list column);
#'   `NA` where a figure could not be measured. `$stragglers` names the
#'   stragglers. `print(job)` shows the per-task table.
#' @family launching
#' @export
#' @examples
#' if (backend_available()) {
#'   script <- tempfile(fileext = ".R")
#'   writeLines(c("library(tfdistributed)",
#'                "cat('task of', num_workers(), 'workers; chief:', is_chief(), '\\n')"),
#'              script)
#'   job <- launch_cluster(script, workers = 2, timeout = 120)
#'   job$tasks
#'   # A script that trains: plot(job$history) and the per-task figures
#'   job$workers
#' }
#' \dontrun{
#' # Not run here: it needs a SLURM cluster and a Ray cluster (the article
#' # "Running on a cluster" starts both and runs these for real).
#' # The same script on a SLURM cluster or on Ray:
#' launch_cluster("train.R", workers = 4, backend = "slurm", partition = "gpu")
#' launch_cluster("train.R", workers = 2, backend = "ray")
#' }
launch_cluster <- function(script, workers = 2, ps = 0, chief = FALSE, timeout = NULL,
                           env = NULL, args = NULL, echo = TRUE, backend = "local", ...,
                           max_restarts = 0, cluster = NULL, hosts = NULL, progress = TRUE,
                           stall_warning = 60, stall_timeout = NULL, show_all = FALSE,
                           tensorboard = NULL, join_timeout = NULL, min_workers = NULL,
                           warm_start = NULL) {
  script <- as_string(script)
  echo <- as_flag(echo)
  options <- list(...)
  check_named(options, "...", what = "named options of the backend", example = 'partition = "gpu"')
  check_named(env, example = 'c(MY_VAR = "1")')
  env_py <- if (is.null(env)) NULL else reticulate::r_to_py(as.list(vapply(env, as.character, "")))
  if (!is.null(args) && (!is.atomic(args) || anyNA(args))) {
    tfd_abort("`args` must be a character vector of command-line arguments, got ", describe(args), ".")
  }
  # Output is relayed through an R function called on R's own thread, so cat() output is
  # captured by knitr and sink(); Python's own echo would bypass them.
  console <- if (echo) console_writer() else NULL
  on.exit(if (!is.null(console)) console$close(), add = TRUE)
  # Rscript tasks find this package where this session does.
  env_py <- merge_env(env_py, R_LIBS = paste(.libPaths(), collapse = .Platform$path.sep))
  # Left out (NULL), the timeout is the backend's default.
  arguments <- c(list(
    normalizePath(script, mustWork = FALSE), workers = as_integer(workers), ps = as_integer(ps),
    chief = as_flag(chief), env = env_py, args = py_list(as.character(args)),
    on_output = console$write, echo = FALSE, rscript = file.path(R.home("bin"), "Rscript"),
    backend = as_string(backend), max_restarts = as_integer(max_restarts),
    progress = progress_mode(progress), stall_warning = as_number(stall_warning),
    stall_timeout = as_number(stall_timeout), show_all = as_flag(show_all)),
    if (!is.null(timeout)) list(timeout = as_number(timeout)),
    if (!is.null(join_timeout)) list(join_timeout = as_number(join_timeout)),
    if (!is.null(min_workers)) list(min_workers = as_integer(min_workers)),
    if (!is.null(warm_start)) list(warm_start = as_flag(warm_start)),
    if (!is.null(cluster)) list(cluster = cluster_to_py(cluster)),
    if (!is.null(hosts)) list(hosts = hosts_to_py(hosts)),
    if (!is.null(tensorboard)) list(tensorboard = path.expand(as_string(tensorboard))), options)
  result <- with_backend(do.call(backend()$launch, arguments))
  launch_result(result, backend)
}

# The R object of a Python LaunchResult.
launch_result <- function(result, backend) {
  tasks <- result$tasks
  out <- structure(list(
    cluster = as_tfdistributed_cluster(result$cluster),
    tasks = data.frame(
      task_type = vapply(tasks, function(t) t$task_type, ""),
      task_index = vapply(tasks, function(t) as.integer(t$task_index), 0L),
      returncode = vapply(tasks, function(t) if (is.null(t$returncode)) NA_integer_ else
        as.integer(t$returncode), 0L),
      stringsAsFactors = FALSE
    ),
    output = stats::setNames(lapply(tasks, function(t) as.character(unlist(t$output))),
                             vapply(tasks, function(t) t$name, "")),
    seconds = result$seconds,
    backend = backend,
    restarts = as.integer(result$restarts),
    attempts = attempts_frame(result$attempts),
    history = new_history(result$history, result$epochs),
    workers = workers_frame(result$workers),
    stragglers = as.character(unlist(result$stragglers)),
    sizes = sizes_frame(result$sizes)
  ), class = "tfdistributed_launch")
  invisible(out)
}

# `progress = TRUE` is "live" (a redrawn line) only where someone watches the console; knitr,
# Rscript and sink() get a line per epoch. Python checks the other values.
progress_mode <- function(progress) {
  if (isTRUE(progress)) if (interactive()) "live" else "lines" else progress
}

# Writes the job's lines to R's console: a live progress line starts with "\r" and redraws
# itself (no newline); the next plain line, or the end of the job, first ends it.
console_writer <- function() {
  open <- FALSE
  list(
    write = function(line) {
      live <- startsWith(line, "\r")
      cat(if (open && !live) "\n", line, if (!live) "\n", sep = "")
      open <<- live
    },
    close = function() if (open) cat("\n")
  )
}

# One row per task of the job; NA where a figure could not be measured (e.g. a task that
# never stepped). `straggler_epochs` is a list column: the epochs (from 1) it was named in.
workers_frame <- function(workers) {
  field <- function(name, type) {
    vapply(workers, function(w) if (is.null(w[[name]])) type[NA_integer_] else
      as.vector(w[[name]], typeof(type)), type)
  }
  frame <- data.frame(
    task = field("task", character(1)), steps = field("steps", integer(1)),
    examples_per_second = field("examples_per_second", numeric(1)),
    median_step_seconds = field("median_step_seconds", numeric(1)),
    wait_seconds = field("wait_seconds", numeric(1)),
    outside_seconds = field("outside_seconds", numeric(1)),
    restarts = field("restarts", integer(1)), straggler = field("straggler", logical(1)),
    stringsAsFactors = FALSE)
  frame$straggler_epochs <- lapply(workers, function(w) as.integer(unlist(w$straggler_epochs)))
  frame
}

# Host address -> command prefix, as a dict of lists (a one-word prefix stays a list). Whether
# the cluster's addresses are on them is the backend's rule.
hosts_to_py <- function(hosts, call = rlang::caller_env()) {
  if (is_py(hosts)) {
    return(hosts)
  }
  if (is.list(hosts)) {
    hosts[] <- lapply(hosts, function(p) if (is.list(p)) unlist(p) else p)
  }
  ok <- is.list(hosts) && rlang::is_named(hosts) &&
    all(vapply(hosts, function(p) is.character(p) && length(p) > 0 && !anyNA(p), TRUE))
  if (!ok) {
    tfd_abort("`hosts` must be a named list: each name a host's address, each value the command ",
              "that starts a process there, e.g. list(\"10.77.0.2\" = c(\"ip\", \"netns\", ",
              "\"exec\", \"ns0\")); got ", describe(hosts), ".", call = call)
  }
  reticulate::r_to_py(lapply(hosts, as.list))
}

# One row per attempt of the job; the failure columns are NA for the attempt that succeeded.
attempts_frame <- function(attempts) {
  field <- function(name, type) {
    vapply(attempts, function(a) if (is.null(a[[name]])) type[NA_integer_] else a[[name]], type)
  }
  frame <- data.frame(attempt = field("attempt", integer(1)), task = field("task", character(1)),
                      ended = field("ended", character(1)), error = field("error", character(1)),
                      preempted = field("preempted", logical(1)), stringsAsFactors = FALSE)
  # Restarts that changed the hosts of an elastic job (min_workers), not counted in max_restarts.
  frame$resized <- vapply(attempts, function(a) isTRUE(a$resized), logical(1))
  frame
}

# One row per size of an elastic job; `places` joins the hosts or nodes that left or came.
sizes_frame <- function(sizes) {
  field <- function(name, type) {
    vapply(sizes, function(s) if (is.null(s[[name]])) type[NA_integer_] else
      as.vector(s[[name]], typeof(type)), type)
  }
  data.frame(attempt = field("attempt", integer(1)), workers = field("workers", integer(1)),
             wanted = field("wanted", integer(1)), why = field("why", character(1)),
             places = vapply(sizes, function(s) paste(unlist(s$places), collapse = ", "), ""),
             position = field("position", integer(1)), seconds = field("seconds", numeric(1)),
             stringsAsFactors = FALSE)
}

merge_env <- function(env_py, ...) {
  extra <- list(...)
  env <- if (is.null(env_py)) list() else reticulate::py_to_r(env_py)
  for (name in names(extra)) {
    if (is.null(env[[name]])) {
      env[[name]] <- extra[[name]]
    }
  }
  if (length(env)) reticulate::r_to_py(env) else NULL
}

#' @export
print.tfdistributed_launch <- function(x, ...) {
  restarts <- if (length(x$restarts) && x$restarts > 0) {
    sprintf(", %d restart%s", x$restarts, if (x$restarts == 1) "" else "s")
  } else {
    ""
  }
  cat(sprintf("<tfdistributed launch: %d task%s, %.1f s%s>\n", nrow(x$tasks),
              if (nrow(x$tasks) == 1) "" else "s", x$seconds, restarts))
  failed <- x$attempts[!is.na(x$attempts$task), , drop = FALSE]
  for (i in seq_len(nrow(failed))) {
    why <- if (isTRUE(failed$resized[[i]])) " (the hosts changed)" else ""
    cat(sprintf("  attempt %d: %s %s%s\n", failed$attempt[[i]] + 1L, failed$task[[i]],
                failed$ended[[i]], why))
  }
  for (i in seq_len(nrow(x$tasks))) {
    cat(sprintf("  %s %d: exit %d\n", x$tasks$task_type[[i]], x$tasks$task_index[[i]],
                x$tasks$returncode[[i]]))
  }
  changes <- x$sizes[-1, , drop = FALSE]
  for (i in seq_len(NROW(changes))) {
    cat(sprintf("  from attempt %d: %d of %d workers (%s: %s)\n", changes$attempt[[i]] + 1L,
                changes$workers[[i]], changes$wanted[[i]], changes$why[[i]], changes$places[[i]]))
  }
  print_workers(x$workers, x$stragglers)
  if (length(x$history$epochs)) {
    cat(sprintf("  history: %d epoch%s (plot(job$history))\n", length(x$history$epochs),
                if (length(x$history$epochs) == 1) "" else "s"))
  }
  invisible(x)
}

# The per-task table, briefly: what a user looks at to see which worker is slow.
print_workers <- function(workers, stragglers) {
  if (!NROW(workers)) {
    return(invisible())
  }
  shown <- data.frame(
    steps = workers$steps, `examples/s` = round(workers$examples_per_second),
    `step ms` = round(1000 * workers$median_step_seconds, 1),
    `wait ms` = round(1000 * workers$wait_seconds, 1),
    straggler = ifelse(workers$straggler, "yes", ""),
    row.names = workers$task, check.names = FALSE)
  cat("  per task:\n")
  lines <- utils::capture.output(print(shown))
  cat(paste0("    ", lines, "\n"), sep = "")
  if (length(stragglers)) {
    cat("  stragglers:", paste(stragglers, collapse = ", "), "\n")
  }
}
