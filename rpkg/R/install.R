default_envname <- "r-tfdistributed"

#' Install the Python backend into a virtualenv
#'
#' Creates (or reuses) the virtualenv `envname` with reticulate and installs
#' the Python package `tfdistributed` into it, with TensorFlow and Keras 3 when
#' the environment has none in the supported range. The package finds that
#' virtualenv by itself when it is loaded in a new R session (unless
#' `RETICULATE_PYTHON` says otherwise). No root is needed.
#'
#' An environment that already holds a TensorFlow within the supported range
#' keeps it (`tensorflow`, `tensorflow-cpu`, or the CUDA build): the backend
#' names TensorFlow only as an optional requirement, so pip never installs a
#' second one beside it. A TensorFlow outside the range is replaced by the
#' newest supported one, and the message says so.
#'
#' @param envname Name or path of the virtualenv.
#' @param package What to `pip install`: `NULL` (the default) for the backend's
#'   wheel that this R package carries when it was built with `make dist`; a
#'   wheel file (`tfdistributed-0.1.0-py3-none-any.whl`); a checkout of the
#'   project (the directory holding `pyproject.toml`); or a requirement such as
#'   `"tfdistributed"` for a package index that has it.
#' @param python_version The Python version(s) to create the virtualenv with,
#'   e.g. `"3.11"` or `">=3.10"`: reticulate picks a matching interpreter on
#'   this machine. Used only when the virtualenv does not exist yet.
#' @param gpu `NA` (the default): install TensorFlow's CUDA build when this is a
#'   Linux machine with an NVIDIA GPU (a driver in `/proc/driver/nvidia`, or
#'   `nvidia-smi -L` listing one). `TRUE` or `FALSE` to choose.
#' @param extra_packages More Python packages to install, e.g.
#'   `"pandas"` for your own data loading.
#' @param python Python interpreter to create the virtualenv with (a path);
#'   default reticulate's choice. Used only when the virtualenv does not exist
#'   yet.
#' @return `envname`, invisibly.
#' @family backend and Keras
#' @export
#' @examples
#' \dontrun{
#' # Not run here: it creates a virtualenv and installs TensorFlow.
#' install_tfdistributed()
#' # A wheel you were given, into a project's own virtualenv:
#' install_tfdistributed("~/venvs/project",
#'                       package = "~/Downloads/tfdistributed-0.1.0-py3-none-any.whl")
#' # From a checkout of the project, with pandas:
#' install_tfdistributed(package = "~/src/tfdistributed", extra_packages = "pandas")
#' }
install_tfdistributed <- function(envname = default_envname, package = NULL,
                                  python_version = NULL, gpu = NA,
                                  extra_packages = NULL, python = NULL) {
  envname <- as_string(envname, "envname")
  package <- as_string(package, "package", allow_null = TRUE)
  python_version <- as_string(python_version, "python_version", allow_null = TRUE)
  if (!is.logical(gpu) || length(gpu) != 1) {
    tfd_abort("`gpu` must be NA (find out), TRUE or FALSE, got ", describe(gpu), ".")
  }
  if (!is.null(extra_packages) && (!is.character(extra_packages) || anyNA(extra_packages))) {
    tfd_abort("`extra_packages` must be a character vector of pip requirements, got ",
              describe(extra_packages), ".")
  }
  python <- as_string(python, "python", allow_null = TRUE)
  package <- backend_package(package)
  if (is.na(gpu)) {
    gpu <- nvidia_gpu_present()
    if (gpu) {
      message("Found an NVIDIA GPU: installing TensorFlow's CUDA build ",
              "(gpu = FALSE installs the CPU one).")
    }
  }

  if (!reticulate::virtualenv_exists(envname)) {
    reticulate::virtualenv_create(envname, python = python, version = python_version)
  }
  env_python <- reticulate::virtualenv_python(envname)
  had <- python_versions(env_python)$tensorflow
  # The backend first, naming TensorFlow only where the environment has none: pip keeps a
  # TensorFlow that is there (only-if-needed upgrades), whatever its distribution.
  extra <- if (is.null(had)) tensorflow_extra(gpu) else NULL
  pip_install(envname, c(requirement_with_extra(package, extra), extra_packages))

  state <- python_versions(env_python, backend = TRUE)
  tf <- state$tensorflow
  if (!isTRUE(tf$ok)) {
    wanted <- paste0(tensorflow_requirement(gpu), tf$supported)
    if (!is.null(tf$version) && !identical(tf$distribution, "tensorflow")) {
      tfd_abort(tf$distribution, " ", tf$version, " in '", envname, "' is outside the releases ",
                "tfdistributed supports (", tf$supported, "), and installing ", wanted,
                " beside it would make two TensorFlows. Fix: upgrade it (pip install \"",
                tf$distribution, tf$supported, "\" in that environment), or pass a new ",
                "`envname`.")
    }
    if (!is.null(tf$version)) {
      message(tf$distribution, " ", tf$version, " in '", envname, "' is outside the releases ",
              "tfdistributed supports (", tf$supported, "): installing ", wanted, ".")
    }
    pip_install(envname, wanted)
  } else if (gpu && !is.null(had)) {
    if (identical(tf$distribution, "tensorflow")) {
      # The same TensorFlow, with the CUDA libraries it names.
      pip_install(envname, paste0("tensorflow[and-cuda]==", tf$version))
    } else {
      warning(tf$distribution, " ", tf$version, " in '", envname, "' was kept: it has no CUDA ",
              "build. For GPUs, use a virtualenv without it (a new `envname`).", call. = FALSE)
    }
  }
  state <- python_versions(env_python, backend = TRUE)
  message("Installed the tfdistributed backend into virtualenv '", envname, "' (",
          state$tensorflow$distribution, " ", state$tensorflow$version, ", keras ",
          state$keras$version, ").")
  if (reticulate::py_available(initialize = FALSE)) {
    # A running Python cannot be swapped for another one.
    message("Restart R to use it: this session already runs a Python.")
  }
  invisible(envname)
}

# What install_tfdistributed() installs for `package`: a directory or file normalised (so that
# pip does not read it as a requirement name), NULL for the wheel this package carries.
backend_package <- function(package, call = rlang::caller_env()) {
  if (is.null(package)) {
    wheel <- bundled_wheel()
    if (is.null(wheel)) {
      tfd_abort("This installation of the R package carries no backend wheel (it was not built ",
                "with `make dist`) and no package index has tfdistributed yet. Fix: ",
                "install_tfdistributed(package = \"<a tfdistributed wheel, or a checkout of ",
                "the project>\").", call = call)
    }
    return(wheel)
  }
  path <- path.expand(package)
  if (dir.exists(path)) {
    if (!file.exists(file.path(path, "pyproject.toml"))) {
      tfd_abort("`package` = '", package, "' is a directory without pyproject.toml: pass the ",
                "project's root directory (the one holding pyproject.toml), or a wheel.",
                call = call)
    }
    return(normalizePath(path))
  }
  if (grepl("\\.(whl|tar\\.gz|zip)$", path)) {
    if (!file.exists(path)) {
      tfd_abort("`package` = '", package, "' does not exist. Fix: pass the path of a ",
                "tfdistributed wheel (.whl) or source archive.", call = call)
    }
    return(normalizePath(path))
  }
  package
}

# The backend wheel that `make dist` puts into the R source package (inst/python/), or NULL.
bundled_wheel <- function() {
  dir <- system.file("python", package = "tfdistributed")
  wheels <- if (nzchar(dir)) Sys.glob(file.path(dir, "tfdistributed-*.whl")) else character()
  if (length(wheels)) wheels[[length(wheels)]] else NULL
}

# pip's spelling of `package` with an extra: "tfdistributed[tensorflow]",
# "/path/x.whl[tensorflow]", "/path/checkout[tensorflow]".
requirement_with_extra <- function(package, extra) {
  if (is.null(extra)) {
    return(package)
  }
  if (file.exists(package) || grepl("^[A-Za-z0-9._-]+$", package)) {
    return(paste0(package, "[", extra, "]"))
  }
  # A requirement with a version or a URL: the extra goes after the name.
  sub("^([A-Za-z0-9._-]+)", paste0("\\1[", extra, "]"), package)
}

tensorflow_extra <- function(gpu) if (gpu) "and-cuda" else "tensorflow"
tensorflow_requirement <- function(gpu) if (gpu) "tensorflow[and-cuda]" else "tensorflow"

pip_install <- function(envname, packages) {
  reticulate::py_install(packages, envname = envname, method = "virtualenv", pip = TRUE)
}

# The TensorFlow, Keras and tensorflow-datasets a virtualenv's Python has, without starting
# that Python in this session: `python -m tfdistributed versions` once the backend is there
# (with the supported ranges), else the installed distributions from importlib.metadata.
# A list per package: distribution, version, supported, ok (NULL entries when absent).
python_versions <- function(python, backend = FALSE) {
  args <- if (backend) {
    c("-m", "tfdistributed", "versions", "--format", "table")
  } else {
    c("-c", shQuote(paste(
      "import importlib.metadata as m",
      "names = {'tensorflow': ('tensorflow', 'tensorflow-cpu', 'tensorflow-gpu',",
      "    'tensorflow-intel', 'tensorflow-macos', 'tf-nightly', 'tf-nightly-cpu'),",
      "    'keras': ('keras',), 'tensorflow-datasets': ('tensorflow-datasets',)}",
      "print('package\\tdistribution\\tversion\\tsupported\\tok')",
      "for name, dists in names.items():",
      "    for d in dists:",
      "        try: print(f'{name}\\t{d}\\t{m.version(d)}\\t\\tTrue'); break",
      "        except m.PackageNotFoundError: pass",
      sep = "\n")))
  }
  out <- suppressWarnings(system2(python, args, stdout = TRUE, stderr = TRUE))
  status <- attr(out, "status")
  if (!is.null(status) && status != 0) {
    tfd_abort("Could not ask ", python, " what it has installed:\n",
              paste(utils::tail(out, 20), collapse = "\n"))
  }
  header <- which(startsWith(out, "package\t"))
  rows <- if (length(header)) out[-seq_len(header[[1]])] else character()
  found <- list()
  for (row in strsplit(rows, "\t", fixed = TRUE)) {
    row <- c(row, rep("", 5 - length(row)))
    found[[row[[1]]]] <- list(
      distribution = if (nzchar(row[[2]])) row[[2]] else NULL,
      version = if (nzchar(row[[3]])) row[[3]] else NULL,
      supported = row[[4]], ok = identical(row[[5]], "True"))
  }
  found
}

# An NVIDIA GPU on this (Linux) machine: the driver lists one, or nvidia-smi does.
nvidia_gpu_present <- function(proc = "/proc/driver/nvidia/gpus",
                               smi = Sys.which("nvidia-smi")) {
  if (!identical(Sys.info()[["sysname"]], "Linux")) {
    return(FALSE)
  }
  if (length(list.files(proc)) > 0) {
    return(TRUE)
  }
  if (!nzchar(smi)) {
    return(FALSE)
  }
  listed <- suppressWarnings(tryCatch(system2(smi, "-L", stdout = TRUE, stderr = FALSE),
                                      error = function(e) character()))
  any(grepl("^GPU [0-9]+", listed))
}
