# The mlverse/distributed README's multi-worker R program, as an R user writes it, on one machine
# of a job by hand: Python started first (tf$version), TF_CONFIG written by hand with jsonlite,
# TensorFlow's own MultiWorkerMirroredStrategy, the TFDS data set (one file per split) mapped with
# an R function, cached, shuffled and batched at 64 x workers, a model built and compiled with R
# values (doubles, metrics = "accuracy"), and Keras' own fit. The one line added for
# tfdistributed is library(tfdistributed).
# Usage: Rscript mlverse.R INDEX HOST:PORT,HOST:PORT,... TFDS_DIR OUT_DIR
# (installed with the package: system.file("examples", "mlverse.R", package = "tfdistributed"))
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
index <- as.integer(args[[1]])
workers <- strsplit(args[[2]], ",")[[1]]
num_workers <- length(workers)

tf <- reticulate::import("tensorflow")
cat("TensorFlow", tf$version$VERSION, "\n")
Sys.setenv(TF_CONFIG = jsonlite::toJSON(list(
  cluster = list(worker = workers),
  task = list(type = "worker", index = index)
), auto_unbox = TRUE))
strategy <- tf$distribute$MultiWorkerMirroredStrategy()

tfds <- reticulate::import("tensorflow_datasets")
train <- tfds$load("sklearn_digits", split = "train", data_dir = args[[3]], as_supervised = TRUE)
train <- train$map(function(image, label) {
  list(tf$cast(image, tf$float32) / 255, label)
})
train <- train$cache()$shuffle(2000)$batch(64 * num_workers)

with(strategy$scope(), {
  model <- keras$Sequential(list(
    keras$Input(shape = c(8, 8, 1)),
    keras$layers$Conv2D(filters = 16, kernel_size = 3, activation = "relu"),
    keras$layers$Flatten(),
    keras$layers$Dense(units = 32, activation = "relu"),
    keras$layers$Dense(units = 10, activation = "softmax")
  ))
  model$compile(loss = "sparse_categorical_crossentropy", optimizer = "adam",
                metrics = "accuracy")
})
history <- model$fit(train, epochs = 8, verbose = 2)

np <- reticulate::import("numpy")
weights <- model$get_weights()
names(weights) <- paste0("w", seq_along(weights))
do.call(np$savez, c(list(file.path(args[[4]], sprintf("worker-%d.npz", index)),
                         loss = unlist(history$history$loss),
                         replicas = strategy$num_replicas_in_sync), weights))
cat(sprintf("worker %d: %d replicas, loss %.4f -> %.4f\n", index,
            strategy$num_replicas_in_sync, history$history$loss[[1]],
            tail(unlist(history$history$loss), 1)))
