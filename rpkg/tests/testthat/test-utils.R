test_that("whole doubles become integers", {
  expect_identical(as_integer(64, "batch_size"), 64L)
  expect_identical(as_integer(64L, "batch_size"), 64L)
  expect_null(as_integer(NULL, "steps", allow_null = TRUE))
})

test_that("fractions, NA, NULL, strings and vectors are R errors naming the fix", {
  expect_error(as_integer(64.5, "batch_size"), "`batch_size` must be a single whole number.*batch_size = 64",
               class = "tfdistributed_error")
  expect_error(as_integer(NA, "batch_size"), "whole number", class = "tfdistributed_error")
  expect_error(as_integer(NA_integer_, "epochs"), "whole number", class = "tfdistributed_error")
  expect_error(as_integer(NULL, "epochs"), "`epochs` is required", class = "tfdistributed_error")
  expect_error(as_integer("64", "batch_size"), "character", class = "tfdistributed_error")
  expect_error(as_integer(c(1, 2), "epochs"), "single whole number", class = "tfdistributed_error")
  expect_error(as_integer(Inf, "epochs"), "whole number", class = "tfdistributed_error")
  expect_error(as_integer(0, "epochs", minimum = 1L), "must be >= 1", class = "tfdistributed_error")
})

test_that("verbose accepts auto, 0-2 and logicals", {
  expect_identical(as_verbose("auto"), "auto")
  expect_identical(as_verbose(2), 2L)
  expect_identical(as_verbose(FALSE), 0L)
  expect_error(as_verbose(3), "verbose", class = "tfdistributed_error")
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
})

test_that("shape() gives Keras a tuple of integers", {
  skip_if_no_backend()
  expect_identical(reticulate::py_str(shape(3)), "(3,)")
  expect_identical(reticulate::py_str(shape(8, 8, 1)), "(8, 8, 1)")
  expect_identical(reticulate::py_str(shape(c(8, 8))), "(8, 8)")
  expect_identical(reticulate::py_str(shape(NA, 4)), "(None, 4)")
  expect_error(shape(2.5), "dimension 1", class = "tfdistributed_error")
})

test_that("a Python without the backend gives an R error naming the fix", {
  skip_if_not(file.exists("/usr/bin/python3"), "needs a system Python without the backend")
  rscript <- file.path(R.home("bin"), "Rscript")
  code <- "library(tfdistributed); tryCatch(distribute_strategy('mirrored'), tfdistributed_backend_missing = function(e) cat(conditionMessage(e)))"
  out <- withr::with_envvar(
    c(RETICULATE_PYTHON = "/usr/bin/python3", R_LIBS = paste(.libPaths(), collapse = ":")),
    system2(rscript, c("-e", shQuote(code)), stdout = TRUE, stderr = TRUE)
  )
  expect_match(paste(out, collapse = "\n"), "has no module 'tfdistributed'.*install_tfdistributed\\(\\)")
})
