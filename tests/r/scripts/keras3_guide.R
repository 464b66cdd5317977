# keras3's own guide "Multi-GPU distributed training with TensorFlow" (keras3 1.2.0,
# vignettes/distributed_training_with_tensorflow.Rmd, MIT), its code as the guide writes it,
# with library(tfdistributed) loaded. Where it differs, marked "# here:", this machine is why:
# two logical CPUs stand in for the GPUs, the digits (8 x 8, from digits_data(), in the same
# list as dataset_mnist()'s) for MNIST (nothing can be downloaded), 300 of their 1,347 training
# images held out for validation where the guide holds out 10,000 of MNIST's 60,000, and 8
# epochs where the guide's 2 epochs of MNIST are 1,563 steps. The results go to OUT.json for
# tests/r/test_r_keras3.py.
# Usage: Rscript keras3_guide.R OUT_DIR
out_dir <- commandArgs(trailingOnly = TRUE)[[1]]
setwd(out_dir)  # the guide writes its checkpoints to ./ckpt

library(keras3)
library(tensorflow, exclude = c("shape", "set_random_seed"))
library(tfdatasets, exclude = "shape")
library(tfdistributed)
configure_cpu_devices(2)  # here: 2 logical CPUs for MirroredStrategy() to find
set_random_seed(1)

get_compiled_model <- function() {
  inputs <- keras_input(shape = 64)  # here: 8 x 8 digits, not 28 x 28
  outputs <- inputs |>
    layer_dense(units = 256, activation = "relu") |>
    layer_dense(units = 256, activation = "relu") |>
    layer_dense(units = 10)
  model <- keras_model(inputs, outputs)
  model |> compile(
    optimizer = optimizer_adam(),
    loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
    metrics = list(metric_sparse_categorical_accuracy()),
    # XLA compilation is temporarily disabled due to a bug
    # https://github.com/keras-team/keras/issues/19005
    jit_compile = FALSE
  )
  model
}

get_dataset <- function(batch_size = 64) {
  c(c(x_train, y_train), c(x_test, y_test)) %<-% digits_data()  # here: not dataset_mnist()
  x_train <- array_reshape(x_train, c(-1, 64))
  x_test <- array_reshape(x_test, c(-1, 64))

  # Reserve 300 samples for validation.
  val_i <- sample.int(nrow(x_train), 300)  # here: 300, not 10000
  x_val <- x_train[val_i,]
  y_val <- y_train[val_i]
  x_train = x_train[-val_i,]
  y_train = y_train[-val_i]

  # Prepare the training dataset.
  train_dataset <- list(x_train, y_train) |>
    tensor_slices_dataset() |>
    dataset_batch(batch_size)

  # Prepare the validation dataset.
  val_dataset <- list(x_val, y_val) |>
    tensor_slices_dataset() |>
    dataset_batch(batch_size)

  # Prepare the test dataset.
  test_dataset <- list(x_test, y_test) |>
    tensor_slices_dataset() |>
    dataset_batch(batch_size)

  list(train_dataset, val_dataset, test_dataset)
}

# Create a MirroredStrategy.
strategy <- tf$distribute$MirroredStrategy()
cat(sprintf('Number of devices: %d\n', strategy$num_replicas_in_sync))

# Open a strategy scope.
with(strategy$scope(), {
  # Everything that creates variables should be under the strategy scope.
  # In general this is only model construction & `compile()`.
  model <- get_compiled_model()

  c(train_dataset, val_dataset, test_dataset) %<-% get_dataset()

  # Train the model on all available devices.
  history <- model |> fit(train_dataset, epochs = 8, validation_data = val_dataset)  # here: 8

  # Test the model on all available devices.
  scores <- model |> evaluate(test_dataset)
})

# Prepare a directory to store all the checkpoints.
checkpoint_dir <- "./ckpt"
if (!dir.exists(checkpoint_dir)) {
  dir.create(checkpoint_dir)
}

make_or_restore_model <- function() {
  # Either restore the latest model, or create a fresh one
  # if there is no checkpoint available.
  checkpoints <- list.files(checkpoint_dir, pattern = "ckpt-.*\\.keras",
                            full.names = TRUE)

  if (length(checkpoints) > 0) {
    checkpoint_epochs <- as.integer(sub("ckpt-([0-9]+)\\.keras", "\\1",
                                        basename(checkpoints)))
    latest_checkpoint <- checkpoints[which.max(checkpoint_epochs)]
    load_model(latest_checkpoint)
  } else {
    get_compiled_model()
  }
}

run_training <- function(epochs = 1) {
  # Create a MirroredStrategy.
  strategy <- tf$distribute$MirroredStrategy()

  # Open a strategy scope and create/restore the model
  with(strategy$scope(), {
    model <- make_or_restore_model()

    callbacks <- list(
      # This callback saves a SavedModel every epoch
      # We include the current epoch in the folder name.
      callback_model_checkpoint(
        filepath = paste0(checkpoint_dir, "/ckpt-{epoch}.keras"),
        save_freq = "epoch"
      ))
    model |> fit(
      train_dataset,
      epochs = epochs,
      callbacks = callbacks,
      validation_data = val_dataset,
      verbose = 2
    )
  })
}

# Running the first time creates the model
first <- run_training(epochs = 1)

# Calling the same function again will resume from where we left off
second <- run_training(epochs = 1)

jsonlite::write_json(list(
  replicas = strategy$num_replicas_in_sync,
  history = history$metrics, evaluate = scores,
  checkpoints = list.files(checkpoint_dir),
  first = first$metrics, second = second$metrics
), "keras3_guide.json", auto_unbox = TRUE, digits = NA)
