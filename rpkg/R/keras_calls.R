# Keras' own constructors and model$compile(), called from R with R values, through the `keras`
# object this package exports.
#
# reticulate hands Keras `3` as 3.0 and "accuracy" as a str: `keras$layers$Conv2D(32, 3)` and
# `model$compile(metrics = "accuracy")` fail in Keras. keras3's R wrappers convert such values
# first; here the exported `keras` module carries one more class, whose `$` method (below)
# returns submodules with that class again and, for the calls the backend covers (layers,
# callbacks, optimizers, ... see tfdistributed.rvalues), a function that sends its arguments
# through the backend's one table of rules (`rvalues$call`). The rules and messages are the
# backend's; R only routes. Unknown calls are returned as reticulate gives them.
#
# The returned function is the class for everything but the call: it carries the Python
# object's attributes (its `py_object` and class), so `keras$layers$Dense` passed to Python, to
# `reticulate::PyClass(inherit =)`, to `isinstance()` or `inherits()` is Keras' class itself.

KERAS_MODULE_CLASS <- "tfdistributed_keras_module"

# `module` (a reticulate module proxy) with the class whose `$` converts R values.
keras_module_for_r <- function(module) {
  if (!inherits(module, KERAS_MODULE_CLASS)) {
    class(module) <- c(KERAS_MODULE_CLASS, class(module))
  }
  module
}

#' @export
`$.tfdistributed_keras_module` <- function(x, name) {
  value <- NextMethod()
  if (inherits(value, "python.builtin.module")) {
    return(keras_module_for_r(value))
  }
  if (is.function(value) && is_py(value) && isTRUE(r_values()$covers(x, name))) {
    return(keras_call_for_r(value))
  }
  value
}

#' @export
`[[.tfdistributed_keras_module` <- `$.tfdistributed_keras_module`

# The backend's module of rules for R values in Keras' calls.
r_values <- function() backend()$rvalues

# An R function calling the Python callable `fn` with its R arguments converted by the backend's
# rules, with `fn`'s formals (args() and completion show Keras' signature, as reticulate's own
# function does) and attributes (so it stays the Python object wherever one is needed). Its body
# uses only names with a dot, which no Python parameter can have (Keras' MeanMetricWrapper has
# a parameter `fn`, and a formal shadows the closure's variable of the same name).
keras_call_for_r <- function(fn) {
  .tfdistributed_fn <- fn
  .tfdistributed_call <- call_with_r_values
  wrapper <- as.function.default(c(formals(fn), quote({
    .call <- sys.call()
    .tfdistributed_call(.tfdistributed_fn, .call, parent.frame())
  })))
  attributes(wrapper) <- attributes(fn)
  wrapper
}

# Calls `fn` with the arguments of the user's `call` (evaluated where it was made): as in
# reticulate, only the arguments given, so Keras applies its own defaults. Errors are reported
# for the user's own call (`keras$layers$Conv2D(...)`).
call_with_r_values <- function(fn, call, env) {
  given <- call
  given[[1L]] <- base::list
  args <- eval(given, env)
  with_backend(do.call(r_values()$call, c(list(fn), args)), call = call)
}
