#' tfdistributed: distributed TensorFlow/Keras 3 training for R
#'
#' A thin wrapper over the Python package `tfdistributed`: every piece of
#' distributed-training logic lives there, the R side converts arguments at the
#' boundary and turns results into R objects.
#'
#' Start with [distribute_strategy()], build the model inside
#' `with(strategy$scope(), { ... })` using [keras], then [fit_distributed()] and
#' [evaluate_distributed()]. The same script runs on several workers with
#' [launch_cluster()].
#'
#' @section Articles:
#' The tutorials run for real when they are rendered (2-worker,
#' parameter-server, SLURM and Ray jobs included); installed from a built
#' package, `vignette(package = "tfdistributed")` lists them:
#' * `vignette("getting-started", package = "tfdistributed")`: strategies,
#'   scopes and distributed fit;
#' * `vignette("multi-worker", package = "tfdistributed")`: TF_CONFIG, local
#'   clusters, sharding, a job's history and per-worker figures, jobs that heal;
#' * `vignette("parameter-server", package = "tfdistributed")`;
#' * `vignette("custom-training-loops", package = "tfdistributed")`;
#' * `vignette("callbacks-checkpoints", package = "tfdistributed")`;
#' * `vignette("data-bigger-than-memory", package = "tfdistributed")`;
#' * `vignette("running-on-a-cluster", package = "tfdistributed")`: SLURM, Ray
#'   and Kubernetes.
#'
#' The documentation site has them all, with the guides that are on the site
#' only: Jobs that heal themselves (`articles/self-healing.html`),
#' Seeing a launched job (`articles/seeing-a-job.html`),
#' Clusters and networks (`articles/clusters-and-networks.html`),
#' Performance (`articles/performance.html`) and
#' the Python API reference (`python/tfdistributed.html`).
#' The project publishes no site yet: in a checkout of the project, `make docs`
#' builds it into `site/` (open `site/index.html`; the paths above are relative
#' to it).
#'
#' @keywords internal
"_PACKAGE"

#' The Python backend module `tfdistributed` (imported on first use)
#'
#' @format A Python module proxy created by [reticulate::import()].
#' @keywords internal
#' @family backend and Keras
#' @export
tfd <- NULL

#' Keras 3 (the Python module), imported on first use
#'
#' Where the keras3 R package is installed, `keras` is keras3's own `keras`
#' object (the same object, so attaching both packages, in either order, masks
#' nothing), and models are best built with keras3's functions
#' (`keras_model_sequential() %>% layer_dense(64)`). Without keras3, models are
#' built through this object, e.g.
#' `keras$Sequential(list(keras$layers$Dense(64, activation = "relu")))`, and
#' R values are converted as keras3's R wrappers convert them, by one table of
#' rules in the backend (`tfd$r$values$R_VALUE_RULES`): in the calls of
#' `keras$layers`, `keras$callbacks`, `keras$optimizers`, `keras$losses`,
#' `keras$metrics`, `keras$models`, `keras$regularizers`, `keras$initializers`,
#' `keras$Input()`, `keras$Sequential()`, `keras$Model()` and a model's
#' `$compile()`, whole doubles become integers where Keras needs integers
#' (`units`, `filters`, `kernel_size`, `strides`, `save_freq`, `patience`...),
#' R vectors become shapes and tuples (`shape = c(8, 8, 1)`, `NA` for an unknown
#' size) and a single string becomes a list where Keras needs one
#' (`metrics = "accuracy"`). `axis` keeps Keras' Python numbering (from 0).
#' A model's `$fit()`, `$evaluate()` and `$predict()` convert as
#' [fit_distributed()] converts (R vectors and arrays become NumPy arrays,
#' `validation_data` may be an R list and `class_weight` a named R list or
#' vector). A value that cannot be converted is an R error naming the argument.
#' Other calls (`keras$ops`, `keras$utils`...) are reticulate's own, and
#' `keras$layers$Dense` is still the Python class wherever one is needed.
#'
#' @format A Python module proxy created by [reticulate::import()].
#' @family backend and Keras
#' @examples
#' if (backend_available()) {
#'   model <- keras$Sequential(list(
#'     keras$Input(shape = c(8, 8, 1)),
#'     keras$layers$Conv2D(filters = 4, kernel_size = 3),
#'     keras$layers$Flatten(),
#'     keras$layers$Dense(10)
#'   ))
#'   model$compile(optimizer = "adam", loss = "mse", metrics = "mae")
#'   model$count_params()
#' }
#' @export
keras <- NULL

.onLoad <- function(libname, pkgname) {
  select_python()
  tfd <<- reticulate::import("tfdistributed", delay_load = TRUE)
  # keras3's own `keras` where keras3 is installed (one object for both packages); else one
  # whose calls of layers, callbacks, optimizers... take R values (keras_calls.R).
  keras <<- keras3_keras()
  if (is.null(keras)) {
    keras <<- keras_module_for_r(reticulate::import("keras", delay_load = TRUE))
  }
  # Importing the backend installs its Keras repairs, so the user's own model$fit() (and keras3's
  # fit()) under a strategy is repaired too, whoever starts Python first.
  if (reticulate::py_available(initialize = FALSE)) {
    install_keras_repairs()
  } else {
    setHook("reticulate.onPyInit", install_keras_repairs)
  }
}

# keras3's exported `keras`, or NULL without keras3. R reports no conflict between identical
# objects, so `library(keras3)` and `library(tfdistributed)` in either order mask nothing.
keras3_keras <- function() {
  if (!requireNamespace("keras3", quietly = TRUE)) {
    return(NULL)
  }
  getExportedValue("keras3", "keras")
}

install_keras_repairs <- function() {
  # A missing backend is reported, with the fix, by the first call that needs it.
  try(reticulate::import("tfdistributed"), silent = TRUE)
  # TensorFlow's deprecation notices expect a Python caller (tf$distribute$experimental$...
  # called from R failed in the notice itself): mended as TensorFlow loads, or now if it has.
  if (reticulate::py_eval("'tensorflow' in __import__('sys').modules")) {
    tf_called_from_r()
  } else {
    setHook("reticulate::tensorflow::load", tf_called_from_r)
  }
  invisible()
}

tf_called_from_r <- function() {
  try(reticulate::import("tfdistributed.r.callers")$install(), silent = TRUE)
  invisible()
}

# Inside this repository the R side must use the project's .venv with no manual step; outside
# it, the virtualenv made by install_tfdistributed(). An explicit choice (RETICULATE_PYTHON,
# use_python(), or a Python already running in this process, e.g. under rpy2) always wins.
select_python <- function() {
  if (nzchar(Sys.getenv("RETICULATE_PYTHON")) || reticulate::py_available(initialize = FALSE)) {
    return(invisible())
  }
  venv_python <- find_project_python(getwd())
  if (!is.null(venv_python)) {
    Sys.setenv(RETICULATE_PYTHON = venv_python)
  } else if (reticulate::virtualenv_exists(default_envname)) {
    reticulate::use_virtualenv(default_envname, required = FALSE)
  }
  invisible()
}

# The .venv of the tfdistributed project containing `dir` (walking up), or NULL.
find_project_python <- function(dir) {
  dir <- normalizePath(dir, mustWork = FALSE)
  repeat {
    python <- file.path(dir, ".venv", "bin", "python")
    if (dir.exists(file.path(dir, "pybackend", "tfdistributed")) && file.exists(python)) {
      return(python)
    }
    parent <- dirname(dir)
    if (identical(parent, dir)) {
      return(NULL)
    }
    dir <- parent
  }
}

# The backend module, checked once per session: reticulate's own errors for a missing Python
# or module do not say how to get the backend, ours does.
backend_state <- new.env()
backend <- function() {
  if (!isTRUE(backend_state$ok)) {
    problem <- tryCatch({
      python <- reticulate::py_config()$python
      if (reticulate::py_module_available("tfdistributed")) NULL else
        paste0("Python ", python, " has no module 'tfdistributed'")
    }, error = function(e) conditionMessage(e))
    if (!is.null(problem)) {
      # The call that works for this installation: the wheel it carries (built by make dist),
      # else a wheel or checkout the user has (no package index has tfdistributed yet).
      install <- if (is.null(bundled_wheel())) {
        "tfdistributed::install_tfdistributed(package = \"<a tfdistributed wheel or checkout>\")"
      } else {
        "tfdistributed::install_tfdistributed()"
      }
      tfd_abort("The Python backend 'tfdistributed' is not available (", trimws(problem), "). ",
            "Fix: run ", install, " and restart R, or set RETICULATE_PYTHON to a Python where ",
            "the backend is installed (in a checkout of the project: `make setup`, which ",
            "creates .venv/bin/python).", class = "tfdistributed_backend_missing")
    }
    backend_state$ok <- TRUE
  }
  tfd
}

#' Is the Python backend available?
#'
#' `TRUE` when Python and the `tfdistributed` backend can be imported; never
#' errors. Useful to skip examples and tests.
#'
#' @return A single logical.
#' @family backend and Keras
#' @export
#' @examples
#' backend_available()
#' if (backend_available()) {
#'   tfd$cluster$is_chief()   # the backend module, through reticulate
#' }
backend_available <- function() {
  isTRUE(tryCatch(reticulate::py_module_available("tfdistributed"), error = function(e) FALSE))
}

#' The shape of a Keras input, from R numbers
#'
#' Calls through the package's [keras] object convert shapes themselves
#' (`keras$Input(shape = c(8, 8, 1))`); `input_shape()` is for the other places
#' a shape goes to Python, where reticulate would pass a scalar for `c(3L)` and
#' floats for `c(8, 8, 1)`, e.g. `tf$TensorSpec(input_shape(NA, 8))`. It gives
#' the tuple of integers TensorFlow and Keras expect; `NA` or `NULL` stands for
#' an unknown dimension. (It is not called `shape()`, so that it does not mask
#' `shape()` of the tensorflow and keras3 R packages.)
#'
#' @param ... Dimensions (whole numbers; `NA`/`NULL` for unknown), or one
#'   numeric vector of them.
#' @return A Python tuple.
#' @family backend and Keras
#' @export
#' @examples
#' if (backend_available()) {
#'   input_shape(8, 8, 1)
#'   input_shape(c(8, 8, 1))
#'   input_shape(NA, 4)    # (None, 4)
#'   keras$Input(shape = input_shape(4))
#' }
input_shape <- function(...) {
  dims <- list(...)
  if (length(dims) == 1 && is.numeric(dims[[1]]) && length(dims[[1]]) > 1) {
    dims <- as.list(dims[[1]])
  }
  dims <- lapply(seq_along(dims), function(i) {
    d <- dims[[i]]
    if (is.null(d) || (length(d) == 1 && is.na(d))) {
      return(NULL)
    }
    d <- as_integer(d, paste0("dimension ", i))
    if (d < 0L) {
      tfd_abort("`dimension ", i, "` must be >= 0 (NA for an unknown size), got ", d, ".")
    }
    d
  })
  do.call(reticulate::tuple, dims)
}
