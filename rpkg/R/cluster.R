#' Describe a cluster: which tasks run where
#'
#' Builds and validates the `cluster` part of TF_CONFIG from `"host:port"`
#' addresses. Every mistake (a missing port, the same address twice, ps tasks
#' without workers...) is an R error naming the field and the fix. Every role
#' stays a JSON list in TF_CONFIG, even with one task: TensorFlow cannot read a
#' job written as a bare string.
#'
#' @param workers Character vector of worker addresses (`"host:port"`).
#' @param ps Character vector of parameter-server addresses, or `NULL`. A
#'   parameter-server cluster needs no chief: without one, the coordinator is
#'   the process whose TF_CONFIG has no task (see [tf_task_config()]).
#' @param chief Address of the chief, or `NULL`.
#' @param evaluator Address of the evaluator, or `NULL`.
#' @return A named list of character vectors (roles in TensorFlow's order), of
#'   class `tfdistributed_cluster`.
#' @seealso [local_cluster()] for free ports on this machine, [set_tf_config()].
#' @family cluster configuration
#' @export
#' @examples
#' if (backend_available()) {
#'   tf_cluster(workers = c("10.0.0.1:2222", "10.0.0.2:2222"))
#'   # Mistakes are R errors naming the field and the fix:
#'   try(tf_cluster(workers = c("10.0.0.1:2222", "10.0.0.1")))
#' }
tf_cluster <- function(workers = NULL, ps = NULL, chief = NULL, evaluator = NULL) {
  cluster <- with_backend(backend()$cluster_spec(
    as_addresses(workers), ps = as_addresses(ps), chief = as_addresses(chief),
    evaluator = as_addresses(evaluator)))
  as_tfdistributed_cluster(cluster)
}

# "host:port" strings -> a Python list (a single string stays a list). Whether the addresses
# and their number are right is the backend's rule.
as_addresses <- function(x, arg = rlang::caller_arg(x), call = rlang::caller_env()) {
  if (!is.null(x) && (!is.character(x) || anyNA(x))) {
    tfd_abort("`", arg, "` must be a character vector of \"host:port\" strings, e.g. ",
              "\"127.0.0.1:2222\"; got ", describe(x), ".", call = call)
  }
  py_list(x)
}

#' A cluster of tasks on this machine, on free ports
#'
#' Addresses are on 127.0.0.1 (TensorFlow's gRPC servers have no
#' authentication, so local clusters never listen on other interfaces).
#'
#' @param workers Number of worker tasks (left out: 2).
#' @param ps Number of parameter-server tasks (needs `chief = TRUE`; left out:
#'   none).
#' @param chief Add a chief task (left out: no).
#' @param evaluator Add an evaluator task (it evaluates what the chief saves,
#'   outside the training cluster; left out: no).
#' @return A `tfdistributed_cluster` (see [tf_cluster()]).
#' @family cluster configuration
#' @export
#' @examples
#' if (backend_available()) {
#'   local_cluster(workers = 2)
#'   local_cluster(workers = 2, ps = 1, chief = TRUE)
#' }
local_cluster <- function(workers, ps, chief, evaluator) {
  as_tfdistributed_cluster(with_backend(do.call(backend()$local_cluster, given_arguments(
    environment(), list(workers = as_integer, ps = as_integer, chief = optional_flag,
                        evaluator = optional_flag)))))
}

as_tfdistributed_cluster <- function(cluster) {
  cluster <- lapply(cluster, as.character)
  structure(cluster, class = "tfdistributed_cluster")
}

# R cluster list -> Python dict of lists (length-one roles must stay lists).
cluster_to_py <- function(cluster, call = rlang::caller_env()) {
  if (is.null(cluster) || is_py(cluster)) {
    return(cluster)
  }
  if (!is.list(cluster) || !rlang::is_named(cluster)) {
    tfd_abort("`cluster` must be a named list of \"host:port\" vectors such as ",
              "list(worker = c(\"127.0.0.1:2222\", \"127.0.0.1:2223\")) (see tf_cluster()), got ",
              describe(cluster), ".", call = call)
  }
  reticulate::r_to_py(lapply(unclass(cluster), function(x) if (is.character(x)) as.list(x) else x))
}

#' @export
print.tfdistributed_cluster <- function(x, ...) {
  cat("<tfdistributed cluster>\n")
  for (role in names(x)) {
    cat(sprintf("  %-9s %s\n", paste0(role, ":"), paste(x[[role]], collapse = ", ")))
  }
  invisible(x)
}

#' TF_CONFIG for one task of a cluster
#'
#' The validated TF_CONFIG (as an R list) that tells the process running task
#' `task_type` number `task_index` who is in the cluster. Does not change the
#' environment: see [set_tf_config()].
#'
#' @param cluster A cluster from [tf_cluster()] or [local_cluster()].
#' @param task_type `"worker"` (left out), `"chief"`, `"ps"` or `"evaluator"`;
#'   `NULL` for the coordinator of a parameter-server cluster without a chief
#'   (its TF_CONFIG has no task: TensorFlow adds it to the cluster itself).
#' @param task_index Index of the task within its role (from 0; left out: 0).
#' @return A list with `cluster` and `task`, of class `tfdistributed_tf_config`.
#'   `format()` gives the JSON text.
#' @family cluster configuration
#' @export
#' @examples
#' if (backend_available()) {
#'   config <- tf_task_config(local_cluster(2), "worker", 1)
#'   config
#'   format(config)   # the JSON text
#' }
tf_task_config <- function(cluster, task_type, task_index) {
  config <- with_backend(do.call(backend()$tf_config, c(list(cluster_to_py(cluster)),
                                                        task_arguments(environment()))))
  as_tfdistributed_tf_config(config)
}

as_tfdistributed_tf_config <- function(config) {
  if (is.null(config)) {
    return(NULL)
  }
  config$cluster <- as_tfdistributed_cluster(config$cluster)
  structure(config, class = "tfdistributed_tf_config")
}

# A TF_CONFIG as R list -> Python dict (JSON text and NULL pass as they are).
tf_config_to_py <- function(config, call = rlang::caller_env()) {
  if (is.null(config) || is.character(config) || is_py(config)) {
    return(config)
  }
  if (!is.list(config) || !rlang::is_named(config)) {
    tfd_abort("A TF_CONFIG must be a named list with `cluster` and `task` (or its JSON text), got ",
              describe(config), ".", call = call)
  }
  config <- unclass(config)
  if (!is.null(config$cluster)) {
    config$cluster <- cluster_to_py(config$cluster, call = call)
  }
  if (is.list(config$task) && is.numeric(config$task$index)) {
    config$task$index <- as_integer(config$task$index, "task index", call = call)
  }
  reticulate::r_to_py(config)
}

#' @export
format.tfdistributed_tf_config <- function(x, ...) {
  json <- reticulate::import("json", convert = TRUE)
  json$dumps(tf_config_to_py(x))
}

#' @export
print.tfdistributed_tf_config <- function(x, ...) {
  if (is.null(x$task)) {
    cat("<TF_CONFIG> no task: the coordinator of parameter-server training\n")
  } else {
    cat("<TF_CONFIG> task:", x$task$type, x$task$index, "\n")
  }
  print(x$cluster)
  invisible(x)
}

#' Set or read this process's TF_CONFIG
#'
#' `set_tf_config()` validates a TF_CONFIG and exports it for this process:
#' the process environment variable `TF_CONFIG` is its one store, which
#' TensorFlow, R (`Sys.getenv("TF_CONFIG")`) and the tasks this process starts
#' all read. Call it before
#' [distribute_strategy()]: TensorFlow reads TF_CONFIG when the strategy is
#' created. [launch_cluster()] sets it for every task it starts, so scripts run
#' by it need not call this.
#'
#' A TF_CONFIG set some other way (by Kubernetes, Vertex AI, Ray, or with
#' `Sys.setenv(TF_CONFIG = jsonlite::toJSON(...))`) is read the way TensorFlow
#' reads it. Keys TensorFlow ignores (Vertex AI's `job`, `environment`,
#' `trial`...) are kept. Shapes TensorFlow would crash on but whose meaning is
#' clear are rewritten in the environment before TensorFlow reads them: a
#' one-task job written as a bare string (`auto_unbox = TRUE`), a type or index
#' written as a one-element array (without `auto_unbox`), an index written as
#' text, a chief called `"master"`. Anything else TensorFlow cannot use is an
#' R error naming the field, including `TF_CONFIG=""` (use
#' [clear_tf_config()] or `Sys.unsetenv("TF_CONFIG")` to unset it).
#'
#' @inheritParams tf_task_config
#' @param config Instead of `cluster`/`task_type`/`task_index` (which say
#'   which task this process is): a whole TF_CONFIG, as a list or JSON text.
#' @return `set_tf_config()`: the TF_CONFIG that was set, invisibly.
#'   `get_tf_config()`: the validated TF_CONFIG, or `NULL` when none is set.
#' @family cluster configuration
#' @export
#' @examples
#' if (backend_available()) {
#'   set_tf_config(local_cluster(2), "worker", 0)
#'   get_tf_config()
#'   Sys.getenv("TF_CONFIG")
#'   clear_tf_config()
#'   get_tf_config()   # NULL: no cluster
#' }
set_tf_config <- function(cluster = NULL, task_type, task_index, config = NULL) {
  set <- with_backend(do.call(backend()$set_tf_config, c(list(
    tf_config_to_py(config), cluster = cluster_to_py(cluster)), task_arguments(environment()))))
  invisible(as_tfdistributed_tf_config(set))
}

# `task_type` and `task_index` of the function whose frame is `env`, those it was given.
task_arguments <- function(env) {
  given_arguments(env, list(
    task_type = function(x, arg, call) as_string(x, arg, allow_null = TRUE, call = call),
    task_index = as_integer))
}

#' @rdname set_tf_config
#' @export
get_tf_config <- function() {
  as_tfdistributed_tf_config(with_backend(backend()$read_tf_config()))
}

#' @rdname set_tf_config
#' @export
clear_tf_config <- function() {
  with_backend(backend()$clear_tf_config())
  invisible()
}

#' Where this task stands in the cluster
#'
#' `is_chief()`: is this task a chief as TensorFlow defines it: the chief,
#' worker 0 when there is no chief, the evaluator (its own one-task cluster),
#' or the coordinator of a parameter-server cluster without a chief (`TRUE`
#' without TF_CONFIG). Saving functions such as [save_model_distributed()]
#' never let the evaluator write training checkpoints, although it is a chief.
#' `num_workers()`: how many tasks hold training replicas, i.e. the hosts a
#' training step runs on: chief and workers in a multi-worker cluster (the chief
#' trains too); only the workers in a parameter-server cluster (TensorFlow's
#' `worker_count` counts the chief there as well, but it only coordinates); 1
#' for the evaluator and without TF_CONFIG. For a global batch size use
#' [global_batch_size()], which counts each host's devices too.
#'
#' @param config A TF_CONFIG (list or JSON text); default this process's.
#' @return A logical / an integer.
#' @family cluster configuration
#' @export
#' @examples
#' if (backend_available()) {
#'   is_chief()      # TRUE without TF_CONFIG
#'   num_workers()   # 1
#'   config <- tf_task_config(local_cluster(3), "worker", 2)
#'   is_chief(config)
#'   num_workers(config)
#' }
is_chief <- function(config = NULL) {
  with_backend(backend()$is_chief(tf_config_to_py(config)))
}

#' @rdname is_chief
#' @export
num_workers <- function(config = NULL) {
  as.integer(with_backend(backend()$num_workers(tf_config_to_py(config))))
}
