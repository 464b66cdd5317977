#' Train a Keras model under a distribution strategy
#'
#' Checks that the model was built and compiled inside the strategy's scope,
#' turns R data into a `tf.data` pipeline with the global batch size and the
#' `"data"` shard policy, checks that a dataset can be split over the workers
#' *before* training, and runs Keras `fit` inside the scope. Parameter-server
#' strategies use a coordinator-based loop; your code is the same for every
#' strategy.
#'
#' R data: numeric matrices, arrays and vectors (doubles become float32,
#' integers int32), data frames of numeric columns, factors as labels
#' (0-based codes), and named lists of those for models with named inputs.
#' Or pass a `tf.data.Dataset` yielding `(inputs, targets)` batches of the
#' global batch size as `x`. Keras' own `model$fit()`, `model$evaluate()` and
#' `model$predict()` work under every strategy too once the package is loaded
#' (the Keras repairs are installed when Python starts), and take R values
#' converted by the same rules as `fit_distributed()` (see [keras]).
#'
#' @param model A compiled Keras model, built inside `with(strategy$scope(), ...)`.
#' @param x Inputs (see Details), a `tf.data.Dataset`, or a
#'   [dataset_from_generator()] (batches made by an R function).
#' @param y Targets (arrays only).
#' @param strategy A strategy from [distribute_strategy()] (or any
#'   `tf.distribute.Strategy`); default the one the model was built under.
#' @param epochs Number of epochs to train (left out: 1).
#' @param batch_size Global batch size (arrays only): each replica gets
#'   `batch_size / replicas` examples per step, so it must divide evenly over
#'   the replicas, see [global_batch_size()].
#' @param validation_data `list(x, y)`, `list(x, y, sample_weight)` or a
#'   `tf.data.Dataset`.
#' @param validation_split Fraction of the rows (arrays only) held out for
#'   validation, as Keras does: the last rows, taken before shuffling and
#'   sharding. Ignored when `validation_data` is given.
#' @param class_weight A named list or named numeric vector mapping class
#'   indices (0-based, as names) to weights, e.g. `c("0" = 1, "1" = 2.5)`.
#' @param callbacks A Keras callback or a list of them.
#' @param shard_policy How a multi-worker job splits the data (`"data"` for
#'   arrays by default); see [dataset_shard_policy()].
#' @param shuffle Shuffle arrays every epoch (left out: yes).
#' @param seed Seed for the shuffle. In a multi-worker job every worker must
#'   shuffle alike: without a `seed`, a script that set TensorFlow's global
#'   seed (e.g. `keras$utils$set_random_seed(1L)`) shuffles as it would on one
#'   device, the same batches in every run; without either, the workers share a
#'   seed derived from the cluster. Workers seeded differently are an error.
#'   (The order is `tf.data`'s shuffle of the whole arrays: the same seed gives
#'   other batches than Keras' own `model$fit(shuffle = TRUE)`.)
#' @param steps_per_epoch Steps per epoch (needed for infinite datasets).
#' @param sample_weight Per-example weights (arrays only).
#' @param check_shards Check that a dataset can be sharded before training
#'   (left out: yes).
#' @param backup_dir A directory every worker can read (shared storage on a
#'   real cluster): the chief backs training up there, and a job started again
#'   (by hand, or by [launch_cluster()]'s [restarts()]) resumes from the last
#'   backup instead of from the start. Removed when training completes. With a
#'   backup directory, a SIGTERM (the preemption notice of SLURM, Kubernetes or
#'   a spot VM) makes every worker stop at the next backup, once written, with
#'   exit status 75, which [launch_cluster()] restarts.
#' @param save_freq When to back up: `"epoch"` (left out: a restarted job
#'   redoes the epoch it was in) or every N steps (arrays only, not under
#'   `parameter_server`): a restarted job resumes at the step of its last
#'   backup, so it redoes at most N steps and, with `shuffle = FALSE` or a
#'   `seed`, ends with the weights of an uninterrupted run.
#' @param max_replica_batch The most examples a replica takes in one step, a
#'   whole number. Where `batch_size` split over the replicas gives each more
#'   (an elastic job that lost workers), each update is made of several steps
#'   whose gradients are accumulated, so the global batch keeps its size and
#'   each replica its memory. Left out, each replica's share grows instead.
#' @param verbose `"auto"`, 0, 1 or 2 (non-chief workers are quiet with
#'   `"auto"`, the backend's default). Left out, `getOption("tfdistributed.verbose")`
#'   when it is set: `options(tfdistributed.verbose = 0)` changes the default.
#' @param ... Passed to Keras `model$fit()` / `model$evaluate()`.
#' @return `fit_distributed()`: a `tfdistributed_history`: `print()`, `plot()`
#'   and `as.data.frame()` (columns `epoch`, `metric`, `value`, and `data`:
#'   `"training"` or `"validation"` for the `val_*` metrics, as in keras' R
#'   history) work on it; `$metrics` is a named list of per-epoch values,
#'   `$epochs` the epochs (from 1). A job run by [launch_cluster()] returns
#'   the same kind of history in `$history`.
#' @seealso [distribute_strategy()], [dataset_from_arrays()],
#'   [backup_and_restore()]
#' @family training
#' @export
#' @examples
#' if (backend_available()) {
#'   strategy <- distribute_strategy("auto")
#'   digits <- digits_data()
#'   with(strategy$scope(), {
#'     model <- keras$Sequential(list(
#'       keras$Input(shape = input_shape(8, 8, 1)),
#'       keras$layers$Flatten(),
#'       keras$layers$Dense(64L, activation = "relu"),
#'       keras$layers$Dense(10L)
#'     ))
#'     model$compile(
#'       optimizer = "adam",
#'       loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE),
#'       metrics = list("accuracy")
#'     )
#'   })
#'   history <- fit_distributed(model, digits$train$x, digits$train$y,
#'                              epochs = 3, batch_size = 64, verbose = 0)
#'   history
#'   plot(history)
#'   evaluate_distributed(model, digits$test$x, digits$test$y, verbose = 0)
#' }
fit_distributed <- function(model, x, y = NULL, strategy = NULL, epochs, batch_size = NULL,
                            validation_data = NULL, validation_split = NULL, callbacks = NULL,
                            shard_policy = NULL, shuffle, seed = NULL,
                            steps_per_epoch = NULL, sample_weight = NULL, class_weight = NULL,
                            check_shards, backup_dir = NULL, save_freq, max_replica_batch,
                            verbose, ...) {
  # Data made by R code is served from R's main thread while training runs (generators.R).
  if (!missing(x) && is_generator_dataset(x)) {
    return(serve_training(match.call(), x, parent.frame(), "fit"))
  }
  if (missing(x)) {
    x <- NULL   # the backend says what data it needs
  }
  given <- given_arguments(environment(), list(
    epochs = as_integer, shuffle = optional_flag, check_shards = optional_flag,
    save_freq = as_save_freq, max_replica_batch = as_integer, verbose = as_verbose))
  history <- with_backend(do.call(backend()$fit, c(list(
    model, to_numpy(x, "x"), to_numpy(y, "y"),
    strategy = strategy, batch_size = as_integer(batch_size),
    validation_data = validation_arg(validation_data),
    validation_split = as_number(validation_split),
    class_weight = class_weight_arg(class_weight), callbacks = callbacks_arg(callbacks),
    shard_policy = as_string(shard_policy, allow_null = TRUE),
    seed = as_integer(seed), steps_per_epoch = as_integer(steps_per_epoch),
    sample_weight = to_numpy(sample_weight, "sample_weight"),
    backup_dir = as_path(backup_dir)), given, verbose_option(given), list(...))))
  as_tfdistributed_history(history)
}

#' @rdname fit_distributed
#' @param steps Number of evaluation steps (datasets).
#' @return `evaluate_distributed()`: a named numeric vector (`loss` and the
#'   compiled metrics).
#' @export
evaluate_distributed <- function(model, x, y = NULL, strategy = NULL, batch_size = NULL,
                                 shard_policy = NULL, sample_weight = NULL, steps = NULL,
                                 check_shards, verbose, ...) {
  if (!missing(x) && is_generator_dataset(x)) {
    return(serve_training(match.call(), x, parent.frame(), "evaluate"))
  }
  if (missing(x)) {
    x <- NULL   # the backend says what data it needs
  }
  given <- given_arguments(environment(), list(check_shards = optional_flag,
                                               verbose = as_verbose))
  result <- with_backend(do.call(backend()$evaluate, c(list(
    model, to_numpy(x, "x"), to_numpy(y, "y"),
    strategy = strategy, batch_size = as_integer(batch_size),
    shard_policy = as_string(shard_policy, allow_null = TRUE),
    sample_weight = to_numpy(sample_weight, "sample_weight"), steps = as_integer(steps)),
    given, verbose_option(given), list(...))))
  unlist(result)
}

# `verbose` from options(tfdistributed.verbose =) when the call gave none (`given`: the
# arguments it gave); neither: none, and the backend's default ("auto") applies.
verbose_option <- function(given) {
  verbose <- getOption("tfdistributed.verbose")
  if ("verbose" %in% names(given) || is.null(verbose)) list() else list(verbose = as_verbose(verbose))
}

as_path <- function(path, arg = rlang::caller_arg(path), call = rlang::caller_env()) {
  if (is.null(path)) NULL else path.expand(as_string(path, arg, call = call))
}

# "epoch" or a number of steps; which values are valid is the backend's rule.
as_save_freq <- function(save_freq, arg = "save_freq", call = rlang::caller_env()) {
  if (is.numeric(save_freq)) as_integer(save_freq, arg, call = call) else save_freq
}

# list(x, y[, sample_weight]) -> a Python list (Keras takes it as the tuple), each part converted
# by to_numpy() (x may be a list of arrays, one per model input); an R array -> a NumPy array.
# Which shapes are valid validation data is the backend's rule. (`call` may be a call object: it
# goes to each part as an argument, never through Map()'s or do.call()'s argument lists, which
# would evaluate it.)
validation_arg <- function(validation_data, call = rlang::caller_env()) {
  if (is.null(validation_data) || is_py(validation_data)) {
    return(validation_data)
  }
  if (!is.list(validation_data) || is.data.frame(validation_data)) {
    return(to_numpy(validation_data, "validation_data", call = call))
  }
  labels <- c("validation x", "validation y", "validation sample_weight")
  lapply(seq_along(validation_data), function(i) {
    to_numpy(validation_data[[i]], if (i <= length(labels)) labels[[i]] else "validation_data",
             call = call)
  })
}

class_weight_arg <- function(class_weight, call = rlang::caller_env()) {
  # A Python dict is Keras' own form (keras3's fit() converts to it before calling model$fit()).
  if (is.null(class_weight) || is_py(class_weight)) {
    return(class_weight)
  }
  classes <- suppressWarnings(as.integer(names(class_weight)))
  if (!(is.numeric(class_weight) || is.list(class_weight)) || is.null(names(class_weight)) ||
      anyNA(classes)) {
    tfd_abort("`class_weight` must be named by class index, e.g. c(\"0\" = 1, \"1\" = 2.5), got ",
              describe(class_weight), ".", call = call)
  }
  weights <- as.numeric(unlist(class_weight))
  reticulate::py_dict(as.list(classes), as.list(weights))
}

callbacks_arg <- function(callbacks, call = rlang::caller_env()) {
  if (is.null(callbacks)) {
    return(NULL)
  }
  if (is_py(callbacks)) {
    callbacks <- list(callbacks)
  }
  if (!is.list(callbacks) || !all(vapply(callbacks, is_py, logical(1)))) {
    tfd_abort("`callbacks` must be a Keras callback or a list of them ",
          "(e.g. keras$callbacks$EarlyStopping()), got ", describe(callbacks), ".", call = call)
  }
  callbacks
}

as_tfdistributed_history <- function(history) {
  params <- tryCatch(reticulate::py_to_r(history$params), error = function(e) list())
  new_history(history$history, history$epoch, params)
}

# The one constructor of a `tfdistributed_history`, from Keras' `History.history` (a dict of
# per-epoch lists) and its 0-based epochs: fit_distributed()'s and a launched job's are one
# class, so print(), plot() and as.data.frame() treat them alike. A metric the reporting task
# did not log in some epoch comes as None: NA here, not a shorter vector.
new_history <- function(history, epochs, params = list()) {
  history <- if (is_py(history)) reticulate::py_to_r(history) else history
  metrics <- lapply(history, function(v) {
    vapply(v, function(x) if (is.null(x)) NA_real_ else as.numeric(x), numeric(1))
  })
  structure(list(metrics = metrics, epochs = as.integer(unlist(epochs)) + 1L, params = params),
            class = "tfdistributed_history")
}

#' @export
as.data.frame.tfdistributed_history <- function(x, ...) {
  rows <- lapply(names(x$metrics), function(metric) {
    values <- x$metrics[[metric]]
    data.frame(epoch = x$epochs[seq_along(values)], metric = metric, value = values,
               data = if (startsWith(metric, "val_")) "validation" else "training",
               stringsAsFactors = FALSE)
  })
  if (!length(rows)) {
    return(data.frame(epoch = integer(), metric = character(), value = numeric(),
                      data = character()))
  }
  do.call(rbind, rows)
}

#' @export
print.tfdistributed_history <- function(x, ...) {
  n <- length(x$epochs)
  cat(sprintf("<tfdistributed history: %d epoch%s>\n", n, if (n == 1) "" else "s"))
  if (n) {
    last <- vapply(x$metrics, function(v) v[[length(v)]], numeric(1))
    cat(sprintf("  final %-*s %s\n", max(nchar(names(last))) + 1, paste0(names(last), ":"),
                format(signif(last, 4))), sep = "")
  }
  invisible(x)
}

#' Plot a training history
#'
#' One panel per metric, with training and validation (`val_*`) values on
#' the same panel. Base graphics.
#'
#' @param x A `tfdistributed_history` from [fit_distributed()], or a launched
#'   job's `$history` ([launch_cluster()]).
#' @param y Unused.
#' @param metrics Metric names to plot; default all.
#' @param ... Passed to [graphics::plot()].
#' @return `x`, invisibly.
#' @family training
#' @export
plot.tfdistributed_history <- function(x, y, metrics = NULL, ...) {
  names_all <- names(x$metrics)
  base <- unique(sub("^val_", "", names_all))
  if (!is.null(metrics)) {
    base <- intersect(base, metrics)
  }
  if (!length(base)) {
    tfd_abort("Nothing to plot: the history has no metrics", if (!is.null(metrics)) " of those names", ".")
  }
  old <- graphics::par(mfrow = c(length(base), 1), mar = c(4, 4, 1.5, 1))
  on.exit(graphics::par(old))
  for (metric in base) {
    series <- intersect(c(metric, paste0("val_", metric)), names_all)
    values <- unlist(x$metrics[series])
    graphics::plot(range(x$epochs), range(values, na.rm = TRUE), type = "n", xlab = "epoch",
                   ylab = metric, main = metric, ...)
    for (i in seq_along(series)) {
      v <- x$metrics[[series[[i]]]]
      graphics::lines(x$epochs[seq_along(v)], v, type = "b", pch = 19 + i - 1, col = i, lty = i)
    }
    if (length(series) > 1) {
      graphics::legend("topright", legend = c("training", "validation"), col = seq_along(series),
                       lty = seq_along(series), pch = 19 + seq_along(series) - 1, bty = "n")
    }
  }
  invisible(x)
}
