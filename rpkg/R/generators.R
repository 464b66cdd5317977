# R generators feeding TensorFlow under any strategy, without the deadlock.
#
# tf$data$Dataset$from_generator(<R function>) given to model$fit() hangs: TensorFlow calls the
# generator on one of its own threads, reticulate runs R only on R's main thread, and that
# thread is blocked inside fit(). Here the roles are swapped: training runs on a Python thread
# (tfdistributed.r.served.TrainingJob) and R's main thread serves the generator - it calls
# the R function, puts the batch into a bounded buffer (BatchFeed) that TensorFlow reads, and
# waits for space in short Python calls (<= 10 ms). So R stays responsive: an interrupt is
# noticed within one wait, and an error in the generator stops training at the next step.
# The buffer's capacity (`prefetch`) is how far R runs ahead of training.

#' Stream batches from an R function into distributed training
#'
#' Wraps an R function that returns the next batch, so that [fit_distributed()]
#' and [evaluate_distributed()] can train on data that does not fit in memory:
#' read the next chunk of a file, query a database, augment images - any R code.
#' Training runs on a background thread while R's main thread calls your
#' function and keeps up to `prefetch` batches ready, so R prepares the next
#' batches while TensorFlow trains on the current one.
#'
#' The function returns `list(x, y)` or `list(x, y, sample_weight)` per call:
#' `x` a numeric array (or a list of arrays, one per model input) whose first
#' dimension is the batch, `y` the targets (a vector, factor or array) with the
#' same first dimension. Doubles become float32, integers int32, factors
#' 0-based int32 codes. Every batch must have the types and shapes of the first
#' (apart from the batch size). Return `NULL` to end an epoch: the function is
#' then called again for the next epoch, so it must start over. A function that
#' never returns `NULL` needs `steps_per_epoch` in [fit_distributed()] (and
#' `steps` in [evaluate_distributed()]). Under every strategy but `default`
#' and `one_device`, give `steps_per_epoch` / `steps` in any case: there Keras
#' reads ahead of an epoch's end and would drop batches, so a `NULL` only
#' means that the function starts over. Batches are *global* batches, as for
#' arrays: each replica gets its share.
#'
#' If the function declares arguments named `worker_index` and/or
#' `num_workers`, they are passed on every call. In a multi-worker job each
#' worker calls its own function, in its own process: worker `i` of `n` should
#' produce its part of the data (e.g. every `n`-th file starting at `i`), and
#' every worker must produce the same number of batches per epoch (steps run in
#' lock-step). Under `multi_worker_mirrored` TensorFlow does not shard this
#' stream further (shard policy `"off"`): each worker's batches are split over
#' its replicas, one global batch per worker every `n` steps.
#'
#' Under `parameter_server` the input pipelines run inside the workers'
#' TensorFlow servers, which have no R: write the data as files with
#' [write_dataset_shards()] and read them with [dataset_from_files()] instead
#' (an R generator there is an error that says so).
#'
#' An error in the function stops training at once with an R error of class
#' `tfdistributed_generator_error` that carries your function's message (and
#' the original condition as `$parent`); a batch of the wrong type or shape is
#' the same error naming the expected signature; an interrupt (Ctrl-C) stops
#' training. Up to `prefetch` batches made before training stopped are
#' discarded.
#'
#' @param generator A function returning the next batch (see Details).
#' @param prefetch How many batches R may prepare ahead of training (left out:
#'   the backend's default, 8).
#' @return A `tfdistributed_generator_dataset` for [fit_distributed()] and
#'   [evaluate_distributed()].
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   digits <- digits_data()
#'   batches <- function(x, y, batch_size = 64) {
#'     start <- 1
#'     function() {
#'       if (start > nrow(x)) { start <<- 1; return(NULL) }   # end of the epoch
#'       rows <- start:min(start + batch_size - 1, nrow(x))
#'       start <<- start + batch_size
#'       list(x[rows, , , , drop = FALSE], y[rows])
#'     }
#'   }
#'   gen <- dataset_from_generator(batches(digits$train$x, digits$train$y))
#'   gen
#'   model <- keras$Sequential(list(keras$Input(shape = input_shape(8, 8, 1)),
#'                                  keras$layers$Flatten(), keras$layers$Dense(10L)))
#'   model$compile(optimizer = "adam", metrics = list("accuracy"),
#'                 loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
#'   fit_distributed(model, gen, epochs = 2, verbose = 0)
#' }
dataset_from_generator <- function(generator, prefetch) {
  if (!is.function(generator)) {
    tfd_abort("`generator` must be an R function returning the next batch as list(x, y), got ",
          describe(generator), ".", class = "tfdistributed_generator_error")
  }
  # The backend's feed holds `prefetch` batches (left out: its default): its rule, checked
  # now rather than at fit().
  prefetch <- with_backend(do.call(backend()$r$feed$BatchFeed$check_capacity,
    unname(given_arguments(environment(), list(prefetch = as_integer)))))
  args <- names(formals(generator))
  known <- c("worker_index", "num_workers")
  unknown <- setdiff(args, c(known, "..."))
  required <- unknown[vapply(formals(generator)[unknown], function(a) identical(a, quote(expr = )),
                             logical(1))]
  if (length(required)) {
    tfd_abort("The generator has argument(s) ", paste0("`", required, "`", collapse = ", "),
          " without a default; it is called with no arguments, or with `worker_index` and ",
          "`num_workers` when it declares them. Give the others defaults, or capture them in a ",
          "closure: function(worker_index, num_workers) { ... }.",
          class = "tfdistributed_generator_error")
  }
  arg_names <- if ("..." %in% args) known else intersect(known, args)
  structure(list(generator = generator, prefetch = prefetch, arg_names = arg_names),
            class = "tfdistributed_generator_dataset")
}

#' @export
print.tfdistributed_generator_dataset <- function(x, ...) {
  cat("<tfdistributed generator dataset: an R function, prefetch ", x$prefetch, ">\n", sep = "")
  if (length(x$arg_names)) {
    cat("  called with: ", paste(x$arg_names, collapse = ", "), "\n", sep = "")
  }
  invisible(x)
}

#' Is this a dataset fed by R code?
#'
#' `TRUE` for [dataset_from_generator()] objects, and for `tf.data` datasets
#' whose elements come from an R function through a Python callback (such as
#' `tf$data$Dataset$from_generator(<R function>)`). [fit_distributed()] serves
#' the former from R's main thread; the latter would hang in Keras (its
#' callback waits for R's main thread, which waits inside `fit()`), so it is
#' refused at once with an error that points to [dataset_from_generator()].
#'
#' @param x An object.
#' @return A single logical.
#' @family data
#' @export
is_generator_dataset <- function(x) {
  inherits(x, "tfdistributed_generator_dataset") || calls_r(x)
}

# A tf.data dataset whose Python callbacks call R functions (reticulate's wrappers).
calls_r <- function(x) {
  if (!inherits(x, "tensorflow.python.data.ops.dataset_ops.DatasetV2")) {
    return(FALSE)
  }
  found <- with_backend(backend()$r$find_host_generators(x))
  found$r_functions > 0
}

# Called at the top of fit_distributed() / evaluate_distributed(): the same call, with the
# already evaluated `x`, goes to fit_served() / evaluate_served().
serve_training <- function(call, x, env, what) {
  call[[1]] <- if (what == "fit") fit_served else evaluate_served
  call$x <- x
  eval(call, env)
}

# A tf$data$Dataset$from_generator(<R function>) would hang in fit(): refused with the fix.
refuse_raw_generator <- function(x, what) {
  if (!inherits(x, "tfdistributed_generator_dataset")) {
    tfd_abort(what, "() was given a tf.data dataset whose generator is an R function ",
          "(tf$data$Dataset$from_generator(<R function>)). Keras would hang on it: TensorFlow ",
          "calls the generator on its own thread, and that call waits for R's main thread, ",
          "which waits inside fit(). Pass dataset_from_generator(<your function>) instead: it ",
          "takes the same kind of function (returning list(x, y) per batch, NULL at the end ",
          "of an epoch) and serves it from R's main thread while TensorFlow trains.",
          class = "tfdistributed_generator_error")
  }
}

no_array_args <- function(what, y, batch_size, sample_weight) {
  given <- c(y = !is.null(y), batch_size = !is.null(batch_size),
             sample_weight = !is.null(sample_weight))
  if (any(given)) {
    tfd_abort(what, "(): ", paste0("`", names(given)[given], "`", collapse = ", "),
          " apply to arrays only: a generator returns list(x, y[, sample_weight]) batches of ",
          "the global batch size itself.", class = "tfdistributed_generator_error")
  }
}

# fit_distributed()'s and evaluate_distributed()'s own arguments (serve_training() calls these
# with the call as it was written): an argument left out is left out here too.
fit_served <- function(model, x, y = NULL, strategy = NULL, epochs, batch_size = NULL,
                       validation_data = NULL, callbacks = NULL, shard_policy = NULL,
                       shuffle, seed = NULL, steps_per_epoch = NULL,
                       sample_weight = NULL, check_shards, backup_dir = NULL,
                       save_freq, verbose, ...) {
  refuse_raw_generator(x, "fit_distributed")
  no_array_args("fit_distributed", y, batch_size, sample_weight)
  if (!is.null(shard_policy)) {
    tfd_abort("fit_distributed(): `shard_policy` does not apply to a generator: each worker's ",
          "generator produces that worker's data (TensorFlow does not shard it).",
          class = "tfdistributed_generator_error")
  }
  if (inherits(validation_data, "tfdistributed_generator_dataset")) {
    tfd_abort("fit_distributed(): `validation_data` cannot be a generator; pass list(x, y) arrays ",
          "or a tf.data dataset, or call evaluate_distributed() with the generator after ",
          "training.", class = "tfdistributed_generator_error")
  }
  given <- given_arguments(environment(), list(
    epochs = as_integer, shuffle = optional_flag, check_shards = optional_flag,
    save_freq = as_save_freq, verbose = as_verbose))
  args <- c(list(
    strategy = strategy, validation_data = validation_arg(validation_data),
    callbacks = callbacks_arg(callbacks), steps_per_epoch = as_integer(steps_per_epoch),
    backup_dir = as_path(backup_dir)), given, verbose_option(given), list(...))
  history <- run_served(model, x, strategy, args, "fit", passes = NULL,
                        stream = !is.null(args$steps_per_epoch))
  as_tfdistributed_history(history)
}

evaluate_served <- function(model, x, y = NULL, strategy = NULL, batch_size = NULL,
                            shard_policy = NULL, sample_weight = NULL, steps = NULL,
                            check_shards, verbose, ...) {
  refuse_raw_generator(x, "evaluate_distributed")
  no_array_args("evaluate_distributed", y, batch_size, sample_weight)
  steps <- as_integer(steps)
  given <- given_arguments(environment(), list(check_shards = optional_flag,
                                               verbose = as_verbose))
  args <- c(list(strategy = strategy, steps = steps), given, verbose_option(given), list(...))
  # Without `steps`, evaluation is one pass: R stops calling the generator at its NULL.
  result <- run_served(model, x, strategy, args, "evaluate", passes = if (is.null(steps)) 1L,
                       stream = !is.null(steps))
  unlist(result)
}

# Start the job on a training thread and serve it from here until it ends.
run_served <- function(model, x, strategy, args, what, passes, stream) {
  served <- backend()$r$served
  context <- with_backend(served$check_strategy(model, strategy, what))
  steps <- if (what == "fit") args$steps_per_epoch else args$steps
  with_backend(served$check_epochs(model, strategy, steps, what))
  feed <- backend()$r$feed$BatchFeed(capacity = x$prefetch, passes = passes, stream = stream)
  state <- new.env()
  state$batches <- 0L
  state$calls <- 0L
  call_args <- list(worker_index = as.integer(context$worker_index),
                    num_workers = as.integer(context$num_workers))[x$arg_names]
  # The first batch gives the dataset its signature, before training starts.
  produce_batch(x, feed, call_args, state)
  if (!is.null(state$error)) {
    stop(state$error)
  }
  starter <- if (what == "fit") served$start_fit else served$start_evaluate
  job <- with_backend(do.call(starter, c(list(model, feed), args)))
  on.exit(stop_job(job), add = TRUE)
  repeat {
    free <- feed$free_slots(0.01)
    if (free < 0L) {
      if (job$wait(0.01)) break
      next
    }
    for (i in seq_len(free)) {
      if (!produce_batch(x, feed, call_args, state)) break
    }
    if (!is.null(state$error)) break
  }
  if (!is.null(state$error)) {
    stop_job(job)
    stop(state$error)
  }
  with_backend(job$result())
}

# Call the generator once and put its batch (or the end of a pass) into the feed. FALSE when
# producing should stop (an error, recorded in state$error, or the last pass is done).
produce_batch <- function(x, feed, call_args, state) {
  number <- state$batches + 1L
  state$calls <- state$calls + 1L
  batch <- tryCatch(
    if (length(call_args)) do.call(x$generator, call_args) else x$generator(),
    error = function(e) {
      state$error <- generator_failed(e, state$calls, state$batches)
      feed$fail(conditionMessage(state$error))
      NULL
    }
  )
  if (!is.null(state$error)) {
    return(FALSE)
  }
  # An interrupt that arrived while the generator ran is pending for both R and Python; if
  # Python handled it first, it would surface as a KeyboardInterrupt inside the next Python
  # call (reticulate then fails to convert it). Sys.sleep() lets R take it here, as an R
  # interrupt.
  Sys.sleep(0)
  tryCatch({
    if (is.null(batch)) {
      feed$end_pass()
      state$stopped <- feed$stopped
    } else {
      feed$put(batch_to_py(batch, number))
      state$batches <- number
    }
  }, python.builtin.Exception = function(e) {
    message <- if (inherits(e, "tfdistributed.errors.TFDistributedError")) e$message_for("r") else
      python_message(e)
    state$error <- generator_error(message)
    feed$fail(conditionMessage(state$error))
  }, tfdistributed_generator_error = function(e) {
    state$error <- e
    feed$fail(conditionMessage(e))
  })
  # Only a NULL can complete the last pass; otherwise free_slots() reports a stop.
  is.null(state$error) && !isTRUE(state$stopped)
}

# A condition of class tfdistributed_generator_error, to be signalled later with stop().
generator_error <- function(message, parent = NULL) {
  rlang::error_cnd(c("tfdistributed_generator_error", "tfdistributed_error"),
                   message = message, parent = parent)
}

# The generator's own error is the parent, and its message is part of ours.
generator_failed <- function(e, calls, batches) {
  generator_error(paste0("The data generator failed on call ", calls, " (after ", batches,
                         " batches): ", conditionMessage(e), " (training was stopped)."),
                  parent = e)
}

# The message alone: it already says what the generator's own error (the parent) said, and
# rlang's "Caused by" would repeat it under a call that is ours, not the user's.
#' @export
conditionMessage.tfdistributed_generator_error <- function(c) {
  c$message
}

# A batch as Python expects it: an unnamed list(x, y[, w]) of arrays. R vectors get a dim so
# they become NumPy arrays (a plain vector would become a Python list), factors their 0-based
# codes, data frames numeric matrices.
batch_to_py <- function(batch, number) {
  if (!is.list(batch) || is.data.frame(batch) || !length(batch) %in% c(2L, 3L)) {
    tfd_abort("Batch ", number, " is ", describe(batch), ", not list(x, y) or ",
          "list(x, y, sample_weight). The generator must return list(x, y) for each batch ",
          "(NULL to end an epoch), x a numeric array whose first dimension is the batch, y the ",
          "targets with the same first dimension.", class = "tfdistributed_generator_error")
  }
  parts <- unname(batch)
  parts[[1]] <- if (is.list(parts[[1]]) && !is.data.frame(parts[[1]])) {
    lapply(parts[[1]], as_batch_leaf)
  } else {
    as_batch_leaf(parts[[1]])
  }
  parts[-1] <- lapply(parts[-1], as_batch_leaf)
  parts
}

as_batch_leaf <- function(v) {
  if (is.data.frame(v)) {
    v <- data.matrix(v)
  }
  if (is.factor(v)) {
    v <- as.integer(v) - 1L
  }
  if (is.atomic(v) && is.null(dim(v))) {
    dim(v) <- length(v)
  }
  v
}

# Close the feed and join the training thread; an R interrupt lands here through on.exit().
stop_job <- function(job, timeout = 60) {
  if (!job$stop(timeout)) {
    warning("The training thread did not stop within ", timeout, " s (TensorFlow is still ",
            "inside a step); it ends at its next read of the data.", call. = FALSE)
  }
  invisible()
}
