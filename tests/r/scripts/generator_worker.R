# One worker of a 2-worker job that streams from its own R generator (tests/r/test_r_generators.py).
# Each worker reads its own half of the digits (rows i, i + n, ...), reshuffled every epoch, in
# 10 batches of 64 per epoch; steps run in lock-step, so both must end with the same weights.
# Usage: Rscript generator_worker.R OUT_DIR
library(tfdistributed)
out_dir <- commandArgs(trailingOnly = TRUE)[[1]]
options(tfdistributed.verbose = 0L)
strategy <- distribute_strategy("auto")
digits <- digits_data()
batches_per_epoch <- 10L
calls <- list()

worker_batches <- function(worker_index, num_workers) {
  x <- digits$train$x
  y <- digits$train$y
  mine <- which((seq_len(dim(x)[1]) - 1L) %% num_workers == worker_index)
  order <- NULL
  i <- 0L
  function(worker_index, num_workers) {
    calls[[length(calls) + 1L]] <<- c(worker_index, num_workers)
    if (i == batches_per_epoch) {
      i <<- 0L
      return(NULL)
    }
    if (i == 0L) order <<- sample(mine)
    rows <- order[i * 64L + seq_len(64L)]
    i <<- i + 1L
    list(x[rows, , , , drop = FALSE], y[rows])
  }
}

with(strategy$scope(), {
  keras$utils$set_random_seed(7L)
  model <- keras$Sequential(list(
    keras$Input(shape = input_shape(8, 8, 1)),
    keras$layers$Flatten(),
    keras$layers$Dense(64L, activation = "relu"),
    keras$layers$Dense(10L)
  ))
  model$compile(optimizer = "adam", metrics = list("accuracy"),
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
})
info <- strategy_info(strategy)
set.seed(100 + info$task_index)
gen <- dataset_from_generator(worker_batches(info$task_index, info$num_workers))
# Each step uses 1/n of one batch of every worker: an epoch of 10 batches is 10 * n steps.
history <- fit_distributed(model, gen, epochs = 15, steps_per_epoch = batches_per_epoch * info$num_workers)
result <- evaluate_distributed(model, digits$test$x, digits$test$y)
told <- unique(vapply(calls, paste, "", collapse = "/"))
cat(sprintf("worker %d: told %s; test accuracy %.4f\n", info$task_index, paste(told, collapse = ","),
            result[["accuracy"]]))
np <- reticulate::import("numpy")
weights <- model$get_weights()
names(weights) <- paste0("w", seq_along(weights))
do.call(np$savez, c(list(file.path(out_dir, sprintf("weights-%d.npz", info$task_index))), weights))
