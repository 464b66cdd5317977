test_that("whole doubles become integers; NULL is left to the backend", {
  expect_identical(as_integer(64, "batch_size"), 64L)
  expect_identical(as_integer(64L, "batch_size"), 64L)
  expect_null(as_integer(NULL, "steps"))
})

test_that("fractions, NA, strings and vectors are R errors naming the fix", {
  expect_error(as_integer(64.5, "batch_size"), "`batch_size` must be a single whole number.*batch_size = 64",
               class = "tfdistributed_error")
  expect_error(as_integer(NA, "batch_size"), "whole number", class = "tfdistributed_error")
  expect_error(as_integer(NA_integer_, "epochs"), "whole number", class = "tfdistributed_error")
  expect_error(as_integer("64", "batch_size"), "character", class = "tfdistributed_error")
  expect_error(as_integer(c(1, 2), "epochs"), "single whole number", class = "tfdistributed_error")
  expect_error(as_integer(Inf, "epochs"), "whole number", class = "tfdistributed_error")
  # The argument's name comes from the call, as in rlang's check_*() helpers.
  epochs <- 1.5
  expect_error(as_integer(epochs), "`epochs` must be a single whole number", class = "tfdistributed_error")
})

test_that("R conditions are rlang errors carrying the backend's kind and its R hint", {
  skip_if_no_backend()
  err <- expect_error(local_cluster(workers = 2, ps = 1), class = "tfdistributed_cluster_config_error")
  expect_s3_class(err, c("tfdistributed_cluster_config_error", "tfdistributed_error", "rlang_error"))
  # The backend's neutral message, plus the R hint (not the Python one).
  expect_match(conditionMessage(err), "needs a chief.*local_cluster\\(2, ps = 1, chief = TRUE\\)")
  expect_false(grepl("chief=True", conditionMessage(err), fixed = TRUE))
  expect_identical(format(err$call), "local_cluster(workers = 2, ps = 1)")
  # A range rule is the backend's (here `>= 1`), reported for the R function that was called.
  expect_error(fit_distributed(linear_model(), matrix(1, 4, 3), 1:4, epochs = 0), "`epochs` must be >= 1",
               class = "tfdistributed_argument_type_error")
})

test_that("verbose accepts auto, 0-2 and logicals; the backend names the valid levels", {
  skip_if_no_backend()
  expect_identical(as_verbose("auto"), "auto")
  expect_identical(as_verbose(2), 2L)
  expect_identical(as_verbose(FALSE), 0L)
  # Which levels exist is the backend's rule, checked by fit() and evaluate() themselves.
  model <- linear_model()
  x <- matrix(1, 4, 3)
  expect_error(fit_distributed(model, x, 1:4, verbose = 3), 'must be "auto", 0, 1 or 2',
               class = "tfdistributed_argument_type_error")
  expect_error(evaluate_distributed(model, x, 1:4, verbose = "loud"), "verbose",
               class = "tfdistributed_argument_type_error")
  expect_error(as_verbose(1.5), "`verbose` must be a single whole number", class = "tfdistributed_error")
})

test_that("the project's .venv is found by walking up from a subdirectory", {
  root <- withr::local_tempdir()
  dir.create(file.path(root, "pybackend", "tfdistributed"), recursive = TRUE)
  dir.create(file.path(root, ".venv", "bin"), recursive = TRUE)
  file.create(file.path(root, ".venv", "bin", "python"))
  dir.create(file.path(root, "vignettes", "deep"), recursive = TRUE)
  found <- find_project_python(file.path(root, "vignettes", "deep"))
  expect_identical(found, file.path(normalizePath(root), ".venv", "bin", "python"))
  expect_null(find_project_python(tempdir()))
})

test_that("install_tfdistributed() checks its arguments before touching Python", {
  # Creating a virtualenv needs the network; only the argument checks run offline.
  expect_error(install_tfdistributed(envname = 1), "`envname` must be a single non-empty string",
               class = "tfdistributed_error")
  expect_error(install_tfdistributed(envname = ""), "`envname`", class = "tfdistributed_error")
  expect_error(install_tfdistributed(package = NA_character_), "`package`", class = "tfdistributed_error")
  expect_error(install_tfdistributed(extra_packages = 3), "`extra_packages`", class = "tfdistributed_error")
  expect_error(install_tfdistributed(package = tempdir()), "pyproject.toml", class = "tfdistributed_error")
  expect_error(install_tfdistributed(package = "nowhere/tfdistributed-0.1.0-py3-none-any.whl"),
               "does not exist", class = "tfdistributed_error")
  expect_error(install_tfdistributed(package = "x", gpu = "yes"), "`gpu` must be NA",
               class = "tfdistributed_error")
  # This installation was not built by make dist: it carries no wheel, and says what works.
  skip_if(!is.null(bundled_wheel()), "this installation carries a backend wheel")
  expect_error(install_tfdistributed(), "install_tfdistributed\\(package = ",
               class = "tfdistributed_error")
})

test_that("install_tfdistributed() names TensorFlow as pip spells an extra", {
  wheel <- tempfile(fileext = ".whl")
  file.create(wheel)
  expect_identical(requirement_with_extra(wheel, "tensorflow"), paste0(wheel, "[tensorflow]"))
  expect_identical(requirement_with_extra("tfdistributed", "and-cuda"), "tfdistributed[and-cuda]")
  expect_identical(requirement_with_extra("tfdistributed>=0.1", "tensorflow"),
                   "tfdistributed[tensorflow]>=0.1")
  expect_identical(requirement_with_extra("tfdistributed", NULL), "tfdistributed")
  expect_identical(tensorflow_requirement(TRUE), "tensorflow[and-cuda]")
})

test_that("gpu = NA finds an NVIDIA GPU from the driver or nvidia-smi", {
  skip_if_not(identical(Sys.info()[["sysname"]], "Linux"))
  none <- tempfile()
  dir.create(none)
  expect_false(nvidia_gpu_present(proc = none, smi = ""))
  driver <- tempfile()
  dir.create(file.path(driver, "0000:01:00.0"), recursive = TRUE)
  expect_true(nvidia_gpu_present(proc = driver, smi = ""))
  smi <- tempfile()
  writeLines(c("#!/bin/sh", "echo 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)'"), smi)
  Sys.chmod(smi, "0755")
  expect_true(nvidia_gpu_present(proc = none, smi = smi))
  writeLines(c("#!/bin/sh", "echo 'NVIDIA-SMI has failed' >&2; exit 9"), smi)
  expect_false(nvidia_gpu_present(proc = none, smi = smi))
})

test_that("input_shape() gives Keras a tuple of integers", {
  skip_if_no_backend()
  expect_identical(reticulate::py_str(input_shape(3)), "(3,)")
  expect_identical(reticulate::py_str(input_shape(8, 8, 1)), "(8, 8, 1)")
  expect_identical(reticulate::py_str(input_shape(c(8, 8))), "(8, 8)")
  expect_identical(reticulate::py_str(input_shape(NA, 4)), "(None, 4)")
  expect_error(input_shape(2.5), "dimension 1", class = "tfdistributed_error")
  expect_error(input_shape(-1), "`dimension 1` must be >= 0", class = "tfdistributed_error")
  # The package does not mask shape() of the tensorflow and keras3 R packages.
  expect_false("shape" %in% getNamespaceExports("tfdistributed"))
})

test_that("a Python without the backend gives an R error naming the fix", {
  skip_if_not(file.exists("/usr/bin/python3"), "needs a system Python without the backend")
  rscript <- file.path(R.home("bin"), "Rscript")
  code <- "library(tfdistributed); tryCatch(distribute_strategy('mirrored'), tfdistributed_backend_missing = function(e) cat(conditionMessage(e)))"
  out <- withr::with_envvar(
    c(RETICULATE_PYTHON = "/usr/bin/python3", R_LIBS = paste(.libPaths(), collapse = ":")),
    system2(rscript, c("-e", shQuote(code)), stdout = TRUE, stderr = TRUE)
  )
  expect_match(paste(out, collapse = "\n"), "has no module 'tfdistributed'.*install_tfdistributed\\(package = ")
})
