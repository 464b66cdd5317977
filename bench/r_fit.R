# The R side of the R-overhead benchmark: the same fit as `workloads.py digits`, driven from R.
# Usage: Rscript bench/r_fit.R EPOCHS BATCH STRATEGY
# Prints one `BENCH_RESULT {json}` line for bench/run.py; only the fit call is timed.
args <- commandArgs(trailingOnly = TRUE)
epochs <- as.integer(args[[1]])
batch <- as.integer(args[[2]])
strategy_name <- args[[3]]

# The R package is the thing measured: the same fit as the Python arm, through fit_distributed().
library(tfdistributed)
via <- "R package"
strategy <- distribute_strategy(strategy_name)
digits <- digits_data()
x <- digits$train$x
y <- digits$train$y
fit_call <- function(model) {
  fit_distributed(model, x, y, epochs = epochs, batch_size = batch, seed = 0, verbose = 0)
}

keras$utils$set_random_seed(0L)
with(strategy$scope(), {
  model <- keras$Sequential(list(
    keras$Input(shape = list(8L, 8L, 1L)),
    keras$layers$Flatten(),
    keras$layers$Dense(64L, activation = "relu"),
    keras$layers$Dense(10L)
  ))
  model$compile(
    optimizer = "adam",
    loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE),
    metrics = list("accuracy")
  )
})

start <- Sys.time()
invisible(fit_call(model))
seconds <- as.numeric(difftime(Sys.time(), start, units = "secs"))
cat(sprintf("BENCH_RESULT {\"fit_seconds\": %.6f, \"via\": \"%s\"}\n", seconds, via))
