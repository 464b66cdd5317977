# One worker of a 2-worker job run by srun, launch_cluster() or a Ray actor: nothing here knows
# which; distribute_strategy("auto") reads TF_CONFIG, or SLURM's environment under srun.
# Usage: Rscript mwms_digits.R OUT_DIR [EPOCHS]
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
out_dir <- args[[1]]
epochs <- if (length(args) > 1) as.integer(args[[2]]) else 2L
strategy <- distribute_strategy("auto")
info <- strategy_info(strategy)
cat(sprintf("%s %d of %d workers, TF_CONFIG %s\n", info$task_type, info$task_index,
            info$num_workers, Sys.getenv("TF_CONFIG")))
with(strategy$scope(), {
  keras$utils$set_random_seed(1L)
  model <- keras$Sequential(list(
    keras$Input(shape = reticulate::tuple(8L, 8L, 1L)),
    keras$layers$Flatten(),
    keras$layers$Dense(32L, activation = "relu"),
    keras$layers$Dense(10L)))
  model$compile(optimizer = "adam", metrics = list("accuracy"),
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
})
digits <- digits_data()
history <- fit_distributed(model, digits$train$x, digits$train$y, epochs = epochs,
                           batch_size = 64, shuffle = FALSE, verbose = 2)
result <- evaluate_distributed(model, digits$test$x, digits$test$y)
cat(sprintf("worker %d: test accuracy %.4f\n", info$task_index, result[["accuracy"]]))
np <- reticulate::import("numpy")
weights <- model$get_weights()
names(weights) <- paste0("w", seq_along(weights))
do.call(np$savez, c(list(file.path(out_dir, sprintf("%s-%d.npz", info$task_type, info$task_index))),
                    weights))
