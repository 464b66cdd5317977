# The multi-worker R program as users write it from the mlverse/distributed README, ported to
# Keras 3 through reticulate: TF_CONFIG written by hand with jsonlite, TensorFlow's own
# MultiWorkerMirroredStrategy, and Keras' own model$fit() on digits_data() as it comes (an R
# array and an R integer vector of labels) with `batch_size = 64 * num_workers`, an R double.
# The one line added for tfdistributed is library(tfdistributed).
# With a 4th argument "late", Python and TensorFlow start before TF_CONFIG is set (as after any
# earlier reticulate call), which TensorFlow alone never sees (issue 30).
# Usage: Rscript mlverse_mwms.R INDEX PORT0,PORT1 OUT_DIR [late]
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
index <- as.integer(args[[1]])
ports <- strsplit(args[[2]], ",")[[1]]
out_dir <- args[[3]]
if (length(args) >= 4 && args[[4]] == "late") {
  tf <- reticulate::import("tensorflow")
  cat("TensorFlow", tf$version$VERSION, "started before TF_CONFIG is set\n")
}

num_workers <- length(ports)
Sys.setenv(TF_CONFIG = jsonlite::toJSON(list(
  cluster = list(worker = paste0("127.0.0.1:", ports)),
  task = list(type = "worker", index = index)
), auto_unbox = TRUE))

tf <- reticulate::import("tensorflow")
strategy <- tf$distribute$MultiWorkerMirroredStrategy()

d <- digits_data()
with(strategy$scope(), {
  model <- keras$Sequential(list(
    keras$Input(shape = c(8L, 8L, 1L)),
    keras$layers$Conv2D(16L, c(3L, 3L), activation = "relu"),
    keras$layers$Flatten(),
    keras$layers$Dense(32L, activation = "relu"),
    keras$layers$Dense(10L, activation = "softmax")
  ))
  model$compile(loss = "sparse_categorical_crossentropy", optimizer = "adam",
                metrics = list("accuracy"))
})

history <- model$fit(d$train$x, d$train$y, batch_size = 64 * num_workers, epochs = 12,
                     verbose = 2)
score <- model$evaluate(d$test$x, d$test$y, verbose = 0)
predictions <- model$predict(d$test$x, verbose = 0)
cat(sprintf("worker %d: test loss %.4f, accuracy %.4f\n", index, score[[1]], score[[2]]))

np <- reticulate::import("numpy")
weights <- model$get_weights()
names(weights) <- paste0("w", seq_along(weights))
do.call(np$savez, c(list(file.path(out_dir, sprintf("worker-%d.npz", index)),
                         loss = unlist(history$history$loss), score = unlist(score),
                         replicas = strategy$num_replicas_in_sync,
                         predicted = max.col(predictions) - 1L, labels = d$test$y),
                    weights))
