#' Create a distribution strategy by name
#'
#' Returns a `tf.distribute.Strategy` (a reticulate Python object, so
#' `strategy$scope()` and every other method work) that also prints usefully
#' in R. Build and compile models inside `with(strategy$scope(), { ... })`.
#'
#' Names (case-insensitive; class names such as `"MirroredStrategy"` work too):
#' `"default"`, `"one_device"`, `"mirrored"`, `"central_storage"`,
#' `"multi_worker_mirrored"`, `"parameter_server"`, `"tpu"`, and `"auto"`, which
#' picks `parameter_server` when TF_CONFIG has ps tasks (on the chief, or on
#' the coordinator of a cluster without a chief), `multi_worker_mirrored` when
#' it has several workers, `mirrored` with several GPUs or when
#' `num_cpu_devices` > 1 is asked for, else `default` (an `evaluator` task gets
#' a local strategy); so one script runs unchanged on a laptop and under
#' [launch_cluster()].
#'
#' TensorFlow fixes its devices when it first initializes: `num_cpu_devices`
#' must be given in the first strategy of the R session (before anything else
#' uses TensorFlow). Later strategies reuse those logical CPUs.
#'
#' On GPUs, every GPU the process sees gets memory growth first, so that
#' TensorFlow takes memory as it needs it and tasks can share a GPU
#' (`TF_FORCE_GPU_ALLOW_GROWTH=false`, TensorFlow's own variable, turns it
#' off), and `multi_worker_mirrored` all-reduces with NCCL unless
#' `communication_options` names another implementation. No GPU run has been
#' measured yet (the article "GPUs" on the site).
#'
#' @param name Strategy name (see Details); left out, `"auto"`.
#' @param devices Device string(s) for `one_device`, `mirrored` and
#'   `central_storage`, e.g. `c("/cpu:0", "/cpu:1")`.
#' @param num_cpu_devices Split the CPU into this many logical devices first, so
#'   a CPU-only machine gets several replicas.
#' @param gradient_compression `"fp16"` or `"bf16"`: the gradients cross the
#'   network between workers in 16 bits and are applied in the model's own
#'   precision (about 2x less traffic; the loss moves by ~1e-5 relative on the
#'   digits model with fp16, ~1e-4 with bf16). `"powersgd"`, or [powersgd()]'s
#'   options (`powersgd(rank = 4, warmup_steps = 100)`): big gradient matrices
#'   cross the network as their low-rank approximation, what it drops is sent
#'   in later steps (tens of times less traffic; see [powersgd()]). Only for
#'   `multi_worker_mirrored`: an error for the other kinds, a warning (and
#'   ignored) when `"auto"` picks a local strategy; `"auto"` never compresses by
#'   itself. `NULL` (the default) or `"none"`: 32 bits.
#' @param join_timeout Seconds a task of a multi-worker job waits for the
#'   others to join (default: the environment variable
#'   `TFDISTRIBUTED_JOIN_TIMEOUT`, else 300). While it waits, it prints every
#'   15 s (a third of a shorter timeout) which tasks it still waits for, at
#'   which address, and what the network answers (connection refused: nothing
#'   listens there; no route or timed out: a wrong address, a host down, a
#'   firewall); then it fails with an error naming them.
#' @param bytes_per_pack For `multi_worker_mirrored`: send the gradients in
#'   packs of about this many bytes (e.g. `4e6`), each as soon as the backward
#'   pass has computed it, so that the network works while the earlier layers'
#'   gradients are still being computed (as PyTorch DDP's buckets). `NULL` (the
#'   default): "auto", about 4 packs for a gradient of 8 MB or more, one
#'   all-reduce below; 0: always one all-reduce per step. Packs pay when a
#'   step's compute and its all-reduce take times of the same order (a big model
#'   on a slow network: 1.04-1.16x the examples/s measured); they need 2
#'   TensorFlow inter-op threads, which this arranges for a task limited to one
#'   core (a 1 you set is kept, with a warning when you asked for packs). An
#'   error for the other kinds; ignored when `"auto"` picks a local strategy.
#' @param ... Passed to the strategy constructor: `cross_device_ops`
#'   (mirrored), `parameter_device` (central_storage), `communication_options`
#'   (multi_worker_mirrored), `variable_partitioner` (parameter_server), `tpu`,
#'   `cluster_resolver`.
#' @return The strategy, with class `tfdistributed_strategy` prepended.
#' @seealso [fit_distributed()]
#' @family strategies
#' @export
#' @examples
#' if (backend_available()) {
#'   strategy <- distribute_strategy("auto")   # "default" here: no cluster, no GPUs
#'   strategy
#'   with(strategy$scope(), {
#'     model <- keras$Sequential(list(keras$Input(shape = input_shape(4)),
#'                                    keras$layers$Dense(1L)))
#'     model$compile(optimizer = "adam", loss = "mse")
#'   })
#'   # A misspelt name is an R error with the closest valid one:
#'   try(distribute_strategy("mirorred"))
#' }
distribute_strategy <- function(name, devices = NULL, num_cpu_devices = NULL,
                                gradient_compression = NULL, ..., join_timeout = NULL,
                                bytes_per_pack = NULL) {
  named <- given_arguments(environment(), list(
    name = function(x, arg, call) as_string(x, arg, call = call)))
  strategy <- with_backend(do.call(backend()$make_strategy, c(unname(named), list(
    devices = if (is.character(devices)) py_list(devices) else devices,
    num_cpu_devices = as_integer(num_cpu_devices),
    gradient_compression = if (is_py(gradient_compression)) {
      gradient_compression  # powersgd()'s options
    } else {
      as_string(gradient_compression, allow_null = TRUE)
    },
    join_timeout = as_number(join_timeout),
    bytes_per_pack = as_integer(bytes_per_pack)), list(...))))
  as_tfdistributed_strategy(strategy)
}

as_tfdistributed_strategy <- function(strategy) {
  if (!inherits(strategy, "tfdistributed_strategy")) {
    class(strategy) <- c("tfdistributed_strategy", class(strategy))
  }
  strategy
}

#' Low-rank gradient compression (PowerSGD) for a multi-worker strategy
#'
#' Options for `distribute_strategy("multi_worker_mirrored", gradient_compression
#' = powersgd(...))` (`gradient_compression = "powersgd"` takes the defaults).
#' Each big gradient matrix (a dense layer's kernel; a convolution kernel,
#' reshaped) crosses the network as two thin matrices, its rank-`rank`
#' approximation, in two small all-reduces per step (PyTorch DDP's
#' `powerSGD_hook`, after Vogels, Karimireddy and Jaggi, 2019); every worker
#' applies the same update. What the approximation drops is kept per worker
#' (error feedback) and added to the next step's gradient, so it is delayed,
#' not lost. Vectors (biases) and matrices too small to shrink go whole, with
#' the step's loss and metrics. The state (the `Q` matrices and error buffers)
#' is saved with the optimizer: `fit_distributed(backup_dir = )`
#' backs it up and a restarted job resumes as if uninterrupted; a job restarted
#' with another number of workers starts it afresh, and says so.
#'
#' It pays where the network is the bottleneck: big matrices on a slow link (on
#' 2 hosts at 100 Mbit/s the benchmark's wide MLP, a 10.6 MB gradient, trained
#' at 9.2 times the examples/s of 32 bits, with the same held-out accuracy
#' within 0.005). It costs two all-reduces per step instead of one (a round
#' trip of latency: a small model gains nothing, and on a fast network can
#' lose), and some progress per step, which error feedback, the warm-up and
#' later epochs make up.
#'
#' @param rank The rank of each matrix's approximation (a whole number >= 1;
#'   left out, 4; DDP's default is 1). Higher: more bytes, closer to the full
#'   gradient.
#' @param warmup_steps Steps of plain 32-bit all-reduce before compression
#'   starts (a whole number >= 0; left out, 1000, as DDP's
#'   `start_powerSGD_iter`).
#' @param min_compression_rate A matrix goes low-rank only when that divides
#'   its bytes by at least this much (a number >= 1; left out, 2, as DDP);
#'   else it is sent whole.
#' @param error_feedback Add what compression dropped to the next step's
#'   gradient (left out: `TRUE`, as DDP).
#' @param warm_start Start each step from the last step's `Q` matrices (left
#'   out: `TRUE`, as DDP); `FALSE` draws new ones every step.
#' @return The options (a Python object) for `gradient_compression`.
#' @seealso [distribute_strategy()]
#' @family strategies
#' @export
#' @examples
#' if (backend_available()) {
#'   print(powersgd(rank = 2, warmup_steps = 100))
#'   # Refused by name:
#'   try(powersgd(rank = 0))
#'   try(distribute_strategy("mirrored", gradient_compression = powersgd()))
#' }
powersgd <- function(rank, warmup_steps, min_compression_rate, error_feedback, warm_start) {
  with_backend(do.call(backend()$powersgd, given_arguments(environment(), list(
    rank = as_integer, warmup_steps = as_integer, min_compression_rate = as_number,
    error_feedback = optional_flag, warm_start = optional_flag))))
}

#' Describe a strategy: kind, replicas, devices, workers
#'
#' @param strategy A strategy from [distribute_strategy()] (or any
#'   `tf.distribute.Strategy`).
#' @return A list with `kind`, `num_replicas`, `devices`, `num_workers`,
#'   `task_type` and `task_index` (and `num_ps` for parameter-server,
#'   `gradient_compression`, `powersgd` (its options, or `NULL`) and
#'   `bytes_per_pack` for multi-worker mirrored).
#' @family strategies
#' @export
#' @examples
#' if (backend_available()) {
#'   strategy_info(distribute_strategy("default"))$num_replicas
#' }
strategy_info <- function(strategy) {
  with_backend(backend()$strategy_info(strategy))
}

#' @export
format.tfdistributed_strategy <- function(x, ...) {
  info <- tryCatch(strategy_info(x), error = function(e) NULL)
  if (is.null(info)) {
    return("<tfdistributed strategy (not inspectable)>")
  }
  lines <- c(
    sprintf("<tfdistributed strategy: %s>", info$kind),
    sprintf("  replicas in sync: %d", as.integer(info$num_replicas)),
    sprintf("  devices:          %s", paste(unlist(info$devices), collapse = ", ")),
    sprintf("  workers:          %d", as.integer(info$num_workers))
  )
  if (!is.null(info$task_type)) {
    lines <- c(lines, sprintf("  this task:        %s %d", info$task_type, as.integer(info$task_index)))
  }
  if (!is.null(info$gradient_compression)) {
    sent <- info$gradient_compression
    if (!is.null(info$powersgd)) {
      sent <- sprintf("powersgd (rank %d, after %d steps in 32 bits)",
                      as.integer(info$powersgd$rank), as.integer(info$powersgd$warmup_steps))
    }
    lines <- c(lines, sprintf("  gradients sent:   %s", sent))
  }
  if (identical(info$kind, "multi_worker_mirrored")) {
    packs <- info$bytes_per_pack
    lines <- c(lines, sprintf("  gradient packs:   %s", if (is.null(packs)) {
      "auto (packs for a gradient of 8 MB or more)"
    } else if (packs == 0) {
      "none (one all-reduce per step)"
    } else {
      paste(format(packs, big.mark = ","), "bytes")
    }))
  }
  if (!is.null(info$num_ps)) {
    lines <- c(lines, sprintf("  ps tasks:         %d", as.integer(info$num_ps)))
  }
  lines
}

#' @export
print.tfdistributed_strategy <- function(x, ...) {
  writeLines(format(x, ...))
  invisible(x)
}

#' Split the CPU into logical devices
#'
#' Gives a CPU-only machine several replicas for `mirrored` and
#' `central_storage`. Must run before anything else uses TensorFlow in this R
#' session; [distribute_strategy()] does it for you with `num_cpu_devices`.
#'
#' @param n Number of logical CPU devices.
#' @return The logical device names, invisibly.
#' @family strategies
#' @export
#' @examples
#' if (backend_available()) {
#'   # Only before TensorFlow initializes; afterwards, asking for the same number
#'   # again is fine and any other number is an error naming the fix.
#'   try(configure_cpu_devices(2))
#' }
configure_cpu_devices <- function(n) {
  n <- as_integer(n)
  devices <- with_backend(backend()$configure_cpu_devices(n))
  invisible(vapply(devices, function(d) d$name, character(1)))
}
