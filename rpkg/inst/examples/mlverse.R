# The mlverse/distributed README's multi-worker R program, as an R user writes it, on one machine
# of a job by hand, with keras3 for keras: Python started first (tf$version), TF_CONFIG written
# by hand with jsonlite, TensorFlow's own (experimental) MultiWorkerMirroredStrategy made by
# hand, the TFDS data set (one file per split) mapped with an R function, cached, shuffled and
# batched at 64 x workers, keras_model_sequential() %>% layer_conv_2d(...) built and compiled
# inside the scope, and keras3's fit(). The one line added for tfdistributed is
# library(tfdistributed). Where the README differs, this machine is why: tfdatasets and tfds are
# not installed (tensorflow_datasets is imported through reticulate), the TFDS digits stand in
# for MNIST (8 x 8 images), and 8 epochs in place of 3 (the digits are a small data set).
# Usage: Rscript mlverse.R INDEX HOST:PORT,HOST:PORT,... TFDS_DIR OUT_DIR
# (installed with the package: system.file("examples", "mlverse.R", package = "tfdistributed"))
library(tensorflow)
library(keras3)
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
index <- as.integer(args[[1]])
workers <- strsplit(args[[2]], ",")[[1]]
num_workers <- length(workers)

cat("TensorFlow", tf$version$VERSION, "\n")
Sys.setenv(TF_CONFIG = jsonlite::toJSON(list(
  cluster = list(worker = workers),
  task = list(type = "worker", index = index)
), auto_unbox = TRUE))
strategy <- tf$distribute$experimental$MultiWorkerMirroredStrategy()

tfds <- reticulate::import("tensorflow_datasets")
train <- tfds$load("sklearn_digits", split = "train", data_dir = args[[3]], as_supervised = TRUE)
train <- train$map(function(image, label) {
  list(tf$cast(image, tf$float32) / 255, label)
})
train <- train$cache()$shuffle(2000)$batch(64 * num_workers)

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

history <- model %>% fit(train, epochs = 8, verbose = 2)

np <- reticulate::import("numpy")
weights <- get_weights(model)
names(weights) <- paste0("w", seq_along(weights))
do.call(np$savez, c(list(file.path(args[[4]], sprintf("worker-%d.npz", index)),
                         loss = history$metrics$loss,
                         replicas = strategy$num_replicas_in_sync), weights))
cat(sprintf("worker %d: %d replicas, loss %.4f -> %.4f\n", index,
            strategy$num_replicas_in_sync, history$metrics$loss[[1]],
            tail(history$metrics$loss, 1)))
