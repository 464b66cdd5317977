# Argument coercion at the R/Python boundary, and backend errors turned into R errors.
#
# R writes 64 for a double; Python's backend refuses floats where it needs an int (so that a
# 64.5 is caught), so whole doubles become integers here and everything else is an R error
# naming the fix, before Python is involved.

tfdistributed_condition <- function(message, call = NULL, class = NULL) {
  structure(
    class = c(class, "tfdistributed_error", "error", "condition"),
    list(message = message, call = call)
  )
}

abort <- function(..., class = NULL) {
  stop(tfdistributed_condition(paste0(...), class = class))
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

#' Coerce a whole number to an R integer, or fail with a helpful R error
#'
#' Whole doubles such as `64` become `64L`; fractional values, `NA`, `NULL`
#' (unless allowed), strings and vectors are R errors that say what to pass.
#'
#' @param x The value.
#' @param name Argument name used in the error message.
#' @param minimum Smallest allowed value, or `NULL`.
#' @param allow_null Return `NULL` for `NULL` instead of failing.
#' @return A length-one integer, or `NULL`.
#' @keywords internal
#' @noRd
as_integer <- function(x, name, minimum = NULL, allow_null = FALSE) {
  if (is.null(x)) {
    if (allow_null) {
      return(NULL)
    }
    abort("`", name, "` is required: pass a whole number, e.g. ", name, " = 2.")
  }
  if (!is.numeric(x) || length(x) != 1 || is.na(x) || !is.finite(x) || x != round(x) ||
      abs(x) > .Machine$integer.max) {
    example <- if (is.numeric(x) && length(x) == 1 && is.finite(x)) max(floor(x), 1) else 2
    abort("`", name, "` must be a single whole number, got ", describe(x),
          ": pass e.g. ", name, " = ", example, ".")
  }
  x <- as.integer(x)
  if (!is.null(minimum) && x < minimum) {
    abort("`", name, "` must be >= ", minimum, ", got ", x, ".")
  }
  x
}

as_string <- function(x, name, allow_null = FALSE) {
  if (is.null(x) && allow_null) {
    return(NULL)
  }
  if (!is.character(x) || length(x) != 1 || is.na(x) || !nzchar(x)) {
    abort("`", name, "` must be a single non-empty string, got ", describe(x), ".")
  }
  x
}

as_flag <- function(x, name) {
  if (!is.logical(x) || length(x) != 1 || is.na(x)) {
    abort("`", name, "` must be TRUE or FALSE, got ", describe(x), ".")
  }
  x
}

as_number <- function(x, name, allow_null = FALSE) {
  if (is.null(x) && allow_null) {
    return(NULL)
  }
  if (!is.numeric(x) || length(x) != 1 || is.na(x) || !is.finite(x) || x <= 0) {
    abort("`", name, "` must be a single positive number, got ", describe(x), ".")
  }
  as.double(x)
}

# Keras accepts "auto", 0, 1 or 2.
as_verbose <- function(verbose) {
  if (identical(verbose, "auto")) {
    return(verbose)
  }
  if (is.logical(verbose) && length(verbose) == 1 && !is.na(verbose)) {
    return(as.integer(verbose))
  }
  verbose <- as_integer(verbose, "verbose", minimum = 0L)
  if (verbose > 2L) {
    abort("`verbose` must be \"auto\", 0, 1 or 2, got ", verbose, ".")
  }
  verbose
}

# Run `expr` (calls into the backend); a Python exception raised on purpose by tfdistributed
# becomes an R error carrying only our message (it already says what to do), not a Python
# traceback. Other Python exceptions (TensorFlow, Keras) keep their own message and type name.
with_backend <- function(expr) {
  tryCatch(expr, python.builtin.Exception = function(e) {
    message <- python_message(e)
    if (inherits(e, "tfdistributed.errors.TFDistributedError")) {
      stop(tfdistributed_condition(message, class = python_error_class(e)))
    }
    stop(tfdistributed_condition(paste0(class(e)[[1]], ": ", message), class = "tfdistributed_python_error"))
  })
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

# R character vector -> Python list (a length-one vector would otherwise become a str).
py_list <- function(x) {
  if (is.null(x)) NULL else reticulate::r_to_py(as.list(x))
}

is_py <- function(x) inherits(x, "python.builtin.object")
