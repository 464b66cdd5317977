# Keras' own constructors and model$compile(), called from R with R values, through the `keras`
# object this package exports.
#
# reticulate hands Keras `3` as 3.0 and "accuracy" as a str: `keras$layers$Conv2D(32, 3)` and
# `model$compile(metrics = "accuracy")` fail in Keras. keras3's R wrappers convert such values
# first; here the exported `keras` module carries one more class, whose `$` method (below)
# returns submodules with that class again and, for the calls the backend covers (layers,
# callbacks, optimizers, ... see tfdistributed.r.values), a function that sends its arguments
# through the backend's one table of rules (`r$values$call`). The rules and messages are the
# backend's; R only routes. Unknown calls are returned as reticulate gives them.
#
# The returned function is the class for everything but the call: it carries the Python
# object's attributes (its `py_object` and class), so `keras$layers$Dense` passed to Python, to
# `reticulate::PyClass(inherit =)`, to `isinstance()` or `inherits()` is Keras' class itself.

KERAS_MODULE_CLASS <- "tfdistributed_keras_module"

# `module` (a reticulate module proxy, reached from R as `path`, e.g. "keras.layers") with the
# class whose `$` converts R values.
keras_module_for_r <- function(module, path = "keras") {
  if (!inherits(module, KERAS_MODULE_CLASS)) {
    class(module) <- c(KERAS_MODULE_CLASS, class(module))
  }
  attr(module, "tfdistributed_path") <- path
  module
}

#' @export
`$.tfdistributed_keras_module` <- function(x, name) {
  value <- NextMethod()
  path <- attr(x, "tfdistributed_path")
  if (inherits(value, "python.builtin.module")) {
    return(keras_module_for_r(value, paste(path, name, sep = ".")))
  }
  if (is.function(value) && is_py(value) && keras_call_covered(path, name)) {
    return(keras_call_for_r(value, paste0(gsub(".", "$", path, fixed = TRUE), "$", name)))
  }
  value
}

#' @export
`[[.tfdistributed_keras_module` <- `$.tfdistributed_keras_module`

# A tf.data pipeline's own methods take R values too (`ds$shuffle(2000)`, `ds$batch(64 * 2)`:
# TensorFlow refuses 2000.0 for an int64), by the same rules, for the methods the backend covers.
#' @export
`$.tensorflow.python.data.ops.dataset_ops.DatasetV2` <- function(x, name) {
  method <- NextMethod()
  if (is.function(method) && is_py(method) && name %in% covered_dataset_methods()) {
    return(keras_call_for_r(method, paste0("dataset$", name)))
  }
  method
}

#' @export
`[[.tensorflow.python.data.ops.dataset_ops.DatasetV2` <-
  `$.tensorflow.python.data.ops.dataset_ops.DatasetV2`

covered_dataset_methods <- function() {
  r_values()
  r_values_state$dataset_methods
}

# The backend's module of rules for R values in Keras' calls, and what it said about each call
# (a model is built with the same few calls again and again: each is asked about once).
r_values_state <- new.env()
r_values <- function() {
  if (is.null(r_values_state$module)) {
    r_values_state$module <- backend()$r$values
    r_values_state$call <- r_values_state$module$call
    r_values_state$covered <- new.env()
    r_values_state$model_methods <- as.character(unlist(r_values_state$module$COVERED_MODEL_METHODS))
    r_values_state$dataset_methods <-
      as.character(unlist(r_values_state$module$COVERED_DATASET_METHODS))
  }
  r_values_state$module
}

# A model's methods that take R values by the backend's rules (`compile`).
covered_model_methods <- function() {
  r_values()
  r_values_state$model_methods
}

keras_call_covered <- function(path, name) {
  r_values()
  key <- paste(path, name, sep = "$")
  covered <- r_values_state$covered[[key]]
  if (is.null(covered)) {
    covered <- isTRUE(r_values_state$module$covers(path, name))
    assign(key, covered, envir = r_values_state$covered)
  }
  covered
}

# An R function calling the Python callable `fn` with its R arguments converted by the backend's
# rules, with `fn`'s formals (args() and completion show Keras' signature, as reticulate's own
# function does) and attributes (so it stays the Python object wherever one is needed). Its body
# uses only names with a dot, which no Python parameter can have (Keras' MeanMetricWrapper has
# a parameter `fn`, and a formal shadows the closure's variable of the same name). `label`
# (e.g. "dataset$batch") names the call in errors where the caller's own call cannot.
keras_call_for_r <- function(fn, label) {
  .tfdistributed_fn <- fn
  .tfdistributed_call <- call_with_r_values
  .tfdistributed_label <- label
  wrapper <- as.function.default(c(formals(fn), quote({
    .call <- sys.call()
    .tfdistributed_call(.tfdistributed_fn, .call, parent.frame(), .tfdistributed_label)
  })))
  attributes(wrapper) <- attributes(fn)
  wrapper
}

# Calls `fn` with the arguments of the user's `call` (evaluated where it was made): as in
# reticulate, only the arguments given, so Keras applies its own defaults. Errors are reported
# for the user's own call (`keras$layers$Conv2D(...)`, see error_call()).
call_with_r_values <- function(fn, call, env, label) {
  given <- call
  given[[1L]] <- base::list
  args <- eval(given, env)
  r_values()
  with_backend(do.call(r_values_state$call, c(list(fn), args)), call = error_call(call, label),
               foreign = "as_raised")
}
