# Runs the R package's testthat suite against the installed package and prints one summary
# line, "TESTTHAT_SUMMARY {json}", that tests/r/test_testthat.py parses.
args <- commandArgs(trailingOnly = TRUE)
test_dir <- if (length(args)) args[[1]] else "rpkg/tests/testthat"
results <- testthat::test_dir(
  test_dir,
  package = "tfdistributed",
  load_package = "installed",
  reporter = testthat::ProgressReporter$new(show_praise = FALSE),
  stop_on_failure = FALSE
)
df <- as.data.frame(results)
summary <- list(
  files = length(unique(df$file)),
  tests = nrow(df),
  expectations = sum(df$nb),
  failed = sum(df$failed),
  errors = sum(df$error),
  skipped = sum(df$skipped),
  warnings = sum(df$warning),
  seconds = sum(df$real),
  # Seconds per file, costliest first: where the suite's time goes.
  by_file = as.list(sort(round(tapply(df$real, df$file, sum), 1), decreasing = TRUE)),
  failing = as.list(paste(df$file, df$test, sep = ": ")[df$failed > 0 | df$error])
)
cat("\nTESTTHAT_SUMMARY ", jsonlite::toJSON(summary, auto_unbox = TRUE), "\n", sep = "")
