#' Run a training script as a cluster of tasks
#'
#' Starts one process per task, each with its own TF_CONFIG (on this
#' computer: free loopback ports), and prints every line they write prefixed
#' with the task (`[worker 1] ...`), but for each task's Keras progress: the
#' job shows one progress display of its own ([watching()]). In R Markdown the
#' output lands in the document. When it is done, `$history` holds the job's
#' training history and `$workers` each task's figures. On the first failure,
#' or at the timeout, every process is stopped and the R error names the task
#' and shows its last output.
#'
#' The script is the same one you run on a laptop: it calls
#' `distribute_strategy("auto")` (or `"multi_worker_mirrored"`), which reads the
#' TF_CONFIG set by the launcher. `.R` scripts run with `Rscript`, `.py`
#' scripts with the Python that R uses. With `ps > 0` the script runs as the
#' chief (the parameter-server coordinator) and workers and ps tasks run
#' TensorFlow servers.
#'
#' The job's shape, where it runs, how it heals and what is shown of it are
#' four objects: `scaling` ([scaling()]: workers, ps, chief, the fewest workers
#' it goes on with, each task's GPUs), `engine` ([local_hosts()], [slurm()] or
#' [ray()]), `restarts` ([restarts()]) and `watch` ([watching()]). Each is
#' built from the arguments you give it; those left out, like the arguments of
#' `launch_cluster()` left out, take the backend's defaults (2 workers, no ps,
#' no chief, a 15-minute timeout). `launch_cluster("train.R", workers = 3)` is
#' short for `launch_cluster("train.R", scaling(workers = 3))`.
#'
#' @param script Path of a `.R` or `.py` training script.
#' @param scaling The job's shape: [scaling()].
#' @param workers Number of worker tasks, for a job of workers alone (the short
#'   form of `scaling(workers = )`; give one or the other).
#' @param engine Where the tasks run: [local_hosts()] (this computer, the
#'   default), [slurm()] or [ray()].
#' @param restarts How the job heals after a failure: [restarts()].
#' @param watch What is shown of the job: [watching()] (its `echo = FALSE`
#'   prints nothing).
#' @param env Named character vector of extra environment variables for every task.
#' @param args Command-line arguments for the script.
#' @param timeout Seconds for the whole job, restarts included; then every
#'   process is stopped (left out: 15 minutes). On SLURM, its running time: not
#'   its wait in the queue (see [slurm()]).
#' @return A `tfdistributed_launch` object, invisibly: `$tasks` is a data frame
#'   (`task_type`, `task_index`, `returncode`), `$output` a list of each task's
#'   lines, `$seconds` the wall time, `$cluster` the cluster, `$backend` the
#'   engine's name; `$restarts` the
#'   number of restarts and `$attempts` a data frame with one row per attempt
#'   (`attempt`, the failed `task`, how it `ended`, its `error` line,
#'   `preempted`, and `resized` when it ended because the hosts of an elastic
#'   job changed; `NA` for the attempt that succeeded). Tasks, output and
#'   cluster are those of the last attempt. `$sizes` is a data frame with
#'   one row per size an elastic job (`scaling(min_workers =)`) ran at:
#'   `attempt`, `workers`, `wanted`, `why` (`"start"`, `"lost"`, `"back"`),
#'   `places` (the hosts or nodes that left or came), `position` (the step it
#'   resumed from) and `seconds` (since the start); no rows for other jobs.
#'   A SLURM job's result also has `$job_id` and `$queue_seconds`, its wait in
#'   SLURM's queue (every attempt's summed; `timeout` counts running time only).
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
#' # The same script on a SLURM cluster or on Ray, restarted up to twice:
#' launch_cluster("train.R", scaling(workers = 4, gpus_per_task = 1),
#'                engine = slurm(partition = "gpu"),
#'                restarts = restarts(max_restarts = 2))
#' launch_cluster("train.R", workers = 2, engine = ray())
#' }
launch_cluster <- function(script, scaling = NULL, workers = NULL, engine = NULL,
                           restarts = NULL, watch = NULL, env = NULL, args = NULL, timeout) {
  script <- as_string(script)
  check_named(env, example = 'c(MY_VAR = "1")')
  env_py <- if (is.null(env)) NULL else reticulate::r_to_py(as.list(vapply(env, as.character, "")))
  if (!is.null(args) && (!is.atomic(args) || anyNA(args))) {
    tfd_abort("`args` must be a character vector of command-line arguments, got ", describe(args), ".")
  }
  engine <- with_rscript(if (is.null(engine)) local_hosts() else engine)
  watch <- with_progress_mode(if (is.null(watch)) watching() else watch)
  console <- if (echoes(watch)) console_writer() else NULL
  on.exit(if (!is.null(console)) console$close(), add = TRUE)
  # Rscript tasks find this package where this session does.
  env_py <- merge_env(env_py, R_LIBS = paste(.libPaths(), collapse = .Platform$path.sep))
  # What is left out is not passed on: the backend's default applies.
  given <- c(Filter(Negate(is.null), list(scaling = scaling, workers = as_integer(workers),
                                          restarts = restarts)),
             given_arguments(environment(), list(timeout = as_number)))
  arguments <- c(list(normalizePath(script, mustWork = FALSE)), given, list(
    env = env_py, args = py_list(as.character(args)), engine = engine,
    watch = relayed_by_r(watch, console)))
  result <- with_backend(do.call(backend()$launch, arguments))
  launch_result(result, engine$name)
}

# An engine as R runs it: its .R tasks run with this R's Rscript unless it names one.
with_rscript <- function(engine) {
  if (!is_py(engine) || !reticulate::py_has_attr(engine, "rscript") || !is.null(engine$rscript)) {
    return(engine)
  }
  with_backend(engine$replace(rscript = file.path(R.home("bin"), "Rscript")))
}

# `progress = TRUE` is "live" (a redrawn line) only where someone watches the console; knitr,
# Rscript and sink() get a line per epoch. Python checks the other values.
with_progress_mode <- function(watch) {
  if (!is_py(watch) || !reticulate::py_has_attr(watch, "progress") || !isTRUE(watch$progress)) {
    return(watch)
  }
  with_backend(watch$replace(progress = if (interactive()) "live" else "lines"))
}

# Whether the job's lines are to be printed: the watch's `echo` (Python's default unless given).
echoes <- function(watch) {
  is_py(watch) && reticulate::py_has_attr(watch, "echo") && isTRUE(watch$echo)
}

# The job's lines reach R's console through cat() on R's own thread, so that knitr and sink()
# capture them (Python's print() would bypass them): Python's echo is turned off, and R's
# `console` writer, then the watch's own `on_output`, get each line.
relayed_by_r <- function(watch, console) {
  if (!is_py(watch) || !reticulate::py_has_attr(watch, "on_output")) {
    return(watch)
  }
  theirs <- watch$on_output
  write <- function(line) {
    if (!is.null(console)) console$write(line)
    if (!is.null(theirs)) theirs(line)
  }
  with_backend(watch$replace(echo = FALSE, on_output = write))
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
  # SLURM's: the job's id (the last attempt's) and the seconds spent waiting in the queue,
  # every attempt's summed (the timeout counts running time only).
  for (name in c("job_id", "queue_seconds")) {
    if (reticulate::py_has_attr(result, name)) {
      out[[name]] <- reticulate::py_to_r(reticulate::py_get_attr(result, name))
    }
  }
  invisible(out)
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
