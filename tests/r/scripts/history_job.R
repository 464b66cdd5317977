# One worker of a 2-worker launch_cluster() job that trains with validation and writes the
# history its own fit returned, for the launcher's job$history to be compared with.
# Usage: Rscript history_job.R OUT_DIR fit_distributed|keras_fit [EPOCHS]
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
out_dir <- args[[1]]
how <- args[[2]]
epochs <- if (length(args) > 2) as.integer(args[[3]]) else 3L
strategy <- distribute_strategy("auto")
info <- strategy_info(strategy)
with(strategy$scope(), {
  keras$utils$set_random_seed(1L)
  model <- keras$Sequential(list(
    keras$Input(shape = input_shape(8, 8, 1)),
    keras$layers$Flatten(),
    keras$layers$Dense(16L, activation = "relu"),
    keras$layers$Dense(10L)))
  model$compile(optimizer = "adam", metrics = list("accuracy"),
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
})
digits <- digits_data()
# verbose = 2 on every worker: each prints Keras' own per-epoch lines, which the launcher keeps
# in the task's output and leaves out of the job's console output.
metrics <- if (how == "fit_distributed") {
  history <- fit_distributed(model, digits$train$x, digits$train$y, epochs = epochs,
                             batch_size = 64, shuffle = FALSE, verbose = 2,
                             validation_data = list(digits$test$x, digits$test$y))
  history$metrics
} else {
  history <- model$fit(reticulate::np_array(digits$train$x, dtype = "float32"),
                       reticulate::np_array(digits$train$y), batch_size = 64L,
                       epochs = epochs, shuffle = FALSE, verbose = 2L, validation_split = 0.1)
  lapply(reticulate::py_to_r(history$history), function(v) as.numeric(unlist(v)))
}
jsonlite::write_json(metrics, file.path(out_dir, sprintf("%s-%d.json", info$task_type,
                                                         info$task_index)),
                     digits = NA, auto_unbox = FALSE)
cat(sprintf("%s %d done\n", info$task_type, info$task_index))
