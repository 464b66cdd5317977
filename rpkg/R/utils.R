# The R/Python boundary: R values coerced to what the backend expects, and backend errors
# turned into R conditions.
#
# The Python backend holds every rule and every message (a batch size that does not divide
# over the replicas, a misspelt strategy, a malformed TF_CONFIG...). This file only does what
# reticulate cannot do right by itself: R writes 64 for a double, and the backend refuses
# floats where it needs a count (so that a computed 64.5 is caught), so whole doubles become
# integers here; NA (which has no Python equivalent) is refused here; character vectors that
# must stay lists become lists. Everything else goes to Python as it is.

# Our conditions: rlang errors whose class vector holds the kind (e.g.
# "tfdistributed_cluster_config_error"), then "tfdistributed_error", so callers can catch one
# kind or all of ours with tryCatch(). `call` is the frame of the function the user called.
# They are signalled with base stop(), not rlang::abort(): in an embedded, interactive R (rpy2)
# abort() prints the message itself and leaves R's error message (geterrmessage(), which rpy2
# reports) empty.
tfd_abort <- function(..., class = NULL, call = rlang::caller_env(), parent = NULL) {
  if (is.environment(call)) {
    call <- rlang::frame_call(call)
  }
  stop(rlang::error_cnd(c(class, "tfdistributed_error"), message = paste0(...), call = call,
                        parent = parent))
}

# The call an error names: the user's own (`model$fit(x, y)`), or, where the function was
# called through do.call() with itself in the call (keras3's fit() runs `do.call(object$fit,
# args)`, tfdatasets' dataset_batch() `do.call(dataset$batch, args)`), a call of `label` with no
# arguments (`model$fit()`): that call's arguments are values, not code.
error_call <- function(call, label) {
  if (is.call(call) && !is.function(call[[1L]])) call else as.call(list(str2lang(label)))
}

describe <- function(x) {
  if (is.null(x)) {
    return("NULL")
  }
  if (inherits(x, "python.builtin.object")) {
    return(paste("a Python", class(x)[[1]]))
  }
  shown <- if (is.atomic(x) && length(x) <= 3) {
    paste(format(x), collapse = ", ")
  } else {
    paste("length", length(x))
  }
  paste0(class(x)[[1]], " ", shown)
}

# Type checks in the style of rlang's standalone `check_*()` helpers: the argument's name comes
# from the call (`caller_arg()`), the error from the function the user called (`caller_env()`).
# Only types are checked; ranges (`>= 1`, `0 < x < 1`...) are the backend's rules.

#' Coerce a whole number to an R integer, or fail with a helpful R error
#'
#' Whole doubles such as `64` become `64L`; `NULL` stays `NULL` (the backend
#' says whether the argument may be left out); fractional values, `NA`,
#' strings and vectors are R errors that say what to pass.
#'
#' @param x The value.
#' @param arg Argument name used in the error message.
#' @param call The call the error is reported for.
#' @return A length-one integer, or `NULL`.
#' @keywords internal
#' @noRd
as_integer <- function(x, arg = rlang::caller_arg(x), call = rlang::caller_env()) {
  if (is.null(x) || is_py(x)) {
    return(x)
  }
  if (!rlang::is_scalar_integerish(x, finite = TRUE) || abs(x) > .Machine$integer.max) {
    example <- if (is.numeric(x) && length(x) == 1 && is.finite(x)) max(floor(x), 1) else 2
    tfd_abort("`", arg, "` must be a single whole number, got ", describe(x),
              ": pass e.g. ", arg, " = ", example, ".", call = call)
  }
  as.integer(x)
}

as_string <- function(x, arg = rlang::caller_arg(x), allow_null = FALSE,
                      call = rlang::caller_env()) {
  if (is.null(x) && allow_null) {
    return(NULL)
  }
  if (!rlang::is_string(x) || !nzchar(x)) {
    tfd_abort("`", arg, "` must be a single non-empty string, got ", describe(x), ".", call = call)
  }
  x
}

as_flag <- function(x, arg = rlang::caller_arg(x), allow_null = FALSE,
                    call = rlang::caller_env()) {
  if (is.null(x) && allow_null) {
    return(NULL)
  }
  if (!rlang::is_bool(x)) {
    tfd_abort("`", arg, "` must be TRUE or FALSE, got ", describe(x), ".", call = call)
  }
  x
}

as_number <- function(x, arg = rlang::caller_arg(x), call = rlang::caller_env()) {
  if (is.null(x) || is_py(x)) {
    return(x)
  }
  if (!is.numeric(x) || length(x) != 1 || is.na(x)) {
    tfd_abort("`", arg, "` must be a single number, got ", describe(x), ".", call = call)
  }
  as.double(x)
}

# Keras' verbose: "auto", or a level; TRUE/FALSE and whole doubles become integers. Which
# levels exist is the backend's rule.
as_verbose <- function(verbose, arg = "verbose", call = rlang::caller_env()) {
  if (rlang::is_bool(verbose)) {
    return(as.integer(verbose))
  }
  if (is.numeric(verbose)) as_integer(verbose, arg, call = call) else verbose
}

# A named R list or vector (names required: it becomes Python keyword arguments or a dict).
check_named <- function(x, arg = rlang::caller_arg(x), what = "a named character vector",
                        example, call = rlang::caller_env()) {
  if (!length(x)) {
    return(invisible(x))
  }
  if (!rlang::is_named(x) || anyNA(x)) {
    tfd_abort("`", arg, "` must be ", what, " such as ", example, ", got ", describe(x), ".",
              call = call)
  }
  invisible(x)
}

# Run `expr` (calls into the backend). A Python exception raised on purpose by tfdistributed
# becomes an R error with the backend's message plus its R hint (not Python's), and the
# backend's kind in the class vector, without a Python traceback. Other Python exceptions
# (TensorFlow, Keras) keep their own message and type name; with `foreign = "as_raised"` (the
# methods of other packages' objects that this package takes over, `model$fit()`,
# `dataset$batch()`) they are re-signalled as reticulate raised them, so code that catches
# them by class (`python.builtin.ValueError`) works as it did without tfdistributed.
with_backend <- function(expr, call = rlang::caller_env(), foreign = c("wrapped", "as_raised")) {
  force(call)
  foreign <- match.arg(foreign)
  tryCatch(expr, python.builtin.SystemExit = function(e) exit_as_asked(e, call),
           python.builtin.Exception = function(e) {
    if (inherits(e, "tfdistributed.errors.TFDistributedError")) {
      message <- tryCatch(e$message_for("r"), error = function(err) python_message(e))
      tfd_abort(message, class = python_error_class(e), call = call)
    }
    if (foreign == "as_raised") {
      stop(e)
    }
    tfd_abort(class(e)[[1]], ": ", python_message(e), class = "tfdistributed_python_error",
              call = call)
  })
}

# A preempted fit() (SIGTERM with a backup_dir) backs up, then asks to exit with status 75 so
# that launch_cluster(restarts = restarts(max_restarts =)) or the scheduler restarts the job.
# From Rscript, that is what happens (an R error would exit with 1, an ordinary failure); an
# interactive session gets an R error of class tfdistributed_preempted instead of being closed.
exit_as_asked <- function(e, call) {
  status <- tryCatch(as.integer(e$code), error = function(err) 1L)
  if (!interactive()) {
    quit(save = "no", status = if (length(status) == 1 && !is.na(status)) status else 1L)
  }
  tfd_abort("Training stopped to be restarted (a preemption notice): the backup is written; ",
            "run the job again to resume.", class = "tfdistributed_preempted", call = call)
}

python_message <- function(e) {
  message <- tryCatch(reticulate::py_str(e), error = function(err) conditionMessage(e))
  if (!nzchar(message)) class(e)[[1]] else message
}

# "tfdistributed.errors.ShardingError" -> "tfdistributed_sharding_error", so R code can catch
# one kind with tryCatch(tfdistributed_sharding_error = ...).
python_error_class <- function(e) {
  name <- sub("^tfdistributed\\.errors\\.", "", class(e)[[1]])
  snake <- tolower(gsub("([a-z0-9])([A-Z])", "\\1_\\2", name))
  if (identical(snake, "tfdistributed_error")) NULL else paste0("tfdistributed_", snake)
}

# The arguments of the function whose frame is `env` that its caller gave (missing() is FALSE),
# each converted by its function in `converters` (value, name, call); the others are left out,
# so that the backend's default applies. This is how every R function that wraps the backend
# takes an argument whose Python default is not None: R never types a default of its own
# (tests/python/package/test_architecture.py checks it).
given_arguments <- function(env, converters) {
  given <- Filter(function(name) !eval(call("missing", as.name(name)), env), names(converters))
  values <- lapply(given, function(name) converters[[name]](get(name, envir = env), name, env))
  stats::setNames(values, given)
}

optional_flag <- function(x, arg, call) as_flag(x, arg, allow_null = TRUE, call = call)

# R character vector -> Python list (a length-one vector would otherwise become a str).
py_list <- function(x) {
  if (is.null(x) || is_py(x)) x else reticulate::r_to_py(as.list(x))
}

is_py <- function(x) inherits(x, "python.builtin.object")
