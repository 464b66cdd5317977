# keras3's own testthat tests, as keras3's R CMD check runs them (against the installed package,
# NOT_CRAN=true), each test's outcome written as JSON for tests/peers/test_keras3_peers.py.
# Usage: Rscript run_keras3_tests.R TESTTHAT_DIR OUT.json with|without [FILE_REGEX]
# "with": library(tfdistributed) first, as a user's session that loaded it before its Keras code.
args <- commandArgs(trailingOnly = TRUE)
if (args[[3]] == "with") {
  library(tfdistributed)
}
filter <- if (length(args) > 3) args[[4]] else NULL
Sys.setenv(NOT_CRAN = "true")
results <- testthat::test_dir(args[[1]], package = "keras3", load_package = "installed",
                              filter = filter, reporter = testthat::SilentReporter$new(),
                              stop_on_failure = FALSE, stop_on_warning = FALSE)
# An outcome per test (a test of a file may share its name with another: each is told apart by
# its order in the file), with the first thing that went wrong in it.
outcome <- function(test) {
  bad <- Filter(function(r) inherits(r, c("expectation_failure", "expectation_error")),
                test$results)
  skipped <- any(vapply(test$results, inherits, logical(1), "expectation_skip"))
  list(file = test$file, test = test$test,
       outcome = if (length(bad)) "failed" else if (skipped) "skipped" else "passed",
       message = if (length(bad)) substr(conditionMessage(bad[[1]]), 1, 600) else "")
}
jsonlite::write_json(lapply(results, outcome), args[[2]], auto_unbox = TRUE)
