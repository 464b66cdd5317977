# Keras' own model$fit(), model$evaluate() and model$predict(), called from R.
#
# reticulate hands R values to Python as they are: an R vector becomes a Python list (Keras
# answers "Unrecognized data type" and prints the numbers) and `64 * 2` a float (a TensorFlow
# op fails on it under multi_worker_mirrored). keras3 R users never meet either, because
# keras3's fit() converts R values first. Here `model$fit` is looked up through the `$` method
# below, which converts the arguments with the very helpers fit_distributed() uses, then calls
# Keras' method (which tfdistributed has repaired for every strategy). Anything R cannot convert
# is an R error naming the argument; values that are already Python objects pass unchanged.

# How each of Keras' arguments is converted, by name (positional arguments get their names from
# the Python signature first). Arguments not listed go to Keras as reticulate converts them.
keras_argument_converters <- function() {
  count <- function(value, arg, call) as_integer(value, arg, call = call)
  # Which of Keras' arguments count is the backend's list (it refuses floats for the same ones).
  counts <- as.character(unlist(backend()$KERAS_COUNT_ARGUMENTS))
  c(
    stats::setNames(rep(list(count), length(counts)), counts),
    list(
      x = function(value, arg, call) to_numpy(value, arg, call = call),
      y = function(value, arg, call) to_numpy(value, arg, call = call),
      sample_weight = function(value, arg, call) to_numpy(value, arg, call = call),
      validation_data = function(value, arg, call) validation_arg(value, call = call),
      validation_split = function(value, arg, call) as_number(value, arg, call = call),
      class_weight = function(value, arg, call) class_weight_arg(value, call = call),
      callbacks = function(value, arg, call) callbacks_arg(value, call = call),
      verbose = function(value, arg, call) as_verbose(value, call = call)
    )
  )
}

KERAS_R_METHODS <- c("fit", "evaluate", "predict")

# fit/evaluate/predict convert here (their data need R's own conversions); the other methods
# that take R values (`compile`: `metrics = "accuracy"`) go through the backend's rules for
# Keras' calls, as keras$layers$... do (keras_calls.R).
#' @export
`$.keras.src.models.model.Model` <- function(x, name) {
  method <- NextMethod()
  if (!is_py(method)) {
    return(method)
  }
  if (name %in% KERAS_R_METHODS) {
    return(keras_method_for_r(method, paste0("model$", name)))
  }
  if (name %in% covered_model_methods()) keras_call_for_r(method, paste0("model$", name)) else method
}

#' @export
`[[.keras.src.models.model.Model` <- `$.keras.src.models.model.Model`

# An R function calling Keras' bound `method` with R values converted: R values only, by
# structure (a list stays a list, named a dict), so values that are Python objects already, as
# keras3's fit() hands them over, reach Keras as they would without this package. Its errors are
# reported for the user's own call (`model$fit(...)`; `label`, e.g. "model$fit", where that
# call holds the function itself: see error_call()).
keras_method_for_r <- function(method, label) {
  force(method)
  force(label)
  function(...) {
    call <- error_call(sys.call(), label)
    args <- name_positional(list(...), keras_parameters(method))
    converters <- keras_argument_converters()
    for (arg in intersect(names(args), names(converters))) {
      if (!is.null(args[[arg]])) {
        args[arg] <- list(converters[[arg]](args[[arg]], arg, call))
      }
    }
    with_backend(do.call(method, args), call = call, foreign = "as_raised")
  }
}

# Keras' parameter names, in order (tfdistributed's repaired methods expose Keras' signature).
keras_parameters <- function(method) {
  inspect <- reticulate::import("inspect", convert = FALSE)
  parameters <- inspect$signature(method)$parameters$keys()
  as.character(unlist(reticulate::import_builtins()$list(parameters)))
}

# Positional arguments named as Python would bind them: in order, to the parameters not named.
name_positional <- function(args, parameters) {
  given <- if (is.null(names(args))) rep("", length(args)) else names(args)
  free <- setdiff(parameters, given[nzchar(given)])
  positional <- which(!nzchar(given))
  n <- min(length(positional), length(free))
  given[positional[seq_len(n)]] <- free[seq_len(n)]
  names(args) <- given
  args
}
