# The mlverse/distributed README's multi-worker R program, as an R user writes it, on one machine
# of a job by hand, with keras3 for keras: Python started first (tf$version), TF_CONFIG written
# by hand with jsonlite, TensorFlow's own (experimental) MultiWorkerMirroredStrategy made by
# hand, the data set loaded with tfds_load(), its records mapped with an R function, cached,
# shuffled and batched at 64 x workers with tfdatasets, keras_model_sequential() %>%
# layer_conv_2d(...) built and compiled inside the scope, and keras3's fit(). The one line added
# for tfdistributed is library(tfdistributed). Where the README differs, this machine is why:
# the TFDS digits stand in for MNIST (8 x 8 images; nothing can be downloaded here, so
# tfds_load() is given the data_dir they were written to), and 8 epochs in place of 3 (the
# digits are a small data set).
# Usage: Rscript mlverse.R INDEX HOST:PORT,HOST:PORT,... TFDS_DIR OUT_DIR
# (installed with the package: system.file("examples", "mlverse.R", package = "tfdistributed"))
library(tensorflow)
library(keras3)
library(tfdatasets)
library(tfds)
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
index <- as.integer(args[[1]])
workers <- strsplit(args[[2]], ",")[[1]]

BUFFER_SIZE <- 2000L
NUM_WORKERS <- length(workers)
BATCH_SIZE <- 64L * NUM_WORKERS

cat("TensorFlow", tf$version$VERSION, "\n")
Sys.setenv(TF_CONFIG = jsonlite::toJSON(list(
  cluster = list(worker = workers),
  task = list(type = "worker", index = index)
), auto_unbox = TRUE))
strategy <- tf$distribute$experimental$MultiWorkerMirroredStrategy()

digits <- tfds_load("sklearn_digits", data_dir = args[[3]])
train_dataset <- digits$train %>%
  dataset_map(function(record) {
    record$image <- tf$cast(record$image, tf$float32) / 255
    record
  }) %>%
  dataset_cache() %>%
  dataset_shuffle(BUFFER_SIZE) %>%
  dataset_batch(BATCH_SIZE) %>%
  dataset_map(unname)

with (strategy$scope(), {
  model <- keras_model_sequential() %>%
    layer_conv_2d(
      filters = 32,
      kernel_size = 3,
      activation = 'relu',
    input_shape = c(8, 8, 1)
    ) %>%
      layer_max_pooling_2d() %>%
      layer_flatten() %>%
      layer_dense(units = 64, activation = 'relu') %>%
      layer_dense(units = 10, activation = 'softmax')

  model %>% compile(
    loss = 'sparse_categorical_crossentropy',
    optimizer = 'adam',
    metrics = 'accuracy')
})

history <- model %>% fit(train_dataset, epochs = 8, verbose = 2)

np <- reticulate::import("numpy")
weights <- get_weights(model)
names(weights) <- paste0("w", seq_along(weights))
do.call(np$savez, c(list(file.path(args[[4]], sprintf("worker-%d.npz", index)),
                         loss = history$metrics$loss,
                         replicas = strategy$num_replicas_in_sync), weights))
cat(sprintf("worker %d: %d replicas, loss %.4f -> %.4f\n", index,
            strategy$num_replicas_in_sync, history$metrics$loss[[1]],
            tail(history$metrics$loss, 1)))
