default_envname <- "r-tfdistributed"

#' Install the Python backend into a virtualenv
#'
#' Creates (or reuses) the virtualenv `envname` with reticulate and installs
#' the Python package `tfdistributed` with TensorFlow and Keras 3 into it. The
#' package finds that virtualenv by itself when it is loaded in a new R session
#' (unless `RETICULATE_PYTHON` says otherwise). Inside the project repository
#' you don't need this: `make setup` creates `.venv`, which is found
#' automatically.
#'
#' @param envname Name or path of the virtualenv.
#' @param package What to `pip install`: `"tfdistributed"` from the package
#'   index, or a path to a checkout of the project (the directory holding
#'   `pyproject.toml`).
#' @param extra_packages More Python packages to install, e.g.
#'   `"pandas"` for your own data loading.
#' @param python Python interpreter to create the virtualenv with; default
#'   reticulate's choice.
#' @return `envname`, invisibly.
#' @family backend and Keras
#' @export
#' @examples
#' \dontrun{
#' # Not run here: it creates a virtualenv and installs TensorFlow from PyPI.
#' install_tfdistributed(extra_packages = "pandas")
#' }
install_tfdistributed <- function(envname = default_envname, package = "tfdistributed",
                                  extra_packages = NULL, python = NULL) {
  envname <- as_string(envname, "envname")
  package <- as_string(package, "package")
  if (!is.null(extra_packages) && (!is.character(extra_packages) || anyNA(extra_packages))) {
    tfd_abort("`extra_packages` must be a character vector of pip requirements, got ",
          describe(extra_packages), ".")
  }
  python <- as_string(python, "python", allow_null = TRUE)
  if (dir.exists(package)) {
    if (!file.exists(file.path(package, "pyproject.toml"))) {
      tfd_abort("`package` = '", package, "' is a directory without pyproject.toml: pass the ",
            "project's root directory (the one holding pyproject.toml), or \"tfdistributed\".")
    }
    package <- normalizePath(package)
  }
  if (!reticulate::virtualenv_exists(envname)) {
    reticulate::virtualenv_create(envname, python = python)
  }
  reticulate::py_install(c(package, extra_packages), envname = envname, method = "virtualenv",
                         pip = TRUE)
  message("Installed the tfdistributed backend into virtualenv '", envname, "'.")
  if (reticulate::py_available(initialize = FALSE)) {
    # A running Python cannot be swapped for another one.
    message("Restart R to use it: this session already runs a Python.")
  }
  invisible(envname)
}
